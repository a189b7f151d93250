//! The pub/sub side of waiting, as the waiting threads see it: a thread that finds a lock
//! taken registers on the lock's unlock channel ([`Subscription`]); the first waiter of a
//! channel asks the listener of the channel's master ([`crate::pubsub::listener`]: one
//! connection and thread per master) to subscribe (`SSUBSCRIBE` on a cluster with sharded
//! pub/sub, `SUBSCRIBE` otherwise), and the last one to leave asks it to unsubscribe.
//!
//! Each channel keeps a count of wake permits, like Redisson's semaphore: a `0` message adds
//! one and wakes one waiter, a `1` wakes all. A permit that arrives while its waiter is busy
//! with an attempt is kept, so no release is missed between an attempt and the next sleep.
//! Semaphores and count-down latches wait here too, and their messages mean other things
//! (told by the channel's prefix; the registry's `Wake` reads them): on a semaphore's channel
//! a message is the number of permits available after a release, and wakes up to that many
//! waiters (what Redisson's `SemaphorePubSub` does); on a latch's channel `0` (the count
//! reached zero) wakes all, and `1` (a new count was set) wakes nobody, since the latch just
//! closed.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cancel::Waker;
use crate::fork::Origin;
use crate::pubsub::listener;
use crate::pubsub::registry::{ListenerHandle, Order, Shared, Waiters};
use crate::pubsub::tracked::{TrackState, TrackedKeys};
use crate::stop::{Stop, Wakes};
use crate::store::LockStore;
use crate::threads;

/// How long a dropped manager tries to wake each listener: the wake-up only saves waiting for
/// the listener's next read tick, so a slow server is not waited for.
const SHUTDOWN_WAKE_BUDGET: Duration = Duration::from_millis(200);

/// Handle to the listeners; dropping it stops and joins their threads.
pub(crate) struct Subscriber {
    pub(super) shared: Arc<Shared>,
    /// The process whose threads these are (see [`crate::fork`]).
    origin: Origin,
}

