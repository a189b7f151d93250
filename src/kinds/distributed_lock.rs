//! [`DistributedLock`]: what every lock kind answers, as Redisson's `RLock` does, so that a
//! program can take "some lock" without knowing which kind.

use std::fmt;
use std::time::Duration;

use crate::engine::options::AcquireOptions;
use crate::error::Result;
use crate::kinds::fair_lock::FairLock;
use crate::kinds::lock::{Lock, LockGuard};
use crate::kinds::read_write_lock::{ReadLock, WriteLock};
use crate::kinds::spin_lock::SpinLock;
use crate::kinds::string_lock::StringLock;

/// A lock of any kind: Redisson's `RLock` interface, implemented by [`Lock`], [`FairLock`],
/// [`SpinLock`], [`StringLock`], [`ReadLock`] and [`WriteLock`].
///
/// Each kind also has these methods as its own (inherent) methods, so the common calls need
/// no `use` of this trait; import it to write code generic over the kind, or to keep locks of
/// several kinds side by side as `Box<dyn DistributedLock>` (the trait is object safe).
///
/// Every method means what Redisson's `RLock` method of that kind means. For a
/// [`ReadLock`] or [`WriteLock`] the key is the read-write lock's shared hash, as in
/// Redisson: `is_locked` is true while the hash is held in that half's mode, `hold_count`
/// and `is_held_by_current_thread` count the calling thread's holds of that half,
/// `remaining_ttl` is the hash's, and `force_unlock` deletes the hash only when it is held in
/// that half's mode.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_rlock::{DistributedLock, LockManager};
///
/// /// Runs `work` under any kind of lock, giving up after a second.
/// fn with_lock(lock: &dyn DistributedLock, work: impl FnOnce()) -> redis_rlock::Result<bool> {
///     match lock.try_lock(Duration::from_secs(1))? {
///         Some(guard) => {
///             work();
///             guard.unlock()?;
///             Ok(true)
///         }
///         None => Ok(false),
///     }
/// }
///
/// let manager = LockManager::new("redis://127.0.0.1/")?;
/// with_lock(&manager.get_fair_lock("reports"), || println!("fair"))?;
/// with_lock(&manager.get_read_write_lock("table").write_lock(), || println!("writer"))?;
/// # Ok::<(), redis_rlock::Error>(())
/// ```
pub trait DistributedLock: fmt::Debug + Send + Sync {
    /// The lock's name, which is also its Redis key.
    fn name(&self) -> &str;

    /// Waits as long as it takes to acquire, watchdog lease (Redisson's `lock()`).
    fn lock(&self) -> Result<LockGuard>;

    /// Tries to acquire for up to `wait`, watchdog lease (Redisson's `tryLock(wait, unit)`);
    /// `Ok(None)` when the wait passed. `Duration::ZERO` makes exactly one attempt.
    fn try_lock(&self, wait: Duration) -> Result<Option<LockGuard>>;

    /// Waits as long as it takes to acquire with a fixed `lease`, never renewed (Redisson's
    /// `lock(lease, unit)`).
    fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard>;

    /// Tries to acquire for up to `wait` with a fixed `lease` (Redisson's
    /// `tryLock(wait, lease, unit)`).
    fn try_lock_with_lease(&self, wait: Duration, lease: Duration) -> Result<Option<LockGuard>>;

    /// Like [`lock`](Self::lock), and the guard carries a fencing token
    /// ([`LockGuard::fencing_token`]). A [`ReadLock`] refuses it
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)): read holds are shared.
    fn lock_fenced(&self) -> Result<LockGuard>;

    /// Like [`try_lock`](Self::try_lock), with a fencing token as in
    /// [`lock_fenced`](Self::lock_fenced).
    fn try_lock_fenced(&self, wait: Duration) -> Result<Option<LockGuard>>;

    /// Acquires as `options` say: the general form of the shorthands above. `Ok(None)` only
    /// when a wait limit was given and passed.
    fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>>;

    /// Whether anyone (any thread, process or client) holds the lock (Redisson's `isLocked`).
    fn is_locked(&self) -> Result<bool>;

    /// Whether the calling thread holds the lock through this manager (Redisson's
    /// `isHeldByCurrentThread`).
    fn is_held_by_current_thread(&self) -> Result<bool>;

    /// How many holds the calling thread has (0 when none; Redisson's `getHoldCount`).
    fn hold_count(&self) -> Result<u32>;

    /// The remaining lease as Redis sees it; `None` when nobody holds the lock (Redisson's
    /// `remainTimeToLive`).
    fn remaining_ttl(&self) -> Result<Option<Duration>>;

    /// Deletes the lock whoever holds it and wakes its waiters; `false` when it was free
    /// (Redisson's `forceUnlock`).
    fn force_unlock(&self) -> Result<bool>;
}

/// Implements [`DistributedLock`] for a kind by its inherent methods of the same names.
macro_rules! by_inherent_methods {
    ($($kind:ty),+) => {$(
        impl DistributedLock for $kind {
            fn name(&self) -> &str {
                <$kind>::name(self)
            }

            fn lock(&self) -> Result<LockGuard> {
                <$kind>::lock(self)
            }

            fn try_lock(&self, wait: Duration) -> Result<Option<LockGuard>> {
                <$kind>::try_lock(self, wait)
            }

            fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
                <$kind>::lock_with_lease(self, lease)
            }

            fn try_lock_with_lease(
                &self,
                wait: Duration,
                lease: Duration,
            ) -> Result<Option<LockGuard>> {
                <$kind>::try_lock_with_lease(self, wait, lease)
            }

            fn lock_fenced(&self) -> Result<LockGuard> {
                <$kind>::lock_fenced(self)
            }

            fn try_lock_fenced(&self, wait: Duration) -> Result<Option<LockGuard>> {
                <$kind>::try_lock_fenced(self, wait)
            }

            fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
                <$kind>::acquire(self, options)
            }

            fn is_locked(&self) -> Result<bool> {
                <$kind>::is_locked(self)
            }

            fn is_held_by_current_thread(&self) -> Result<bool> {
                <$kind>::is_held_by_current_thread(self)
            }

            fn hold_count(&self) -> Result<u32> {
                <$kind>::hold_count(self)
            }

            fn remaining_ttl(&self) -> Result<Option<Duration>> {
                <$kind>::remaining_ttl(self)
            }

            fn force_unlock(&self) -> Result<bool> {
                <$kind>::force_unlock(self)
            }
        }
    )+};
}

by_inherent_methods!(Lock, FairLock, SpinLock, StringLock, ReadLock, WriteLock);

// Every kind is one, and the trait stays object safe: checked at compile time.
const _: () = {
    const fn is_one<T: DistributedLock>() {}
    is_one::<Lock>();
    is_one::<FairLock>();
    is_one::<SpinLock>();
    is_one::<StringLock>();
    is_one::<ReadLock>();
    is_one::<WriteLock>();
    let _: Option<&dyn DistributedLock> = None;
};
