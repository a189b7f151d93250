//! The acquire engine: the one loop every lock kind runs to acquire and release, and the
//! machinery a manager shares among its locks (connections, the hold registry, the line, the
//! pub/sub listener, the watchdog).
//!
//! Acquiring is: an attempt in Redis (one script call); when the lock is held, a place in the
//! local line ([`crate::engine::line`]); with the turn, a subscription to the lock's channel and a
//! sleep until an unlock message or the holder's TTL, then another attempt; once acquired, a
//! hold in the registry ([`crate::engine::holds`]) that the watchdog renews. Releasing is one script
//! call that also hands the lock to the next local thread, or leaves it free when others were
//! told (docs/design/engine.md describes the whole protocol).
//!
//! What one acquire and one release do is decided in one place, [`plan`]; the steps are:
//! [`acquire`] (the paths through the line), [`contend`] (the wait in Redis), [`grants`],
//! and [`release`]; [`runs`] keeps a spin lock's local turns from shutting out other
//! clients. A lock kind is what [`LockKind`] says: how one attempt and one release are done
//! and where releases are announced. Everything else is shared.

mod acquire;
mod attempter;
mod contend;
mod grants;
pub(crate) mod holds;
pub(crate) mod kind;
pub(crate) mod line;
pub(crate) mod options;
pub(crate) mod outage;
mod plan;
mod release;
mod runs;
pub(crate) mod watchdog;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::engine::holds::{HoldKey, HoldStatus, Holds};
use crate::engine::kind::{Family, LockKind};
use crate::engine::line::Line;
use crate::engine::options::Request;
use crate::engine::runs::Runs;
use crate::engine::watchdog::Watchdog;
use crate::error::{Error, Result};
use crate::fork::Origin;
use crate::health::HealthState;
use crate::names::LockKeys;
use crate::owner::{current_thread_number, owner_field};
use crate::pubsub::subscriber::Subscriber;
use crate::stats::Stats;
use crate::stop::Stop;
use crate::store::eviction::EvictionPolicy;
use crate::store::scripts::Script;
use crate::store::LockStore;
use crate::topology::config::Config;
use crate::topology::endpoints::Endpoints;
use crate::workers::Workers;
use attempter::Attempter;
use plan::Deployment;

/// How long to sleep between attempts when the holder's key has no TTL at all (a foreign
/// writer made it; no client of this protocol does) and no unlock message comes.
const NO_TTL_POLL: Duration = Duration::from_millis(100);

/// How often a waiter looks again while Redis does not answer (it is also woken as soon as
/// the pub/sub listener has reconnected).
const OUTAGE_RETRY: Duration = Duration::from_millis(100);

/// One hold, as its guard keeps it.
pub(crate) struct Held {
    /// What kind of lock it is a hold on.
    pub(crate) kind: &'static dyn LockKind,
    /// The owner's thread number.
    pub(crate) thread: u64,
    pub(crate) lease_ms: u64,
    /// Whether the watchdog renews it (no fixed lease).
    pub(crate) renewed: bool,
    /// The fencing token of a fenced acquisition.
    pub(crate) token: Option<u64>,
    pub(crate) status: Arc<HoldStatus>,
}

/// Everything a manager owns (see [`crate::LockManager`]).
pub(crate) struct Engine {
    // Field order is drop order: stop the threads before the store they use goes away.
    /// The helper threads that run a `RedLock`'s calls on this manager's master.
    workers: Workers,
    subscriber: Subscriber,
    /// Held only to be dropped: its Drop stops and joins the renewal thread.
    _watchdog: Watchdog,
    holds: Arc<Holds>,
    /// Moved by the watchdog thread (through the registry), read by anyone.
    health: Arc<HealthState>,
    /// Each master's eviction settings, as read at the start.
    eviction: Vec<EvictionPolicy>,
    /// Shared with the registry, which passes a lost hold's turn on.
    line: Arc<Line>,
    /// How long this manager's threads have kept each spin lock in a row.
    runs: Runs,
    store: Arc<LockStore>,
    client_id: String,
    config: Config,
    /// The process that made the engine: its connections, client id and thread numbers are
    /// that process's, so a forked child must not use them.
    origin: Origin,
    /// Cancelled by [`crate::LockManager::shutdown`]: every wait of this manager watches it.
    shutdown: CancelToken,
}

