//! [`Lock`]: a handle on one named lock, and the acquire loop.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::BootInstant;
use crate::config::{check_wait, to_millis};
use crate::error::{Error, Result};
use crate::gate::Entry;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::names::LockKeys;
use crate::owner::{current_thread_number, owner_field};
use crate::store::Attempt;

/// How long to sleep between attempts when the holder's key has no TTL at all (a foreign
/// writer made it; no client of this protocol does) and no unlock message comes.
const NO_TTL_POLL: Duration = Duration::from_millis(100);

/// How often a waiter looks again while Redis does not answer (it is also woken as soon as
/// the pub/sub listener has reconnected).
const OUTAGE_RETRY: Duration = Duration::from_millis(100);

/// A handle on one named lock. Cheap to create ([`LockManager::get_lock`] does no I/O) and
/// to clone; it keeps its manager alive.
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
    manager: LockManager,
    name: Name,
}

/// A lock's name: checked once, when the handle is made; an invalid one is kept to report
/// why at each operation.
#[derive(Clone)]
enum Name {
    Valid(Arc<LockKeys>),
    Invalid(Arc<str>),
}

impl Lock {
    pub(crate) fn new(manager: LockManager, name: &str) -> Self {
        let name = match LockKeys::new(name) {
            Ok(keys) => Name::Valid(Arc::new(keys)),
            Err(_) => Name::Invalid(Arc::from(name)),
        };
        Lock { manager, name }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        match &self.name {
            Name::Valid(keys) => &keys.name,
            Name::Invalid(name) => name,
        }
    }

    pub(crate) fn manager(&self) -> &LockManager {
        &self.manager
    }

    fn keys(&self) -> Result<&Arc<LockKeys>> {
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
        self.acquire(None, None, false)
            .map(|g| g.expect("waits without limit"))
    }

