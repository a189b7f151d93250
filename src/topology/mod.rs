//! Which server each command goes to: the one server, the master Sentinel names, or the master
//! that serves a key's slot in a Redis Cluster (docs/design/deployments.md, "Deployments").
//!
//! The topology keeps a [`Map`] from slots to masters, each master with its own connection
//! [`Pool`]. The map is replaced as a whole when it turns out to be stale: a MOVED reply, a
//! READONLY reply (a master demoted to replica by a failover), or a master that no longer
//! answers. Pools of masters that stay masters are kept across maps, so a refresh costs no
//! connections. How the masters are found is each deployment's own (`server`, `sentinel`,
//! `cluster`); what the deployment allows is one [`Capabilities`] value, fixed at connect.

pub(crate) mod capabilities;
pub(crate) mod cluster;
pub(crate) mod config;
pub(crate) mod endpoints;
pub(crate) mod map;
pub(crate) mod newer_commands;
pub(crate) mod nodes;
pub(crate) mod pool;
pub(crate) mod pubsub_connection;
pub(crate) mod replica_count;
pub(crate) mod sentinel;
pub(crate) mod server;
pub(crate) mod sharded_pubsub;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard, RwLock};
use redis::ConnectionInfo;

use crate::error::{Error, Result};
use crate::slot;
use crate::topology::capabilities::{Capabilities, Deployment};
use crate::topology::cluster::Cluster;
use crate::topology::config::Config;
use crate::topology::endpoints::Endpoints;
pub(crate) use crate::topology::map::Map;
use crate::topology::nodes::{parse_url, split_addr, Nodes};
use crate::topology::pool::Pool;
use crate::topology::sentinel::Sentinel;

/// Refreshes closer together than this reuse the last map: when a whole cluster is down, every
/// failing call would otherwise ask for a new map.
const REFRESH_INTERVAL_MIN: Duration = Duration::from_millis(100);
/// How often, at most, the sentinels are asked again while holds are renewed (see
/// [`Topology::recheck`]).
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How a deployment's masters are found.
enum Discovery {
    Server,
    Sentinel(Sentinel),
    Cluster(Cluster),
}

/// Where commands go, and how to find out again.
pub(crate) struct Topology {
    discovery: Discovery,
    nodes: Nodes,
    map: RwLock<Arc<Map>>,
    /// Held while discovering; also when the last discovery ended.
    refreshing: Mutex<Instant>,
    /// What the deployment allows, decided at connect.
    capabilities: Capabilities,
}

/// How the masters of `endpoints` are found, and the connection settings every node's
/// connection starts from (the first URL's, with `database` in place of its own if given).
fn discovery_of(
    endpoints: &Endpoints,
    database: Option<i64>,
) -> Result<(Discovery, ConnectionInfo)> {
    let parse_all = |urls: &[String]| {
        urls.iter()
            .map(|url| parse_url(url).map(|info| with_database(info, database)))
            .collect::<Result<Vec<_>>>()
    };
    match endpoints {
        Endpoints::Server(url) => Ok((Discovery::Server, with_database(parse_url(url)?, database))),
        Endpoints::Sentinel {
            sentinels,
            master_name,
        } => {
            let sentinels = parse_all(sentinels)?;
            let template = sentinels[0].clone();
            let discovery = Discovery::Sentinel(Sentinel::new(sentinels, master_name.clone()));
            Ok((discovery, template))
        }
        Endpoints::Cluster { seeds } => {
            let seeds = parse_all(seeds)?;
            let template = seeds[0].clone();
            Ok((Discovery::Cluster(Cluster::new(seeds)), template))
        }
    }
}

/// `info` selecting `database` instead of its own, if given.
fn with_database(info: ConnectionInfo, database: Option<i64>) -> ConnectionInfo {
    match database {
        Some(db) => {
            let settings = info.redis_settings().clone().set_db(db);
            info.set_redis_settings(settings)
        }
        None => info,
    }
}

impl Topology {
    /// Reads the endpoints and finds the masters (a wrong address or password fails here).
    pub(crate) fn connect(endpoints: &Endpoints, config: &Config) -> Result<Self> {
        let (discovery, template) = discovery_of(endpoints, config.database)?;
        let nodes = Nodes::new(template, config);
        if let Discovery::Cluster(cluster) = &discovery {
            cluster.check_database(&nodes)?;
        }
        let started = Instant::now();
        let map = discover(&discovery, &nodes, &Map::empty())?;
        let capabilities = Capabilities::of(deployment(&discovery, &map, config)?);
        Ok(Topology {
            discovery,
            nodes,
            map: RwLock::new(Arc::new(map)),
            refreshing: Mutex::new(started),
            capabilities,
        })
    }

    /// The current map.
    pub(crate) fn map(&self) -> Arc<Map> {
        Arc::clone(&self.map.read())
    }

