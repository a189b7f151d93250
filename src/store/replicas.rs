//! Replica sync (docs/design/deployments.md, "Replica acknowledgement"): after an acquire or release with
//! replica sync on, the master's replicas are counted again when the count is old, and the
//! write waits for their acknowledgement (`WAIT`) on the connection that made it; a shortfall
//! is judged against what the deployment says of a failover.

use std::time::Duration;

use redis::RedisResult;

use super::resend::{is_broken, is_unknown_command, Failed};
use super::LockStore;
use crate::error::Error;
use crate::topology::pool::Pool;
use crate::topology::replica_count::listed_replicas;

/// How often acquires and releases count a master's replicas again (`INFO replication`)
/// while replica sync is on.
const REPLICAS_RECOUNT: Duration = Duration::from_secs(10);
/// How often instead while the master had no replica when last counted, where masters can
/// be replaced (see `recount_replicas`).
const REPLICAS_RECOUNT_NONE: Duration = Duration::from_millis(100);

impl LockStore {
    /// Whether an acquire of `name` now waits for a replica's acknowledgement (replica sync
    /// on, and the master has replicas, as last counted).
    pub(crate) fn waits_for_replicas(&self, name: &str) -> bool {
        self.replica_sync.is_some()
            && self
                .topology
                .route(name)
                .is_ok_and(|(pool, _)| pool.replicas() > 0 && pool.knows_wait())
    }

    /// After an acquire or release with replica sync on: counts the master's replicas again
    /// when the count is old (replicas added since must be waited for too), then, when the
    /// script `wrote` and there are replicas, waits for them.
    pub(super) fn sync_replicas(
        &self,
        pool: &Pool,
        conn: &mut crate::topology::pool::PooledConnection<'_>,
        operation: &'static str,
        timeout: Duration,
        wrote: bool,
    ) -> std::result::Result<(), Failed> {
        self.recount_replicas(pool, conn, operation, timeout)?;
        if wrote && pool.replicas() > 0 && pool.knows_wait() {
            self.wait_for_replicas(pool, conn, operation, timeout)?;
        } else if wrote && operation == "acquire" && self.is_unvouched_lone_master(pool) {
            // No replica to wait for, and the sentinels do not vouch for this master: a master
            // stopped past its failover and continued answers as a master with its replica
            // gone (promoted), until the sentinels demote it and drop what it wrote meanwhile.
            return Err(self.not_a_settled_master(operation, 0, timeout));
        }
        Ok(())
    }

    /// Counts the master's replicas again, in any state (`listed_replicas`: a replica in
    /// its full sync is one a failover may promote), when the count is old: every 10 s, and
    /// every 100 ms while it was none where masters can be replaced (a replica promoted while
    /// its master was stopped has none until its old master comes back as its replica, and a
    /// count of none sends no `WAIT`). A server that is no master any more fails the write.
    fn recount_replicas(
        &self,
        pool: &Pool,
        conn: &mut crate::topology::pool::PooledConnection<'_>,
        operation: &'static str,
        timeout: Duration,
    ) -> std::result::Result<(), Failed> {
        let recount = if pool.replicas() == 0 && self.topology.capabilities().masters_move {
            REPLICAS_RECOUNT_NONE
        } else {
            REPLICAS_RECOUNT
        };
        if !pool.replicas_older_than(recount) {
            return Ok(());
        }
        self.counters.sent(1);
        match listed_replicas(conn) {
            Ok(listed) => {
                // Not a master any more: the write went to a master demoted since (one
                // continued after its failover), and is dropped with its data.
                let Some(counted) = listed else {
                    let replicas = pool.replicas();
                    return Err(self.not_a_settled_master(operation, replicas, timeout));
                };
                if pool.count_replicas(counted) && !self.topology.failover_suspected(pool.addr()) {
                    pool.set_replicas(counted);
                }
            }
            Err(err) if is_broken(&err) => return Err(Failed::Redis(err)),
            // Not allowed (an ACL without INFO and ROLE): the count stays as it was.
            Err(_) => pool.set_replicas(pool.replicas()),
        }
        Ok(())
    }

    /// A Sentinel master counted without replicas that no sentinel vouches for (see
    /// `Topology::failover_suspected`).
    fn is_unvouched_lone_master(&self, pool: &Pool) -> bool {
        pool.replicas() == 0
            && self.topology.capabilities().sentinels_vouch
            && self.topology.failover_suspected(pool.addr())
    }