impl Subscriber {
    /// Starts the subscriber, and the listener of the (first) master right away: waiters of
    /// a single server or Sentinel need no thread start on their first wait.
    pub(crate) fn start(
        store: Arc<LockStore>,
        client_id: &str,
        response_timeout: Duration,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            subscribed: Mutex::new(HashMap::new()),
            message_counts: Mutex::new(HashMap::new()),
            listeners: Mutex::new(HashMap::new()),
            retired: Mutex::new(Vec::new()),
            client_id: client_id.to_owned(),
            store,
            response_timeout,
            shutdown: Mutex::new(false),
            shutdown_signal: Condvar::new(),
            listen: listener::listen,
            tracked: TrackedKeys::default(),
            tracking_refusal_logged: AtomicBool::new(false),
            tracking_refused: AtomicBool::new(false),
        });
        for pool in shared.store.topology().map().masters() {
            let handle = shared.start_listener(pool.addr())?;
            shared
                .listeners
                .lock()
                .insert(pool.addr().to_owned(), handle);
        }
        Ok(Subscriber {
            shared,
            origin: Origin::current(),
        })
    }

    /// Registers the calling thread as a waiter on `channel`, subscribing if it is the first,
    /// and waits (until `deadline` or one response timeout at most) for the subscription to be
    /// confirmed. An unconfirmed subscription still works: waits are bounded by the holder's
    /// TTL, so a missed message costs time, never a hang.
    ///
    /// `stop` ends the wait for the confirmation and every [`Subscription::wait`] at once.
    pub(crate) fn subscribe(
        &self,
        channel: &str,
        deadline: Option<Instant>,
        stop: &Stop,
    ) -> Subscription {
        let (waiters, first) = {
            let mut channels = self.shared.channels.lock();
            let waiters = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Arc::new(Waiters::new()));
            let mut state = waiters.state.lock();
            state.waiters += 1;
            (Arc::clone(waiters), state.waiters == 1)
        };
        let subscription = self.registration(Some(channel), waiters, stop);
        if first {
            self.shared
                .send_by(channel, Order::Subscribe(channel.to_owned()), deadline);
        }
        let limit = self.confirmation_limit(deadline);
        let mut state = subscription.waiters.state.lock();
        while !state.subscribed && !stop.is_stopped() {
            if subscription
                .waiters
                .ready
                .wait_until(&mut state, limit)
                .timed_out()
            {
                log::debug!("subscription to {channel:?} not confirmed in time; waiting by TTL");
                break;
            }
        }
        drop(state);
        subscription
    }

    /// Registers the calling thread as a waiter of the lock key `key` woken by client
    /// tracking alone (a spin lock's, whose releases nobody announces), and waits for the
    /// tracking as [`track`](Self::track) does.
    pub(crate) fn watch(&self, key: &str, deadline: Option<Instant>, stop: &Stop) -> Subscription {
        let waiters = Arc::new(Waiters::new());
        waiters.state.lock().waiters = 1;
        let mut subscription = self.registration(None, waiters, stop);
        self.track(&mut subscription, key, deadline);
        subscription
    }

    /// A registration of the calling thread with `waiters` (of `channel`, if any), whose
    /// waits `stop` ends.
    fn registration(
        &self,
        channel: Option<&str>,
        waiters: Arc<Waiters>,
        stop: &Stop,
    ) -> Subscription {
        let wakes = stop.wake_with({
            let waiters = Arc::clone(&waiters);
            Arc::new(move || {
                let _state = waiters.state.lock();
                waiters.permit.notify_all();
                waiters.ready.notify_all();
            })
        });
        Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.map(str::to_owned),
            key: None,
            waiters,
            expecting: Cell::new(None),
            stop: stop.clone(),
            _wakes: wakes,
            nudged: Arc::new(AtomicBool::new(false)),
        }
    }

    /// How long a new waiter waits for the server's confirmations: one response timeout, or
    /// less by `deadline`.
    fn confirmation_limit(&self, deadline: Option<Instant>) -> Instant {
        let limit = Instant::now() + self.shared.response_timeout;
        deadline.map_or(limit, |deadline| limit.min(deadline))
    }

    /// Has the server watch the lock key `key` for `subscription` too, so that every change
    /// of the key (a release nobody announces, an expiry, a `DEL`) wakes it as an unlock
    /// message would (asking the key's master's listener unless the key is watched already),
    /// and waits until that is confirmed or given up, the stop, or one response timeout
    /// (less by `deadline`).
    pub(crate) fn track(
        &self,
        subscription: &mut Subscription,
        key: &str,
        deadline: Option<Instant>,
    ) {
        subscription.key = Some(key.to_owned());
        if self.shared.tracked.add(key, &subscription.waiters) {
            if self.shared.is_tracking_refused() {
                let key = [key.to_owned()];
                self.shared.tracked.set_state(&key, TrackState::Off, false);
            } else {
                self.shared.track_by(key, deadline);
            }
        }
        let limit = self.confirmation_limit(deadline);
        let mut state = subscription.waiters.state.lock();
        while self.shared.tracked.state(key) == TrackState::Pending
            && !subscription.stop.is_stopped()
        {
            if subscription
                .waiters
                .ready
                .wait_until(&mut state, limit)
                .timed_out()
            {
                log::debug!("tracking of {key:?} not confirmed in time; waiting by back-off");
                break;
            }
        }
    }

    /// Whether one of this manager's listeners is subscribed to `channel` on the server.
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        self.shared.subscribed.lock().contains_key(channel)
    }

    /// How many messages the listeners have heard on `channel` since the manager started (it
    /// only grows, through unsubscribes and reconnects, unless very many channels were
    /// heard).
    pub(crate) fn message_count(&self, channel: &str) -> u64 {
        self.shared
            .message_counts
            .lock()
            .get(channel)
            .copied()
            .unwrap_or(0)
    }

    /// Wakes one local waiter of `channel`, if any: a release that nobody else heard need
    /// not wait for its own unlock message to come back through the listener (and a release
    /// whose message the server refused still wakes this manager's waiters).
    pub(crate) fn wake_one(&self, channel: &str) {
        if let Some(waiters) = self.shared.waiters(channel) {
            waiters.release_one();
        }
    }

    /// How many channels have local waiters (for tests and diagnostics).
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.channels.lock().len()
    }

    /// How many listener threads run (one per master listened to).
    pub(crate) fn listener_count(&self) -> usize {
        self.shared
            .listeners
            .lock()
            .values()
            .filter(|h| h.thread.as_ref().is_some_and(|t| !t.is_finished()))
            .count()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let handles: Vec<(String, ListenerHandle)> = {
            let mut listeners = self.shared.listeners.lock();
            *self.shared.shutdown.lock() = true;
            listeners.drain().collect()
        };
        let retired = std::mem::take(&mut *self.shared.retired.lock());
        if self.origin.is_forked() {
            // A child made by fork(): the listeners do not exist here (joining them fails),
            // their locks may have been held at the fork, and a wake-up would be sent on a
            // socket the parent still uses. Touch nothing.
            for (_, handle) in handles {
                std::mem::forget(handle.thread);
            }
            std::mem::forget(retired);
            return;
        }
        self.shared.shutdown_signal.notify_all();
        // Only to spare the read tick: a paused or unreachable Redis must not hold the drop.
        for (addr, handle) in &handles {
            if let Err(err) = self.shared.store.publish_at(
                addr,
                &handle.control_channel,
                "wake",
                SHUTDOWN_WAKE_BUDGET,
            ) {
                log::debug!("could not wake a pub/sub listener: {err}");
            }
        }
        for thread in handles
            .into_iter()
            .filter_map(|(_, h)| h.thread)
            .chain(retired)
        {
            threads::join_stopping(thread, "pub/sub listener");
        }
    }
}

