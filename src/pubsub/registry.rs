//! What the waiters of a manager and its pub/sub listeners share: the local waiters of each
//! channel with their wake permits ([`Waiters`]), the listeners by master, the counts of who
//! listens and what was heard ([`Shared`]), the orders a listener takes ([`Order`]), and what
//! a message lets waiters do ([`Wake`]). Below both the subscriber and the listener, which use
//! it; the subscriber gives it the listener's thread body.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::names::ChannelKind;
use crate::pubsub::tracked::{TrackState, TrackedKeys};
pub(crate) use crate::pubsub::waiters::Waiters;
use crate::store::LockStore;

/// What a waiting thread (or the subscriber) asks of a listener.
pub(crate) enum Order {
    Subscribe(String),
    Unsubscribe(String),
    /// The masters changed: drop the channels that are no longer this listener's (the
    /// subscriber sends them to their new listeners).
    Resync,
    /// Have the server watch this lock key (see `crate::pubsub::tracking`).
    Track(String),
}

/// A listener thread's body: the listener for the master at the address, with its control
/// channel and its mailbox.
pub(super) type ListenFn = fn(&Arc<Shared>, &str, &str, &Receiver<Order>);

/// Channels whose message counts are kept before the counts start again.
const MESSAGE_COUNTS_KEPT: usize = 4096;

/// One listener thread: where to send it orders and how to wake it.
pub(super) struct ListenerHandle {
    pub(super) orders: Sender<Order>,
    /// Its private channel: a message there wakes it out of its blocking read.
    pub(super) control_channel: String,
    pub(super) thread: Option<JoinHandle<()>>,
}

/// What the subscriber and its listeners share.
pub(crate) struct Shared {
    pub(super) channels: Mutex<HashMap<String, Arc<Waiters>>>,
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
    pub(super) subscribed: Mutex<HashMap<String, u32>>,
    /// How many messages the listeners have heard on each subscribed channel (waiters or
    /// not), so that a thread waiting out a yield to remote waiters can tell whether one of them
    /// released the lock meanwhile.
    pub(super) message_counts: Mutex<HashMap<String, u64>>,
    /// The listeners, by the address of the master each listens to.
    pub(super) listeners: Mutex<HashMap<String, ListenerHandle>>,
    /// Threads of listeners whose master is gone, joined at shutdown.
    pub(super) retired: Mutex<Vec<JoinHandle<()>>>,
    pub(super) client_id: String,
    pub(crate) store: Arc<LockStore>,
    pub(crate) response_timeout: Duration,
    pub(super) shutdown: Mutex<bool>,
    pub(super) shutdown_signal: Condvar,
    /// The listener thread's body (`listener::listen`), given by the subscriber: this module
    /// sits below the listener, which uses it.
    pub(super) listen: ListenFn,
    /// The lock keys waited on, which client tracking reports the changes of.
    pub(crate) tracked: TrackedKeys,
    /// Whether a refusal of client tracking was logged (once per manager).
    pub(super) tracking_refusal_logged: AtomicBool,
    /// Whether the last listener connection that asked was refused client tracking: new
    /// keys' waiters then ask nothing and look by their back-off.
    pub(super) tracking_refused: AtomicBool,
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

    /// Wakes every waiter whose channel or key belongs to the master at `addr` to look again.
    pub(crate) fn wake_waiters_of(&self, addr: &str) {
        for (channel, waiters) in self.waited_channels() {
            if self.master_of(&channel).as_deref() == Some(addr) {
                waiters.release_all();
            }
        }
        for key in self
            .tracked
            .keys(|key| self.master_of_key(key).as_deref() == Some(addr))
        {
            self.tracked.changed(key.as_bytes());
        }
    }

    /// Logs a refusal of client tracking, the first time only: waiters then look by their
    /// back-off, as they did without tracking.
    pub(crate) fn tracking_refused(&self, addr: &str, err: &redis::RedisError) {
        self.tracking_refused.store(true, Ordering::Relaxed);
        if !self.tracking_refusal_logged.swap(true, Ordering::Relaxed) {
            log::warn!(
                "{addr} refused client tracking ({err}): waiters behind holders that announce \
                 no release (a spin lock, an expiry, a DEL) find it by their back-off; grant \
                 the Redis user +client|id and +client|tracking (Redis 6.0 or later) to have \
                 them woken at once"
            );
        }
    }

    /// A listener connection accepted client tracking (again).
    pub(crate) fn tracking_accepted(&self) {
        self.tracking_refused.store(false, Ordering::Relaxed);
    }

    /// Whether client tracking was refused the last time a listener asked.
    pub(crate) fn is_tracking_refused(&self) -> bool {
        self.tracking_refused.load(Ordering::Relaxed)
    }

    /// The address of the master of the lock key `key` now, where its changes are reported.
    pub(crate) fn master_of_key(&self, key: &str) -> Option<String> {
        self.store
            .topology()
            .route(key)
            .ok()
            .map(|(pool, _)| pool.addr().to_owned())
    }

    /// Asks the listener of `key`'s master to have the server watch it (see
    /// [`send_by`](Self::send_by) for `deadline`).
    pub(crate) fn track_by(self: &Arc<Self>, key: &str, deadline: Option<Instant>) {
        let Some(addr) = self.master_of_key(key) else {
            log::debug!("no master for {key:?} now; its waiters look by their back-off");
            self.tracked
                .set_state(&[key.to_owned()], TrackState::Off, false);
            return;
        };
        self.send_at(&addr, Order::Track(key.to_owned()), deadline);
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
        let per_master = topology.capabilities().listener_per_master;
        let key = if per_master { channel } else { "" };
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
    pub(super) fn send_by(
        self: &Arc<Self>,
        channel: &str,
        order: Order,
        deadline: Option<Instant>,
    ) {
        let Some(addr) = self.master_of(channel) else {
            log::debug!("no master for {channel:?} now; its waiters wait by TTL");
            return;
        };
        self.send_at(&addr, order, deadline);
    }

    /// Gives `order` to the listener of the master at `addr` (started if there is none) and
    /// wakes it (see [`send_by`](Self::send_by)).
    pub(super) fn send_at(self: &Arc<Self>, addr: &str, order: Order, deadline: Option<Instant>) {
        let addr = addr.to_owned();
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

    pub(super) fn start_listener(self: &Arc<Self>, addr: &str) -> std::io::Result<ListenerHandle> {
        let (orders, inbox) = crossbeam_channel::unbounded();
        // One per listener: on a cluster, the master's address tells them apart.
        let control_channel = if self.store.topology().capabilities().listener_per_master {
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
                let listen = self.listen;
                move || listen(&shared, &addr, &control, &inbox)
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
        // A key's master may have changed, where nothing watches it yet: unconfirmed until
        // its listener says (its next waiter waits for that, or falls back to the back-off).
        let keys = self.tracked.keys(|_| true);
        self.tracked.set_state(&keys, TrackState::Pending, false);
        for key in keys {
            self.track_by(&key, None);
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
