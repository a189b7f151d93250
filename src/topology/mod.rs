//! Which server each command goes to: the one server, the master Sentinel names, or the master
//! that serves a key's slot in a Redis Cluster (docs/design/deployments.md, "Deployments").
//!
//! The topology keeps a map from slots to masters, each master with its own connection
//! [`Pool`]. The map is replaced as a whole when it turns out to be stale: a MOVED reply, a
//! READONLY reply (a master demoted to replica by a failover), or a master that no longer
//! answers. Pools of masters that stay masters are kept across maps, so a refresh costs no
//! connections. Discovery asks the deployment itself: `CLUSTER SLOTS` on any node (known
//! masters first, then the seeds) or `SENTINEL get-master-addr-by-name` on each sentinel in
//! turn, confirmed by the master's own `INFO replication` (see `replica_count`).

pub(crate) mod config;
pub(crate) mod endpoints;
pub(crate) mod pool;
pub(crate) mod pubsub_connection;
pub(crate) mod replica_count;
pub(crate) mod sharded_pubsub;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard, RwLock};
use redis::{
    Client, Connection, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo,
    Value,
};

use crate::error::{Error, Result};
use crate::slot;
use crate::topology::config::Config;
use crate::topology::endpoints::Endpoints;
use crate::topology::pool::Pool;

/// Refreshes closer together than this reuse the last map: when a whole cluster is down, every
/// failing call would otherwise ask for a new map.
const REFRESH_INTERVAL_MIN: Duration = Duration::from_millis(100);
/// How often, at most, the sentinels are asked again while holds are renewed (see
/// [`Topology::recheck`]).
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A slot served by no known master.
const NO_MASTER: u16 = u16::MAX;

/// How a deployment's masters are found.
enum Discovery {
    Server,
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master_name: String,
    },
    Cluster {
        seeds: Vec<ConnectionInfo>,
    },
}

/// One view of the deployment's masters.
pub(crate) struct Map {
    /// Grows with every new map; a caller that saw a stale map names it when asking for a
    /// refresh, so that many callers seeing the same stale map cause one refresh.
    pub(crate) generation: u64,
    masters: Vec<Arc<Pool>>,
    /// Cluster only: for each slot, its master's index in `masters` (or [`NO_MASTER`]).
    slots: Option<Box<[u16]>>,
}

impl Map {
    /// The master that serves `key`; on one server or Sentinel, the master. An empty key
    /// (commands that touch no key) goes to the first master.
    pub(crate) fn master_for(&self, key: &str) -> Option<&Arc<Pool>> {
        let index = match (&self.slots, key) {
            (Some(slots), key) if !key.is_empty() => slots[usize::from(slot::of(key.as_bytes()))],
            _ => 0,
        };
        self.masters.get(usize::from(index))
    }

    /// Every master, each once.
    pub(crate) fn masters(&self) -> &[Arc<Pool>] {
        &self.masters
    }
}

