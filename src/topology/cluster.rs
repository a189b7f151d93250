//! A Redis Cluster: the slot map comes from `CLUSTER SLOTS` on any node (known masters first,
//! then the seeds), and a demoted master answers MOVED.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionInfo, Value};

use crate::error::{Error, Result};
use crate::slot;
use crate::topology::map::{Map, NO_MASTER};
use crate::topology::nodes::{split_addr, Nodes};
use crate::topology::pool::{self, Pool};
use crate::topology::replica_count::{self, replicas_of_role};

/// The seeds of one cluster.
pub(crate) struct Cluster {
    seeds: Vec<ConnectionInfo>,
}

impl Cluster {
    /// The cluster the nodes at `seeds` belong to.
    pub(crate) fn new(seeds: Vec<ConnectionInfo>) -> Self {
        Cluster { seeds }
    }

    /// The slot map, from the first known master or seed that tells it. Known masters first:
    /// the seeds may be long gone in a cluster that changed.
    pub(crate) fn discover(&self, nodes: &Nodes, current: &Map) -> Result<Map> {
        let mut candidates: Vec<ConnectionInfo> = current
            .masters
            .iter()
            .filter_map(|p| split_addr(p.addr()).map(|(h, port)| nodes.at(h, port)))
            .collect();
        candidates.extend(self.seeds.iter().cloned());
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
            match ask(nodes, candidate) {
                Ok(ranges) => return map_of(nodes, current, &asked, ranges),
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

    /// Refuses a database other than 0 that the cluster does not have: only Valkey 9.0 and
    /// later, with `cluster-databases` above it, lets cluster connections `SELECT` one. Asked
    /// of the first seed that answers (on database 0), so that the refusal is named when the
    /// manager is built, not by its first lock; when no seed answers, discovery says why.
    pub(crate) fn check_database(&self, nodes: &Nodes) -> Result<()> {
        let db = nodes.template.redis_settings().db();
        if db == 0 {
            return Ok(());
        }
        for seed in &self.seeds {
            let on_zero = seed.redis_settings().clone().set_db(0);
            let Ok(mut conn) = nodes.probe(seed.clone().set_redis_settings(on_zero)) else {
                continue;
            };
            match redis::cmd("SELECT").arg(db).query::<()>(&mut conn) {
                Ok(()) => return Ok(()),
                // No answer: another seed may give one.
                Err(lost) if lost.is_io_error() || lost.is_timeout() => continue,
                Err(refused) => {
                    return Err(Error::invalid(
                        "cluster database",
                        format!(
                            "{db}: {} refuses it ({}); only Valkey 9.0 and later with \
                             cluster-databases above {db} has numbered databases in cluster \
                             mode",
                            seed.addr(),
                            refused.detail().unwrap_or("refused"),
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Counts each master's replicas: its own list, or `CLUSTER SLOTS`' (`listed`, by address)
/// when it cannot be asked.
fn count_replicas(nodes: &Nodes, masters: &[Arc<Pool>], listed: &HashMap<String, usize>) {
    for pool in masters {
        if pool.is_silent() {
            continue; // asking it would time out; its count stays as it was
        }
        // `CLUSTER SLOTS` leaves out replicas that gossip has not yet reported in sync;
        // the master itself lists every replica it has, synced or syncing.
        let in_slots = listed.get(pool.addr()).copied().unwrap_or(0);
        pool.count_replicas(listed_replicas(nodes, pool).unwrap_or(in_slots));
    }
}

/// How many replicas the master behind `pool` lists, in any state (`None` when it could
/// not be asked, or is no master).
fn listed_replicas(nodes: &Nodes, pool: &Pool) -> Option<usize> {
    let mut conn = pool.get_by(Instant::now() + nodes.response_timeout).ok()?;
    replica_count::listed_replicas(&mut conn).ok()?
}

/// `CLUSTER SLOTS` on one node.
fn ask(nodes: &Nodes, node: ConnectionInfo) -> Result<Vec<SlotRange>> {
    let mut conn = nodes.probe(node.clone())?;
    let reply: Value =
        pool::query_again_if_interrupted(&mut conn, redis::cmd("CLUSTER").arg("SLOTS")).map_err(
            |source| {
                if source.is_timeout() {
                    nodes.first_reply_timeout(&node)
                } else {
                    Error::Redis {
                        operation: "finding the cluster's slots",
                        source: crate::error::RedisFailure::new(source),
                    }
                }
            },
        )?;
    parse_cluster_slots(reply).ok_or_else(|| Error::Redis {
        operation: "finding the cluster's slots",
        source: crate::error::RedisFailure::new((
            redis::ErrorKind::Parse,
            "unexpected CLUSTER SLOTS reply",
        )),
    })
}

/// The map `ranges` (as `asked` told them) describe, reusing `current`'s pools where
/// masters stayed, each master's replicas counted.
fn map_of(nodes: &Nodes, current: &Map, asked: &str, ranges: Vec<SlotRange>) -> Result<Map> {
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
                masters.push(nodes.reuse(current, nodes.at(&host, range.port))?);
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
    count_replicas(nodes, &masters, &replicas);
    Ok(Map {
        generation: current.generation + 1,
        masters,
        slots: Some(slots),
    })
}

/// Whether the node at `addr` lists, in its own `CLUSTER SLOTS`, more replicas
/// for its slots than its `ROLE` has connected (or is no master, or does not answer). A
/// master stopped past its failover and continued has lost its replica (promoted) but
/// still lists it until the cluster's messages reach it; a replica that failed is left out
/// of `CLUSTER SLOTS` once the cluster marks it failed.
pub(crate) fn lists_missing_replicas(nodes: &Nodes, addr: &str) -> bool {
    let Some((host, port)) = split_addr(addr) else {
        return true;
    };
    let asked = (|| -> Result<bool> {
        let mut conn = nodes.probe(nodes.at(host, port))?;
        let query = |conn: &mut Connection, cmd: &redis::Cmd| {
            pool::query_again_if_interrupted::<Value>(conn, cmd).map_err(|source| Error::Redis {
                operation: "asking a cluster node about its replicas",
                source: crate::error::RedisFailure::new(source),
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

/// Whether the cluster answers `PUBSUB SHARDNUMSUB` (Redis 7): Redisson's AUTO mode then
/// announces releases with `SPUBLISH`, and a client listening with `SUBSCRIBE` would never
/// hear them. Asks the masters in turn until one answers: a master may be down (a failover
/// under way when the manager starts).
pub(crate) fn supports_sharded_pubsub(map: &Map) -> Result<bool> {
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
