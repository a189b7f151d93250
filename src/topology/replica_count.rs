//! How many replicas a master lists, in any state: the count that replica sync waits for
//! (docs/design/deployments.md, "Replica sync through a failover").
//!
//! `ROLE` lists only the replicas that are online. One that waits for or receives its full
//! sync (just added, or restarted) is left out, yet it is the one a failover may promote: a
//! write that no replica acknowledged is then lost. `INFO replication` lists every replica
//! connected to the master (`slaveN:ip=...,port=...,state=...`), as Redis 6.2 and 7.x and
//! Valkey 8 and 9 all do; `WAIT` counts a syncing one once its sync is done.

use redis::{Connection, RedisResult, Value};

use super::pool::query_again_if_interrupted;

/// How many replicas the server behind `conn` lists, in any state; `None` when it is no
/// master. A user allowed `ROLE` but not `INFO` (an ACL) gets `ROLE`'s count of the online
/// ones.
pub(crate) fn listed_replicas(conn: &mut Connection) -> RedisResult<Option<usize>> {
    match query_again_if_interrupted::<String>(conn, redis::cmd("INFO").arg("replication")) {
        Ok(info) => Ok(replicas_of_info(&info)),
        Err(err) if err.code() == Some("NOPERM") => {
            let role: Value = query_again_if_interrupted(conn, &redis::cmd("ROLE"))?;
            Ok(replicas_of_role(&role))
        }
        Err(err) => Err(err),
    }
}

/// The replicas that `INFO replication` lists: one per address among the `slaveN:` lines (a
/// Valkey replica syncing over two channels may be listed twice meanwhile), plus those that
/// `connected_slaves` counts without a line (no address known). `None` unless `role:master`.
pub(crate) fn replicas_of_info(info: &str) -> Option<usize> {
    let field = |line: &str, name: &str| {
        line.split(',')
            .find_map(|part| part.trim().strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let mut master = false;
    let mut connected: usize = 0;
    let mut lines: usize = 0;
    let mut addresses = std::collections::HashSet::new();
    for line in info.lines().map(str::trim) {
        if line == "role:master" {
            master = true;
        } else if let Some(n) = line.strip_prefix("connected_slaves:") {
            connected = n.parse().unwrap_or(0);
        } else if let Some((key, value)) = line.split_once(':') {
            if is_replica_line(key) {
                lines += 1;
                addresses.insert((field(value, "ip"), field(value, "port")));
            }
        }
    }
    master.then(|| addresses.len() + connected.saturating_sub(lines))
}

/// `slave0`, `slave1`, ...
fn is_replica_line(key: &str) -> bool {
    key.strip_prefix("slave")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
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

#[cfg(test)]
mod tests {
    use super::replicas_of_info;

    #[test]
    fn counts_replicas_in_any_state_once_per_address() {
        let syncing = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
                       slave0:ip=127.0.0.1,port=7001,state=wait_bgsave,offset=0,lag=0\r\n\
                       master_failover_state:no-failover\r\n";
        assert_eq!(replicas_of_info(syncing), Some(1));
        let two_channels = "role:master\nconnected_slaves:3\n\
             slave0:ip=10.0.0.2,port=7001,state=send_bulk,offset=0,lag=0,type=rdb-channel\n\
             slave1:ip=10.0.0.2,port=7001,state=wait_bgsave,offset=0,lag=0,type=main-channel\n\
             slave2:ip=10.0.0.3,port=7001,state=online,offset=87,lag=0,type=replica\n";
        assert_eq!(replicas_of_info(two_channels), Some(2));
        let unlisted = "role:master\nconnected_slaves:2\n\
                        slave0:ip=10.0.0.2,port=7001,state=online,offset=1,lag=0\n";
        assert_eq!(replicas_of_info(unlisted), Some(2));
        assert_eq!(
            replicas_of_info("role:master\nconnected_slaves:0\n"),
            Some(0)
        );
        let replica = "role:slave\nmaster_host:10.0.0.1\nconnected_slaves:0\n";
        assert_eq!(replicas_of_info(replica), None);
        assert_eq!(replicas_of_info(""), None);
    }
}
