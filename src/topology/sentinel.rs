//! Sentinel: the master is the one the sentinels name, confirmed by the master itself, and
//! the sentinels say whether a failover of it is under way (they vouch for it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use redis::{Connection, ConnectionInfo, RedisConnectionInfo};

use crate::error::{Error, Result};
use crate::topology::map::Map;
use crate::topology::nodes::Nodes;
use crate::topology::pool::{self, Pool};
use crate::topology::replica_count;

/// The sentinels of one master name.
pub(crate) struct Sentinel {
    sentinels: Vec<ConnectionInfo>,
    master_name: String,
    /// The sentinels (by address) that refused the URL's credentials and answered without
    /// them (see [`Sentinel::probe`]); later discoveries ask them without credentials at once.
    without_auth: Mutex<HashSet<String>>,
}

impl Sentinel {
    /// The sentinels at `sentinels`, asked for the master named `master_name`.
    pub(crate) fn new(sentinels: Vec<ConnectionInfo>, master_name: String) -> Self {
        Sentinel {
            sentinels,
            master_name,
            without_auth: Mutex::new(HashSet::new()),
        }
    }

    /// The master the sentinels name now, reusing `current`'s pool if it stayed.
    pub(crate) fn discover(&self, nodes: &Nodes, current: &Map) -> Result<Arc<Pool>> {
        let (host, port, replicas) = self.ask(nodes, current)?;
        let pool = nodes.reuse(current, nodes.at(&host, port))?;
        // A lower count is kept for the replica sync to confirm (see `count_replicas`).
        if let Some(replicas) = replicas {
            pool.count_replicas(replicas);
        }
        Ok(pool)
    }

