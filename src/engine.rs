//! The acquire engine: the one loop every lock kind runs to acquire and release, and the
//! machinery a manager shares among its locks (connections, the hold registry, the line, the
//! pub/sub listener, the watchdog).
//!
//! Acquiring is: an attempt in Redis (one script call); when the lock is held, a place in the
//! local line ([`crate::line`]); with the turn, a subscription to the lock's channel and a
//! sleep until an unlock message or the holder's TTL, then another attempt; once acquired, a
//! hold in the registry ([`crate::holds`]) that the watchdog renews. Releasing is one script
//! call that also hands the lock to the next local thread, or leaves it free when others were
//! told (docs/DESIGN.md describes the whole protocol).
//!
//! A lock kind is what [`LockKind`] says: how one attempt and one release are done and where
//! releases are announced. Everything else is shared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attempt_id::AttemptId;
use crate::backoff::{Backoff, SpinBackoff};
use crate::cancel::CancelToken;
use crate::clock::BootInstant;
use crate::config::Config;
use crate::endpoints::Endpoints;
use crate::error::{Error, Result};
use crate::fork::Origin;
use crate::holds::{HoldKey, HoldStatus, Holds, HoldsLeft, Unregistered};
use crate::kind::{AttemptArgs, LockKind};
use crate::line::{Entry, Handed, HoldBack, Join, Line, Probed, Wait};
use crate::names::LockKeys;
use crate::options::Request;
use crate::outage::Outage;
use crate::owner::{current_thread_number, owner_field};
use crate::stats::Stats;
use crate::stop::Stop;
use crate::store::{Attempt, Listeners, LockStore, Release, Waiting};
use crate::subscriber::{Subscriber, Subscription};
use crate::watchdog::Watchdog;

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
    subscriber: Subscriber,
    /// Held only to be dropped: its Drop stops and joins the renewal thread.
    _watchdog: Watchdog,
    holds: Arc<Holds>,
    /// Shared with the registry, which passes a lost hold's turn on.
    line: Arc<Line>,
    store: Arc<LockStore>,
    client_id: String,
    config: Config,
    /// The process that made the engine: its connections, client id and thread numbers are
    /// that process's, so a forked child must not use them.
    origin: Origin,
    /// Cancelled by [`crate::LockManager::shutdown`]: every wait of this manager watches it.
    shutdown: CancelToken,
}

/// The last attempt's facts: its id, when it was first sent (its lease counts from then) and
/// its token.
struct Attempter<'a> {
    engine: &'a Engine,
    kind: &'static dyn LockKind,
    keys: &'a LockKeys,
    owner: String,
    request: &'a Request,
    id: AttemptId,
    sent: BootInstant,
    token: Option<u64>,
    /// Whether the owner holds nothing of the lock locally (see `AttemptArgs::fresh`).
    fresh: bool,
    /// This wait's number while it is registered for grants (docs/DESIGN.md, "Grants"), and
    /// the control channel that tells a release its manager still listens.
    waiting: Option<(u64, String)>,
    /// How long this waiter has found Redis not answering, and may go on waiting so.
    outage: Outage,
}

impl Attempter<'_> {
    fn args(&self) -> AttemptArgs<'_> {
        AttemptArgs {
            owner: &self.owner,
            lease_ms: self.request.lease_ms,
            fenced: self.request.fenced,
            wait_ms: self.request.wait_ms,
            attempt_id: self.id.current(),
            fresh: self.fresh,
            waiting: self.waiting.as_ref().map(|(number, control)| Waiting {
                number: *number,
                left_ms: self.request.deadline.map(|deadline| {
                    let left = deadline.saturating_duration_since(Instant::now());
                    u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
                }),
                control: control.clone(),
            }),
        }
    }

    fn attempt(&mut self) -> Result<Attempt> {
        if !self.id.start() {
            // A repeated attempt's hold, if the first send took it, counts from that send.
            self.sent = BootInstant::now();
        }
        let outcome = self
            .kind
            .attempt(&self.engine.store, self.keys, &self.args());
        self.id.ended(&outcome);
        let outcome = match outcome {
            Err(err) if err.is_not_replicated() => {
                self.roll_back();
                return Err(err);
            }
            other => other?,
        };
        if let Attempt::Acquired { token } = outcome {
            self.token = token;
        }
        Ok(outcome)
    }
}

