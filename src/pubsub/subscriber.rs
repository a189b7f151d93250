//! The pub/sub side of waiting: the registry of local waiters per channel, shared by every
//! waiting thread, and the listeners that hear releases for them ([`crate::pubsub::listener`]): one
//! listener connection and thread per master (one on a single server or with Sentinel).
//!
//! A thread that finds a lock taken registers on the lock's unlock channel; the first waiter
//! of a channel asks the listener of the channel's master to subscribe (`SSUBSCRIBE` on a
//! cluster with sharded pub/sub, `SUBSCRIBE` otherwise), the last one to leave asks it to
//! unsubscribe. Each channel keeps a count of permits, like Redisson's semaphore: a `0`
//! message adds one and wakes one waiter, a `1` wakes all. A permit that arrives while its
//! waiter is busy with an attempt is kept, so no release is missed between an attempt and the
//! next sleep.
//!
//! Semaphores and count-down latches wait here too, and their messages mean other things
//! (see [`ChannelKind`], told by the channel's prefix): on a semaphore's channel a message is
//! the number of permits available after a release, and wakes up to that many waiters (what
//! Redisson's `SemaphorePubSub` does); on a latch's channel `0` (the count reached zero) wakes
//! all, and `1` (a new count was set) wakes nobody, since the latch just closed.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use crate::cancel::Waker;
use crate::fork::Origin;
use crate::names::ChannelKind;
use crate::pubsub::listener::{self, Order};
use crate::stop::{Stop, Wakes};
use crate::store::LockStore;
use crate::threads;

/// Channels whose message counts are kept before the counts start again.
const MESSAGE_COUNTS_KEPT: usize = 4096;
/// How long a dropped manager tries to wake each listener: the wake-up only saves waiting for
/// the listener's next read tick, so a slow server is not waited for.
const SHUTDOWN_WAKE_BUDGET: Duration = Duration::from_millis(200);

/// The local waiters of one channel.
pub(crate) struct Waiters {
    state: Mutex<WaitState>,
    /// Signalled when a permit is added.
    permit: Condvar,
    /// Signalled when the subscription is confirmed.
    ready: Condvar,
}

#[derive(Default)]
struct WaitState {
    waiters: usize,
    permits: usize,
    subscribed: bool,
    /// The wait numbers the local waiters registered with (docs/design/engine.md, "Grants"): a
    /// grant to any other number is another client's business, and wakes nobody here.
    expected: Vec<u64>,
    /// Those of them that a release has granted the lock to, until their waiter takes it.
    grants: Vec<u64>,
}

impl Waiters {
    fn new() -> Self {
        Waiters {
            state: Mutex::new(WaitState::default()),
            permit: Condvar::new(),
            ready: Condvar::new(),
        }
    }

    /// The server confirmed a subscription for these waiters. When they were subscribed
    /// before (this is a resubscription: after a reconnect, a failover, a resharding),
    /// releases announced in between were missed: every waiter looks again now that the new
    /// subscription would hear the next one. (Letting them look when the resubscription was
    /// sent is too early: a release between their look and the confirmation goes unheard.)
    pub(crate) fn mark_subscribed(&self) {
        let mut state = self.state.lock();
        let again = std::mem::replace(&mut state.subscribed, true);
        if again {
            state.permits = state.waiters;
        }
        drop(state);
        self.ready.notify_all();
        if again {
            self.permit.notify_all();
        }
    }

    /// A `0` message: one waiter may try again.
    fn release_one(&self) {
        let mut state = self.state.lock();
        // Permits beyond the number of waiters would only cause useless attempts later.
        state.permits = (state.permits + 1).min(state.waiters);
        drop(state);
        self.permit.notify_one();
    }

    /// A semaphore's message: `available` permits are free now, so up to that many waiters
    /// may try again (more could not all succeed; fewer would leave permits idle).
    fn release_up_to(&self, available: usize) {
        let mut state = self.state.lock();
        let before = state.permits;
        state.permits = state.permits.saturating_add(available).min(state.waiters);
        let added = state.permits - before;
        drop(state);
        for _ in 0..added {
            self.permit.notify_one();
        }
    }