    /// The master's address and replica count from the first sentinel that knows it and
    /// whose answer the master confirms (its `INFO replication` says master). A sentinel that
    /// names the current master while it is silent (see [`Pool::is_silent`]) is passed over,
    /// its answer kept (with no count: `None`) in case no sentinel names another: asking the
    /// master would only time out, one response timeout per sentinel, while a stopped master
    /// is being replaced.
    fn ask(&self, nodes: &Nodes, current: &Map) -> Result<(String, u16, Option<usize>)> {
        let silent = |host: &str, port: u16| {
            let addr = nodes.at(host, port).addr().to_string();
            current
                .masters
                .iter()
                .any(|pool| pool.addr() == addr && pool.is_silent())
        };
        let mut tried = Vec::new();
        let mut unconfirmed = None;
        for sentinel in &self.sentinels {
            let asked = self
                .master_named_by(nodes, sentinel)
                .and_then(|(host, port)| {
                    if silent(&host, port) {
                        return Ok((host, port, None));
                    }
                    let replicas = check_master(nodes, &host, port)?;
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
            asked: format!(
                "no sentinel named a master {:?} that answered",
                self.master_name
            ),
            tried,
        })
    }

    /// The address `sentinel` gives for the master named `master_name`.
    fn master_named_by(&self, nodes: &Nodes, sentinel: &ConnectionInfo) -> Result<(String, u16)> {
        let mut conn = self.probe(nodes, sentinel)?;
        let asking = |source| Error::Redis {
            operation: "asking a sentinel for the master",
            source: crate::error::RedisFailure::new(source),
        };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(&self.master_name);
        let reply = pool::query_again_if_interrupted(&mut conn, &cmd).map_err(asking)?;
        let reply: Option<(String, u16)> =
            redis::from_redis_value(reply).map_err(|source| asking(source.into()))?;
        reply.ok_or_else(|| {
            Error::invalid(
                "master name",
                format!(
                    "the sentinel at {} knows no master {:?}",
                    sentinel.addr(),
                    self.master_name
                ),
            )
        })
    }

    /// Whether the master at `addr` may be being replaced: unless a sentinel still names it
    /// as the master, neither down nor with a failover under way (a sentinel marks the
    /// failover before it promotes a replica, so a replica already gone from the old master
    /// is covered). No sentinel answering counts as suspected.
    pub(crate) fn failover_suspected(&self, nodes: &Nodes, addr: &str) -> bool {
        for sentinel in &self.sentinels {
            let asked = self.probe(nodes, sentinel).and_then(|mut conn| {
                let mut cmd = redis::cmd("SENTINEL");
                cmd.arg("MASTER").arg(&self.master_name);
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

    /// Whether the first sentinel that answers names, settled (neither down nor failing
    /// over), a master other than `addr`: the master moved, and a discovery now finds the new
    /// one without waiting for the old. `false` while a failover is under way, or when no
    /// sentinel answers.
    pub(crate) fn names_another_master(&self, nodes: &Nodes, addr: &str) -> bool {
        for sentinel in &self.sentinels {
            match self.settled_master(nodes, sentinel) {
                Ok(named) => return named.is_some_and(|named| named != addr),
                Err(err) => log::debug!("sentinel {}: {err}", sentinel.addr()),
            }
        }
        false
    }

    /// The master `sentinel` names, `None` when it is down or failing over.
    fn settled_master(&self, nodes: &Nodes, sentinel: &ConnectionInfo) -> Result<Option<String>> {
        let mut conn = self.probe(nodes, sentinel)?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(&self.master_name);
        let master = pool::query_again_if_interrupted::<HashMap<String, String>>(&mut conn, &cmd)
            .map_err(|source| Error::Redis {
            operation: "asking a sentinel about the master",
            source: crate::error::RedisFailure::new(source),
        })?;
        Ok(match (master.get("ip"), master.get("port")) {
            (Some(ip), Some(port)) if sentinel_says_settled(&master, &format!("{ip}:{port}")) => {
                Some(format!("{ip}:{port}"))
            }
            _ => None,
        })
    }

    /// A connection to a sentinel. The URL's credentials are the master's; sentinels often
    /// have none of their own (Redis then refuses any AUTH), so when they refuse the
    /// credentials, the sentinel is asked without them. A sentinel that needs other
    /// credentials than the master is not supported: its answer without them is NOAUTH, and
    /// the first error is reported.
    fn probe(&self, nodes: &Nodes, sentinel: &ConnectionInfo) -> Result<Connection> {
        // A sentinel has no databases (it refuses SELECT): a database in the URL is the
        // master's.
        let settings = sentinel.redis_settings();
        let with_auth = settings.clone().set_db(0);
        let without_auth = RedisConnectionInfo::default().set_protocol(settings.protocol());
        let has_auth = settings.password().is_some() || settings.username().is_some();
        let probe = |settings: RedisConnectionInfo| {
            nodes.probe(sentinel.clone().set_redis_settings(settings))
        };
        let addr = sentinel.addr().to_string();
        if !has_auth || self.without_auth.lock().contains(&addr) {
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
                self.without_auth.lock().insert(addr);
                Ok(conn)
            }
            other => other,
        }
    }
}

/// How many replicas the master a sentinel named has connected. A sentinel may not have
/// seen a failover yet: the master must agree. It also lists the replicas connected to it,
/// in any state (a sentinel's own list lags behind; see `replica_count`).
fn check_master(nodes: &Nodes, host: &str, port: u16) -> Result<usize> {
    let checking = |source| Error::Redis {
        operation: "checking the master's role",
        source: crate::error::RedisFailure::new(source),
    };
    let mut master = nodes
        .probe(nodes.at(host, port))
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

/// Whether connecting failed because the server refused the credentials: AUTH refused (redis-rs
/// reports RESP2's as `AuthenticationFailed`) or `HELLO ... AUTH` refused (RESP3: WRONGPASS, or
/// an error about AUTH or a password).
fn is_refused_auth(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed || err.code() == Some("WRONGPASS") {
        return true;
    }
    let detail = err.detail().unwrap_or_default().to_ascii_lowercase();
    err.code().is_some() && (detail.contains("auth") || detail.contains("password"))
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
}