    /// What the deployment allows (masters that move, routing by slot, the pub/sub commands).
    pub(crate) fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// Whether `pool`'s master went silent (a command timed out, no reply since) where
    /// masters can be replaced: a stopped master is replaced as a dead one is, but nothing
    /// else says so (no refused connection, no READONLY or MOVED while it is stopped).
    fn may_be_replaced(&self, pool: &Pool) -> bool {
        self.capabilities.masters_move && pool.is_silent()
    }

    /// The master of `key` in the current map, with the map's generation.
    /// On a cluster, a name whose keys would hash to different slots is refused here, before
    /// anything is sent (see `check_cluster_name`); `""` means any master.
    pub(crate) fn route(&self, key: &str) -> Result<(Arc<Pool>, u64)> {
        self.route_by(key, None)
    }

    /// [`route`](Self::route) for a command due by `deadline`: when no master serves the
    /// slot, or its master went silent where masters can be replaced, the deployment is asked
    /// again as [`refresh_by`](Self::refresh_by) does.
    pub(crate) fn route_by(
        &self,
        key: &str,
        deadline: Option<Instant>,
    ) -> Result<(Arc<Pool>, u64)> {
        if self.capabilities.routes_by_slot && !key.is_empty() {
            crate::names::check_cluster_name(key)?;
        }
        let mut map = self.map();
        match map.master_for(key) {
            Some(pool) if !self.may_be_replaced(pool) => {
                return Ok((Arc::clone(pool), map.generation));
            }
            Some(_) => {
                // Its last command timed out: the master may be stopped and its replica
                // promoted by now. Asked again (at most every `REFRESH_INTERVAL_MIN`), this
                // node last.
                match deadline {
                    Some(deadline) => self.refresh_by(map.generation, deadline),
                    None => self.refresh_unless_under_way(map.generation),
                }
                map = self.map();
            }
            None => {}
        }
        match map.master_for(key) {
            Some(pool) => Ok((Arc::clone(pool), map.generation)),
            None => {
                // No master serves the slot: a failover or a resharding is under way.
                match deadline {
                    Some(deadline) => self.refresh_by(map.generation, deadline),
                    None => self.refresh(map.generation),
                }
                let map = self.map();
                map.master_for(key)
                    .map(|pool| (Arc::clone(pool), map.generation))
                    .ok_or_else(|| Error::Redis {
                        operation: "routing",
                        source: crate::error::RedisFailure::new((
                            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                            "no master serves the key's slot",
                            format!("slot {}", slot::of(key.as_bytes())),
                        )),
                    })
            }
        }
    }

    /// A pool for the node at `addr` (`host:port`), as an ASK redirection names it: the
    /// current map's if it has one, else a new one, not kept.
    pub(crate) fn node(&self, addr: &str) -> Result<Arc<Pool>> {
        if let Some(pool) = self.map().masters.iter().find(|p| p.addr() == addr) {
            return Ok(Arc::clone(pool));
        }
        let (host, port) = split_addr(addr)
            .ok_or_else(|| Error::invalid("redirection", format!("bad address {addr:?}")))?;
        Ok(Arc::new(self.nodes.pool(self.nodes.at(host, port))?))
    }

    /// Asks the sentinels again whether the master is still the one in the map, unless they
    /// were asked within [`RECHECK_INTERVAL`]. A failover the sentinels were asked for
    /// (`SENTINEL FAILOVER`) leaves the old master writable until the sentinels demote it, up
    /// to 10 s later: no error says the master changed, and what is written there meanwhile
    /// (renewals included) is lost at the demotion, while the copies on the new master expire.
    /// The watchdog calls this after each renewal sweep (docs/design/deployments.md, "Deployments").
    /// Nothing for a single server or a cluster, where a demoted master answers MOVED.
    pub(crate) fn recheck(&self) {
        if !self.capabilities.sentinels_vouch {
            return;
        }
        let current = {
            // A search under way (another thread's) is the check: the watchdog does not wait.
            let Some(mut last) = self.refreshing.try_lock() else {
                return;
            };
            if last.elapsed() < RECHECK_INTERVAL {
                return;
            }
            *last = Instant::now();
            self.map()
        };
        // Asked without holding `refreshing`: a caller whose command failed must never wait
        // behind this routine check (sentinels that do not answer cost a connect timeout
        // each).
        self.install(current.generation, self.discover(&current));
    }

    /// Asks the deployment where its masters are now, unless the map is newer than
    /// `seen_generation` (someone else asked already) or was made a moment ago. Failures
    /// are logged and leave the current map.
    pub(crate) fn refresh(&self, seen_generation: u64) {
        self.refresh_locked(seen_generation, self.refreshing.lock());
    }

