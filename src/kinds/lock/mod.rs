//! The reentrant lock, in one place: [`Lock`], a handle on one named lock, and
//! [`LockGuard`], one hold on it (by any kind that wraps a `Lock`), released on drop; its
//! kind as the engine knows it (`kind`), its protocol (`protocol`) and its scripts
//! (`scripts`).

pub(crate) mod kind;
pub(crate) mod protocol;
pub(crate) mod scripts;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::kind::LockKind;
use crate::engine::options::{AcquireOptions, Lease};
use crate::engine::{Engine, Held};
use crate::error::Result;
use crate::names::LockKeys;
use crate::store::Op;
pub(crate) use kind::REENTRANT;

/// A handle on one named lock. Cheap to create
/// ([`LockManager::get_lock`](crate::LockManager::get_lock) does no I/O) and to clone; it keeps
/// its manager alive.
///
/// The methods that acquire follow Redisson's `RLock` overloads:
///
/// | method | waits | lease |
/// |---|---|---|
/// | [`lock`](Self::lock) | until acquired | watchdog: renewed while the guard lives |
/// | [`try_lock`](Self::try_lock) | up to `wait` | watchdog |
/// | [`lock_with_lease`](Self::lock_with_lease) | until acquired | fixed, never renewed |
/// | [`try_lock_with_lease`](Self::try_lock_with_lease) | up to `wait` | fixed |
///
/// Ownership is per thread: the thread that acquires is the owner, and acquiring again from
/// the same thread re-enters (the hold count goes up) instead of waiting. Every acquire returns
/// a [`LockGuard`] that releases exactly one hold.
#[derive(Clone)]
pub struct Lock {
    engine: Arc<Engine>,
    name: Name,
    /// For the `Lock` a handle of another format wraps (a string lock's), that format: its
    /// acquires and inspection calls answer for it (see [`OtherFormat`]).
    format: Option<&'static dyn OtherFormat>,
}

/// A lock format other than the hash of hold counts, whose handle wraps a [`Lock`] (the
/// string lock): the `Lock` its guards hand out ([`LockGuard::lock`]) acquires and inspects
/// through it, so that it answers for that lock instead of reading a hash.
pub(crate) trait OtherFormat: Send + Sync {
    fn acquire(&self, lock: &Lock, options: AcquireOptions) -> Result<Option<LockGuard>>;
    fn is_locked(&self, lock: &Lock) -> Result<bool>;
    fn is_held_by_current_thread(&self, lock: &Lock) -> Result<bool>;
    fn hold_count(&self, lock: &Lock) -> Result<u32>;
    fn remaining_ttl(&self, lock: &Lock) -> Result<Option<Duration>>;
    fn force_unlock(&self, lock: &Lock) -> Result<bool>;
}

/// A lock's name: checked once, when the handle is made; an invalid one is kept to report
/// why at each operation.
#[derive(Clone)]
enum Name {
    Valid(Arc<LockKeys>),
    Invalid(Arc<str>),
}