impl Engine {
    /// Connects and starts the manager's threads; `preload` are the scripts loaded on every
    /// master at once (see [`LockStore::connect`]).
    pub(crate) fn start(
        endpoints: &Endpoints,
        config: Config,
        preload: &[&'static Script],
    ) -> Result<Self> {
        let client_id = uuid::Uuid::new_v4().to_string();
        let store = Arc::new(LockStore::connect(endpoints, &config, preload)?);
        // Without channel rights every unlock would go unheard: refuse now, not at the first
        // release (docs/design/threads.md, "Starting a manager").
        crate::store::acl::check_channel_rights(&store, &client_id, config.response_timeout)?;
        let eviction = crate::store::eviction::read_policies(&store, config.response_timeout);
        let timeout = Duration::from_millis(config.watchdog_timeout_ms);
        let line = Arc::new(Line::new(config.renewal_period()));
        let on_lost = {
            let line = Arc::clone(&line);
            Box::new(move |hold: &HoldKey| {
                // The lock's kind, or another of its family that the thread re-entered by.
                if matches!(hold.kind.id().family(), Family::Reentrant | Family::String) {
                    line.leave(&hold.keys, hold.thread);
                }
            })
        };
        let health = Arc::new(HealthState::default());
        let holds = Arc::new(Holds::new(
            timeout,
            Arc::clone(&store.counters),
            Arc::clone(&health),
            on_lost,
        ));
        let thread_error = |source| Error::ThreadSpawn { source };
        let watchdog = Watchdog::start(
            Arc::clone(&holds),
            Arc::clone(&store),
            client_id.clone(),
            config.watchdog_timeout_ms,
        )
        .map_err(thread_error)?;
        let subscriber = Subscriber::start(Arc::clone(&store), &client_id, config.response_timeout)
            .map_err(thread_error)?;
        Ok(Engine {
            workers: Workers::new(),
            subscriber,
            _watchdog: watchdog,
            holds,
            health,
            eviction,
            line,
            runs: Runs::new(),
            store,
            client_id,
            config,
            origin: Origin::current(),
            shutdown: CancelToken::new(),
        })
    }

    /// Ends every wait of this manager, now and later (see [`crate::LockManager::shutdown`]).
    pub(crate) fn shut_down(&self) {
        self.shutdown.cancel();
        self.health.close();
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    pub(crate) fn shutdown_token(&self) -> &CancelToken {
        &self.shutdown
    }

    /// What ends a call on `name` of this manager: its shutdown, and the caller's `token`.
    pub(crate) fn stop(&self, name: &str, token: Option<&CancelToken>) -> Stop {
        Stop::new(name, &self.shutdown, token)
    }

    /// Registers the calling thread as a waiter on `channel`, for kinds that wait without a
    /// hold (a semaphore's permits, a latch's count); see [`Subscriber::subscribe`]. How the
    /// channel's messages wake waiters follows from its name (`crate::names::ChannelKind`).
    pub(crate) fn subscribe(
        &self,
        channel: &str,
        deadline: Option<Instant>,
        stop: &Stop,
    ) -> crate::pubsub::subscriber::Subscription {
        self.subscriber.subscribe(channel, deadline, stop)
    }

    /// Refuses to run in a child made by `fork()` (see [`Origin`]).
    pub(crate) fn check_process(&self) -> Result<()> {
        self.origin.check()
    }

    /// Whether this is a child made by `fork()`: a guard dropped there releases nothing.
    pub(crate) fn is_forked(&self) -> bool {
        self.origin.is_forked()
    }

    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn store(&self) -> &LockStore {
        &self.store
    }

    pub(crate) fn stats(&self) -> Stats {
        self.store.counters.snapshot()
    }

    /// A redis-rs client for the master that serves `name` now.
    pub(crate) fn master_client(&self, name: &str) -> Result<redis::Client> {
        self.check_process()?;
        let (pool, _) = self.store.topology().route(name)?;
        Ok(pool.client().clone())
    }

    pub(crate) fn eviction_policies(&self) -> &[EvictionPolicy] {
        &self.eviction
    }

    pub(crate) fn health(&self) -> &HealthState {
        &self.health
    }

    pub(crate) fn renewing_count(&self) -> usize {
        self.holds.renewing_count()
    }

    pub(crate) fn queued_thread_count(&self) -> usize {
        self.line.queued_count()
    }

    pub(crate) fn waiting_channel_count(&self) -> usize {
        self.subscriber.channel_count()
    }

    pub(crate) fn listener_count(&self) -> usize {
        self.subscriber.listener_count()
    }

    /// The helper threads that run calls on this manager's master at the same time as the
    /// caller's (see [`crate::workers`]).
    pub(crate) fn workers(&self) -> &Workers {
        &self.workers
    }

    /// The owner field of the calling thread.
    pub(crate) fn current_owner(&self) -> String {
        owner_field(&self.client_id, current_thread_number())
    }

    /// How many holds of `kind` the calling thread has on `keys` through this manager.
    pub(crate) fn own_hold_count(&self, kind: &'static dyn LockKind, keys: &Arc<LockKeys>) -> u32 {
        self.holds.count(kind, keys, current_thread_number())
    }

    /// The token of the calling thread's hold of `kind` on `keys` through this manager, for a
    /// kind with one per acquisition (see [`LockKind::fresh_token`]).
    pub(crate) fn own_token(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
    ) -> Option<Arc<str>> {
        self.holds.token(kind, keys, current_thread_number())
    }

    /// A force unlock through this manager: every local hold of the lock is lost, and
    /// whoever had the local turn passes it on.
    pub(crate) fn forget_holds(&self, keys: &Arc<LockKeys>) {
        self.holds.forget(&keys.name);
        self.line.reset(keys);
    }

    /// Acquires a hold on `keys` for thread `thread` as `request` says; `None` when its wait
    /// passed. The hold is `thread`'s, whichever thread runs the call: a [`crate::RedLock`]
    /// sends its attempts from helper threads in the caller's name (Redisson's
    /// `tryLockAsync(…, threadId)`).
    ///
    /// A call stopped (its token cancelled, the manager shut down) before it returns fails
    /// with that, and gives back a hold it got meanwhile (a handoff or a grant that raced
    /// with the stop): a stopped call never leaves a hold, and passes the lock on.
    pub(crate) fn acquire(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
        thread: u64,
    ) -> Result<Option<Held>> {
        // Before anything else: a forked child must not even take the parent's local locks.
        self.check_process()?;
        let stop = self.stop(&keys.name, request.cancel.as_ref());
        stop.check()?; // stopped already: nothing is sent
        self.check_family(kind, keys, thread)?;
        let held = self.acquire_useful(kind, keys, request, thread, &stop)?;
        if let Err(err) = stop.check() {
            if let Some(held) = held {
                if let Err(release) = self.release(keys, &held) {
                    log::warn!(
                        "lock {:?}: giving back a hold taken as the wait was stopped failed: \
                         {release}",
                        keys.name
                    );
                }
            }
            return Err(err);
        }
        Ok(held)
    }

    /// Refuses a lock to a thread that holds the read-write lock of its name (see
    /// [`Family::conflicts_with`]): nothing is sent.
    fn check_family(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        thread: u64,
    ) -> Result<()> {
        let Some(held) = self.holds.conflicting(kind, keys, thread) else {
            return Ok(());
        };
        Err(Error::invalid(
            "lock kind",
            format!(
                "the calling thread holds {} {:?}; {} of the same name is that key in another \
                 format (a hash of hold counts), which it would corrupt or wait for forever: \
                 release it first, or use another name",
                held.noun(),
                keys.name,
                kind.id().family().noun(),
            ),
        ))
    }

    /// [`acquire`](Self::acquire) without the stop's last look.
    fn acquire_useful(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
        thread: u64,
        stop: &Stop,
    ) -> Result<Option<Held>> {
        loop {
            match self.acquire_once(kind, keys, request, thread, stop)? {
                // A reply that came back too late to leave a useful lease is not a lock: the
                // server may count the lease from earlier than this side can prove. Release
                // it and try again while the wait allows.
                Some(held) if !has_useful_lease(&held) => {
                    log::warn!(
                        "lock {:?}: the acquire's reply came too late to leave a useful lease; \
                         releasing it",
                        keys.name
                    );
                    if let Err(err) = self.release(keys, &held) {
                        log::warn!("lock {:?}: releasing it failed: {err}", keys.name);
                    }
                    if request.expired() || stop.is_stopped() {
                        return Ok(None);
                    }
                }
                other => return Ok(other),
            }
        }
    }

    /// What this deployment does for acquires of `name` (see [`plan::Deployment`]).
    fn deployment(&self, name: &str) -> Deployment {
        Deployment {
            grants_possible: self.store.grants_possible(),
            waits_for_replicas: self.store.waits_for_replicas(name),
        }
    }

    /// Registers the hold `attempter` got (`waited`: how long it waited, if it did).
    fn register_hold(&self, attempter: &Attempter<'_>, waited: Option<Duration>) -> Held {
        let (keys, thread, request) = (attempter.keys, attempter.thread, attempter.request);
        self.store.counters.acquired(waited);
        self.line.acquired(keys, thread, request.fixed);
        if attempter.kind.spins() {
            self.runs.acquired(keys);
        }
        let renewed = request.fixed.is_none();
        let lease = Duration::from_millis(request.lease_ms);
        let status = self.holds.register(
            (attempter.kind, attempter.hold_token()),
            keys,
            thread,
            (renewed, request.max_hold),
            attempter.sent,
            lease,
        );
        Held {
            kind: attempter.kind,
            thread,
            lease_ms: request.lease_ms,
            renewed,
            token: attempter.token,
            status,
        }
    }
}

/// Whether a new hold has at least a tenth of its lease left, as confirmed (counted from when
/// its request was sent).
fn has_useful_lease(held: &Held) -> bool {
    let lease = Duration::from_millis(held.lease_ms);
    held.status
        .remaining()
        .is_some_and(|left| left >= lease / 10)
}