    /// A release granted the lock to the wait numbered `number` (docs/design/engine.md, "Grants").
    /// When it is a local waiter's, all look and that one takes it
    /// ([`Subscription::take_grant`]); a grant to another client's waiter wakes nobody (the
    /// lock is held again, by that waiter). Whether it was a local waiter's.
    pub(crate) fn grant(&self, number: u64) -> bool {
        let mut state = self.state.lock();
        if !state.expected.contains(&number) {
            return false;
        }
        if !state.grants.contains(&number) {
            state.grants.push(number);
        }
        state.permits = state.waiters;
        drop(state);
        self.permit.notify_all();
        true
    }

    /// A `1` message, or a reconnect after which messages may have been missed: all try again.
    pub(crate) fn release_all(&self) {
        let mut state = self.state.lock();
        state.permits = state.waiters;
        drop(state);
        self.permit.notify_all();
    }
}

/// One listener thread: where to send it orders and how to wake it.
struct ListenerHandle {
    orders: Sender<Order>,
    /// Its private channel: a message there wakes it out of its blocking read.
    control_channel: String,
    thread: Option<JoinHandle<()>>,
}

/// What the subscriber and its listeners share.
pub(crate) struct Shared {
    channels: Mutex<HashMap<String, Arc<Waiters>>>,
    /// For each channel, how many of the listeners' connections the server may count among
    /// its subscribers: each listener counts a channel from when it sends the SUBSCRIBE (the
    /// server may run it before the confirmation is read) until its UNSUBSCRIBE is confirmed,
    /// or a response timeout has passed without a confirmation, or its connection is gone;
    /// each adds and removes only its own count (`crate::pubsub::listener`). A release subtracts this
    /// client's own listener from the count of those who heard its unlock. In the moments
    /// either side of a subscription the server may already, or still, lack it, and the
    /// release then hands over locally where it could have yielded, which passes a remote
    /// waiter over once. The other mistake, a yield that nobody takes, would leave the lock
    /// idle and widen the yield window for nothing.
    subscribed: Mutex<HashMap<String, u32>>,
    /// How many messages the listeners have heard on each subscribed channel (waiters or
    /// not), so that a thread waiting out a yield to remote waiters can tell whether one of them
    /// released the lock meanwhile.
    message_counts: Mutex<HashMap<String, u64>>,
    /// The listeners, by the address of the master each listens to.
    listeners: Mutex<HashMap<String, ListenerHandle>>,
    /// Threads of listeners whose master is gone, joined at shutdown.
    retired: Mutex<Vec<JoinHandle<()>>>,
    client_id: String,
    pub(crate) store: Arc<LockStore>,
    pub(crate) response_timeout: Duration,
    shutdown: Mutex<bool>,
    shutdown_signal: Condvar,
}

impl Shared {
    pub(crate) fn is_shutdown(&self) -> bool {
        *self.shutdown.lock()
    }