    /// A write that must not count (the caller rolls an acquire back); the deployment is asked
    /// again for its master.
    fn not_a_settled_master(
        &self,
        operation: &'static str,
        replicas: usize,
        timeout: Duration,
    ) -> Failed {
        self.topology
            .refresh_unless_under_way(self.topology.map().generation);
        Failed::Other(Error::NotReplicated {
            operation,
            replicas,
            timeout,
        })
    }

    /// `WAIT <replicas> <timeout>` on the connection that just wrote, then
    /// [`judge_acknowledgements`](Self::judge_acknowledgements).
    fn wait_for_replicas(
        &self,
        pool: &Pool,
        conn: &mut crate::topology::pool::PooledConnection<'_>,
        operation: &'static str,
        timeout: Duration,
    ) -> std::result::Result<(), Failed> {
        let replicas = pool.replicas();
        let read_timeout = timeout + self.response_timeout;
        let waited = (|| -> RedisResult<bool> {
            conn.set_read_timeout(Some(read_timeout))?;
            self.counters.sent(1);
            let wait = |ms: u64| {
                let mut wait = redis::cmd("WAIT");
                wait.arg(replicas).arg(ms);
                wait
            };
            let acked: usize = match wait(timeout.as_millis() as u64).query(&mut **conn) {
                // The process was stopped and continued meanwhile (see `pool::connect_by`).
                // The first WAIT still runs on the server, and a WAIT sent now is answered
                // after it: one millisecond more is all it needs to count the acknowledgements
                // of this connection's last write again, so the call keeps its time. redis-rs
                // skips the first WAIT's reply when it comes.
                Err(err) if crate::error::is_interrupted(&err) => {
                    log::debug!("waiting for WAIT's reply was interrupted ({err}); asking again");
                    self.counters.sent(1);
                    wait(1).query(&mut **conn)?
                }
                acked => acked?,
            };
            if acked >= replicas {
                return Ok(true);
            }
            self.counters.sent(1);
            let connected = listed_replicas(conn)?.unwrap_or(0);
            Ok(self.judge_acknowledgements(pool, acked, connected))
        })();
        let restored = conn.set_read_timeout(Some(self.response_timeout));
        match (waited, restored) {
            (Ok(true), Ok(())) => Ok(()),
            (Ok(false), Ok(())) => Err(Failed::Other(Error::NotReplicated {
                operation,
                replicas,
                timeout,
            })),
            // A managed service or proxy without WAIT (ElastiCache Serverless): nothing can
            // be waited for there, and the write stands, as without replica sync (Redisson
            // skips WAIT where its probe finds none). Told once; never sent there again.
            (Err(err), Ok(())) if is_unknown_command(&err) => {
                if !pool.knows_no_wait_from_now() {
                    log::warn!(
                        "{} does not know WAIT ({err}): acquires and releases there do not \
                         wait for replicas",
                        pool.addr()
                    );
                }
                Ok(())
            }
            (Err(err), _) | (_, Err(err)) => Err(Failed::Redis(err)),
        }
    }

    /// Whether a write that `acked` of the master's replicas acknowledged, fewer than it
    /// had, is safe, with `connected` replicas connected to it now (docs/design/deployments.md,
    /// "Replica sync through a failover"). A replica being promoted leaves the old master
    /// first, and the others follow the new master soon after, dropping what the old one
    /// wrote meanwhile: so on Sentinel, a shortfall counts only when the sentinels say that
    /// no failover of this master is under way. A master left with no replica acknowledging
    /// is trusted only on a single server, where nobody promotes a replica.
    fn judge_acknowledgements(&self, pool: &Pool, acked: usize, connected: usize) -> bool {
        let follows = self.topology.capabilities().masters_move;
        let safe = if acked == 0 {
            !follows && connected == 0
        } else {
            !self.topology.failover_suspected(pool.addr())
        };
        if safe {
            // The missing replicas failed: later writes wait for those left.
            pool.set_replicas(connected.max(acked));
        } else if follows {
            // The master may have been replaced (a failover under way): the next command
            // goes where the deployment says the master is. Only if nobody is asking
            // already: this call has waited long enough.
            self.topology
                .refresh_unless_under_way(self.topology.map().generation);
        }
        safe
    }
}