impl Attempter<'_> {
    /// Takes back what an attempt that no replica acknowledged may have taken: one hold of
    /// this owner, if it got one. A release only ever removes the owner's own hold, so when
    /// the attempt found the lock held by another, this changes nothing.
    fn roll_back(&self) {
        let store = &self.engine.store;
        match self.kind.release(
            store,
            self.keys,
            &self.owner,
            self.request.lease_ms,
            Listeners::default(),
            None,
        ) {
            Ok(_) => log::warn!(
                "lock {:?}: no replica acknowledged the acquire; rolled it back",
                self.keys.name
            ),
            Err(err) => log::warn!(
                "lock {:?}: no replica acknowledged the acquire, and rolling it back failed \
                 ({err}); it expires with its lease",
                self.keys.name
            ),
        }
    }
}

impl Engine {
    pub(crate) fn start(endpoints: &Endpoints, config: Config) -> Result<Self> {
        let client_id = uuid::Uuid::new_v4().to_string();
        let store = Arc::new(LockStore::connect(endpoints, &config)?);
        // Without channel rights every unlock would go unheard: refuse now, not at the first
        // release (docs/DESIGN.md).
        crate::acl::check_channel_rights(&store, &client_id, config.response_timeout)?;
        let timeout = Duration::from_millis(config.watchdog_timeout_ms);
        let line = Arc::new(Line::new(config.renewal_period()));
        let on_lost = {
            let line = Arc::clone(&line);
            Box::new(move |hold: &HoldKey| {
                if hold.kind.uses_line() {
                    line.leave(&hold.keys, hold.thread);
                }
            })
        };
        let holds = Arc::new(Holds::new(timeout, Arc::clone(&store.counters), on_lost));
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
            subscriber,
            _watchdog: watchdog,
            holds,
            line,
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
    ) -> crate::subscriber::Subscription {
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

    /// The owner field of the calling thread.
    pub(crate) fn current_owner(&self) -> String {
        owner_field(&self.client_id, current_thread_number())
    }

    /// How many holds of `kind` the calling thread has on `keys` through this manager.
    pub(crate) fn own_hold_count(&self, kind: &'static dyn LockKind, keys: &Arc<LockKeys>) -> u32 {
        self.holds.count(kind, keys, current_thread_number())
    }

    /// A force unlock through this manager: every local hold of the lock is lost, and
    /// whoever had the local turn passes it on.
    pub(crate) fn forget_holds(&self, keys: &Arc<LockKeys>) {
        self.holds.forget(&keys.name);
        self.line.reset(keys);
    }

    /// Acquires a hold on `keys` as `request` says; `None` when its wait passed.
    ///
    /// A call stopped (its token cancelled, the manager shut down) before it returns fails
    /// with that, and gives back a hold it got meanwhile (a handoff or a grant that raced
    /// with the stop): a stopped call never leaves a hold, and passes the lock on.
    pub(crate) fn acquire(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
    ) -> Result<Option<Held>> {
        // Before anything else: a forked child must not even take the parent's local locks.
        self.check_process()?;
        let stop = self.stop(&keys.name, request.cancel.as_ref());
        stop.check()?; // stopped already: nothing is sent
        let held = self.acquire_useful(kind, keys, request, &stop)?;
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

    /// [`acquire`](Self::acquire) without the stop's last look.
    fn acquire_useful(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
        stop: &Stop,
    ) -> Result<Option<Held>> {
        loop {
            match self.acquire_once(kind, keys, request, stop)? {
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

    /// One acquire, until the request's deadline or the stop.
    fn acquire_once(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
        stop: &Stop,
    ) -> Result<Option<Held>> {
        let thread = current_thread_number();
        let started = Instant::now();
        let holding = self.holds.count(kind, keys, thread) > 0;
        // Reentrant: this thread holds the lock already, so no local thread can be ahead.
        let reentrant = kind.uses_line() && holding;
        let mut attempter = Attempter {
            engine: self,
            kind,
            keys,
            owner: owner_field(&self.client_id, thread),
            request,
            id: AttemptId::new(),
            sent: BootInstant::now(),
            token: None,
            // Whatever the line: a kind without one (a spin lock) re-enters by counting on.
            fresh: !holding,
            waiting: None,
            outage: Outage::of(self),
        };
        if !kind.uses_line() {
            // Order is Redis' business (a fair queue) or holds are shared (readers): every
            // thread contends for itself.
            if attempter.attempt()?.is_acquired() {
                return Ok(Some(self.granted(keys, thread, request, &attempter, None)));
            }
            if request.one_attempt {
                return Ok(None);
            }
            let outcome = self.contend(kind, keys, request, true, None, stop, &mut attempter);
            if !matches!(outcome, Ok(true)) {
                self.abandon(kind, keys, &attempter);
            }
            return match outcome? {
                true => {
                    let waited = Some(started.elapsed());
                    Ok(Some(
                        self.granted(keys, thread, request, &attempter, waited),
                    ))
                }
                false => Ok(None),
            };
        }
        if request.one_attempt {
            // One attempt and no queueing; while a local thread has the turn, the lock is
            // held or about to be, and the answer is no without asking.
            if !reentrant && !self.line.may_attempt(keys, thread) {
                return Ok(None);
            }
            if !attempter.attempt()?.is_acquired() {
                return Ok(None);
            }
            if !reentrant {
                self.line.take_over(keys, thread);
            }
            return Ok(Some(self.granted(keys, thread, request, &attempter, None)));
        }
        let mut attempted = false;
        if reentrant || !self.line.is_busy(keys) {
            // Uncontended here: one attempt, and no entry in the line unless it fails.
            if attempter.attempt()?.is_acquired() {
                return Ok(Some(self.granted(keys, thread, request, &attempter, None)));
            }
            attempted = true;
        }
        let entry = match self
            .line
            .join(keys, thread, request.lease_ms, request.fenced)
        {
            Join::Entered(entry) => entry,
            Join::Queued(mut ticket) => loop {
                let _wakes = stop.wake_with(ticket.waker());
                match self
                    .line
                    .wait(&mut ticket, request.deadline, &|| stop.is_stopped())
                {
                    Wait::Entered(entry) => break entry,
                    Wait::TimedOut => return Ok(None),
                    Wait::Stopped => {
                        stop.check()?;
                        return Ok(None);
                    }
                    Wait::Probe => {
                        let probed = match attempter.attempt() {
                            Ok(Attempt::Acquired { .. }) => Probed::Acquired,
                            Ok(Attempt::HeldByOther(ttl)) => {
                                attempter.outage.over();
                                Probed::Held(ttl.map_or(NO_TTL_POLL, Duration::from_millis))
                            }
                            // A queued thread rides out an outage as the one with the turn
                            // does: it stays in line and probes again soon.
                            Err(err) => match attempter.outage.ride_out(&keys.name, err) {
                                Ok(()) => Probed::Held(OUTAGE_RETRY),
                                Err(err) => {
                                    self.line.probed(&mut ticket, thread, Probed::Failed);
                                    return Err(err);
                                }
                            },
                        };
                        if let Some(entry) = self.line.probed(&mut ticket, thread, probed) {
                            break entry;
                        }
                    }
                }
            },
        };
        let hold_back = match entry {
            Entry::Acquired { sent } => {
                if let Some(at) = sent {
                    attempter.sent = at; // acquired by the releasing thread's request
                }
                let waited = Some(started.elapsed());
                return Ok(Some(
                    self.granted(keys, thread, request, &attempter, waited),
                ));
            }
            Entry::Unconfirmed { sent } => {
                // A queued thread holds nothing of this lock but what the handoff gave it.
                match self.store.hold_count(keys, &attempter.owner) {
                    Ok(0) => None,
                    Ok(_) => {
                        attempter.sent = sent;
                        let waited = Some(started.elapsed());
                        return Ok(Some(
                            self.granted(keys, thread, request, &attempter, waited),
                        ));
                    }
                    Err(err) => {
                        self.line.leave(keys, thread);
                        return Err(err);
                    }
                }
            }
            Entry::Turn { hold_back_until } => hold_back_until,
        };
        let outcome = self.contend(
            kind,
            keys,
            request,
            attempted,
            hold_back,
            stop,
            &mut attempter,
        );
        if !matches!(outcome, Ok(true)) {
            // Given up (the wait passed, or an error): the next local thread may try.
            self.line.leave(keys, thread);
        }
        match outcome? {
            true => {
                let waited = Some(started.elapsed());
                Ok(Some(
                    self.granted(keys, thread, request, &attempter, waited),
                ))
            }
            false => Ok(None),
        }
    }

    /// The Redis side of acquiring, for the thread with the turn: attempt (unless `attempted`
    /// just now, or holding back for remote waiters until `hold_back`); on failure subscribe,
    /// attempt again (a release may have been announced before the subscription), then sleep
    /// until a release message or the holder's TTL, and repeat. `Ok(false)` when the deadline
    /// passed; the stop's error when it was stopped.
    #[allow(clippy::too_many_arguments)]
    fn contend(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        request: &Request,
        attempted: bool,
        hold_back: Option<HoldBack>,
        stop: &Stop,
        attempter: &mut Attempter<'_>,
    ) -> Result<bool> {
        stop.check()?;
        let deadline = request.deadline;
        if hold_back.is_none() && !attempted {
            // Only a thread that waited in line gets here: it rides out an outage (the loop
            // below looks again).
            match attempter.attempt() {
                Ok(attempt) if attempt.is_acquired() => return Ok(true),
                Ok(_) => attempter.outage.over(),
                Err(err) => attempter.outage.ride_out(&keys.name, err)?,
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return attempter.outage.at_deadline();
        }
        if kind.spins() {
            return self.spin(keys, request, stop, attempter);
        }
        let channel = kind.channel(keys, &attempter.owner);
        let subscription = self.subscriber.subscribe(&channel, deadline, stop);
        stop.check()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            // Subscribing took the rest of the wait (a slow server): no attempt after it.
            return Ok(false);
        }
        let mut yielding = None;
        if let Some(hold_back) = hold_back {
            let until = hold_back.until;
            // Others were told the lock is free: give them the first go, until the window ends
            // or one of them has had the lock and let it go (an unlock message beyond the one
            // this manager's own release sent its still-subscribed listener).
            let until = deadline.map_or(until, |d| d.min(until));
            loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero()
                    || stop.is_stopped()
                    || self.subscriber.message_count(&channel) > hold_back.messages_expected
                {
                    break;
                }
                subscription.wait(left);
            }
            yielding = Some(hold_back.messages_expected);
        }
        if kind.grants()
            && !request.fenced
            && self.store.grants_possible()
            && !self.store.waits_for_replicas(&keys.name)
        {
            // Registered by the attempts below, so that a release elsewhere may grant the lock
            // to this wait (a fenced acquire needs its own token, and with replica sync only
            // the acquiring thread's attempt waits for the replicas).
            if let Some(control) = self.subscriber.control_channel_of(&channel) {
                let number = wait_number();
                subscription.expect_grant(number);
                attempter.waiting = Some((number, control));
            }
        }
        // The stop is looked at after each sleep (the subscription's waker ends the sleep);
        // a grant that raced with it is found by STOP_WAITING below and given back by the
        // caller.
        let outcome = match stop.check() {
            Ok(()) => {
                self.wait_in_redis(keys, request, &subscription, &channel, yielding, attempter)
            }
            Err(err) => Err(err),
        };
        let Some((number, _)) = attempter.waiting else {
            return outcome;
        };
        if matches!(outcome, Ok(true)) {
            return outcome;
        }
        // Out of the registration, unless a release granted the lock meanwhile: then it is
        // ours, with its lease counted from this call.
        let sent = BootInstant::now();
        match self
            .store
            .stop_waiting(keys, &attempter.owner, number, request.lease_ms)
        {
            Ok(true) => {
                attempter.sent = sent;
                attempter.token = None;
                Ok(true)
            }
            Ok(false) => outcome,
            Err(err) => {
                log::warn!(
                    "lock {:?}: leaving the waiters failed ({err}); the registration expires by \
                     itself",
                    keys.name
                );
                // A grant may have come that this thread never learns of: its next acquire
                // of the lock, holding nothing of it, takes it rather than counting a second
                // hold on top (see ACQUIRE).
                outcome
            }
        }
    }

    /// The loop of [`contend`](Self::contend) once subscribed: attempt, and sleep until a
    /// release message, a grant to this wait, or the holder's TTL.
    fn wait_in_redis(
        &self,
        keys: &Arc<LockKeys>,
        request: &Request,
        subscription: &Subscription,
        channel: &str,
        mut yielding: Option<u64>,
        attempter: &mut Attempter<'_>,
    ) -> Result<bool> {
        let deadline = request.deadline;
        // A grant can only follow this wait's first registration: its lease counts from no
        // earlier than this.
        let registered_from = BootInstant::now();
        // A release nobody announced (a spin lock's, a deleted key) is found by looking again.
        let mut backoff = Backoff::new(current_thread_number());
        // When the holder's lease, as last seen, ends.
        let mut holder_until: Option<Instant> = None;
        // A waiter rides out an outage (a restart, its data loading back, a failover) for the
        // outage grace (`crate::outage`), woken when the listener is back; past that the
        // outage is reported. Redis down for good is still an error.
        loop {
            if let Some((_, control)) = &mut attempter.waiting {
                // Its listener's, where the channel is served now (after a failover or a
                // resharding, another master's).
                if let Some(now) = self.subscriber.control_channel_of(channel) {
                    *control = now;
                }
            }
            // The first pass closes the race with a release announced before we subscribed.
            let holder_ttl = match attempter.attempt() {
                Ok(Attempt::Acquired { .. }) => {
                    if let Some(expected) = yielding {
                        // Free after the window: nobody came, unless someone took it and
                        // let it go meanwhile (their unlock message says so).
                        let released_meanwhile = self.subscriber.message_count(channel) > expected;
                        self.line.yield_outcome(!released_meanwhile);
                    }
                    return Ok(true);
                }
                Ok(Attempt::HeldByOther(ttl)) => {
                    if yielding.take().is_some() {
                        self.line.yield_outcome(false);
                    }
                    attempter.outage.over();
                    holder_until = ttl.map(|ms| Instant::now() + Duration::from_millis(ms));
                    ttl
                }
                // A look of the back-off, while the holder's lease still runs, that a server
                // no longer answering (frozen) let time out: without the back-off nothing
                // would have been asked before the lease's end, so it is not reported yet
                // (a look whose reply was lost takes no second hold: the attempt id).
                Err(err)
                    if err.is_timeout() && holder_until.is_some_and(|u| Instant::now() < u) =>
                {
                    log::debug!(
                        "lock {:?}: a look timed out ({err}); looking again",
                        keys.name
                    );
                    holder_until
                        .map(|u| u.saturating_duration_since(Instant::now()).as_millis() as u64)
                }
                Err(err) => {
                    attempter.outage.ride_out(&keys.name, err)?;
                    Some(OUTAGE_RETRY.as_millis() as u64)
                }
            };
            let mut sleep = holder_ttl
                .map_or(NO_TTL_POLL, Duration::from_millis)
                .min(backoff.next(self.subscriber.channel_count()));
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    return attempter.outage.at_deadline();
                }
                sleep = sleep.min(deadline - now);
            }
            if self.sleep_parked(keys, request, subscription, sleep, attempter) {
                return Ok(true);
            }
            if let Some(err) = subscription.stopped() {
                return Err(err);
            }
            if let Some((number, _)) = attempter.waiting {
                // Taken without asking while most of its lease is surely left; otherwise the
                // next attempt finds the grant and counts the lease from its own send.
                let lease = Duration::from_millis(request.lease_ms);
                if subscription.take_grant(number)
                    && BootInstant::now().saturating_since(registered_from) < lease / 2
                {
                    attempter.sent = registered_from;
                    attempter.token = None;
                    self.store.counters.grant_taken();
                    return Ok(true);
                }
            }
        }
    }

    /// Sleeps on `subscription` for at most `sleep`, parked in the line (see `Line::park`):
    /// `true` when a release by another thread of this manager acquired the lock in this
    /// thread's name meanwhile.
    fn sleep_parked(
        &self,
        keys: &Arc<LockKeys>,
        request: &Request,
        subscription: &Subscription,
        sleep: Duration,
        attempter: &mut Attempter<'_>,
    ) -> bool {
        let thread = current_thread_number();
        let parked = attempter.kind.uses_line().then(|| {
            let nudge = subscription.nudger();
            self.line
                .park(keys, thread, request.lease_ms, request.fenced, nudge)
        });
        subscription.wait(sleep);
        match parked.flatten().and_then(|parked| self.line.unpark(parked)) {
            Some(Entry::Acquired { sent }) => {
                attempter.sent = sent.unwrap_or_else(BootInstant::now);
                attempter.token = None;
                true
            }
            // Only the turn, or a handoff whose outcome is unknown: the next attempt finds
            // out (as a fresh hold, it cannot count a second one).
            Some(Entry::Turn { .. } | Entry::Unconfirmed { .. }) | None => false,
        }
    }

    /// The wait of a kind whose releases are silent (a spin lock): no subscription, no
    /// message; sleep Redisson's spin back-off (at most the wait left), attempt, and repeat (the
    /// caller made the first attempt). An outage is ridden out as in
    /// [`wait_in_redis`](Self::wait_in_redis); the stop ends a sleep at once.
    fn spin(
        &self,
        keys: &LockKeys,
        request: &Request,
        stop: &Stop,
        attempter: &mut Attempter<'_>,
    ) -> Result<bool> {
        let mut backoff = SpinBackoff::new(current_thread_number());
        loop {
            let mut sleep = backoff.next();
            if let Some(deadline) = request.deadline {
                let now = Instant::now();
                if now >= deadline {
                    return attempter.outage.at_deadline();
                }
                sleep = sleep.min(deadline - now);
            }
            stop.sleep(sleep)?;
            match attempter.attempt() {
                Ok(Attempt::Acquired { .. }) => return Ok(true),
                Ok(Attempt::HeldByOther(_)) => attempter.outage.over(),
                // Looked at again after the next back-off (at most 128 ms).
                Err(err) => attempter.outage.ride_out(&keys.name, err)?,
            }
        }
    }

    /// Tells the kind that the attempter's owner stopped waiting (a failure is only logged:
    /// the kind's own timeouts clean up after a waiter that is gone).
    fn abandon(&self, kind: &dyn LockKind, keys: &LockKeys, attempter: &Attempter<'_>) {
        if let Err(err) = kind.abandon(&self.store, keys, &attempter.args()) {
            log::warn!("lock {:?}: leaving the wait failed: {err}", keys.name);
        }
    }

    fn granted(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        request: &Request,
        attempter: &Attempter<'_>,
        waited: Option<Duration>,
    ) -> Held {
        self.store.counters.acquired(waited);
        self.line.acquired(keys, thread, request.fixed);
        let renewed = request.fixed.is_none();
        let lease = Duration::from_millis(request.lease_ms);
        let status = self.holds.register(
            attempter.kind,
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

    /// Releases one hold. When it is the owner's last and another local thread is queued,
    /// the same script call acquires for that thread, unless remote waiters heard the unlock:
    /// then the lock is left to them and the line yields.
    pub(crate) fn release(&self, keys: &Arc<LockKeys>, held: &Held) -> Result<()> {
        self.check_process()?;
        let kind = held.kind;
        let owner = owner_field(&self.client_id, held.thread);
        // Count the hold off first: whether it was this thread's last decides the handoff.
        let left = match self
            .holds
            .unregister(kind, keys, held.thread, held.renewed, &held.status)
        {
            Unregistered::Counted(left) => left,
            // Lost, and the thread holds the lock again by a newer hold, which a release in
            // its name would take: nothing is sent (docs/DESIGN.md, "The watchdog and holds").
            Unregistered::Lost { newer: true } => {
                return Err(Error::NotHeld {
                    name: keys.name.to_string(),
                })
            }
            // Lost as far as this side knows (a renewal's reply too late, say): whatever is
            // left of it on Redis is released as any last hold is.
            Unregistered::Lost { newer: false } => HoldsLeft::default(),
        };
        // Holds that remain keep the lease the watchdog gives them, if it renews them.
        let lease_ms = if held.renewed || left.renewed > 0 {
            self.config.watchdog_timeout_ms
        } else {
            held.lease_ms
        };
        let last = left.total == 0;
        let uses_line = kind.uses_line();
        let successor = uses_line
            .then(|| self.line.successor(keys, held.thread, last))
            .flatten();
        // Some successors acquire themselves: a fenced one wants its own token, and with
        // replica sync an acquire must be acknowledged by a replica or rolled back, which only
        // the acquiring thread's own attempt does (a release's WAIT failing cannot fail it).
        let next = successor
            .as_ref()
            .filter(|next| next.may_acquire() && !self.store.waits_for_replicas(&keys.name))
            .map(|next| (owner_field(&self.client_id, next.thread()), next.lease_ms()));
        let channel = kind.channel(keys, &owner);
        // Whether this manager's own listener hears the unlock (only a last release sends one).
        let listening = last && self.subscriber.is_listening(&channel);
        // Who may hear the unlock without the lock being left to them: this manager's own
        // listener, or everyone while yields keep finding the lock free (no real waiter).
        let ignored = if uses_line && self.line.yields_suspended() {
            u64::from(u32::MAX)
        } else {
            u64::from(uses_line && listening)
        };
        // What this manager's listener will have heard on the channel once this release's own
        // unlock message is in, if nobody else releases the lock meanwhile: only a release
        // that may yield (a last hold, with the line) needs it.
        let messages_expected = if last && uses_line {
            self.subscriber.message_count(&channel) + u64::from(ignored == 1)
        } else {
            0
        };
        // Taken before the request goes out: the successor's lease counts from no later.
        let sent = BootInstant::now();
        let outcome = kind.release(
            &self.store,
            keys,
            &owner,
            lease_ms,
            Listeners {
                ignored,
                own: listening,
            },
            next.as_ref().map(|(owner, lease)| (owner.as_str(), *lease)),
        );
        match outcome {
            Ok(Release::HandedOver) => self.store.counters.local_handoff(),
            Ok(Release::LeftForOthers) => self.store.counters.yielded(),
            Ok(Release::Granted) => self.store.counters.grant_given(),
            // The release set the lease of the holds that remain: the guards' deadline follows.
            Ok(Release::StillHeld) => {
                let lease = Duration::from_millis(lease_ms);
                self.holds.confirm(kind, keys, held.thread, sent, lease);
            }
            _ => {}
        }
        match successor {
            Some(successor) => {
                let handed = match &outcome {
                    Ok(Release::HandedOver) => Handed::Lock(sent),
                    Ok(Release::LeftForOthers) => Handed::Yield { messages_expected },
                    // The script may have run, handoff included, with its replies lost.
                    Err(err)
                        if next.is_some() && (err.is_timeout() || err.is_connection_error()) =>
                    {
                        Handed::Unknown(sent)
                    }
                    _ => Handed::Turn,
                };
                self.line.hand_over(successor, handed);
            }
            None if last && !uses_line => {
                if matches!(outcome, Ok(Release::Released)) {
                    self.subscriber.wake_one(&channel);
                }
            }
            None if last => match outcome {
                Ok(Release::LeftForOthers) => {
                    self.line
                        .yield_to_others(keys, held.thread, messages_expected)
                }
                // After the reply, so that the next local thread's attempt finds it free.
                _ => {
                    self.line.leave(keys, held.thread);
                    if matches!(outcome, Ok(Release::Released)) {
                        // Nobody else heard: a local waiter goes first, without the pub/sub hop.
                        self.subscriber.wake_one(&channel);
                    }
                }
            },
            None => {}
        }
        match outcome? {
            Release::NotHeld => Err(Error::NotHeld {
                name: keys.name.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

/// A new wait's number: published by the release that grants the lock to it, so it must not
/// be another wait's (random, 2^62 of them) nor look like Redisson's messages (`0`, `1`).
fn wait_number() -> u64 {
    (uuid::Uuid::new_v4().as_u128() as u64 >> 2) + 2
}

/// Whether a new hold has at least a tenth of its lease left, as confirmed (counted from when
/// its request was sent).
fn has_useful_lease(held: &Held) -> bool {
    let lease = Duration::from_millis(held.lease_ms);
    held.status
        .remaining()
        .is_some_and(|left| left >= lease / 10)
}
