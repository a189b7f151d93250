//! The pub/sub listener: one connection and one thread per manager, shared by every waiter.
//!
//! A thread that finds a lock taken registers on the lock's unlock channel; the first waiter
//! of a channel asks the listener to SUBSCRIBE, the last one to leave asks it to UNSUBSCRIBE.
//! Each channel keeps a count of permits, like Redisson's semaphore: a `0` message adds one
//! and wakes one waiter, a `1` wakes all. A permit that arrives while its waiter is busy with
//! an attempt is kept, so no release is missed between an attempt and the next sleep.
//!
//! Semaphores and count-down latches wait here too, and their messages mean other things
//! (see [`ChannelKind`], told by the channel's prefix): on a semaphore's channel a message is
//! the number of permits available after a release, and wakes up to that many waiters (what
//! Redisson's `SemaphorePubSub` does); on a latch's channel `0` (the count reached zero) wakes
//! all, and `1` (a new count was set) wakes nobody, since the latch just closed.
//!
//! redis-rs' sync `PubSub` borrows its connection and blocks in `get_message`, so only the
//! listener thread may touch the connection. It reads with a short timeout to notice requests
//! and shutdown; a waiter that needs a new subscription now publishes on the manager's private
//! control channel, which wakes the listener at once instead of after a tick.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use redis::{Connection, PubSub, RedisResult};

use crate::fork::Origin;
use crate::names::ChannelKind;
use crate::store::LockStore;
use crate::threads;

/// How long the listener blocks in one read before it looks at requests and shutdown without
/// being woken; it bounds how late an unsubscribe or a shutdown without Redis can be.
const TICK: Duration = Duration::from_millis(500);
/// Without traffic for this long the listener PINGs, so a silently dead connection is found.
const PING_AFTER: Duration = Duration::from_secs(5);
/// Channels whose message counts are kept before the counts start again.
const MESSAGE_COUNTS_KEPT: usize = 4096;
/// Reconnect delays grow from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long a dropped manager tries to wake its listener: the wake-up only saves waiting for
/// the listener's next tick, so a slow server is not waited for.
const SHUTDOWN_WAKE_BUDGET: Duration = Duration::from_millis(200);

enum Request {
    Subscribe(String, Arc<Waiters>),
    Unsubscribe(String),
}

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
}

impl Waiters {
    fn new() -> Self {
        Waiters {
            state: Mutex::new(WaitState::default()),
            permit: Condvar::new(),
            ready: Condvar::new(),
        }
    }

    fn mark_subscribed(&self) {
        self.state.lock().subscribed = true;
        self.ready.notify_all();
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

    /// A `1` message, or a reconnect after which messages may have been missed: all try again.
    fn release_all(&self) {
        let mut state = self.state.lock();
        state.permits = state.waiters;
        drop(state);
        self.permit.notify_all();
    }
}

struct Shared {
    channels: Mutex<HashMap<String, Arc<Waiters>>>,
    /// The channels the listener's connection is subscribed to on the server (including
    /// those without waiters, until the listener unsubscribes): a release subtracts this
    /// client's own listener from the count of those who heard its unlock.
    subscribed: Mutex<HashSet<String>>,
    /// How many messages the listener has heard on each subscribed channel (waiters or not),
    /// so that a thread holding back for remote waiters can tell whether one of them
    /// released the lock meanwhile.
    message_counts: Mutex<HashMap<String, u64>>,
    requests: Sender<Request>,
    control_channel: String,
    store: Arc<LockStore>,
    response_timeout: Duration,
    shutdown: Mutex<bool>,
    shutdown_signal: Condvar,
}

impl Shared {
    fn is_shutdown(&self) -> bool {
        *self.shutdown.lock()
    }

    /// Sleeps for `d` unless shutdown comes first; returns whether it did.
    fn sleep(&self, d: Duration) -> bool {
        let mut down = self.shutdown.lock();
        if !*down {
            self.shutdown_signal.wait_for(&mut down, d);
        }
        *down
    }

