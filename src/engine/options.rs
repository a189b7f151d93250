//! [`AcquireOptions`], [`Lease`] and [`WaitOptions`]: what an acquire (or a wait) asks for,
//! in one value.

use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::limits::{check_wait, to_millis};

/// How long a hold lasts unless released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lease {
    /// The manager's watchdog timeout, renewed every third of it by the watchdog while the
    /// guard lives (Redisson's `lock()` without a lease).
    #[default]
    Watchdog,
    /// A fixed lease, never renewed: the lock expires this long after it was acquired, even if
    /// the holder hangs (Redisson's `lock(leaseTime, unit)`). At least 1 ms.
    Fixed(Duration),
}

/// What an acquire asks for: how long to wait, which [`Lease`], whether to take a fencing
/// token, and a [`CancelToken`] that ends the wait early. Taken by [`Lock::acquire`](crate::Lock::acquire) and
/// [`LockManager::acquire`](crate::LockManager::acquire); the other acquiring methods are
/// shorthands for common values.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_rlock::{AcquireOptions, Lease, LockManager};
///
/// let manager = LockManager::new("redis://127.0.0.1/")?;
/// // A fenced lock with a fixed lease, waiting at most 2 s.
/// let options = AcquireOptions::new()
///     .wait(Duration::from_secs(2))
///     .lease(Lease::Fixed(Duration::from_secs(30)))
///     .fenced(true);
/// if let Some(guard) = manager.acquire("reports:daily", options)? {
///     let token = guard.fencing_token().expect("fenced");
///     // ... write with `token` ...
/// }
/// # Ok::<(), redis_rlock::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use]
pub struct AcquireOptions {
    wait: Option<Duration>,
    lease: Lease,
    fenced: bool,
    max_hold: Option<Duration>,
    cancel: Option<CancelToken>,
}

impl AcquireOptions {
    /// Wait without limit, watchdog lease, no fencing token: what [`Lock::lock`](crate::Lock::lock) does.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait at most `wait` (`Duration::ZERO`: exactly one attempt). Without it, the acquire
    /// waits as long as it takes.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The lease (default [`Lease::Watchdog`]).
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = lease;
        self
    }

    /// Take a fencing token with the lock ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// Renew the lease for at most `max_hold` (watchdog leases only): once the hold is that
    /// old, the watchdog stops renewing it, and it ends with the lease it has then (within
    /// one watchdog timeout), reported lost to its guard ([`LockGuard::is_lost`],
    /// [`LockGuard::lost_signal`]). A thread stuck while holding the lock then keeps it no
    /// longer than this. With re-entries, the earliest end of any of the thread's holds of
    /// the lock counts. At least 1 ms; not with a fixed lease, which is never renewed.
    ///
    /// [`LockGuard::is_lost`]: crate::LockGuard::is_lost
    /// [`LockGuard::lost_signal`]: crate::LockGuard::lost_signal
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_rlock::{AcquireOptions, LockManager};
    ///
    /// let manager = LockManager::new("redis://127.0.0.1/")?;
    /// let options = AcquireOptions::new().max_hold(Duration::from_secs(600));
    /// let guard = manager.acquire("nightly-report", options)?.expect("waits without limit");
    /// // ... at most ten minutes (and one watchdog timeout) of work under the lock ...
    /// guard.unlock()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Ends the wait when `token` is cancelled: the acquire then returns
    /// [`Error::Cancelled`](crate::Error::Cancelled) within milliseconds and holds nothing
    /// (see [`CancelToken`]).
    pub fn cancel_token(mut self, token: &CancelToken) -> Self {
        self.cancel = Some(token.clone());
        self
    }

    // The getters are named as `std::process::Command`'s: `get_` and the setter's name,
    // since the setters, builder style, already have the plain names.

    /// The wait limit set by [`wait`](Self::wait); `None` waits without limit.
    pub fn get_wait(&self) -> Option<Duration> {
        self.wait
    }

    /// The lease set by [`lease`](Self::lease).
    pub fn get_lease(&self) -> Lease {
        self.lease
    }

    /// Whether a fencing token is taken ([`fenced`](Self::fenced)).
    pub fn get_fenced(&self) -> bool {
        self.fenced
    }

    /// The cap on renewals set by [`max_hold`](Self::max_hold); `None`: renewed while the
    /// guard lives.
    pub fn get_max_hold(&self) -> Option<Duration> {
        self.max_hold
    }

    /// The token set by [`cancel_token`](Self::cancel_token), if any.
    pub fn get_cancel_token(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    /// Checks the values and fixes the deadline, counted from now.
    pub(crate) fn request(&self, watchdog_timeout_ms: u64) -> Result<Request> {
        let (lease_ms, fixed) = match self.lease {
            Lease::Watchdog => (watchdog_timeout_ms, None),
            Lease::Fixed(lease) => (to_millis("lease", lease)?, Some(lease)),
        };
        if let Some(wait) = self.wait {
            check_wait(wait)?;
        }
        if let Some(max_hold) = self.max_hold {
            to_millis("max hold", max_hold)?;
            if fixed.is_some() {
                return Err(Error::invalid(
                    "max hold",
                    "a fixed lease is never renewed, so there are no renewals to cap: \
                     use a shorter lease, or the watchdog lease with max_hold",
                ));
            }
        }
        Ok(Request {
            deadline: self.wait.map(|wait| Instant::now() + wait),
            wait_ms: self.wait.map(|wait| wait.as_millis() as u64),
            one_attempt: self.wait == Some(Duration::ZERO),
            lease_ms,
            fixed,
            fenced: self.fenced,
            max_hold: self.max_hold,
            cancel: self.cancel.clone(),
        })
    }
}