/// Opens clients and pools for nodes of one deployment, all with the same settings.
struct Nodes {
    /// The first URL's settings: credentials, database, TLS or not.
    template: ConnectionInfo,
    tls_root_certificate: Option<Vec<u8>>,
    pool_size: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Nodes {
    /// The template's settings with another node's address.
    fn at(&self, host: &str, port: u16) -> ConnectionInfo {
        let addr = match self.template.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        self.template.clone().set_addr(addr)
    }

    fn client(&self, info: ConnectionInfo) -> Result<Client> {
        client(info, self.tls_root_certificate.as_deref())
    }

    fn pool(&self, info: ConnectionInfo) -> Result<Pool> {
        Ok(Pool::new(
            self.client(info)?,
            self.pool_size,
            self.connect_timeout,
            self.response_timeout,
        ))
    }

    /// The error for the first command on a new connection to `node` not answered in time.
    /// Over TLS, that is most often a server that does not speak TLS on that port: the
    /// handshake, which redis-rs runs with the first command, waits for a reply that never
    /// comes, and the socket's "Resource temporarily unavailable" would not say so.
    fn first_reply_timeout(&self, node: &ConnectionInfo) -> Error {
        let operation = match node.addr() {
            ConnectionAddr::TcpTls { .. } => {
                "the first reply over TLS (does the server serve TLS on that port?)"
            }
            _ => "the first reply from Redis",
        };
        Error::Timeout {
            operation,
            after: self.response_timeout,
        }
    }

    /// A connection of its own, for discovery, with the pool's timeouts.
    fn probe(&self, info: ConnectionInfo) -> Result<Connection> {
        let deadline = Instant::now() + self.connect_timeout;
        let conn = crate::topology::pool::connect_by(&self.client(info)?, 1, deadline)
            .map_err(Error::from_connect)?;
        conn.set_read_timeout(Some(self.response_timeout))
            .map_err(Error::connect)?;
        Ok(conn)
    }
}

/// Makes a redis-rs client for `info`: TCP_NODELAY, no `CLIENT SETINFO`, TLS roots if given.
pub(crate) fn client(info: ConnectionInfo, tls_root_certificate: Option<&[u8]>) -> Result<Client> {
    // Every request is a small write followed by a wait for the reply: Nagle's algorithm
    // would only add delay (up to a delayed-ACK period) to each of them.
    let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    // CLIENT SETINFO (which redis-rs sends on connect unless told not to) is informative
    // only and its replies are ignored, but a paused server makes each of them cost a
    // full timeout of the connect.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_tcp_settings(tcp).set_redis_settings(settings);
    match tls_root_certificate {
        #[cfg(feature = "tls")]
        Some(pem) => Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ),
        _ => Client::open(info),
    }
    .map_err(Error::invalid_url)
}

fn parse_url(url: &str) -> Result<ConnectionInfo> {
    url.into_connection_info().map_err(Error::invalid_url)
}

/// Where commands go, and how to find out again.
pub(crate) struct Topology {
    discovery: Discovery,
    nodes: Nodes,
    map: RwLock<Arc<Map>>,
    /// Held while discovering; also when the last discovery ended.
    refreshing: Mutex<Instant>,
    /// Cluster only: releases are announced with `SPUBLISH` and heard with `SSUBSCRIBE` on
    /// the slot's master (Redis 7 sharded pub/sub), as Redisson does when the cluster
    /// supports it.
    sharded_pubsub: bool,
    /// Sentinel only: the sentinels (by address) that refused the URL's credentials and
    /// answered without them (see [`Topology::probe_sentinel`]); later discoveries ask them
    /// without credentials at once.
    sentinels_without_auth: Mutex<HashSet<String>>,
}

/// How the masters of `endpoints` are found, and the connection settings every node's
/// connection starts from (the first URL's).
fn discovery_of(endpoints: &Endpoints) -> Result<(Discovery, ConnectionInfo)> {
    let parse_all = |urls: &[String]| {
        urls.iter()
            .map(|url| parse_url(url))
            .collect::<Result<Vec<_>>>()
    };
    match endpoints {
        Endpoints::Server(url) => Ok((Discovery::Server, parse_url(url)?)),
        Endpoints::Sentinel {
            sentinels,
            master_name,
        } => {
            let sentinels = parse_all(sentinels)?;
            let template = sentinels[0].clone();
            let discovery = Discovery::Sentinel {
                sentinels,
                master_name: master_name.clone(),
            };
            Ok((discovery, template))
        }
        Endpoints::Cluster { seeds } => {
            let seeds = parse_all(seeds)?;
            if let Some(seed) = seeds.iter().find(|seed| seed.redis_settings().db() != 0) {
                return Err(Error::invalid(
                    "cluster node URL",
                    format!("{}: a cluster has only database 0", seed.addr()),
                ));
            }
            let template = seeds[0].clone();
            Ok((Discovery::Cluster { seeds }, template))
        }
    }
}