/// One thread's registration as a waiter on one channel; dropping it deregisters.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    /// The channel it waits on; `None` for a waiter woken by client tracking alone.
    channel: Option<String>,
    /// The lock key whose changes client tracking reports to it, if any.
    key: Option<String>,
    pub(super) waiters: Arc<Waiters>,
    /// The wait number this waiter registered with for grants, if it did (see
    /// `super::grants`).
    pub(super) expecting: Cell<Option<u64>>,
    /// What ends the wait early; its waker is registered while the subscription lives.
    stop: Stop,
    _wakes: Wakes,
    /// Set by [`nudger`](Subscription::nudger)'s waker: ends the current or next wait.
    nudged: Arc<AtomicBool>,
}

impl Subscription {
    /// Sleeps until a release is announced, `timeout` passes, the wait is stopped (a
    /// cancel, a shutdown) or nudged; `true` if woken by a release. A stopped or nudged
    /// waiter takes no permit: it is left to the channel's other waiters.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.waiters.state.lock();
        let nudged = || self.nudged.swap(false, Ordering::AcqRel);
        while state.permits == 0 && !self.stop.is_stopped() {
            if nudged() {
                return false;
            }
            if self
                .waiters
                .permit
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                break;
            }
        }
        if state.permits > 0 && !self.stop.is_stopped() {
            state.permits -= 1;
            true
        } else {
            false
        }
    }

    /// A waker that ends this subscription's current wait, or its next one if it is not
    /// waiting now (a release that handed this waiter the lock: see `Line::park`).
    pub(crate) fn nudger(&self) -> Waker {
        let waiters = Arc::clone(&self.waiters);
        let nudged = Arc::clone(&self.nudged);
        Arc::new(move || {
            let _state = waiters.state.lock();
            nudged.store(true, Ordering::Release);
            waiters.permit.notify_all();
        })
    }
}

impl Subscription {
    /// The stop's error once the wait is stopped (a cancel, a shutdown).
    pub(crate) fn stopped(&self) -> Option<crate::error::Error> {
        self.stop.check().err()
    }

    /// The lock key it has the server watch, if any.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Whether the server reports every change of its key now (client tracking confirmed):
    /// its back-off is then only a safety net.
    pub(crate) fn is_tracked(&self) -> bool {
        self.key
            .as_deref()
            .is_some_and(|key| self.shared.tracked.state(key) == TrackState::Live)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.forget_expected_grant();
        if let Some(key) = self.key.take() {
            // The key stays watched, idle, until its listener forgets it.
            self.shared.tracked.remove(&key, &self.waiters);
        }
        if let Some(channel) = self.channel.take() {
            self.leave(channel);
        }
    }
}

impl Subscription {
    /// This waiter leaves `channel`; the last one asks for the unsubscribe.
    fn leave(&self, channel: String) {
        let mut channels = self.shared.channels.lock();
        let mut state = self.waiters.state.lock();
        state.waiters -= 1;
        state.permits = state.permits.min(state.waiters);
        if state.waiters > 0 {
            if state.permits > 0 {
                // A wake-up this waiter left unused (it was stopped, or it is leaving with
                // the lock): it goes to the others rather than waiting for their timeouts.
                drop(state);
                self.waiters.permit.notify_all();
            }
            return;
        }
        drop(state);
        channels.remove(&channel);
        drop(channels);
        // No wake-up: an extra subscription costs nothing until the listener's next tick.
        let Some(addr) = self.shared.master_of(&channel) else {
            return;
        };
        if let Some(handle) = self.shared.listeners.lock().get(&addr) {
            let _ = handle.orders.send(Order::Unsubscribe(channel));
        }
    }
}