    /// [`refresh`](Self::refresh) for a caller with a deadline: when another thread is asking
    /// the deployment already, it waits for that discovery only until `deadline` (then the
    /// caller goes on with the map it has, and its own retries see the new map once it is
    /// installed), and past the deadline it asks nobody. A discovery that has to connect to
    /// nodes that do not answer costs a connect timeout each. A discovery the caller runs
    /// itself is not cut short at the deadline: a map found half-way would be worse than none.
    pub(crate) fn refresh_by(&self, seen_generation: u64, deadline: Instant) {
        if Instant::now() >= deadline {
            // Whatever a search found now could not be used by this call any more.
            return;
        }
        if let Some(last) = self.refreshing.try_lock_until(deadline) {
            self.refresh_locked(seen_generation, last);
        }
    }

    /// [`refresh`](Self::refresh) unless another thread is asking the deployment already:
    /// then that search is the refresh, and the caller does not wait for it.
    pub(crate) fn refresh_unless_under_way(&self, seen_generation: u64) {
        if let Some(last) = self.refreshing.try_lock() {
            self.refresh_locked(seen_generation, last);
        }
    }

    fn refresh_locked(&self, seen_generation: u64, mut last: MutexGuard<'_, Instant>) {
        let current = self.map();
        if current.generation != seen_generation || last.elapsed() < REFRESH_INTERVAL_MIN {
            return;
        }
        let result = self.discover(&current);
        *last = Instant::now();
        self.install(current.generation, result);
    }

    /// Makes a newly discovered map the current one, unless the current one is no longer the
    /// map of `seen_generation` it was discovered from (someone installed a newer one
    /// meanwhile). A failed discovery is logged and leaves the current map.
    fn install(&self, seen_generation: u64, discovered: Result<Map>) {
        let map = match discovered {
            Ok(map) => map,
            Err(err) => {
                log::warn!("could not find the masters again: {err}");
                return;
            }
        };
        let mut installed = self.map.write();
        if installed.generation != seen_generation {
            return;
        }
        let addrs = |map: &Map| {
            map.masters
                .iter()
                .map(|p| p.addr().to_owned())
                .collect::<Vec<_>>()
        };
        if addrs(&map) == addrs(&installed) {
            log::debug!("topology: masters unchanged: {:?}", addrs(&map));
        } else {
            log::info!("topology: masters now {:?}", addrs(&map));
        }
        *installed = Arc::new(map);
    }

    /// A new map, reusing `current`'s pools where masters stayed.
    fn discover(&self, current: &Map) -> Result<Map> {
        discover(&self.discovery, &self.nodes, current)
    }

    /// Whether the sentinels name, settled, a master other than `addr` (asked of them, not of
    /// any master); `false` on other deployments.
    pub(crate) fn sentinels_name_another_master(&self, addr: &str) -> bool {
        match &self.discovery {
            Discovery::Sentinel(sentinel) => sentinel.names_another_master(&self.nodes, addr),
            _ => false,
        }
    }

    /// Whether the master at `addr` may be being replaced, so that fewer of its replicas
    /// than before acknowledging a write does not mean that they failed: on Sentinel, unless
    /// a sentinel vouches for it; on a cluster, when the node itself still lists replicas it
    /// no longer has (see `cluster::lists_missing_replicas`). `false` on a single server,
    /// which has nobody to promote replicas.
    pub(crate) fn failover_suspected(&self, addr: &str) -> bool {
        match &self.discovery {
            Discovery::Server => false,
            Discovery::Sentinel(sentinel) => sentinel.failover_suspected(&self.nodes, addr),
            Discovery::Cluster(_) => cluster::lists_missing_replicas(&self.nodes, addr),
        }
    }
}

/// A new map of the deployment `discovery` finds, reusing `current`'s pools where masters
/// stayed.
fn discover(discovery: &Discovery, nodes: &Nodes, current: &Map) -> Result<Map> {
    let master = match discovery {
        Discovery::Server => server::discover(nodes, current)?,
        Discovery::Sentinel(sentinel) => sentinel.discover(nodes, current)?,
        Discovery::Cluster(cluster) => return cluster.discover(nodes, current),
    };
    Ok(Map {
        generation: current.generation + 1,
        masters: vec![master],
        slots: None,
    })
}

/// The deployment `discovery` found `map` in; on a cluster, whether releases go by sharded
/// pub/sub is decided here, from the masters' answer and the builder's mode.
fn deployment(discovery: &Discovery, map: &Map, config: &Config) -> Result<Deployment> {
    Ok(match discovery {
        Discovery::Server => Deployment::Server,
        Discovery::Sentinel(_) => Deployment::Sentinel,
        Discovery::Cluster(_) => Deployment::Cluster {
            sharded_pubsub: config
                .sharded_pubsub
                .decide(cluster::supports_sharded_pubsub(map)?)?,
        },
    })
}