    /// Tries to acquire the lock for up to `wait` (watchdog lease, as [`lock`](Self::lock)).
    ///
    /// `Duration::ZERO` makes exactly one attempt. Returns `Ok(None)` when the wait passed
    /// without the lock; it returns at most one response timeout after `wait`.
    pub fn try_lock(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), None, false)
    }

    /// Waits as long as it takes to acquire the lock with a fixed `lease`: the lock expires
    /// `lease` after it was acquired unless released before. The watchdog is not involved.
    ///
    /// The lease must be at least 1 ms and at most 2^52 ms.
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(None, Some(lease), false)
            .map(|g| g.expect("waits without limit"))
    }

    /// Tries to acquire the lock for up to `wait` with a fixed `lease` (no watchdog).
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), Some(lease), false)
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
        self.acquire(None, None, true)
            .map(|g| g.expect("waits without limit"))
    }

    /// Like [`try_lock`](Self::try_lock), with a fencing token as in
    /// [`lock_fenced`](Self::lock_fenced).
    pub fn try_lock_fenced(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), None, true)
    }

    /// Whether anyone (any thread, process or client) holds the lock.
    pub fn is_locked(&self) -> Result<bool> {
        self.manager.inner.store.is_locked(self.keys()?)
    }

    /// Whether the calling thread holds the lock through this manager.
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        let owner = owner_field(&self.manager.inner.client_id, current_thread_number());
        self.manager.inner.store.is_held_by(self.keys()?, &owner)
    }

    /// How many holds the calling thread has on the lock (0 when it holds none).
    pub fn hold_count(&self) -> Result<u32> {
        let owner = owner_field(&self.manager.inner.client_id, current_thread_number());
        self.manager.inner.store.hold_count(self.keys()?, &owner)
    }

    /// The lock's remaining lease as Redis sees it; `None` when nobody holds it (or its key
    /// has no expiry, which only a foreign writer can cause).
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.manager.inner.store.remaining_ttl(self.keys()?)
    }

    /// Deletes the lock whoever holds it and wakes its waiters; `true` if it was held.
    ///
    /// The former holder's guards then fail to release with [`Error::NotHeld`](crate::Error::NotHeld), and the
    /// watchdog drops their renewal at its next sweep. A key of this name that is not a lock
    /// is left alone and reported as [`Error::WrongType`](crate::Error::WrongType).
    pub fn force_unlock(&self) -> Result<bool> {
        let keys = self.keys()?;
        let released = self.manager.inner.store.force_unlock(keys)?;
        // Whichever local thread had the turn lost its hold: the next one may go at once.
        self.manager.inner.gates.reset(keys);
        Ok(released)
    }

    /// Acquires through the manager's local turn ([`crate::gate`]): threads of this manager
    /// that want the same lock queue in-process, and only the turn holder contends in Redis.
    /// `wait: None` waits without limit; `lease: None` uses the watchdog; `fenced` takes a
    /// fencing token with the lock.
    fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
        fenced: bool,
    ) -> Result<Option<LockGuard>> {
        self.keys()?;
        let lease_ms = match lease {
            Some(lease) => to_millis("lease", lease)?,
            None => self.manager.inner.config.watchdog_timeout_ms,
        };
        if let Some(wait) = wait {
            check_wait(wait)?;
        }
        let deadline = wait.map(|wait| Instant::now() + wait);
        let one_attempt = wait == Some(Duration::ZERO);
        loop {
            let guard = self.acquire_until(deadline, one_attempt, lease, lease_ms, fenced)?;
            match guard {
                // A reply that came back too late to leave a useful lease is not a lock: the
                // server may count the lease from earlier than this side can prove. Release
                // it (dropping the guard does) and try again while the wait allows.
                Some(guard) if !has_useful_lease(&guard, lease_ms) => {
                    log::warn!(
                        "lock {:?}: the acquire's reply came too late to leave a useful lease; \
                         released it",
                        self.name()
                    );
                    drop(guard);
                    if one_attempt || deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
                other => return Ok(other),
            }
        }
    }

    /// One acquire, until `deadline` (see [`acquire`](Self::acquire)).
    fn acquire_until(
        &self,
        deadline: Option<Instant>,
        one_attempt: bool,
        lease: Option<Duration>,
        lease_ms: u64,
        fenced: bool,
    ) -> Result<Option<LockGuard>> {
        let keys = self.keys()?;
        let inner = &self.manager.inner;
        let thread = current_thread_number();
        let owner = owner_field(&inner.client_id, thread);
        // When the last attempt was sent (its lease counts from then), and its token if fenced.
        let sent = Cell::new(BootInstant::now());
        let token = Cell::new(None);
        let attempt = || {
            sent.set(BootInstant::now());
            let outcome = if fenced {
                inner.store.try_acquire_fenced(keys, lease_ms, &owner)?
            } else {
                inner.store.try_acquire(keys, lease_ms, &owner)?
            };
            if let Attempt::Acquired { token: got } = outcome {
                token.set(got);
            }
            Ok(outcome)
        };
        let acquired = || {
            Ok(Some(self.granted(
                thread,
                lease_ms,
                lease,
                token.get(),
                sent.get(),
            )))
        };

        // Reentrant: this thread holds the lock already, so no local thread can be ahead.
        let reentrant = inner.watchdog.holds(keys, thread) > 0;
        if one_attempt {
            // One attempt and no queueing; while a local thread has the turn, the lock is
            // held or about to be, and the answer is no without asking.
            if !reentrant && !inner.gates.may_attempt(keys, thread) {
                return Ok(None);
            }
            if !attempt()?.is_acquired() {
                return Ok(None);
            }
            inner.gates.take_over(keys, thread);
            return acquired();
        }
        let mut attempted = false;
        if reentrant || !inner.gates.is_contended(keys) {
            // Uncontended here: one attempt, and no entry in the gate unless it fails.
            if attempt()?.is_acquired() {
                return acquired();
            }
            attempted = true;
        }
        let entry = inner
            .gates
            .enter(keys, thread, lease_ms, fenced, deadline, || {
                Ok::<_, Error>(match attempt()? {
                    Attempt::Acquired { .. } => None,
                    Attempt::HeldByOther(ttl) => {
                        Some(ttl.map_or(NO_TTL_POLL, Duration::from_millis))
                    }
                })
            })?;
        match entry {
            Entry::TimedOut => return Ok(None),
            Entry::Acquired { sent: handed } => {
                if let Some(at) = handed {
                    sent.set(at); // acquired by the releasing thread's request
                }
                return acquired();
            }
            Entry::Turn => {}
        }
        let outcome = self.contend(keys, deadline, attempted, &attempt);
        if !matches!(outcome, Ok(true)) {
            // Given up (the wait passed, or an error): the next local thread may try.
            inner.gates.leave(keys, thread);
        }
        match outcome? {
            true => acquired(),
            false => Ok(None),
        }
    }

    /// The Redis side of acquiring, for the thread with the turn: attempt (unless `attempted`
    /// just now); on failure subscribe, attempt again (a release may have been announced
    /// before the subscription), then sleep until a release message or the holder's TTL, and
    /// repeat. `Ok(false)` when the deadline passed.
    fn contend(
        &self,
        keys: &LockKeys,
        deadline: Option<Instant>,
        attempted: bool,
        attempt: &dyn Fn() -> Result<Attempt>,
    ) -> Result<bool> {
        if !attempted && attempt()?.is_acquired() {
            return Ok(true);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(false);
        }
        let subscription = self
            .manager
            .inner
            .subscriber
            .subscribe(&keys.channel(), deadline);
        // A waiter rides out a short outage (a restart, a failover): for up to one connect
        // timeout after Redis stopped answering it keeps waiting, woken when the listener is
        // back; past that the outage is reported. Redis down for good is still an error.
        let outage_grace = self.manager.inner.config.connect_timeout;
        let mut down_since: Option<Instant> = None;
        loop {
            // The first pass closes the race with a release announced before we subscribed.
            let holder_ttl = match attempt() {
                Ok(Attempt::Acquired { .. }) => return Ok(true),
                Ok(Attempt::HeldByOther(ttl)) => {
                    down_since = None;
                    ttl
                }
                Err(err) if err.is_connection_error() => {
                    let since = *down_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= outage_grace {
                        return Err(err);
                    }
                    log::debug!(
                        "lock {:?}: {err}; waiting for Redis to come back",
                        keys.name
                    );
                    Some(OUTAGE_RETRY.as_millis() as u64)
                }
                Err(err) => return Err(err),
            };
            let mut sleep = holder_ttl.map_or(NO_TTL_POLL, Duration::from_millis);
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                sleep = sleep.min(deadline - now);
            }
            subscription.wait(sleep);
        }
    }

    fn granted(
        &self,
        thread: u64,
        lease_ms: u64,
        lease: Option<Duration>,
        token: Option<u64>,
        sent: BootInstant,
    ) -> LockGuard {
        let keys = self.valid_keys();
        let inner = &self.manager.inner;
        inner.gates.acquired(keys, thread, lease);
        let renewed = lease.is_none();
        let lease = Duration::from_millis(lease_ms);
        let status = inner.watchdog.register(keys, thread, renewed, sent, lease);
        LockGuard::new(self.clone(), thread, lease_ms, status, renewed, token)
    }
}

/// Whether a new hold has at least a tenth of its lease left, as confirmed (counted from when
/// its request was sent).
fn has_useful_lease(guard: &LockGuard, lease_ms: u64) -> bool {
    let lease = Duration::from_millis(lease_ms);
    guard
        .remaining_lease()
        .is_some_and(|left| left >= lease / 10)
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock").field("name", &self.name()).finish()
    }
}