impl Topology {
    /// Reads the endpoints and finds the masters (a wrong address or password fails here).
    pub(crate) fn connect(endpoints: &Endpoints, config: &Config) -> Result<Self> {
        let (discovery, template) = discovery_of(endpoints)?;
        let nodes = Nodes {
            template,
            tls_root_certificate: config
                .tls_root_certificate
                .as_ref()
                .map(|pem| pem.0.clone()),
            pool_size: config.pool_size,
            connect_timeout: config.connect_timeout,
            response_timeout: config.response_timeout,
        };
        let empty = || Map {
            generation: 0,
            masters: Vec::new(),
            slots: None,
        };
        let mut topology = Topology {
            discovery,
            nodes,
            map: RwLock::new(Arc::new(empty())),
            refreshing: Mutex::new(Instant::now()),
            sharded_pubsub: false,
            sentinels_without_auth: Mutex::new(HashSet::new()),
        };
        let map = topology.discover(&empty())?;
        if matches!(topology.discovery, Discovery::Cluster { .. }) {
            topology.sharded_pubsub = config
                .sharded_pubsub
                .decide(supports_sharded_pubsub(&map)?)?;
        }
        *topology.map.get_mut() = Arc::new(map);
        Ok(topology)
    }

    /// The current map.
    pub(crate) fn map(&self) -> Arc<Map> {
        Arc::clone(&self.map.read())
    }

