//! Release latches (docs/design/deployments.md, "Never twice blindly"): every kind's release script call
//! carries a new latch key, so that a call sent again after its reply was lost answers what
//! the first did; the latches of a lock's earlier releases are remembered here and deleted by
//! its next release.

use std::sync::atomic::{AtomicU64, Ordering};

use redis::{Connection, RedisResult};

use super::resend::send_again_if_lost;
use super::{LockStore, Op};
use crate::error::Result;
use crate::names::LockKeys;

/// Above this many locks remembered, the latches of earlier releases are forgotten (they
/// expire by themselves): the memory stays bounded however many names are used.
const LATCHES_REMEMBERED: usize = 1024;

/// At most this many latches of one lock wait for deletion (overlapping releases).
const LATCHES_PER_LOCK: usize = 8;

/// The request ids of a client's unlock latches: 32 lower-case hex digits, as Redisson's, made
/// of the first 64 bits of a random UUID (v4: 60 random bits, 4 fixed version bits) drawn once
/// per manager and the count of its releases. Unique among
/// clients as a random id is, without asking the OS for random bytes at every release (a
/// system call on the release's path).
pub(super) struct LatchIds {
    client: u64,
    next: AtomicU64,
}

impl LatchIds {
    pub(super) fn new() -> Self {
        LatchIds {
            client: uuid::Uuid::new_v4().as_u64_pair().0,
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}{n:016x}", self.client)
    }
}

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
        let latch = keys.latch(&self.latch_ids.next());
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
        let sent = send_again_if_lost(&keys.name, send);
        if sent.again {
            // The first send may still reach the server after this one (a retransmission,
            // a proxy): its latch must outlive it, so it is left to expire, not deleted.
            return sent.reply;
        }
        let reply = sent.reply?;
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

#[cfg(test)]
mod tests {
    use super::LatchIds;

    #[test]
    fn latch_ids_are_32_hex_digits_and_differ() {
        let ids = LatchIds::new();
        let (first, second) = (ids.next(), ids.next());
        assert_eq!(first.len(), 32);
        assert!(first
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(first, second);
        assert_ne!(
            first[..16],
            LatchIds::new().next()[..16],
            "each manager draws its own"
        );
    }
}