    /// Sleeps for `d` unless shutdown comes first; returns whether it did.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let mut down = self.shutdown.lock();
        if !*down {
            self.shutdown_signal.wait_for(&mut down, d);
        }
        *down
    }

    /// One more listener may be subscribed to `channel` on the server (see `subscribed`).
    pub(crate) fn count_listener(&self, channel: &str) {
        *self
            .subscribed
            .lock()
            .entry(channel.to_owned())
            .or_default() += 1;
    }

    /// One listener fewer may be subscribed to `channel` on the server.
    pub(crate) fn uncount_listener(&self, channel: &str) {
        let mut subscribed = self.subscribed.lock();
        if let Some(listeners) = subscribed.get_mut(channel) {
            *listeners -= 1;
            if *listeners == 0 {
                subscribed.remove(channel);
            }
        }
    }

    /// The waiters of `channel`, if any.
    pub(crate) fn waiters(&self, channel: &str) -> Option<Arc<Waiters>> {
        self.channels.lock().get(channel).cloned()
    }

    /// Every channel with waiters now.
    pub(crate) fn waited_channels(&self) -> Vec<(String, Arc<Waiters>)> {
        self.channels
            .lock()
            .iter()
            .map(|(channel, waiters)| (channel.clone(), Arc::clone(waiters)))
            .collect()
    }

    /// Wakes every waiter whose channel belongs to the master at `addr` to look again.
    pub(crate) fn wake_waiters_of(&self, addr: &str) {
        for (channel, waiters) in self.waited_channels() {
            if self.master_of(&channel).as_deref() == Some(addr) {
                waiters.release_all();
            }
        }
    }

    /// Counts a message heard on `channel`.
    pub(crate) fn count_message(&self, channel: &str) {
        let mut counts = self.message_counts.lock();
        if counts.len() >= MESSAGE_COUNTS_KEPT && !counts.contains_key(channel) {
            counts.clear(); // bounded memory; a yield then misjudges once at most
        }
        *counts.entry(channel.to_owned()).or_default() += 1;
    }

    /// The address of the master whose listener serves `channel` now: the slot's master for
    /// a sharded channel on a cluster, else the (first) master, where every message arrives.
    pub(crate) fn master_of(&self, channel: &str) -> Option<String> {
        let topology = self.store.topology();
        let key = if topology.is_cluster() { channel } else { "" };
        topology
            .route(key)
            .ok()
            .map(|(pool, _)| pool.addr().to_owned())
    }

    /// Asks the listener of `channel`'s master (started if there is none) to carry out `order`,
    /// and wakes it. Without a master for it now, the waiters wait by the holder's TTL and
    /// the channel is subscribed at the next resync.
    pub(crate) fn send(self: &Arc<Self>, channel: &str, order: Order) {
        self.send_by(channel, order, None);
    }

    /// [`send`](Self::send) for a caller due by `deadline`: the wake-up may take what is left
    /// of it, one response timeout at most, and none once it has passed (the listener then
    /// finds the order at its next read tick).
    fn send_by(self: &Arc<Self>, channel: &str, order: Order, deadline: Option<Instant>) {
        let Some(addr) = self.master_of(channel) else {
            log::debug!("no master for {channel:?} now; its waiters wait by TTL");
            return;
        };
        let control = {
            let mut listeners = self.listeners.lock();
            if self.is_shutdown() {
                return;
            }
            let handle = match listeners.get(&addr) {
                Some(handle) if !handle.thread.as_ref().is_some_and(|t| t.is_finished()) => handle,
                _ => {
                    match self.start_listener(&addr) {
                        Ok(handle) => {
                            if let Some(old) = listeners.insert(addr.clone(), handle) {
                                self.retired.lock().extend(old.thread);
                            }
                        }
                        Err(err) => {
                            log::error!("cannot start a pub/sub listener for {addr}: {err}");
                            return;
                        }
                    }
                    &listeners[&addr]
                }
            };
            if handle.orders.send(order).is_err() {
                return;
            }
            handle.control_channel.clone()
        };
        let mut budget = self.store.response_timeout();
        if let Some(deadline) = deadline {
            budget = budget.min(deadline.saturating_duration_since(Instant::now()));
        }
        if budget.is_zero() {
            return;
        }
        if let Err(err) = self.store.publish_at(&addr, &control, "wake", budget) {
            log::debug!("could not wake the pub/sub listener for {addr}: {err}");
        }
    }

    fn start_listener(self: &Arc<Self>, addr: &str) -> std::io::Result<ListenerHandle> {
        let (orders, inbox) = crossbeam_channel::unbounded();
        // One per listener: on a cluster, the master's address tells them apart.
        let control_channel = if self.store.topology().is_cluster() {
            format!("redis_rlock__control:{{{}}}:{addr}", self.client_id)
        } else {
            format!("redis_rlock__control:{{{}}}", self.client_id)
        };
        let thread = std::thread::Builder::new()
            .name("redis-rlock-pubsub".into())
            .spawn({
                let shared = Arc::clone(self);
                let addr = addr.to_owned();
                let control = control_channel.clone();
                move || listener::listen(&shared, &addr, &control, &inbox)
            })?;
        Ok(ListenerHandle {
            orders,
            control_channel,
            thread: Some(thread),
        })
    }

    /// Routes every waited channel again and sends each to its listener: after the masters
    /// changed (a failover, a resharding), or when a listener's master is gone. Listeners
    /// drop the channels that are no longer theirs when they get `Order::Resync`.
    pub(crate) fn resync(self: &Arc<Self>) {
        let addrs: Vec<String> = self.listeners.lock().keys().cloned().collect();
        for addr in addrs {
            let handle = self
                .listeners
                .lock()
                .get(&addr)
                .map(|h| (h.orders.clone(), h.control_channel.clone()));
            if let Some((orders, control)) = handle {
                if orders.send(Order::Resync).is_ok() {
                    let budget = self.store.response_timeout();
                    let _ = self.store.publish_at(&addr, &control, "wake", budget);
                }
            }
        }
        for (channel, _) in self.waited_channels() {
            self.send(&channel, Order::Subscribe(channel.clone()));
        }
    }
}