    /// Whether this is a cluster (keys are routed by slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.discovery, Discovery::Cluster { .. })
    }

    /// Whether the master can change under the same name (Sentinel or Cluster): then a
    /// refused connection or a READONLY reply means "ask again where the master is".
    pub(crate) fn follows_failovers(&self) -> bool {
        !matches!(self.discovery, Discovery::Server)
    }

    /// Whether `pool`'s master went silent (a command timed out, no reply since) where
    /// masters can be replaced: a stopped master is replaced as a dead one is, but nothing
    /// else says so (no refused connection, no READONLY or MOVED while it is stopped).
    fn may_be_replaced(&self, pool: &Pool) -> bool {
        self.follows_failovers() && pool.is_silent()
    }

    /// Whether releases are announced with `SPUBLISH` (see the field).
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.sharded_pubsub
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
        if self.is_cluster() && !key.is_empty() {
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
        if !matches!(self.discovery, Discovery::Sentinel { .. }) {
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
        let generation = current.generation + 1;
        let masters = match &self.discovery {
            Discovery::Server => vec![self.discover_server(current)?],
            Discovery::Sentinel {
                sentinels,
                master_name,
            } => {
                let (host, port, replicas) = self.ask_sentinels(current, sentinels, master_name)?;
                let pool = self.reuse(current, self.nodes.at(&host, port))?;
                // A lower count is kept for the replica sync to confirm (see `count_replicas`).
                if let Some(replicas) = replicas {
                    pool.count_replicas(replicas);
                }
                vec![pool]
            }
            Discovery::Cluster { seeds } => return self.discover_cluster(current, seeds),
        };
        Ok(Map {
            generation,
            masters,
            slots: None,
        })
    }

    /// The pool of the master at `info`: the current map's, if it has one there.
    fn reuse(&self, current: &Map, info: ConnectionInfo) -> Result<Arc<Pool>> {
        let addr = info.addr().to_string();
        match current.masters.iter().find(|p| p.addr() == addr) {
            Some(pool) => Ok(Arc::clone(pool)),
            None => Ok(Arc::new(self.nodes.pool(info)?)),
        }
    }

    /// The one server, its replicas counted once, here (a refresh is never needed for one
    /// server); a wrong address or password fails here too.
    fn discover_server(&self, current: &Map) -> Result<Arc<Pool>> {
        let pool = self.reuse(current, self.nodes.template.clone())?;
        let mut conn = pool.get_by(Instant::now() + self.nodes.response_timeout)?;
        let replicas = match replica_count::listed_replicas(&mut conn) {
            Ok(replicas) => replicas.unwrap_or(0),
            Err(source) if source.is_timeout() => {
                return Err(self.nodes.first_reply_timeout(&self.nodes.template))
            }
            Err(source) => match Error::from_command("connecting", "", source) {
                // A user allowed neither INFO nor ROLE (an ACL) can still lock: replica
                // sync is then off for this server.
                Error::Redis { source, .. } if source.code().is_some() => {
                    log::info!(
                        "cannot count the server's replicas ({source}); acquires will not \
                             wait for replicas"
                    );
                    0
                }
                err => return Err(err),
            },
        };
        drop(conn);
        pool.set_replicas(replicas);
        Ok(pool)
    }

    /// The slot map, from the first known master or seed that tells it. Known masters first:
    /// the seeds may be long gone in a cluster that changed.
    fn discover_cluster(&self, current: &Map, seeds: &[ConnectionInfo]) -> Result<Map> {
        let mut candidates: Vec<ConnectionInfo> = current
            .masters
            .iter()
            .filter_map(|p| split_addr(p.addr()).map(|(h, port)| self.nodes.at(h, port)))
            .collect();
        candidates.extend(seeds.iter().cloned());
        // A master gone silent last: it may be stopped (each ask would cost a response
        // timeout), and the others know when its replica is promoted.
        let silent = |info: &ConnectionInfo| {
            let addr = info.addr().to_string();
            current
                .masters
                .iter()
                .any(|pool| pool.addr() == addr && pool.is_silent())
        };
        candidates.sort_by_key(silent); // stable: the order is kept otherwise
        let mut tried = Vec::new();
        for candidate in candidates {
            let asked = candidate.addr().to_string();
            if tried.iter().any(|(addr, _)| *addr == asked) {
                continue; // a known master that is a seed too: one refusal says it
            }
            match self.ask_cluster(candidate) {
                Ok(ranges) => {
                    let reuse = |info| self.reuse(current, info);
                    return self.cluster_map(current.generation + 1, &asked, ranges, reuse);
                }
                Err(err) => tried.push((asked, err)),
            }
        }
        if tried.is_empty() {
            return Err(Error::invalid("cluster node URLs", "none"));
        }
        Err(Error::Nodes {
            asked: "no cluster node told where the slots are".into(),
            tried,
        })
    }

    /// How many replicas the master behind `pool` lists, in any state (`None` when it could
    /// not be asked, or is no master).
    fn listed_replicas(&self, pool: &Pool) -> Option<usize> {
        let mut conn = pool
            .get_by(Instant::now() + self.nodes.response_timeout)
            .ok()?;
        replica_count::listed_replicas(&mut conn).ok()?
    }

    /// `CLUSTER SLOTS` on one node.
    fn ask_cluster(&self, node: ConnectionInfo) -> Result<Vec<SlotRange>> {
        let mut conn = self.nodes.probe(node.clone())?;
        let reply: Value =
            pool::query_again_if_interrupted(&mut conn, redis::cmd("CLUSTER").arg("SLOTS"))
                .map_err(|source| {
                    if source.is_timeout() {
                        self.nodes.first_reply_timeout(&node)
                    } else {
                        Error::Redis {
                            operation: "finding the cluster's slots",
                            source: crate::error::RedisFailure::new(source),
                        }
                    }
                })?;
        parse_cluster_slots(reply).ok_or_else(|| Error::Redis {
            operation: "finding the cluster's slots",
            source: crate::error::RedisFailure::new((
                redis::ErrorKind::Parse,
                "unexpected CLUSTER SLOTS reply",
            )),
        })
    }

    fn cluster_map(
        &self,
        generation: u64,
        asked: &str,
        ranges: Vec<SlotRange>,
        reuse: impl Fn(ConnectionInfo) -> Result<Arc<Pool>>,
    ) -> Result<Map> {
        let mut masters: Vec<Arc<Pool>> = Vec::new();
        let mut replicas: HashMap<String, usize> = HashMap::new();
        let mut slots = vec![NO_MASTER; slot::SLOTS].into_boxed_slice();
        for range in ranges {
            // A node that does not know its own address reports an empty host: it is the
            // node that was asked.
            let host = if range.host.is_empty() || range.host == "?" {
                split_addr(asked).map_or("127.0.0.1", |(h, _)| h).to_owned()
            } else {
                range.host
            };
            let addr = format!("{host}:{}", range.port);
            let index = match masters.iter().position(|p| p.addr() == addr) {
                Some(index) => index,
                None => {
                    masters.push(reuse(self.nodes.at(&host, range.port))?);
                    masters.len() - 1
                }
            };
            let seen = replicas.entry(addr).or_default();
            *seen = (*seen).max(range.replicas);
            for s in range.start..=range.end.min(slot::SLOTS as u16 - 1) {
                slots[usize::from(s)] = index as u16;
            }
        }
        if masters.is_empty() {
            return Err(Error::Redis {
                operation: "finding the cluster's slots",
                source: crate::error::RedisFailure::new((
                    redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                    "the cluster serves no slots",
                )),
            });
        }
        for pool in &masters {
            if pool.is_silent() {
                continue; // asking it would time out; its count stays as it was
            }
            // `CLUSTER SLOTS` leaves out replicas that gossip has not yet reported in sync;
            // the master itself lists every replica it has, synced or syncing.
            let listed = replicas.get(pool.addr()).copied().unwrap_or(0);
            pool.count_replicas(self.listed_replicas(pool).unwrap_or(listed));
        }
        Ok(Map {
            generation,
            masters,
            slots: Some(slots),
        })
    }

    /// The master's address and replica count from the first sentinel that knows it and
    /// whose answer the master confirms (its `INFO replication` says master). A sentinel that
    /// names the current master while it is silent (see [`Pool::is_silent`]) is passed over,
    /// its answer kept (with no count: `None`) in case no sentinel names another: asking the
    /// master would only time out, one response timeout per sentinel, while a stopped master
    /// is being replaced.
    fn ask_sentinels(
        &self,
        current: &Map,
        sentinels: &[ConnectionInfo],
        master_name: &str,
    ) -> Result<(String, u16, Option<usize>)> {
        let silent = |host: &str, port: u16| {
            let addr = self.nodes.at(host, port).addr().to_string();
            current
                .masters
                .iter()
                .any(|pool| pool.addr() == addr && pool.is_silent())
        };
        let mut tried = Vec::new();
        let mut unconfirmed = None;
        for sentinel in sentinels {
            let asked = self
                .master_named_by(sentinel, master_name)
                .and_then(|(host, port)| {
                    if silent(&host, port) {
                        return Ok((host, port, None));
                    }
                    let replicas = self.check_master(&host, port)?;
                    Ok((host, port, Some(replicas)))
                });
            match asked {
                Ok((host, port, None)) => unconfirmed = Some((host, port, None)),
                Ok(found) => return Ok(found),
                Err(err) => {
                    log::debug!("sentinel {}: {err}", sentinel.addr());
                    tried.push((sentinel.addr().to_string(), err));
                }
            }
        }
        if let Some(found) = unconfirmed {
            return Ok(found);
        }
        if tried.is_empty() {
            return Err(Error::invalid("sentinel URLs", "none"));
        }
        Err(Error::Nodes {
            asked: format!("no sentinel named a master {master_name:?} that answered"),
            tried,
        })
    }

    /// The address `sentinel` gives for the master named `master_name`.
    fn master_named_by(
        &self,
        sentinel: &ConnectionInfo,
        master_name: &str,
    ) -> Result<(String, u16)> {
        let mut conn = self.probe_sentinel(sentinel)?;
        let asking = |source| Error::Redis {
            operation: "asking a sentinel for the master",
            source: crate::error::RedisFailure::new(source),
        };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(master_name);
        let reply = pool::query_again_if_interrupted(&mut conn, &cmd).map_err(asking)?;
        let reply: Option<(String, u16)> =
            redis::from_redis_value(reply).map_err(|source| asking(source.into()))?;
        reply.ok_or_else(|| {
            Error::invalid(
                "master name",
                format!(
                    "the sentinel at {} knows no master {master_name:?}",
                    sentinel.addr()
                ),
            )
        })
    }

    /// How many replicas the master a sentinel named has connected. A sentinel may not have
    /// seen a failover yet: the master must agree. It also lists the replicas connected to it,
    /// in any state (a sentinel's own list lags behind; see `replica_count`).
    fn check_master(&self, host: &str, port: u16) -> Result<usize> {
        let checking = |source| Error::Redis {
            operation: "checking the master's role",
            source: crate::error::RedisFailure::new(source),
        };
        let mut master = self
            .nodes
            .probe(self.nodes.at(host, port))
            .map_err(|err| Error::at(format!("{host}:{port}"), err))?;
        let listed = match replica_count::listed_replicas(&mut master) {
            Ok(listed) => listed,
            // A user without the right to INFO or ROLE (an ACL) takes the sentinel's word:
            // replica sync is then off for this master.
            Err(source) if source.code() == Some("NOPERM") => {
                log::info!(
                    "cannot check the master's role at {host}:{port} ({source}); taking the \
                     sentinel's word, and acquires will not wait for replicas"
                );
                return Ok(0);
            }
            Err(source) => return Err(checking(source)),
        };
        listed.ok_or_else(|| {
            checking(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the node the sentinel named is not a master (yet)",
                format!("{host}:{port}"),
            )))
        })
    }

    /// Whether the master at `addr` may be being replaced, so that fewer of its replicas
    /// than before acknowledging a write does not mean that they failed: on Sentinel, unless
    /// a sentinel still names it as the master, neither down nor with a failover under way
    /// (a sentinel marks the failover before it promotes a replica, so a replica already
    /// gone from the old master is covered). On a cluster, when the node itself still lists
    /// replicas it no longer has (see `cluster_lists_missing_replicas`). `false` on a single
    /// server, which has nobody to promote replicas.
    pub(crate) fn failover_suspected(&self, addr: &str) -> bool {
        let (sentinels, master_name) = match &self.discovery {
            Discovery::Sentinel {
                sentinels,
                master_name,
            } => (sentinels, master_name),
            Discovery::Cluster { .. } => return self.cluster_lists_missing_replicas(addr),
            Discovery::Server => return false,
        };
        for sentinel in sentinels {
            let asked = self.probe_sentinel(sentinel).and_then(|mut conn| {
                let mut cmd = redis::cmd("SENTINEL");
                cmd.arg("MASTER").arg(master_name);
                pool::query_again_if_interrupted::<HashMap<String, String>>(&mut conn, &cmd)
                    .map_err(|source| Error::Redis {
                        operation: "asking a sentinel about the master",
                        source: crate::error::RedisFailure::new(source),
                    })
            });
            match asked {
                Ok(master) => return !sentinel_says_settled(&master, addr),
                Err(err) => log::debug!("sentinel {}: {err}", sentinel.addr()),
            }
        }
        true
    }

    /// Cluster: whether the node at `addr` lists, in its own `CLUSTER SLOTS`, more replicas
    /// for its slots than its `ROLE` has connected (or is no master, or does not answer). A
    /// master stopped past its failover and continued has lost its replica (promoted) but
    /// still lists it until the cluster's messages reach it; a replica that failed is left out
    /// of `CLUSTER SLOTS` once the cluster marks it failed.
    fn cluster_lists_missing_replicas(&self, addr: &str) -> bool {
        let Some((host, port)) = split_addr(addr) else {
            return true;
        };
        let asked = (|| -> Result<bool> {
            let mut conn = self.nodes.probe(self.nodes.at(host, port))?;
            let query = |conn: &mut Connection, cmd: &redis::Cmd| {
                pool::query_again_if_interrupted::<Value>(conn, cmd).map_err(|source| {
                    Error::Redis {
                        operation: "asking a cluster node about its replicas",
                        source: crate::error::RedisFailure::new(source),
                    }
                })
            };
            let Some(connected) = replicas_of_role(&query(&mut conn, &redis::cmd("ROLE"))?) else {
                return Ok(true);
            };
            let slots = query(&mut conn, redis::cmd("CLUSTER").arg("SLOTS"))?;
            let listed = parse_cluster_slots(slots)
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r.port == port && (r.host == host || r.host.is_empty()))
                .map(|r| r.replicas)
                .max()
                .unwrap_or(0);
            Ok(listed > connected)
        })();
        asked.unwrap_or_else(|err| {
            log::debug!("cluster node {addr}: {err}");
            true
        })
    }

    /// A connection to a sentinel. The URL's credentials are the master's; sentinels often
    /// have none of their own (Redis then refuses any AUTH), so when they refuse the
    /// credentials, the sentinel is asked without them. A sentinel that needs other
    /// credentials than the master is not supported: its answer without them is NOAUTH, and
    /// the first error is reported.
    fn probe_sentinel(&self, sentinel: &ConnectionInfo) -> Result<Connection> {
        // A sentinel has no databases (it refuses SELECT): a database in the URL is the
        // master's.
        let settings = sentinel.redis_settings();
        let with_auth = settings.clone().set_db(0);
        let without_auth = RedisConnectionInfo::default().set_protocol(settings.protocol());
        let has_auth = settings.password().is_some() || settings.username().is_some();
        let probe = |settings: RedisConnectionInfo| {
            self.nodes
                .probe(sentinel.clone().set_redis_settings(settings))
        };
        let addr = sentinel.addr().to_string();
        if !has_auth || self.sentinels_without_auth.lock().contains(&addr) {
            return probe(without_auth);
        }
        match probe(with_auth) {
            Err(Error::Connect { source }) if is_refused_auth(source.redis()) => {
                let mut conn = probe(without_auth).map_err(|_| Error::Connect {
                    source: source.clone(),
                })?;
                // Connected, but is the sentinel open to everyone? A PING says.
                pool::query_again_if_interrupted::<()>(&mut conn, &redis::cmd("PING"))
                    .map_err(|_| Error::Connect { source })?;
                log::info!(
                    "the sentinel at {} refused the URL's credentials and answers without \
                     them; they are used for the master only",
                    sentinel.addr()
                );
                self.sentinels_without_auth.lock().insert(addr);
                Ok(conn)
            }
            other => other,
        }
    }
}