impl Lock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        let name = match LockKeys::new(name) {
            Ok(keys) => Name::Valid(Arc::new(keys)),
            Err(_) => Name::Invalid(Arc::from(name)),
        };
        Lock {
            engine,
            name,
            format: None,
        }
    }

    /// The `Lock` that a handle of `format` wraps (see [`OtherFormat`]).
    pub(crate) fn in_format(
        engine: Arc<Engine>,
        name: &str,
        format: &'static dyn OtherFormat,
    ) -> Self {
        Lock {
            format: Some(format),
            ..Lock::new(engine, name)
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        match &self.name {
            Name::Valid(keys) => &keys.name,
            Name::Invalid(name) => name,
        }
    }

    /// Whether this `Lock` answers for a lock of another format (a string lock's guard hands
    /// out such a `Lock`), not for a hash of hold counts.
    pub(crate) fn is_other_format(&self) -> bool {
        self.format.is_some()
    }

    /// The manager's engine, also in a child made by `fork()`: for what only reads its
    /// identity and settings, or checks the process itself (see [`engine`](Self::engine)).
    pub(crate) fn engine_in_any_process(&self) -> &Engine {
        &self.engine
    }

    /// The lock's keys; an invalid name is reported here.
    pub(crate) fn keys(&self) -> Result<&Arc<LockKeys>> {
        match &self.name {
            Name::Valid(keys) => Ok(keys),
            Name::Invalid(name) => {
                Err(LockKeys::new(name).expect_err("only invalid names are kept as Invalid"))
            }
        }
    }

    /// The keys of a lock that was acquired, so whose name is valid.
    pub(crate) fn valid_keys(&self) -> &Arc<LockKeys> {
        match &self.name {
            Name::Valid(keys) => keys,
            Name::Invalid(_) => unreachable!("a lock with an invalid name is never acquired"),
        }
    }

    /// Waits as long as it takes to acquire the lock, then keeps it alive with the watchdog
    /// (lease: the manager's watchdog timeout, renewed every third of it) until the guard is
    /// released.
    ///
    /// Waiting costs no polling: the thread sleeps until the holder's release is announced
    /// over pub/sub, or at the latest until the holder's lease would run out.
    ///
    /// Errors: an invalid name, Redis unreachable (reported, not waited out), or a key of this
    /// name that is not a lock.
    pub fn lock(&self) -> Result<LockGuard> {
        self.acquire_waiting(AcquireOptions::new())
    }

    /// Tries to acquire the lock for up to `wait` (watchdog lease, as [`lock`](Self::lock)).
    ///
    /// `Duration::ZERO` makes exactly one attempt. Returns `Ok(None)` when the wait passed
    /// without the lock; it returns at most one response timeout after `wait`.
    pub fn try_lock(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait))
    }

    /// Waits as long as it takes to acquire the lock with a fixed `lease`: the lock expires
    /// `lease` after it was acquired unless released before. The watchdog is not involved.
    ///
    /// The lease must be at least 1 ms and at most 100 years.
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire_waiting(AcquireOptions::new().lease(Lease::Fixed(lease)))
    }

    /// Tries to acquire the lock for up to `wait` with a fixed `lease` (no watchdog).
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait).lease(Lease::Fixed(lease)))
    }

    /// Like [`lock`](Self::lock), and the guard carries a fencing token
    /// ([`LockGuard::fencing_token`]): a number that strictly increases with every fenced
    /// acquisition of this lock name, by any client or process.
    ///
    /// A lock alone cannot protect a resource from a holder that lost it without noticing (a
    /// pause longer than the lease, a partition): by the time it writes, another holder may
    /// have the lock. Send the token with each write and have the resource refuse any write
    /// whose token is lower than the highest it has accepted; see `examples/fencing.rs`.
    ///
    /// The counter is Redisson's (`redisson_lock_token:{name}`), so Java's fenced lock and
    /// this one draw from one sequence. Tokens are exact over the whole `u64` range that Redis'
    /// counters reach (up to 2^63 - 1). Re-entries take a token too. The counter lives in Redis
    /// with no expiry: a server that restarts without persistence starts it again from 1, so
    /// fencing across restarts needs Redis' append-only file (`appendfsync always`).
    pub fn lock_fenced(&self) -> Result<LockGuard> {
        self.acquire_waiting(AcquireOptions::new().fenced(true))
    }

    /// Like [`try_lock`](Self::try_lock), with a fencing token as in
    /// [`lock_fenced`](Self::lock_fenced).
    pub fn try_lock_fenced(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait).fenced(true))
    }

    /// The last fencing token handed out for this lock name, read without acquiring (the
    /// value of Redisson's counter `redisson_lock_token:{name}`); `None` when no fenced
    /// acquire ever happened (or the counter was lost, see [`lock_fenced`](Self::lock_fenced)).
    /// The next fenced acquire gets a larger one. A counter key of another type is
    /// [`Error::WrongType`](crate::Error::WrongType).
    pub fn current_token(&self) -> Result<Option<u64>> {
        let keys = self.keys()?;
        let engine = self.engine()?;
        let budget = engine.config().response_timeout;
        let key = keys.token_key();
        let value: Option<String> =
            engine
                .store()
                .run_within(Op::CurrentToken, &keys.name, 1, budget, |conn| {
                    redis::cmd("GET").arg(&key).query(conn)
                })?;
        value
            .map(|value| {
                value.parse().map_err(|_| crate::Error::WrongType {
                    name: keys.name.to_string(),
                })
            })
            .transpose()
    }

    /// Whether anyone (any thread, process or client) holds the lock.
    pub fn is_locked(&self) -> Result<bool> {
        if let Some(format) = self.format {
            return format.is_locked(self);
        }
        protocol::is_locked(self.engine()?.store(), self.keys()?)
    }

    /// Whether the calling thread holds the lock through this manager.
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        if let Some(format) = self.format {
            return format.is_held_by_current_thread(self);
        }
        let engine = self.engine()?;
        protocol::is_held_by(engine.store(), self.keys()?, &engine.current_owner())
    }

    /// How many holds the calling thread has on the lock (0 when it holds none).
    pub fn hold_count(&self) -> Result<u32> {
        if let Some(format) = self.format {
            return format.hold_count(self);
        }
        let engine = self.engine()?;
        protocol::hold_count(engine.store(), self.keys()?, &engine.current_owner())
    }

    /// The lock's remaining lease as Redis sees it; `None` when nobody holds it (or its key
    /// has no expiry, which only a foreign writer can cause).
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        if let Some(format) = self.format {
            return format.remaining_ttl(self);
        }
        protocol::remaining_ttl(self.engine()?.store(), self.keys()?)
    }

    /// Deletes the lock whoever holds it and wakes its waiters; `true` if it was held. Any
    /// lock of this name goes, and its waiters are woken where they listen: a fair lock's
    /// first waiter on its own channel, a read-write lock's waiters on that lock's channel.
    ///
    /// The former holder's guards then fail to release with [`Error::NotHeld`](crate::Error::NotHeld), and the
    /// watchdog drops their renewal at its next sweep. A key of this name that is not a lock
    /// is left alone and reported as [`Error::WrongType`](crate::Error::WrongType).
    pub fn force_unlock(&self) -> Result<bool> {
        if let Some(format) = self.format {
            return format.force_unlock(self);
        }
        let keys = self.keys()?;
        let engine = self.engine()?;
        let released = protocol::force_unlock(engine.store(), keys)?;
        // Every local hold is gone, and whichever local thread had the turn lost its hold:
        // the next one may go at once.
        engine.forget_holds(keys);
        Ok(released)
    }

    /// Acquires as `options` say: the general form of every acquiring method above (which
    /// are shorthands for it). `Ok(None)` only when a wait limit was given and passed.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_rlock::{AcquireOptions, Lease};
    /// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
    /// let lock = manager.get_lock("invoices");
    /// // What no shorthand offers: a fenced lock with a fixed lease.
    /// let guard = lock
    ///     .acquire(AcquireOptions::new().lease(Lease::Fixed(Duration::from_secs(5))).fenced(true))?
    ///     .expect("no wait limit");
    /// assert!(guard.fencing_token().is_some());
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        if let Some(format) = self.format {
            return format.acquire(self, options);
        }
        self.acquire_as(&REENTRANT, options)
    }

    /// Acquires a hold of `kind` on this name for the calling thread (the other lock kinds'
    /// handles wrap a `Lock`).
    pub(crate) fn acquire_as(
        &self,
        kind: &'static dyn LockKind,
        options: AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        self.acquire_for(options, kind, crate::owner::current_thread_number())
    }

    /// Acquires a hold of `kind` that belongs to thread `thread`, whichever thread calls:
    /// a `RedLock`'s attempts run on helper threads in its caller's name.
    pub(crate) fn acquire_for(
        &self,
        options: AcquireOptions,
        kind: &'static dyn LockKind,
        thread: u64,
    ) -> Result<Option<LockGuard>> {
        let keys = self.keys()?;
        // `Engine::acquire` refuses a child made by `fork()` before anything else: one check
        // (a system call) per acquire is enough.
        let engine = self.engine_in_any_process();
        let request = options.request(engine.config().watchdog_timeout_ms)?;
        let held = engine.acquire(kind, keys, &request, thread)?;
        Ok(held.map(|held| LockGuard::new(self.clone(), held)))
    }

    /// Whether the calling thread holds the lock through this manager, as this process
    /// counts its holds (no I/O).
    pub(crate) fn is_held_here_by_current_thread(&self) -> bool {
        let engine = self.engine_in_any_process();
        self.keys()
            .is_ok_and(|keys| engine.own_hold_count(&REENTRANT, keys) > 0)
    }

    /// Releases one hold of thread `thread` of this lock's manager, straight on Redis: for an
    /// acquire made on a helper thread whose reply never came (so no guard exists), which
    /// may or may not have taken the lock. Someone else's hold is left alone.
    pub(crate) fn release_hold_of_thread(&self, thread: u64) -> Result<()> {
        let keys = self.keys()?;
        let engine = self.engine()?;
        let owner = crate::owner::owner_field(engine.client_id(), thread);
        let lease_ms = engine.config().watchdog_timeout_ms;
        REENTRANT
            .release(engine.store(), keys, &owner, lease_ms)
            .map(drop)
    }

    /// [`acquire`](Self::acquire) for options without a wait limit.
    fn acquire_waiting(&self, options: AcquireOptions) -> Result<LockGuard> {
        self.acquire(options)
            .map(|guard| guard.expect("waits without limit"))
    }

    /// The manager's engine, refused in a child made by `fork()`.
    pub(crate) fn engine(&self) -> Result<&Engine> {
        let engine = &self.engine;
        engine.check_process()?;
        Ok(engine)
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock").field("name", &self.name()).finish()
    }
}

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

    /// The [`Lock`] handle this guard holds: a string lock's guard holds one that answers for
    /// the string lock (see [`StringLock`](crate::StringLock)), the other kinds' guards the
    /// plain `Lock` of their name.
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

    /// Sends on `tell` when the hold is found lost, and drops it when the hold ends: for
    /// one signal over several guards (`MultiLockGuard::lost_signal`).
    pub(crate) fn tell_when_lost(&self, tell: crossbeam_channel::Sender<()>) {
        self.held.status.tell_when_lost(tell);
    }

    fn release(&self) -> Result<()> {
        let engine = self.lock.engine_in_any_process();
        engine.release(self.keys(), &self.held)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released || self.lock.engine_in_any_process().is_forked() {
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

/// The six shorthands of [`Lock`]'s acquiring methods, for another kind's handle with an
/// `acquire(AcquireOptions)` method: one place for the Redisson overloads they mirror.
macro_rules! acquire_shorthands {
    ($what:literal) => {
        #[doc = concat!("Waits as long as it takes to acquire ", $what, ", then keeps it alive")]
        /// with the watchdog until the guard is released (Redisson's `lock()`).
        pub fn lock(&self) -> $crate::Result<$crate::LockGuard> {
            self.acquire($crate::AcquireOptions::new())
                .map(|guard| guard.expect("waits without limit"))
        }

        #[doc = concat!("Tries to acquire ", $what, " for up to `wait`, watchdog lease")]
        /// (Redisson's `tryLock(wait, unit)`). `Duration::ZERO` makes exactly one attempt;
        /// `Ok(None)` when the wait passed without it.
        pub fn try_lock(
            &self,
            wait: std::time::Duration,
        ) -> $crate::Result<Option<$crate::LockGuard>> {
            self.acquire($crate::AcquireOptions::new().wait(wait))
        }

        #[doc = concat!("Waits as long as it takes to acquire ", $what, " with a fixed")]
        /// `lease`, never renewed (Redisson's `lock(lease, unit)`). At least 1 ms.
        pub fn lock_with_lease(
            &self,
            lease: std::time::Duration,
        ) -> $crate::Result<$crate::LockGuard> {
            self.acquire($crate::AcquireOptions::new().lease($crate::Lease::Fixed(lease)))
                .map(|guard| guard.expect("waits without limit"))
        }

        #[doc = concat!("Tries to acquire ", $what, " for up to `wait` with a fixed `lease`")]
        /// (Redisson's `tryLock(wait, lease, unit)`).
        pub fn try_lock_with_lease(
            &self,
            wait: std::time::Duration,
            lease: std::time::Duration,
        ) -> $crate::Result<Option<$crate::LockGuard>> {
            self.acquire(
                $crate::AcquireOptions::new()
                    .wait(wait)
                    .lease($crate::Lease::Fixed(lease)),
            )
        }

        #[doc = concat!("Like [`lock`](Self::lock) for ", $what, ", and the guard carries a")]
        /// fencing token ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)), as
        /// [`Lock::lock_fenced`](crate::Lock::lock_fenced).
        pub fn lock_fenced(&self) -> $crate::Result<$crate::LockGuard> {
            self.acquire($crate::AcquireOptions::new().fenced(true))
                .map(|guard| guard.expect("waits without limit"))
        }

        #[doc = concat!("Like [`try_lock`](Self::try_lock) for ", $what, ", with a fencing")]
        /// token as in [`lock_fenced`](Self::lock_fenced).
        pub fn try_lock_fenced(
            &self,
            wait: std::time::Duration,
        ) -> $crate::Result<Option<$crate::LockGuard>> {
            self.acquire($crate::AcquireOptions::new().wait(wait).fenced(true))
        }
    };
}
pub(crate) use acquire_shorthands;