/// Checked [`AcquireOptions`], as the engine runs them.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// When to give up; `None`: never.
    pub(crate) deadline: Option<Instant>,
    /// The wait limit in ms; `None`: without limit.
    pub(crate) wait_ms: Option<u64>,
    /// Exactly one attempt, no queueing.
    pub(crate) one_attempt: bool,
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
    /// The fixed lease; `None` when the watchdog renews.
    pub(crate) fixed: Option<Duration>,
    pub(crate) fenced: bool,
    /// How long the watchdog renews the hold at most (`None`: while the guard lives).
    pub(crate) max_hold: Option<Duration>,
    /// The caller's token, if any.
    pub(crate) cancel: Option<CancelToken>,
}

impl Request {
    pub(crate) fn expired(&self) -> bool {
        self.one_attempt || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// What a wait for a semaphore's permits or a latch's count asks for: how long to wait, and a
/// [`CancelToken`] that ends the wait early. Taken by
/// [`Semaphore::acquire_with`](crate::Semaphore::acquire_with),
/// [`PermitExpirableSemaphore::acquire_with`](crate::PermitExpirableSemaphore::acquire_with)
/// and [`CountDownLatch::wait_with`](crate::CountDownLatch::wait_with).
///
/// ```no_run
/// use std::time::Duration;
/// use redis_rlock::{CancelToken, LockManager, WaitOptions};
///
/// let manager = LockManager::new("redis://127.0.0.1/")?;
/// let token = CancelToken::new();
/// let options = WaitOptions::new().wait(Duration::from_secs(30)).cancel_token(&token);
/// // Another thread may call `token.cancel()`: the wait then ends with `Error::Cancelled`.
/// let acquired = manager.get_semaphore("uploads").acquire_with(1, options)?;
/// # Ok::<(), redis_rlock::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[must_use]
pub struct WaitOptions {
    wait: Option<Duration>,
    cancel: Option<CancelToken>,
}

impl WaitOptions {
    /// Wait without limit, no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait at most `wait` (`Duration::ZERO`: one look). Without it, the call waits as long
    /// as it takes.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Ends the wait when `token` is cancelled ([`Error::Cancelled`](crate::Error::Cancelled)).
    pub fn cancel_token(mut self, token: &CancelToken) -> Self {
        self.cancel = Some(token.clone());
        self
    }

    /// The wait limit set by [`wait`](Self::wait); `None` waits without limit.
    pub fn get_wait(&self) -> Option<Duration> {
        self.wait
    }

    /// The token set by [`cancel_token`](Self::cancel_token), if any.
    pub fn get_cancel_token(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    /// The deadline counted from now (`None`: no limit), the wait checked as a lock's is.
    pub(crate) fn deadline(&self) -> Result<Option<Instant>> {
        self.wait
            .map(|wait| {
                check_wait(wait)?;
                Ok(Instant::now() + wait)
            })
            .transpose()
    }
}