/// Whether connecting failed because the server refused the credentials: AUTH refused (redis-rs
/// reports RESP2's as `AuthenticationFailed`) or `HELLO ... AUTH` refused (RESP3: WRONGPASS, or
/// an error about AUTH or a password).
/// Whether a sentinel's `SENTINEL MASTER` reply names `addr` as the master, neither down
/// nor being failed over.
fn sentinel_says_settled(master: &HashMap<String, String>, addr: &str) -> bool {
    let named = match (master.get("ip"), master.get("port")) {
        (Some(ip), Some(port)) => format!("{ip}:{port}"),
        _ => return false,
    };
    let flags = master.get("flags").map_or("", String::as_str);
    named == addr
        && flags.split(',').all(|flag| {
            !matches!(
                flag,
                "s_down" | "o_down" | "failover_in_progress" | "force_failover"
            )
        })
}

fn is_refused_auth(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed || err.code() == Some("WRONGPASS") {
        return true;
    }
    let detail = err.detail().unwrap_or_default().to_ascii_lowercase();
    err.code().is_some() && (detail.contains("auth") || detail.contains("password"))
}

/// One entry of `CLUSTER SLOTS`.
struct SlotRange {
    start: u16,
    end: u16,
    host: String,
    port: u16,
    replicas: usize,
}

