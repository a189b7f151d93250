//! [`LockManager`]: the handle that owns connections and background threads.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, LockManagerBuilder};
use crate::error::{Error, Result};
use crate::gate::Gates;
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::stats::Stats;
use crate::store::LockStore;
use crate::subscriber::Subscriber;
use crate::watchdog::Watchdog;

/// The entry point: a connection to one Redis deployment and the machinery shared by all its
/// locks.
///
/// # About threads and cloning
///
/// A `LockManager` is an `Arc` inside: [`Clone`] is cheap, and clones share everything. It is
/// `Send + Sync`; share one per process (or per Redis deployment) among all threads.
///
/// Each manager owns:
/// - a pool of command connections (at most [`pool_size`](LockManagerBuilder::pool_size));
///   a call holds one only for the length of one round trip;
/// - one pub/sub connection and the thread `redis-lock-pubsub` that listens on it for the
///   unlock messages of every lock some local thread is waiting for;
/// - the thread `redis-lock-watchdog`, which renews the leases of all locks held through this
///   manager in batched sweeps.
///
/// That is two threads and `pool_size + 1` connections however many locks are held or awaited.
/// When the last clone is dropped (guards and [`Lock`] handles count: each keeps the manager
/// alive), both threads are stopped and joined and every connection is closed.
///
/// All clones have the same client id (a random UUID), so all threads of the process are
/// told apart by their thread number in the owner field, exactly as Redisson does.
#[derive(Clone)]
pub struct LockManager {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    // Field order is drop order: stop the threads before the store they use goes away.
    pub(crate) subscriber: Subscriber,
    pub(crate) watchdog: Watchdog,
    pub(crate) gates: Gates,
    pub(crate) store: Arc<LockStore>,
    pub(crate) client_id: String,
    pub(crate) config: Config,
}

impl LockManager {
    /// Connects with all defaults (see [`LockManagerBuilder`] for them).
    ///
    /// The URL is redis-rs' format: `redis://[user:password@]host[:port][/db]`, or
    /// `redis+unix:///path/to/socket`.
    ///
    /// ```no_run
    /// let manager = redis_lock::LockManager::new("redis://127.0.0.1:6379/")?;
    /// # Ok::<(), redis_lock::Error>(())
    /// ```
    pub fn new(url: &str) -> Result<Self> {
        Self::builder(url).build()
    }

    /// Starts a builder for settings other than the defaults.
    pub fn builder(url: &str) -> LockManagerBuilder {
        LockManagerBuilder::new(url)
    }

    pub(crate) fn start(url: &str, config: Config) -> Result<Self> {
        let client_id = uuid::Uuid::new_v4().to_string();
        let store = Arc::new(LockStore::connect(url, &config)?);
        crate::acl::check_channel_rights(&store, &client_id, config.response_timeout)?;
        let thread_error = |source| Error::ThreadSpawn { source };
        let watchdog = Watchdog::start(
            Arc::clone(&store),
            client_id.clone(),
            config.watchdog_timeout_ms,
            config.renewal_period(),
        )
        .map_err(thread_error)?;
        let subscriber = Subscriber::start(Arc::clone(&store), &client_id, config.response_timeout)
            .map_err(thread_error)?;
        Ok(LockManager {
            inner: Arc::new(Inner {
                subscriber,
                watchdog,
                gates: Gates::new(config.renewal_period()),
                store,
                client_id,
                config,
            }),
        })
    }

    /// A handle on the lock called `name`. No I/O; an invalid name is reported by the first
    /// operation on the handle.
    pub fn get_lock(&self, name: &str) -> Lock {
        Lock::new(self.clone(), name)
    }

    /// Waits as long as it takes to acquire `name`, then keeps it alive with the watchdog until
    /// the guard is dropped. Re-entrant: the same thread may lock it again.
    ///
    /// Shorthand for `self.get_lock(name).lock()`; see [`Lock::lock`].
    pub fn lock(&self, name: &str) -> Result<LockGuard> {
        self.get_lock(name).lock()
    }

    /// Tries to acquire `name` for up to `wait` (`Duration::ZERO`: one attempt); `Ok(None)`
    /// when the wait ran out. See [`Lock::try_lock`].
    pub fn try_lock(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.get_lock(name).try_lock(wait)
    }

    /// Like [`lock`](Self::lock), with a fixed lease and no watchdog. See
    /// [`Lock::lock_with_lease`].
    pub fn lock_with_lease(&self, name: &str, lease: Duration) -> Result<LockGuard> {
        self.get_lock(name).lock_with_lease(lease)
    }

    /// Like [`try_lock`](Self::try_lock), with a fixed lease and no watchdog. See
    /// [`Lock::try_lock_with_lease`].
    pub fn try_lock_with_lease(
        &self,
        name: &str,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.get_lock(name).try_lock_with_lease(wait, lease)
    }

    /// Like [`lock`](Self::lock), with a fencing token on the guard. See
    /// [`Lock::lock_fenced`].
    pub fn lock_fenced(&self, name: &str) -> Result<LockGuard> {
        self.get_lock(name).lock_fenced()
    }

    /// Like [`try_lock`](Self::try_lock), with a fencing token on the guard. See
    /// [`Lock::try_lock_fenced`].
    pub fn try_lock_fenced(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.get_lock(name).try_lock_fenced(wait)
    }

    /// This manager's client id: the UUID before the `:` in the owner fields it writes.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The lease of watchdog-renewed locks.
    pub fn watchdog_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.watchdog_timeout_ms)
    }

    /// How many holds the watchdog is renewing right now (one per thread and lock, however
    /// many times that thread re-entered it).
    pub fn renewing_count(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Counters of what this manager (all its clones) has sent to Redis and found, since it
    /// started: commands, round trips, renewal sweeps, lost holds.
    pub fn stats(&self) -> Stats {
        self.inner.store.counters.snapshot()
    }

    /// How many threads are waiting in line behind another thread of this manager for the same
    /// lock right now. Such threads send nothing to Redis: the thread ahead of them hands the
    /// lock over when it releases it.
    pub fn queued_thread_count(&self) -> usize {
        self.inner.gates.queued_count()
    }

    /// How many lock channels local threads are waiting on right now.
    pub fn waiting_channel_count(&self) -> usize {
        self.inner.subscriber.channel_count()
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL is left out on purpose: it may carry a password.
        f.debug_struct("LockManager")
            .field("client_id", &self.inner.client_id)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}