    /// Wakes the listener out of its blocking read. If this fails the listener still sees the
    /// request within one tick.
    fn wake_listener(&self) {
        if let Err(err) = self.store.publish(&self.control_channel, "wake") {
            log::debug!("could not wake the pub/sub listener: {err}");
        }
    }

    /// [`wake_listener`](Self::wake_listener), giving up after `budget`.
    fn wake_listener_within(&self, budget: Duration) {
        let wake = self
            .store
            .run_within("waking the pub/sub listener", "", 1, budget, |conn| {
                redis::cmd("PUBLISH")
                    .arg(&self.control_channel)
                    .arg("wake")
                    .query::<i64>(conn)
            });
        if let Err(err) = wake {
            log::debug!("could not wake the pub/sub listener: {err}");
        }
    }
}

/// Handle to the listener thread; dropping it stops and joins the thread.
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process whose thread this is (see [`crate::fork`]).
    origin: Origin,
}

impl Subscriber {
    pub(crate) fn start(
        store: Arc<LockStore>,
        client_id: &str,
        response_timeout: Duration,
    ) -> std::io::Result<Self> {
        let (requests, inbox) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            subscribed: Mutex::new(HashSet::new()),
            message_counts: Mutex::new(HashMap::new()),
            requests,
            control_channel: format!("redis_lock__control:{{{client_id}}}"),
            store,
            response_timeout,
            shutdown: Mutex::new(false),
            shutdown_signal: Condvar::new(),
        });
        let thread = std::thread::Builder::new()
            .name("redis-lock-pubsub".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || listen(&shared, &inbox)
            })?;
        Ok(Subscriber {
            shared,
            thread: Some(thread),
            origin: Origin::current(),
        })
    }

    /// Registers the calling thread as a waiter on `channel`, subscribing if it is the first,
    /// and waits (until `deadline` or one response timeout at most) for the subscription to be
    /// confirmed. An unconfirmed subscription still works: waits are bounded by the holder's
    /// TTL, so a missed message costs time, never a hang.
    pub(crate) fn subscribe(&self, channel: &str, deadline: Option<Instant>) -> Subscription {
        let (waiters, first) = {
            let mut channels = self.shared.channels.lock();
            let waiters = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Arc::new(Waiters::new()));
            let mut state = waiters.state.lock();
            state.waiters += 1;
            (Arc::clone(waiters), state.waiters == 1)
        };
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            waiters,
        };
        if first {
            let request = Request::Subscribe(channel.to_owned(), Arc::clone(&subscription.waiters));
            if self.shared.requests.send(request).is_ok() {
                self.shared.wake_listener();
            }
        }
        let mut limit = Instant::now() + self.shared.response_timeout;
        if let Some(deadline) = deadline {
            limit = limit.min(deadline);
        }
        let mut state = subscription.waiters.state.lock();
        while !state.subscribed {
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

    /// Whether this manager's listener is subscribed to `channel` on the server.
    pub(crate) fn is_listening(&self, channel: &str) -> bool {
        self.shared.subscribed.lock().contains(channel)
    }

    /// How many messages the listener has heard on `channel` since the manager started (it
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
        let waiters = self.shared.channels.lock().get(channel).cloned();
        if let Some(waiters) = waiters {
            waiters.release_one();
        }
    }

    /// How many channels have local waiters (for tests and diagnostics).
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.channels.lock().len()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if self.origin.is_forked() {
            // A child made by fork(): the listener does not exist here (joining it fails), its
            // locks may have been held at the fork, and a wake-up would be sent on a socket
            // the parent still uses. Touch nothing.
            std::mem::forget(thread);
            return;
        }
        *self.shared.shutdown.lock() = true;
        self.shared.shutdown_signal.notify_all();
        // Only to spare the read tick: a paused or unreachable Redis must not hold the drop.
        self.shared.wake_listener_within(SHUTDOWN_WAKE_BUDGET);
        threads::join_stopping(thread, "pub/sub listener");
    }
}

