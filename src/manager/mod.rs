//! [`LockManager`]: the handle that owns connections and background threads, and every way to
//! get one (`new`, the builders' entry points, [`LockManagerBuilder::build`]).

pub(crate) mod builder;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::options::AcquireOptions;
use crate::engine::Engine;
use crate::error::Result;
use crate::health::{Health, HealthChange};
use crate::kinds::count_down_latch::CountDownLatch;
use crate::kinds::fair_lock::FairLock;
use crate::kinds::lock::scripts::LOCK_SCRIPTS;
use crate::kinds::lock::{Lock, LockGuard};
use crate::kinds::permit_expirable_semaphore::PermitExpirableSemaphore;
use crate::kinds::read_write_lock::ReadWriteLock;
use crate::kinds::semaphore::Semaphore;
use crate::kinds::spin_lock::SpinLock;
use crate::kinds::string_lock::StringLock;
use crate::manager::builder::LockManagerBuilder;
use crate::stats::Stats;
use crate::store::eviction::EvictionPolicy;
use crate::topology::endpoints::Endpoints;

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
/// - one pub/sub connection and the thread `redis-rlock-pubsub` that listens on it for the
///   unlock messages of every lock some local thread is waiting for;
/// - the thread `redis-rlock-watchdog`, which renews the leases of all locks held through this
///   manager in batched sweeps.
///
/// That is two threads and `pool_size + 1` connections however many locks are held or awaited.
/// On a Redis Cluster each master has its own pool and (with sharded pub/sub) its own
/// listener connection and thread; see [`cluster_builder`](Self::cluster_builder).
/// When the last clone is dropped (guards and [`Lock`] handles count: each keeps the manager
/// alive), both threads are stopped and joined and every connection is closed.
///
/// All clones have the same client id (a random UUID), so all threads of the process are
/// told apart by their thread number in the owner field, exactly as Redisson does.
///
/// # After `fork()`
///
/// Create the manager in the process that uses it, after any `fork()`. A child inherits the
/// parent's connections (their replies would go to whichever process reads first), client id
/// and thread numbers (parent and child would both "hold" a lock), but not its background
/// threads. In a child, every call on an inherited manager fails with
/// [`Error::Forked`](crate::Error::Forked) and sends nothing; dropping it is safe and leaves
/// the parent's connections alone.
#[derive(Clone)]
pub struct LockManager {
    engine: Arc<Engine>,
}