/// Handle to the listeners; dropping it stops and joins their threads.
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
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
        let wakes = stop.wake_with({
            let waiters = Arc::clone(&waiters);
            Arc::new(move || {
                let _state = waiters.state.lock();
                waiters.permit.notify_all();
                waiters.ready.notify_all();
            })
        });
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            waiters,
            expecting: Cell::new(None),
            stop: stop.clone(),
            _wakes: wakes,
            nudged: Arc::new(AtomicBool::new(false)),
        };
        if first {
            self.shared
                .send_by(channel, Order::Subscribe(channel.to_owned()), deadline);
        }
        let mut limit = Instant::now() + self.shared.response_timeout;
        if let Some(deadline) = deadline {
            limit = limit.min(deadline);
        }
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

    /// Whether one of this manager's listeners is subscribed to `channel` on the server.
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        self.shared.subscribed.lock().contains_key(channel)
    }

    /// The control channel of the listener that serves `channel` (see [`Shared::master_of`]),
    /// if it runs: a registered waiter names it, so that a release can tell that the waiter's
    /// manager still listens (docs/design/engine.md, "Grants").
    pub(crate) fn control_channel_of(&self, channel: &str) -> Option<String> {
        let addr = self.shared.master_of(channel)?;
        let listeners = self.shared.listeners.lock();
        listeners.get(&addr).map(|h| h.control_channel.clone())
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
    channel: String,
    waiters: Arc<Waiters>,
    /// The wait number this waiter registered with, if it did (see `expect_grant`).
    expecting: Cell<Option<u64>>,
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

    /// From now on a grant to the wait numbered `number` wakes this waiter: called before
    /// the wait's first registration is sent (docs/design/engine.md, "Grants").
    pub(crate) fn expect_grant(&self, number: u64) {
        let mut state = self.waiters.state.lock();
        state.expected.push(number);
        drop(state);
        if let Some(old) = self.expecting.replace(Some(number)) {
            self.forget_grant(old);
        }
    }

    /// Whether a release granted the lock to the wait numbered `number` (its message came);
    /// the grant is taken, so it counts once.
    pub(crate) fn take_grant(&self, number: u64) -> bool {
        let mut state = self.waiters.state.lock();
        match state.grants.iter().position(|&n| n == number) {
            Some(at) => {
                state.grants.remove(at);
                true
            }
            None => false,
        }
    }

    fn forget_grant(&self, number: u64) {
        let mut state = self.waiters.state.lock();
        state.expected.retain(|&n| n != number);
        state.grants.retain(|&n| n != number);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(number) = self.expecting.take() {
            self.forget_grant(number);
        }
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
        channels.remove(&self.channel);
        drop(channels);
        // No wake-up: an extra subscription costs nothing until the listener's next tick.
        let Some(addr) = self.shared.master_of(&self.channel) else {
            return;
        };
        if let Some(handle) = self.shared.listeners.lock().get(&addr) {
            let _ = handle.orders.send(Order::Unsubscribe(self.channel.clone()));
        }
    }
}

