//! Release latches (docs/design/deployments.md, "Never twice blindly"): every kind's release script call
//! carries a new latch key, so that a call sent again after its reply was lost answers what
//! the first did; the latches of a lock's earlier releases are remembered here and deleted by
//! its next release.

use redis::{Connection, RedisResult};

use super::resend::is_lost_reply;
use super::{LockStore, Op};
use crate::error::Result;
use crate::names::LockKeys;

/// Above this many locks remembered, the latches of earlier releases are forgotten (they
/// expire by themselves): the memory stays bounded however many names are used.
const LATCHES_REMEMBERED: usize = 1024;

/// At most this many latches of one lock wait for deletion (overlapping releases).
const LATCHES_PER_LOCK: usize = 8;

impl LockStore {
    /// Runs one release script call made idempotent by a latch (see `RELEASE`): `call` gets
    /// a connection, this call's new latch key and the latches of this client's earlier
    /// releases of the lock, which the script deletes. When the reply is lost (a timeout, a
    /// broken connection) the call is sent once more with the same latch, and gets the first
    /// call's answer if that one ran. Every kind's release goes through here.
    pub(crate) fn release_with_latch<T>(
        &self,
        keys: &LockKeys,
        call: impl Fn(&mut Connection, &str, &[String]) -> RedisResult<T>,
    ) -> Result<T> {
        let latch = keys.latch(&uuid::Uuid::new_v4().simple().to_string());
        let previous = self
            .last_latch
            .lock()
            .remove(&*keys.name)
            .unwrap_or_default();
        let send = || {
            self.run(Op::Release, &keys.name, 1, |conn| {
                call(conn, &latch, &previous)
            })
        };
        let reply = match send() {
            Err(err) if is_lost_reply(&err) => {
                log::debug!("release of {:?}: {err}; sending it again", keys.name);
                // The first send may still reach the server after this one (a retransmission,
                // a proxy): its latch must outlive it, so it is left to expire, not deleted.
                return send();
            }
            other => other?,
        };
        let mut latches = self.last_latch.lock();
        if latches.len() >= LATCHES_REMEMBERED {
            latches.clear();
        }
        let pending = latches.entry(keys.name.clone()).or_default();
        if pending.len() >= LATCHES_PER_LOCK {
            pending.remove(0); // it expires by itself
        }
        pending.push(latch);
        Ok(reply)
    }
}
