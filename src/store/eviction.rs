//! The look, when a manager starts, at each master's eviction policy: a lock key evicted is a
//! lock free for anyone (its holder is told, by its lost signal, but only after the fact).
//!
//! Every lock key has a TTL, so the `volatile-*` policies pick lock keys before any key without
//! one, and `allkeys-*` may pick them at any time; ElastiCache's default is `volatile-lru`.
//! Eviction only happens with `maxmemory` set. Managed services often refuse `CONFIG`, so
//! `INFO memory` is read when it is: its `maxmemory_policy` and `maxmemory` fields say the same.

use std::fmt;
use std::time::{Duration, Instant};

use redis::Connection;

use crate::store::{is_broken, LockStore};
use crate::topology::pool::Pool;

/// Where an [`EvictionPolicy`] was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicySource {
    /// `CONFIG GET maxmemory-policy` and `CONFIG GET maxmemory`.
    Config,
    /// `INFO memory` (the server refused `CONFIG`, as managed services often do).
    InfoMemory,
    /// Neither answered: the policy is unknown.
    Unknown,
}

/// One master's eviction settings as read when the manager was built
/// ([`LockManager::eviction_policies`](crate::LockManager::eviction_policies)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EvictionPolicy {
    /// The master's `host:port`.
    pub server: String,
    /// `maxmemory-policy` (`noeviction`, `volatile-lru`, ...), if it could be read.
    pub policy: Option<String>,
    /// `maxmemory` in bytes (0: no limit), if it could be read.
    pub maxmemory: Option<u64>,
    /// Where they were read from.
    pub source: PolicySource,
}

impl EvictionPolicy {
    /// Whether Redis may evict lock keys there: a `volatile-*` or `allkeys-*` policy with a
    /// `maxmemory` limit. `false` when unknown.
    pub fn evicts_locks(&self) -> bool {
        let evicting = self
            .policy
            .as_deref()
            .is_some_and(|p| p.starts_with("volatile-") || p.starts_with("allkeys-"));
        evicting && self.maxmemory.is_some_and(|bytes| bytes > 0)
    }
}

impl fmt::Display for EvictionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.policy, self.maxmemory) {
            (Some(policy), Some(bytes)) => {
                write!(
                    f,
                    "{}: maxmemory-policy {policy}, maxmemory {bytes}",
                    self.server
                )
            }
            _ => write!(f, "{}: eviction policy unknown", self.server),
        }
    }
}

/// Reads every master's eviction settings, and warns once per master whose policy may evict
/// lock keys. Never fails: what cannot be read is [`PolicySource::Unknown`].
pub(crate) fn read_policies(store: &LockStore, budget: Duration) -> Vec<EvictionPolicy> {
    let map = store.topology().map();
    let policies: Vec<EvictionPolicy> = map
        .masters()
        .iter()
        .map(|pool| read_policy(store, pool, budget))
        .collect();
    for policy in policies.iter().filter(|p| p.evicts_locks()) {
        log::warn!(
            "{policy}: Redis may evict lock keys there when memory runs short, and an evicted \
             lock is free for anyone (its holder learns it only afterwards); every lock key has \
             a TTL, so volatile-* policies pick them first (ElastiCache's default is \
             volatile-lru). Set maxmemory-policy noeviction, or keep the locks on a Redis of \
             their own"
        );
    }
    policies
}

fn read_policy(store: &LockStore, pool: &Pool, budget: Duration) -> EvictionPolicy {
    let unknown = EvictionPolicy {
        server: pool.addr().to_owned(),
        policy: None,
        maxmemory: None,
        source: PolicySource::Unknown,
    };
    let mut conn = match pool.get_by(Instant::now() + budget) {
        Ok(conn) => conn,
        Err(err) => {
            log::debug!("eviction policy at {}: {err}", pool.addr());
            return unknown;
        }
    };
    for (source, read) in [
        (
            PolicySource::Config,
            from_config as fn(&mut Connection) -> Read,
        ),
        (PolicySource::InfoMemory, from_info),
    ] {
        store.counters.sent(1);
        match read(&mut conn) {
            Ok(Some((policy, maxmemory))) => {
                return EvictionPolicy {
                    policy: Some(policy),
                    maxmemory: Some(maxmemory),
                    source,
                    ..unknown
                }
            }
            Ok(None) => {}
            Err(err) => {
                log::debug!("eviction policy at {}: {err}", pool.addr());
                if is_broken(&err) {
                    conn.discard(); // its state is unknown
                    return unknown;
                }
            }
        }
    }
    unknown
}

/// The policy and `maxmemory` as read; `Ok(None)` when the reply lacks them.
type Read = redis::RedisResult<Option<(String, u64)>>;

/// Both settings in one `CONFIG GET` (refused by managed services, unknown to some proxies).
fn from_config(conn: &mut Connection) -> Read {
    let pairs: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .arg("maxmemory")
        .query(conn)?;
    let value = |key: &str| {
        pairs
            .chunks(2)
            .find(|pair| pair.len() == 2 && pair[0].eq_ignore_ascii_case(key))
            .map(|pair| pair[1].clone())
    };
    let maxmemory = value("maxmemory").and_then(|bytes| bytes.parse().ok());
    Ok(value("maxmemory-policy").zip(maxmemory))
}

/// `maxmemory_policy` and `maxmemory` from `INFO memory`.
fn from_info(conn: &mut Connection) -> Read {
    let info: String = redis::cmd("INFO").arg("memory").query(conn)?;
    let field = |key: &str| {
        info.lines()
            .filter_map(|line| line.trim_end().split_once(':'))
            .find(|(name, _)| *name == key)
            .map(|(_, value)| value.to_owned())
    };
    let maxmemory = field("maxmemory").and_then(|bytes| bytes.parse().ok());
    Ok(field("maxmemory_policy").zip(maxmemory))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(policy: &str, maxmemory: u64) -> EvictionPolicy {
        EvictionPolicy {
            server: "h:1".into(),
            policy: Some(policy.into()),
            maxmemory: Some(maxmemory),
            source: PolicySource::Config,
        }
    }

    #[test]
    fn only_evicting_policies_with_a_limit_put_locks_at_risk() {
        assert!(policy("volatile-lru", 100).evicts_locks());
        assert!(policy("allkeys-random", 100).evicts_locks());
        assert!(!policy("volatile-lru", 0).evicts_locks());
        assert!(!policy("noeviction", 100).evicts_locks());
    }
}