/// What a message lets the waiters of its channel do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    Nobody,
    One,
    /// Up to this many (a semaphore's free permits).
    UpTo(usize),
    All,
}

impl Wake {
    /// What `payload` on `channel` means, by the protocol the channel belongs to. Messages
    /// that mean nothing to waiters are ignored: a waiter's poll (or the holder's TTL) bounds
    /// what a misread message could cost.
    pub(crate) fn of(channel: &str, payload: &[u8]) -> Self {
        match (ChannelKind::of(channel), payload) {
            (ChannelKind::Unlock, b"0") => Wake::One,
            (ChannelKind::Unlock, b"1") | (ChannelKind::Count, b"0") => Wake::All,
            // A latch's `1` is a new count: the latch closed, nobody may go.
            (ChannelKind::Count, b"1") => Wake::Nobody,
            // Redisson publishes the count after the change, which a foreign writer may have
            // made zero or negative: then nobody can be served.
            (ChannelKind::Permits, free) => match std::str::from_utf8(free)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
            {
                Some(n) if n > 0 => Wake::UpTo(usize::try_from(n).unwrap_or(usize::MAX)),
                Some(_) => Wake::Nobody,
                None => ignored(channel, payload),
            },
            _ => ignored(channel, payload),
        }
    }

    /// Lets the waiters go as `self` says.
    pub(crate) fn apply(self, waiters: &Waiters) {
        match self {
            Wake::Nobody => {}
            Wake::One => waiters.release_one(),
            Wake::UpTo(n) => waiters.release_up_to(n),
            Wake::All => waiters.release_all(),
        }
    }
}

fn ignored(channel: &str, payload: &[u8]) -> Wake {
    log::debug!(
        "ignoring message {:?} on {channel:?}",
        String::from_utf8_lossy(payload)
    );
    Wake::Nobody
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiters of one channel with `n` threads registered and no permit yet.
    fn waiters(n: usize) -> Waiters {
        let waiters = Waiters::new();
        waiters.state.lock().waiters = n;
        waiters
    }

    fn permits(waiters: &Waiters) -> usize {
        waiters.state.lock().permits
    }

    /// Delivers `payload` on `channel` to `waiters`; whether anyone may try again.
    fn wake(channel: &str, waiters: &Waiters, payload: &[u8]) -> bool {
        let wake = Wake::of(channel, payload);
        wake.apply(waiters);
        wake != Wake::Nobody
    }

    #[test]
    fn unlock_messages_wake_one_or_all() {
        let channel = "redisson_lock__channel:{a}";
        let w = waiters(3);
        assert!(wake(channel, &w, b"0"));
        assert_eq!(permits(&w), 1);
        assert!(wake(channel, &w, b"1"));
        assert_eq!(permits(&w), 3);
        let w = waiters(3);
        assert!(!wake(channel, &w, b"7"));
        assert_eq!(permits(&w), 0);
    }

    #[test]
    fn a_semaphore_message_wakes_as_many_waiters_as_permits_are_free() {
        let channel = "redisson_sc:{a}";
        let w = waiters(3);
        assert!(wake(channel, &w, b"2"));
        assert_eq!(permits(&w), 2);
        assert!(wake(channel, &w, b"5"));
        assert_eq!(permits(&w), 3, "never more than the waiters");
        let w = waiters(3);
        for nothing_free in [&b"0"[..], b"-4", b"many"] {
            assert!(!wake(channel, &w, nothing_free));
        }
        assert_eq!(permits(&w), 0);
    }

    #[test]
    fn a_latch_opens_for_all_on_zero_and_stays_closed_on_a_new_count() {
        let channel = "redisson_countdownlatch__channel__{a}";
        let w = waiters(4);
        assert!(!wake(channel, &w, b"1"));
        assert_eq!(permits(&w), 0);
        assert!(wake(channel, &w, b"0"));
        assert_eq!(permits(&w), 4);
    }
}
