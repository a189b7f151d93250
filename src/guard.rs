//! [`LockGuard`]: one hold on a lock, released on drop.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Held;
use crate::error::Result;
use crate::lock::Lock;
use crate::names::LockKeys;

/// One hold on a lock, released when the guard is dropped or [`unlock`](Self::unlock)ed.
///
/// The guard remembers the thread that acquired it, so it may be moved to another thread and
/// released there: it releases the acquiring thread's hold, never the current thread's.
///
/// Dropping releases on a best-effort basis and logs a failure with `log::warn!`; call
/// [`unlock`](Self::unlock) to see the error instead.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    lock: Lock,
    /// The hold: its owner thread, lease, token and what the watchdog knows of it.
    held: Held,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(lock: Lock, held: Held) -> Self {
        LockGuard {
            lock,
            held,
            released: false,
        }
    }

    /// Releases this hold and reports what happened.
    ///
    /// `Ok(())` when the hold was released (the lock is free if this was the owner's last
    /// hold; waiters are woken). [`Error::NotHeld`](crate::Error::NotHeld) when the hold was
    /// gone: its lease ran out, it was force-unlocked, or another owner has the lock now, in
    /// which case nothing on Redis was changed (a newer hold of the same thread is left
    /// alone). A retry after a lost reply is safe: the unlock is
    /// idempotent.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.release()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    fn keys(&self) -> &Arc<LockKeys> {
        self.lock.valid_keys()
    }

    /// The [`Lock`] handle this guard holds.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The fencing token of this hold: `Some` for guards from [`Lock::lock_fenced`] and
    /// [`Lock::try_lock_fenced`], `None` otherwise.
    ///
    /// Tokens of one lock name strictly increase with every fenced acquisition, by any client
    /// or process (Redisson's fenced lock shares the counter). Send it with every write to the
    /// resource the lock protects, and have the resource refuse a write whose token is lower
    /// than the highest it has seen: then a holder that lost the lock without knowing (a long
    /// pause, a partition) cannot overwrite the work of the holder after it.
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.token
    }

    /// The fixed lease this hold was taken with; `None` when the watchdog renews it.
    pub fn lease(&self) -> Option<Duration> {
        match self.held.renewed {
            true => None,
            false => Some(Duration::from_millis(self.held.lease_ms)),
        }
    }

    /// Whether the lock is lost, as far as this client can tell without asking Redis: the
    /// watchdog found the hold gone at a renewal (expired, force-unlocked, taken over), or the
    /// lease last confirmed by Redis has run out without a confirmed renewal (Redis down or
    /// slow past the lease, a fixed lease that passed, the machine suspended). No I/O.
    ///
    /// The confirmed lease is counted from when the acquire or renewal request was *sent*,
    /// less a small margin, on a clock that keeps counting through suspend: `false` means the
    /// lease has not run out on Redis' side either. Once `true`, another client may hold the
    /// lock; protect writes with [fencing tokens](Self::fencing_token) where that matters.
    pub fn is_lost(&self) -> bool {
        self.held.status.is_lost()
    }

    /// The lease left as last confirmed by Redis (see [`is_lost`](Self::is_lost)); `None`
    /// once lost. For renewed locks it goes back up at every renewal.
    pub fn remaining_lease(&self) -> Option<Duration> {
        self.held.status.remaining()
    }

    /// A receiver that gets one message the moment the lock is found lost: by the watchdog at
    /// a renewal, or when the confirmed lease runs out without a renewal. If the guard is
    /// released first, the receiver is disconnected instead.
    ///
    /// Each call registers a new receiver, kept until the hold ends: take one per guard and
    /// keep it, rather than one per check.
    ///
    /// ```no_run
    /// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
    /// let guard = manager.lock("jobs:nightly")?;
    /// let lost = guard.lost_signal();
    /// // ... between steps of the work:
    /// if lost.try_recv().is_ok() {
    ///     // stop: someone else may hold the lock now
    /// }
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn lost_signal(&self) -> crossbeam_channel::Receiver<()> {
        self.held.status.lost_signal()
    }

    fn release(&self) -> Result<()> {
        let engine = self.lock.manager().engine();
        engine.release(self.keys(), &self.held)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released || self.lock.manager().engine().is_forked() {
            // In a child made by fork() the hold is the parent's: leave it to the parent.
            return;
        }
        if let Err(err) = self.release() {
            log::warn!("releasing lock {:?} on drop failed: {err}", self.name());
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("thread", &self.held.thread)
            .field("lease", &self.lease())
            .finish()
    }
}