fn parse_cluster_slots(reply: Value) -> Option<Vec<SlotRange>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(items) = entry else {
            return None;
        };
        let int = |v: &Value| match v {
            Value::Int(n) => u16::try_from(*n).ok(),
            _ => None,
        };
        let start = int(items.first()?)?;
        let end = int(items.get(1)?)?;
        let Value::Array(node) = items.get(2)? else {
            return None;
        };
        let host = match node.first()? {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::SimpleString(text) => text.clone(),
            _ => return None,
        };
        let port = int(node.get(1)?)?;
        ranges.push(SlotRange {
            start,
            end,
            host,
            port,
            replicas: items.len().saturating_sub(3),
        });
    }
    Some(ranges)
}

/// The replicas a master's `ROLE` reply lists; `None` if it is not a master's.
pub(crate) fn replicas_of_role(role: &Value) -> Option<usize> {
    match role {
        Value::Array(items) if is_bulk(items.first(), "master") => match items.get(2) {
            Some(Value::Array(replicas)) => Some(replicas.len()),
            _ => Some(0),
        },
        _ => None,
    }
}

fn is_bulk(value: Option<&Value>, text: &str) -> bool {
    match value {
        Some(Value::BulkString(bytes)) => bytes == text.as_bytes(),
        Some(Value::SimpleString(s)) => s == text,
        _ => false,
    }
}

