//! [`MultiLock`]: several locks taken as one, all or nothing (Redisson's `RedissonMultiLock`).

use std::fmt;
use std::time::{Duration, Instant};

use crate::engine::options::{AcquireOptions, Lease};
use crate::error::Result;
use crate::kinds::lock::{Lock, LockGuard};
use crate::limits::check_wait;

/// Several [`Lock`]s, possibly of different managers (so different Redis servers), acquired
/// as one: all of them or none (Redisson's `RedissonMultiLock`).
///
/// The locks are acquired one after another **in the order given**, on the calling thread
/// (so each hold is the calling thread's, and re-enters a lock it already holds). Two
/// `MultiLock`s that share locks cannot deadlock as long as every program lists shared locks
/// in the same order; list them in different orders and `lock` may wait forever, as with any
/// pair of mutexes (`try_lock` gives up when its wait passes).
///
/// A failure part way (an error, or the wait passing) releases every hold already taken
/// before the call returns.
#[derive(Clone)]
pub struct MultiLock {
    locks: Vec<Lock>,
}

impl MultiLock {
    /// A multi-lock over `locks`, acquired in this order.
    pub fn new(locks: Vec<Lock>) -> Self {
        MultiLock { locks }
    }

    /// The locks, in acquisition order.
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// Refuses a multi-lock over no lock: its guard would hold nothing (a `RedLock` over no
    /// master is refused alike).
    fn check(&self) -> Result<()> {
        if self.locks.is_empty() {
            return Err(crate::error::Error::invalid(
                "locks",
                "a MultiLock needs at least one lock",
            ));
        }
        Ok(())
    }

    /// Waits as long as it takes to acquire every lock, each with the watchdog lease of its
    /// manager. On an error the holds taken so far are released and the error returned.
    pub fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire_waiting(AcquireOptions::new())
    }

    /// Waits as long as it takes to acquire every lock, each with a fixed `lease`, never
    /// renewed (Redisson's `lock(lease, unit)`). On an error the holds taken so far are
    /// released.
    pub fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard> {
        self.acquire_waiting(AcquireOptions::new().lease(Lease::Fixed(lease)))
    }

    /// Tries to acquire every lock within `wait` in all (not per lock), watchdog leases.
    /// `Ok(None)` when the wait passed first; the holds taken so far are then released, as
    /// they are on an error. `Duration::ZERO` makes one attempt per lock.
    pub fn try_lock(&self, wait: Duration) -> Result<Option<MultiLockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait))
    }

    /// Tries to acquire every lock within `wait` in all, each with a fixed `lease` (Redisson's
    /// `tryLock(wait, lease, unit)`); `Ok(None)` when the wait passed first, the holds taken
    /// so far then released.
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait).lease(Lease::Fixed(lease)))
    }

    /// [`acquire`](Self::acquire) for options without a wait limit.
    fn acquire_waiting(&self, options: AcquireOptions) -> Result<MultiLockGuard> {
        self.acquire(options)
            .map(|guard| guard.expect("waits without limit"))
    }

    /// Acquires every lock as `options` say: its wait limit in all (none: as long as it
    /// takes), its lease and fencing on each lock, and its
    /// [`CancelToken`](crate::CancelToken), which ends the wait for whichever lock is being
    /// waited for ([`Error::Cancelled`](crate::Error::Cancelled); a lock's manager shut down
    /// ends it with [`Error::Shutdown`](crate::Error::Shutdown)). `Ok(None)` when the wait
    /// passed; on `None` or an error, the holds taken so far are released.
    ///
    /// ```no_run
    /// use redis_rlock::{AcquireOptions, CancelToken, LockManager, MultiLock};
    /// # let manager = LockManager::new("redis://127.0.0.1/")?;
    /// let both = MultiLock::new(vec![manager.get_lock("a"), manager.get_lock("b")]);
    /// let token = CancelToken::new();
    /// // `token.cancel()` from another thread ends the wait.
    /// let guard = both.acquire(AcquireOptions::new().cancel_token(&token))?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<MultiLockGuard>> {
        // Checked here as each lock would, so a bad wait fails before anything is taken.
        if let Some(wait) = options.get_wait() {
            check_wait(wait)?;
        }
        self.check()?;
        let deadline = options.get_wait().map(|wait| Instant::now() + wait);
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            let mut each = options.clone();
            if let Some(deadline) = deadline {
                // Every lock gets what is left of the one wait, so the call is bounded by it.
                each = each.wait(deadline.saturating_duration_since(Instant::now()));
            }
            match lock.acquire(each)? {
                Some(guard) => guards.push(guard),
                None => return Ok(None), // `guards` drops: all released
            }
        }
        Ok(Some(MultiLockGuard { guards }))
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("locks", &self.locks)
            .finish()
    }
}

/// The holds of a [`MultiLock`], one per lock; dropping it releases them all (failures are
/// logged), [`unlock`](Self::unlock) releases them all and reports.
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The guards, in acquisition order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any of the holds is lost ([`LockGuard::is_lost`]); no I/O.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// A receiver that gets one message the moment any of the holds is found lost (as
    /// [`LockGuard::lost_signal`]); disconnected if every hold is released first. Each call
    /// registers a new receiver, kept until the holds end: take one and keep it.
    ///
    /// No thread: every hold is given a sender of the one channel, so the first loss fills
    /// it and the last hold to end disconnects it.
    pub fn lost_signal(&self) -> crossbeam_channel::Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        for guard in &self.guards {
            guard.tell_when_lost(tx.clone());
        }
        rx
    }

    /// Releases every hold, in reverse order of acquisition, and reports the first error;
    /// a failed release does not stop the others from being tried.
    pub fn unlock(self) -> Result<()> {
        let mut first = None;
        for guard in self.guards.into_iter().rev() {
            if let Err(err) = guard.unlock() {
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("guards", &self.guards)
            .finish()
    }
}