impl LockManager {
    /// Connects with all defaults (see [`LockManagerBuilder`] for them).
    ///
    /// The URL is redis-rs' format for one server: `redis://[user:password@]host[:port][/db]`
    /// (`rediss://` for TLS), or `redis+unix:///path/to/socket`; or, for Sentinel, Lettuce's
    /// `redis-sentinel://[password@]host1:26379,host2:26379[/db]#mymaster`
    /// (see [`sentinel_builder`](Self::sentinel_builder)); or, for a cluster,
    /// `redis-cluster://[password@]host1:port1,host2:port2` (see
    /// [`cluster_builder`](Self::cluster_builder)). `rediss-sentinel://` and
    /// `rediss-cluster://` use TLS.
    ///
    /// ```no_run
    /// let manager = redis_rlock::LockManager::new("redis://127.0.0.1:6379/")?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn new(url: &str) -> Result<Self> {
        Self::builder(url).build()
    }

    /// Starts a builder for settings other than the defaults.
    pub fn builder(url: &str) -> LockManagerBuilder {
        LockManagerBuilder::new(url)
    }

    /// Starts a builder for a Redis Cluster, given some of its nodes (`redis://host:port/`,
    /// with credentials if needed; any reachable one suffices to find the others).
    ///
    /// Every command goes to the master of its lock's slot (all of a lock's keys share one
    /// slot through Redisson's brace rule), MOVED and ASK redirections are followed, and the
    /// slots are looked up again after a failover or a resharding. Releases are announced
    /// with sharded pub/sub (`SPUBLISH`, heard with `SSUBSCRIBE` on the slot's master) when
    /// the cluster has it (Redis 7), as Redisson does; the manager then has one listener
    /// connection and thread per master. [`replica_sync`](LockManagerBuilder::replica_sync)
    /// is on by default. The same is reached with `LockManager::new` and a URL of the form
    /// `redis-cluster://host1:port1,host2:port2`.
    ///
    /// ```no_run
    /// let manager = redis_rlock::LockManager::cluster_builder(&[
    ///     "redis://127.0.0.1:30001/",
    ///     "redis://127.0.0.1:30002/",
    /// ])
    /// .build()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn cluster_builder(nodes: &[&str]) -> LockManagerBuilder {
        LockManagerBuilder::with_endpoints(Endpoints::Cluster {
            seeds: nodes.iter().map(|url| url.to_string()).collect(),
        })
    }

    /// Starts a builder for a master watched by Redis Sentinel: `sentinels` are the
    /// sentinels' URLs (`redis://host:26379/`), `master_name` the name they know the master
    /// by. The user, password and database of the first URL are used for the master too;
    /// a sentinel that refuses them (sentinels often have no password, and Redis then
    /// refuses any) is asked without them.
    ///
    /// The master is asked from the sentinels (and confirmed by its own `ROLE`); after a
    /// failover (a READONLY reply, a refused connection) it is asked again, and the pub/sub
    /// listener follows it. Holds survive a failover when
    /// [`replica_sync`](LockManagerBuilder::replica_sync) was on (the default): renewals
    /// continue on the new master, or the lost signal fires. The same is reached with
    /// `LockManager::new` and Lettuce's URL form
    /// `redis-sentinel://host1:26379,host2:26379/0#mymaster`.
    ///
    /// ```no_run
    /// let manager = redis_rlock::LockManager::sentinel_builder(
    ///     &["redis://127.0.0.1:26379/", "redis://127.0.0.1:26380/"],
    ///     "mymaster",
    /// )
    /// .build()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn sentinel_builder(sentinels: &[&str], master_name: &str) -> LockManagerBuilder {
        LockManagerBuilder::with_endpoints(Endpoints::Sentinel {
            sentinels: sentinels.iter().map(|url| url.to_string()).collect(),
            master_name: master_name.to_owned(),
        })
    }

    /// A handle on the lock called `name`. No I/O; an invalid name is reported by the first
    /// operation on the handle.
    pub fn get_lock(&self, name: &str) -> Lock {
        Lock::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the fair lock called `name` (Redisson's `RFairLock`): granted first come,
    /// first served across all clients. No I/O. See [`FairLock`].
    pub fn get_fair_lock(&self, name: &str) -> FairLock {
        FairLock::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the spin lock called `name` (Redisson's `RSpinLock`): a lock whose release
    /// publishes nothing (its waiters are woken by the server's client tracking, or poll with
    /// a back-off). No I/O. See [`SpinLock`].
    pub fn get_spin_lock(&self, name: &str) -> SpinLock {
        SpinLock::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the lock called `name` in redis-py's format (`redis.lock.Lock`): a string
    /// key holding the owner's token, shared with Python code that locks the same name. No
    /// I/O. See [`StringLock`].
    pub fn get_string_lock(&self, name: &str) -> StringLock {
        StringLock::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the read-write lock called `name` (Redisson's `RReadWriteLock`): shared
    /// read holds, an exclusive write hold. No I/O. See [`ReadWriteLock`].
    pub fn get_read_write_lock(&self, name: &str) -> ReadWriteLock {
        ReadWriteLock::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the semaphore called `name` (Redisson's `RSemaphore`). No I/O; an invalid
    /// name is reported by the first operation on the handle.
    pub fn get_semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the permit-expirable semaphore called `name` (Redisson's
    /// `RPermitExpirableSemaphore`): permits with ids and optional leases. No I/O; an invalid
    /// name is reported by the first operation on the handle.
    pub fn get_permit_expirable_semaphore(&self, name: &str) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore::new(Arc::clone(&self.engine), name)
    }

    /// A handle on the count-down latch called `name` (Redisson's `RCountDownLatch`). No
    /// I/O; an invalid name is reported by the first operation on the handle.
    pub fn get_count_down_latch(&self, name: &str) -> CountDownLatch {
        CountDownLatch::new(Arc::clone(&self.engine), name)
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

    /// Acquires `name` as `options` say. See [`Lock::acquire`].
    pub fn acquire(&self, name: &str, options: AcquireOptions) -> Result<Option<LockGuard>> {
        self.get_lock(name).acquire(options)
    }

    /// Ends every wait of this manager and of all its clones, now and later: each call
    /// waiting (for a lock of any kind, a semaphore's permits, a latch's count) returns
    /// [`Error::Shutdown`](crate::Error::Shutdown) within milliseconds, leaving nothing
    /// behind (as a cancelled call does, see [`CancelToken`](crate::CancelToken)), and every
    /// later acquire or wait fails so without sending anything. What was taken before keeps
    /// working until dropped: guards unlock and the watchdog renews their leases,
    /// [`SemaphorePermits`](crate::SemaphorePermits) give their permits back, and releases,
    /// count-downs and inspection calls still run. Idempotent; it does not block. The
    /// connections and threads stay until the last clone (guards included) is dropped.
    ///
    /// ```no_run
    /// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
    /// let held = manager.lock("config")?;
    /// let waiter = {
    ///     let manager = manager.clone();
    ///     std::thread::spawn(move || manager.lock("config"))
    /// };
    /// manager.shutdown();
    /// assert!(waiter.join().unwrap().unwrap_err().is_shutdown());
    /// held.unlock()?; // still works
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn shutdown(&self) {
        self.engine.shut_down();
    }

    /// Whether [`shutdown`](Self::shutdown) was called (on this manager or a clone).
    pub fn is_shut_down(&self) -> bool {
        self.engine.is_shut_down()
    }

    /// This manager's client id: the UUID before the `:` in the owner fields it writes.
    pub fn client_id(&self) -> &str {
        self.engine.client_id()
    }

    /// The lease of watchdog-renewed locks.
    pub fn watchdog_timeout(&self) -> Duration {
        Duration::from_millis(self.engine.config().watchdog_timeout_ms)
    }

    /// How many holds the watchdog is renewing right now (one per thread and lock, however
    /// many times that thread re-entered it).
    pub fn renewing_count(&self) -> usize {
        self.engine.renewing_count()
    }

    /// Counters of what this manager (all its clones) has sent to Redis and found, since it
    /// started: commands, round trips, renewal sweeps, lost holds.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// Whether this manager's watchdog-renewed holds are being renewed: [`Health`] says what
    /// each state means and when it changes. No I/O.
    pub fn health(&self) -> Health {
        self.engine.health().get()
    }

    /// A receiver of every later change of [`health`](Self::health), in order. Each call
    /// makes a new receiver; dropping it unsubscribes. The watchdog never waits for a
    /// receiver: one that falls behind keeps its first
    /// [`HEALTH_CHANGES_CAPACITY`](crate::HEALTH_CHANGES_CAPACITY) changes,
    /// the later ones are dropped, and the next change it has room for counts them in
    /// [`HealthChange::missed`] (`health()` is always current).
    ///
    /// ```no_run
    /// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
    /// let changes = manager.health_changes();
    /// std::thread::spawn(move || {
    ///     for change in changes {
    ///         eprintln!("lock renewals: {:?} -> {:?}", change.from, change.to);
    ///     }
    /// });
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn health_changes(&self) -> crossbeam_channel::Receiver<HealthChange> {
        self.engine.health().subscribe()
    }

    /// Waits up to `timeout` for the health to change, and returns it then (or at the
    /// timeout). Returns at once when the health is no longer in `seen`'s state (a change
    /// made before the call), and at once after [`shutdown`](Self::shutdown). A state left and
    /// entered again before the call is not seen; [`health_changes`](Self::health_changes)
    /// sees every change.
    pub fn wait_health_change(&self, seen: &Health, timeout: Duration) -> Health {
        self.engine.health().wait_change(seen, timeout)
    }

    /// A redis-rs client for the master that serves `name` now (on a cluster, its slot's;
    /// with Sentinel, the current master), with this manager's credentials, database and TLS
    /// settings: for reading a lock's keys with redis-rs directly, as the command line's
    /// `status` does. Opening connections with it is the caller's business; none of this
    /// manager's are used. Fails as acquires do when no master can be found.
    ///
    /// Hidden from the docs: it is the command line's, and a redis-rs type in the public API
    /// would tie every redis-rs major version to ours.
    #[doc(hidden)]
    pub fn master_client(&self, name: &str) -> Result<redis::Client> {
        self.engine.master_client(name)
    }

    /// Each master's eviction settings, as read when the manager was built (`CONFIG GET`,
    /// or `INFO memory` where `CONFIG` is refused). Where
    /// [`EvictionPolicy::evicts_locks`], a warning was logged then: an evicted lock is free
    /// for anyone. No I/O.
    pub fn eviction_policies(&self) -> Vec<EvictionPolicy> {
        self.engine.eviction_policies().to_vec()
    }

    /// Whether some master may evict lock keys (see
    /// [`eviction_policies`](Self::eviction_policies)). No I/O.
    pub fn eviction_risk(&self) -> bool {
        self.engine
            .eviction_policies()
            .iter()
            .any(EvictionPolicy::evicts_locks)
    }

    /// How many threads are waiting in line behind another thread of this manager for the same
    /// lock right now. Such threads send nothing to Redis: the thread ahead of them hands the
    /// lock over when it releases it.
    pub fn queued_thread_count(&self) -> usize {
        self.engine.queued_thread_count()
    }

    /// How many pub/sub listener connections (each with its thread) this manager runs: one
    /// per master it listens to, so one on a single server or with Sentinel and one per
    /// master on a cluster with sharded pub/sub, however many threads wait.
    pub fn listener_count(&self) -> usize {
        self.engine.listener_count()
    }

    /// How many channels (of locks, semaphores and latches) local threads are waiting on
    /// right now.
    pub fn waiting_channel_count(&self) -> usize {
        self.engine.waiting_channel_count()
    }
}

impl LockManagerBuilder {
    /// Checks the settings, connects to Redis, loads the lock scripts and starts the
    /// manager's background threads (the watchdog, and a pub/sub listener per master).
    ///
    /// Fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument) or
    /// [`Error::InvalidUrl`](crate::Error::InvalidUrl) for bad settings and with
    /// [`Error::Connect`](crate::Error::Connect) when Redis cannot be reached or refuses the
    /// credentials, or when the Redis user may not PUBLISH and SUBSCRIBE on the channels of
    /// every kind (`redisson_lock__channel:*`, `redisson_rwlock:*`, `redisson_sc:*`,
    /// `redisson_countdownlatch__channel__*`) and the manager's control channel
    /// (`redis_rlock__control:*`): Redis 7 gives new ACL users no channel rights, and without
    /// them releases fail and waiters are never woken.
    pub fn build(self) -> Result<LockManager> {
        let (endpoints, config) = self.settings()?;
        Ok(LockManager {
            engine: Arc::new(Engine::start(&endpoints, config, &LOCK_SCRIPTS.all())?),
        })
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL is left out on purpose: it may carry a password.
        f.debug_struct("LockManager")
            .field("client_id", &self.engine.client_id())
            .field("config", self.engine.config())
            .finish_non_exhaustive()
    }
}