/// One thread's registration as a waiter on one channel; dropping it deregisters.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    waiters: Arc<Waiters>,
}

impl Subscription {
    /// Sleeps until a release is announced or `timeout` passes; `true` if woken by a release.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.waiters.state.lock();
        while state.permits == 0 {
            if self
                .waiters
                .permit
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                break;
            }
        }
        if state.permits > 0 {
            state.permits -= 1;
            true
        } else {
            false
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.channels.lock();
        let mut state = self.waiters.state.lock();
        state.waiters -= 1;
        state.permits = state.permits.min(state.waiters);
        if state.waiters > 0 {
            return;
        }
        drop(state);
        channels.remove(&self.channel);
        drop(channels);
        // No wake-up: an extra subscription costs nothing until the listener's next tick.
        let _ = self
            .shared
            .requests
            .send(Request::Unsubscribe(self.channel.clone()));
    }
}

/// The listener thread: connect, serve until the connection fails, reconnect with backoff.
fn listen(shared: &Shared, inbox: &Receiver<Request>) {
    let mut backoff = BACKOFF_FIRST;
    let mut connected_before = false;
    while !shared.is_shutdown() {
        let mut conn = match shared.store.connect_subscriber() {
            Ok(conn) => {
                if connected_before {
                    shared.store.counters.reconnect();
                }
                connected_before = true;
                conn
            }
            Err(err) => {
                log::warn!("pub/sub listener cannot connect: {err}; retrying in {backoff:?}");
                shared.sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        backoff = BACKOFF_FIRST;
        match serve(shared, &mut conn, inbox) {
            Ok(()) => return,
            Err(err) => log::warn!("pub/sub connection lost: {err}; reconnecting"),
        }
    }
}

/// Serves one connection until shutdown (`Ok`) or a connection error.
fn serve(shared: &Shared, conn: &mut Connection, inbox: &Receiver<Request>) -> RedisResult<()> {
    conn.set_read_timeout(Some(TICK))?;
    let mut pubsub = conn.as_pubsub();
    shared.store.counters.sent(1);
    pubsub.subscribe(&shared.control_channel)?;

    // Start from the registry, the truth about who waits; queued requests are covered by it.
    while inbox.try_recv().is_ok() {}
    shared.subscribed.lock().clear();
    let current: Vec<(String, Arc<Waiters>)> = shared
        .channels
        .lock()
        .iter()
        .map(|(channel, waiters)| (channel.clone(), Arc::clone(waiters)))
        .collect();
    for (channel, waiters) in &current {
        subscribe_one(shared, &mut pubsub, channel, waiters)?;
        shared.subscribed.lock().insert(channel.clone());
        // Releases announced while we were disconnected were missed: everyone looks again.
        waiters.release_all();
    }

    let mut last_traffic = Instant::now();
    loop {
        if shared.is_shutdown() {
            // Dropping `pubsub` sends UNSUBSCRIBE and waits for the reply, a whole read tick on
            // a paused server; the connection is closed right after, which unsubscribes anyway.
            pubsub.set_read_timeout(Some(Duration::from_millis(1)))?;
            return Ok(());
        }
        while let Ok(request) = inbox.try_recv() {
            match request {
                Request::Subscribe(channel, waiters) => {
                    subscribe_one(shared, &mut pubsub, &channel, &waiters)?;
                    shared.subscribed.lock().insert(channel);
                }
                Request::Unsubscribe(channel) => {
                    // A new waiter may have come back since; its own request follows.
                    if !shared.channels.lock().contains_key(&channel) {
                        shared.store.counters.sent(1);
                        pubsub.unsubscribe(&channel)?;
                        shared.subscribed.lock().remove(&channel);
                    }
                }
            }
        }
        match pubsub.get_message() {
            Ok(msg) => {
                last_traffic = Instant::now();
                let channel = msg.get_channel_name();
                if channel == shared.control_channel {
                    continue;
                }
                let mut counts = shared.message_counts.lock();
                if counts.len() >= MESSAGE_COUNTS_KEPT && !counts.contains_key(channel) {
                    counts.clear(); // bounded memory; a yield then misjudges once at most
                }
                *counts.entry(channel.to_owned()).or_default() += 1;
                drop(counts);
                let waiters = shared.channels.lock().get(channel).cloned();
                if let Some(waiters) = waiters {
                    let wake = Wake::of(channel, msg.get_payload_bytes());
                    if wake != Wake::Nobody {
                        // Counted first: a woken waiter's caller may look at the stats.
                        shared.store.counters.wakeup();
                    }
                    wake.apply(&waiters);
                }
            }
            Err(err) if err.is_timeout() => {
                if last_traffic.elapsed() >= PING_AFTER {
                    shared.store.counters.sent(1);
                    pubsub.ping::<redis::Value>()?;
                    last_traffic = Instant::now();
                }
            }
            Err(err) => return Err(err),
        }
    }
}

/// What a message lets the waiters of its channel do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
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
    fn of(channel: &str, payload: &[u8]) -> Self {
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
    fn apply(self, waiters: &Waiters) {
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

/// Subscribes to one channel and tells its waiters the subscription is live, unless Redis
/// refused it: then the refusal is logged and the waiters are left unconfirmed, so they wait
/// by the holder's TTL instead of believing a wake-up will come.
///
/// One channel per command on purpose: redis-rs' `PubSub::subscribe` reads a single reply, so
/// with several channels the remaining confirmations would be read as the replies to later
/// commands, and a later subscription would be reported live before the server made it.
///
/// That single reply is discarded, error replies included (NOPERM for a user without the
/// channel right), and `PubSub` gives no access to it. A PING after it tells instead, in
/// RESP2: on a connection with at least one subscription Redis answers `["pong", ""]`. A
/// plain `PONG` means either a RESP2 connection subscribed to nothing (this SUBSCRIBE was
/// refused, and the control channel's too) or RESP3, where PING always answers `PONG`; a
/// SUBSCRIBE on a connection of its own then settles it, and a listener found to speak RESP3
/// stops asking (its refusals go unseen, as before). The manager checks the rights when it
/// starts (`acl.rs`); this catches rights revoked later, after which Redis drops the
/// listener's connection and the subscriptions made on the new one are refused. A refusal
/// while the control channel's subscription stands is not seen either.
fn subscribe_one(
    shared: &Shared,
    pubsub: &mut PubSub<'_>,
    channel: &str,
    waiters: &Waiters,
) -> RedisResult<()> {
    thread_local! {
        /// Whether PING on this listener's connections cannot tell subscribed from not
        /// (RESP3). Per thread is per manager: each manager has its own listener thread.
        static PING_IS_UNINFORMATIVE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    shared.store.counters.sent(1);
    pubsub.subscribe(channel)?;
    if PING_IS_UNINFORMATIVE.get() {
        waiters.mark_subscribed();
        return Ok(());
    }
    shared.store.counters.sent(1);
    if let redis::Value::Array(_) = pubsub.ping::<redis::Value>()? {
        waiters.mark_subscribed();
        return Ok(());
    }
    match crate::acl::check_subscribe(&shared.store, &[channel], shared.response_timeout) {
        Ok(()) => {
            PING_IS_UNINFORMATIVE.set(true);
            waiters.mark_subscribed();
        }
        Err(err) => log::error!(
            "Redis refused the subscription to {channel:?}, or it could not be confirmed: \
             its waiters will not be woken by releases and retry by the holder's TTL \
             instead ({err})"
        ),
    }
    Ok(())
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