/// `host:port` → its parts (`[::1]:7000` too).
pub(crate) fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

/// Whether the cluster answers `PUBSUB SHARDNUMSUB` (Redis 7): Redisson's AUTO mode then
/// announces releases with `SPUBLISH`, and a client listening with `SUBSCRIBE` would never
/// hear them. Asks the masters in turn until one answers: a master may be down (a failover
/// under way when the manager starts).
fn supports_sharded_pubsub(map: &Map) -> Result<bool> {
    let mut tried = Vec::new();
    for pool in &map.masters {
        match shard_numsub_answered(pool) {
            Ok(answered) => return Ok(answered),
            Err(err) => tried.push((pool.addr().to_owned(), err)),
        }
    }
    Err(Error::Nodes {
        asked: "no master answered".into(),
        tried,
    })
}

/// Whether the master behind `pool` knows `PUBSUB SHARDNUMSUB`.
fn shard_numsub_answered(pool: &Pool) -> Result<bool> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut conn = pool.get_by(deadline)?;
    match pool::query_again_if_interrupted::<Value>(
        &mut conn,
        redis::cmd("PUBSUB").arg("SHARDNUMSUB"),
    ) {
        Ok(_) => Ok(true),
        Err(err) if err.code().is_some() => Ok(false),
        Err(source) => {
            conn.discard();
            Err(Error::connect(source))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_vouches_only_for_its_master_with_no_failover_under_way() {
        let master = |ip: &str, flags: &str| -> HashMap<String, String> {
            [("ip", ip), ("port", "6379"), ("flags", flags)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        };
        let here = "10.0.0.1:6379";
        assert!(sentinel_says_settled(&master("10.0.0.1", "master"), here));
        assert!(!sentinel_says_settled(&master("10.0.0.2", "master"), here));
        for flags in [
            "master,failover_in_progress",
            "master,s_down",
            "master,s_down,o_down",
            "master,force_failover,failover_in_progress",
        ] {
            assert!(
                !sentinel_says_settled(&master("10.0.0.1", flags), here),
                "{flags}"
            );
        }
        assert!(!sentinel_says_settled(&HashMap::new(), here));
    }

    #[test]
    fn addresses_split_into_host_and_port() {
        assert_eq!(split_addr("127.0.0.1:30001"), Some(("127.0.0.1", 30001)));
        assert_eq!(split_addr("[::1]:7000"), Some(("::1", 7000)));
        assert_eq!(split_addr("nohost"), None);
    }

    #[test]
    fn cluster_slots_replies_are_read() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            node("127.0.0.1", 30001),
            node("127.0.0.1", 30004),
        ])]);
        let ranges = parse_cluster_slots(reply).unwrap();
        assert_eq!(ranges.len(), 1);
        assert_eq!((ranges[0].start, ranges[0].end), (0, 5460));
        assert_eq!(
            (ranges[0].host.as_str(), ranges[0].port),
            ("127.0.0.1", 30001)
        );
        assert_eq!(ranges[0].replicas, 1);
        assert!(parse_cluster_slots(Value::Int(1)).is_none());
    }
}
