//! One pub/sub listener: a thread with its own connection to one master, subscribed to the
//! channels of that master's waiters (`crate::pubsub::subscriber` keeps the waiters and routes
//! channels to listeners).
//!
//! The connection speaks RESP3 where the server allows it, else RESP2
//! (`crate::topology::pubsub_connection`, which reads both alike): every message, and every
//! subscription's confirmation, is read here, where redis-rs' sync `PubSub` drops the
//! `smessage` of sharded pub/sub (which Redisson uses on a Redis 7 cluster) and discards the
//! replies to SUBSCRIBE, so a refused subscription would look live. Here a subscription counts
//! as live only once the server confirmed it.
//!
//! The listener blocks in one read at a time with a short timeout, to notice orders and
//! shutdown; a waiter that needs a new subscription publishes on the listener's private
//! control channel (plain pub/sub, which reaches every node of a cluster), which wakes it at
//! once. redis-rs counts a read that timed out as a reply still owed and skips the next
//! non-push value it reads; push values are never skipped, so nothing here relies on a
//! non-push reply: liveness is checked by subscribing to the control channel again, whose
//! confirmation is a push.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use redis::{PushKind, RedisResult, ServerError, Value};

use crate::pubsub::registry::{Order, Shared, Wake};
use crate::pubsub::tracked::TrackState;
use crate::pubsub::tracking::{Outcome, Tracker, INVALIDATE_CHANNEL};
use crate::topology::pubsub_connection::{Heard, PubSubConnection};

/// How long the listener blocks in one read before it looks at orders and shutdown without
/// being woken; it bounds how late an unsubscribe or a shutdown without Redis can be.
const TICK: Duration = Duration::from_millis(500);
/// Without traffic for this long the listener checks its connection (and that its server is
/// still a master).
const CHECK_AFTER: Duration = Duration::from_secs(5);
/// Reconnect delays grow from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Idle keys (watched, nobody waits on them now) allowed beyond the waited ones before they
/// are forgotten and their prefixes dropped.
const IDLE_KEYS_ALLOWED: usize = 64;
/// How long idle keys stay watched at most (give or take `IDLE_CHECK_EVERY`).
const IDLE_KEYS_KEPT: Duration = Duration::from_secs(10);
/// How often the listener looks for idle keys to forget.
const IDLE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The listener thread for the master at `addr`: connect, serve until the connection fails,
/// reconnect with backoff; ends at shutdown, or when `addr` is no longer a master (its
/// channels go to the new masters' listeners).
pub(crate) fn listen(shared: &Arc<Shared>, addr: &str, control: &str, inbox: &Receiver<Order>) {
    let mut backoff = BACKOFF_FIRST;
    let mut connected_before = false;
    while !shared.is_shutdown() {
        let mut conn = match shared.store.connect_listener_at(addr) {
            Ok(conn) => conn,
            Err(_) if !is_master(shared, addr, true) => return retire(shared, addr),
            Err(err) => {
                log::warn!(
                    "pub/sub listener cannot connect to {addr}: {err}; retrying in {backoff:?}"
                );
                shared.sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        if connected_before {
            shared.store.counters.reconnect();
        }
        connected_before = true;
        if conn.is_resp2() {
            log::debug!("pub/sub listener for {addr} speaks RESP2");
        }
        backoff = BACKOFF_FIRST;
        let mut listener = Listener::new(shared, addr, control);
        let served = listener.serve(&mut conn, inbox);
        // The server dropped every subscription of the connection with it.
        listener.forget_subscriptions();
        listener.forget_tracking();
        if after_connection(shared, addr, served).is_break() {
            return;
        }
    }
}

/// Says how a connection ended, lets its waiters look now where they must, and tells `listen`
/// whether to connect again (`Continue`) or to stop (`Break`: shutdown, or `addr` is no
/// longer a master).
fn after_connection(
    shared: &Arc<Shared>,
    addr: &str,
    served: RedisResult<Served>,
) -> ControlFlow<()> {
    let dropped = match served {
        Ok(Served::Shutdown) => return ControlFlow::Break(()),
        Ok(Served::Retired) => {
            retire(shared, addr);
            return ControlFlow::Break(());
        }
        Ok(Served::Silent) => {
            log::warn!("pub/sub connection to {addr} stopped answering; reconnecting");
            false
        }
        Err(err) => {
            log::warn!("pub/sub connection to {addr} lost: {err}; reconnecting");
            err.is_connection_dropped()
        }
    };
    // Its waiters sleep until an unlock message or their holder's TTL, which may be
    // minutes away. On a single server whose connection dropped (or was refused) they look
    // now, so that Redis being down reaches them as an error after the outage grace (one
    // connect timeout), not after the lease. Not after a frozen server went silent: their
    // attempts would only time out (a timeout is reported at once, not ridden out), and a
    // server that comes back lets them acquire as before. With Sentinel or a cluster a lost
    // master is most likely a failover under way, which takes longer than that grace: they
    // go on waiting and look when this listener (or the new master's) subscribes again.
    if dropped && !shared.store.topology().capabilities().masters_move {
        shared.wake_waiters_of(addr);
    }
    // Its master may have failed over: the waiters' channels may be elsewhere now.
    if !is_master(shared, addr, true) {
        shared.resync();
        return ControlFlow::Break(());
    }
    ControlFlow::Continue(())
}

/// `addr` is no longer a master: the listener stops, and its channels go to the new masters'
/// listeners.
fn retire(shared: &Arc<Shared>, addr: &str) {
    log::info!("pub/sub listener for {addr}: no longer a master; stopping");
    shared.resync();
}

/// Whether `addr` is a master in the current map (asking the deployment again first when
/// `refresh`).
fn is_master(shared: &Shared, addr: &str, refresh: bool) -> bool {
    let topology = shared.store.topology();
    if refresh && topology.capabilities().masters_move {
        topology.refresh(topology.map().generation);
    }
    topology
        .map()
        .masters()
        .iter()
        .any(|pool| pool.addr() == addr)
}

/// [`is_master`], after finding the masters again when the sentinels name, settled, another
/// master than `addr`. The sentinels are asked, not the master (which may be the one that
/// stopped answering); a discovery starts only once they agree on a new master that answers,
/// so it never holds the map's discovery lock, which the watchdog's renewals wait for, while
/// a frozen master is asked. A cluster needs none of it: a node that lost its slots says so to
/// its sharded subscribers, and plain pub/sub reaches every node.
fn is_master_now(shared: &Shared, addr: &str) -> bool {
    let topology = shared.store.topology();
    if topology.sentinels_name_another_master(addr) {
        topology.refresh_unless_under_way(topology.map().generation);
    }
    is_master(shared, addr, false)
}

enum Served {
    Shutdown,
    /// The server is no longer a master.
    Retired,
    /// The connection stayed open but the server stopped answering (frozen, or a network
    /// that drops packets): reconnect, without waking the waiters (see `listen`).
    Silent,
}

/// One connection's worth of listening.
struct Listener<'a> {
    shared: &'a Arc<Shared>,
    addr: &'a str,
    control: &'a str,
    /// The channels this listener serves (subscribed, or asked to be).
    mine: HashSet<String>,
    /// Subscriptions sent and not confirmed yet: when they were sent, and how many times
    /// they went unconfirmed before.
    pending: HashMap<String, (Instant, u32)>,
    /// Unsubscribes sent whose confirmations have not come back yet, by channel: how many,
    /// and when the last was sent. Until then the server may still count this connection
    /// among the channel's subscribers.
    unsubscribing: HashMap<String, (u32, Instant)>,
    /// The channels this listener counts in `Shared::subscribed`: its own share, which only
    /// it adds or removes (another master's listener may count the same channel).
    counted: HashSet<String>,
    /// Client tracking of this master's waited keys, reported on this connection.
    tracker: Tracker,
    /// When idle keys were last looked at (see `forget_idle_keys`).
    idle_checked: Instant,
}

/// How long the connection has been quiet, and whether its liveness was checked since.
struct Quiet {
    since: Instant,
    checked: bool,
}

impl Quiet {
    fn from_now() -> Self {
        Quiet {
            since: Instant::now(),
            checked: false,
        }
    }
}

impl<'a> Listener<'a> {
    fn new(shared: &'a Arc<Shared>, addr: &'a str, control: &'a str) -> Self {
        Listener {
            shared,
            addr,
            control,
            mine: HashSet::new(),
            pending: HashMap::new(),
            unsubscribing: HashMap::new(),
            counted: HashSet::new(),
            tracker: Tracker::unavailable(shared.response_timeout),
            idle_checked: Instant::now(),
        }
    }

    fn sharded(&self) -> bool {
        self.shared.store.topology().capabilities().sharded_pubsub
    }

    /// Serves one connection until shutdown or retirement (`Ok`) or a connection error.
    fn serve(
        &mut self,
        conn: &mut PubSubConnection,
        inbox: &Receiver<Order>,
    ) -> RedisResult<Served> {
        self.start_tracking(conn)?;
        conn.raw().set_read_timeout(Some(TICK))?;
        self.send(conn, "SUBSCRIBE", self.control)?;
        self.subscribe_waited(conn, inbox)?;
        self.track(self.shared.tracked.keys(|key| self.is_key_mine(key)));
        let mut quiet = Quiet::from_now();
        let mut seen_generation = self.shared.store.topology().map().generation;
        loop {
            if self.shared.is_shutdown() {
                return Ok(Served::Shutdown);
            }
            if self.retired_by_new_map(&mut seen_generation) {
                return Ok(Served::Retired);
            }
            while let Ok(order) = inbox.try_recv() {
                self.handle(conn, order)?;
            }
            self.retry_unconfirmed(conn)?;
            self.forget_idle_keys();
            if let Some(served) = self.read(conn, &mut quiet)? {
                return Ok(served);
            }
        }
    }

    /// Subscribes to the channels of this master's waiters, as a new connection starts.
    fn subscribe_waited(
        &mut self,
        conn: &mut PubSubConnection,
        inbox: &Receiver<Order>,
    ) -> RedisResult<()> {
        // Start from the registry, the truth about who waits; queued orders are covered by it.
        while inbox.try_recv().is_ok() {}
        for (channel, waiters) in self.shared.waited_channels() {
            if self.is_mine(&channel) {
                self.subscribe(conn, &channel)?;
                // Releases announced while we were disconnected were missed: all look again.
                waiters.release_all();
            }
        }
        Ok(())
    }

    /// Whether a map newer than `seen_generation` made another server the master.
    fn retired_by_new_map(&self, seen_generation: &mut u64) -> bool {
        // A new map (a failover the sentinels announced, a resharding) may have made
        // another server the master: hand the channels over now, not after 5 s of silence
        // (traffic, wake-ups included, would put that check off for as long as it lasts).
        let generation = self.shared.store.topology().map().generation;
        if generation == *seen_generation {
            return false;
        }
        *seen_generation = generation;
        !is_master(self.shared, self.addr, false)
    }

    /// Reads for one tick; `Some` when the connection's serving ends (retired, or silent).
    fn read(
        &mut self,
        conn: &mut PubSubConnection,
        quiet: &mut Quiet,
    ) -> RedisResult<Option<Served>> {
        match conn.recv() {
            Ok(heard) => {
                *quiet = Quiet::from_now();
                match heard {
                    Heard::Missed => self.missed(conn)?,
                    heard => self.received(heard),
                }
                Ok(None)
            }
            // Interrupted: the process was stopped and continued (see `pool::connect_by`).
            // Nothing is wrong with the connection, and what the read got so far stays in
            // redis-rs' parser, as after a timeout: read on.
            Err(err) if err.is_timeout() || crate::error::is_interrupted(&err) => {
                if !err.is_timeout() {
                    log::debug!(
                        "pub/sub listener for {}: the read was interrupted; reading on",
                        self.addr
                    );
                }
                self.check_quiet(conn, quiet)
            }
            Err(err) => Err(err),
        }
    }

    /// After `CHECK_AFTER` without traffic: checks that the server is still a master and that
    /// the connection still delivers; `Some` when it is not a master any more, or gave no sign
    /// of life within a response timeout.
    fn check_quiet(
        &mut self,
        conn: &mut PubSubConnection,
        quiet: &mut Quiet,
    ) -> RedisResult<Option<Served>> {
        let idle = quiet.since.elapsed();
        if idle >= CHECK_AFTER && !quiet.checked {
            // Asked, not read from the map: a manager whose only business here is waiting
            // sends nothing else that would learn of a master the sentinels switched to while
            // this one stayed up (a failover they decided again under load; this server is
            // demoted, and its clients cut, only later). Its waiters would sleep on here.
            if !is_master_now(self.shared, self.addr) {
                return Ok(Some(Served::Retired));
            }
            // The confirmation is a push, which a live connection always delivers.
            self.send(conn, "SUBSCRIBE", self.control)?;
            quiet.checked = true;
            if !self.tracker.check() {
                self.track(self.shared.tracked.keys(|key| self.is_key_mine(key)));
            }
        } else if quiet.checked && idle >= CHECK_AFTER + self.shared.response_timeout {
            return Ok(Some(Served::Silent));
        }
        Ok(None)
    }

    /// Whether `channel` belongs to this listener's master now.
    fn is_mine(&self, channel: &str) -> bool {
        self.shared.master_of(channel).as_deref() == Some(self.addr)
    }

    fn handle(&mut self, conn: &mut PubSubConnection, order: Order) -> RedisResult<()> {
        match order {
            Order::Subscribe(channel) => self.subscribe_ordered(conn, channel),
            Order::Unsubscribe(channel) => self.unsubscribe(conn, channel),
            Order::Resync => self.resync(conn),
            Order::Track(key) => {
                self.track(vec![key]);
                Ok(())
            }
        }
    }

    /// A waiter asked for `channel`.
    fn subscribe_ordered(
        &mut self,
        conn: &mut PubSubConnection,
        channel: String,
    ) -> RedisResult<()> {
        if self.mine.contains(&channel) {
            // Subscribed already (its waiters left and new ones came before the
            // unsubscribe went out): the new waiters are covered once it is confirmed.
            if !self.pending.contains_key(&channel) {
                if let Some(waiters) = self.shared.waiters(&channel) {
                    waiters.mark_subscribed();
                }
            }
            return Ok(());
        }
        if self.is_mine(&channel) {
            self.subscribe(conn, &channel)?;
        } else if self.shared.waiters(&channel).is_some() {
            // Routed here by an older map: to the listener of its master now.
            self.shared
                .send(&channel, Order::Subscribe(channel.clone()));
        }
        Ok(())
    }

    /// The last waiter of `channel` left.
    fn unsubscribe(&mut self, conn: &mut PubSubConnection, channel: String) -> RedisResult<()> {
        // A new waiter may have come back since; its own order follows.
        if self.shared.waiters(&channel).is_none() && self.mine.remove(&channel) {
            self.pending.remove(&channel);
            // Still counted as subscribed until the server confirms: a release
            // published before the server drops the subscription is heard by it.
            let now = Instant::now();
            self.unsubscribing
                .entry(channel.clone())
                .and_modify(|(owed, sent)| (*owed, *sent) = (*owed + 1, now))
                .or_insert((1, now));
            let command = self.unsubscribe_command();
            self.send(conn, command, &channel)?;
        }
        Ok(())
    }

    /// The masters changed: drops the channels that are no longer this master's and sends
    /// them to their new listeners.
    fn resync(&mut self, conn: &mut PubSubConnection) -> RedisResult<()> {
        let moved: Vec<String> = self
            .mine
            .iter()
            .filter(|channel| !self.is_mine(channel))
            .cloned()
            .collect();
        for channel in moved {
            self.mine.remove(&channel);
            self.pending.remove(&channel);
            // Releases of the channel go to its new master now, where this
            // connection is nobody; the confirmation is not waited for.
            self.unsubscribing.remove(&channel);
            self.uncount(&channel);
            let command = self.unsubscribe_command();
            self.send(conn, command, &channel)?;
            if let Some(waiters) = self.shared.waiters(&channel) {
                waiters.release_all();
                self.shared
                    .send(&channel, Order::Subscribe(channel.clone()));
            }
        }
        Ok(())
    }

    fn subscribe(&mut self, conn: &mut PubSubConnection, channel: &str) -> RedisResult<()> {
        let command = if self.sharded() {
            "SSUBSCRIBE"
        } else {
            "SUBSCRIBE"
        };
        let failures = self
            .pending
            .get(channel)
            .map_or(0, |(_, failures)| *failures);
        // A first try counts from the send, not the confirmation: the server may run the
        // SUBSCRIBE, and count this connection among those who hear a release, before its
        // confirmation is read here. A retry (the last try went unconfirmed: refused, or sent
        // to a node that does not serve the channel) counts only once confirmed.
        if failures == 0 {
            self.count(channel);
        }
        self.send(conn, command, channel)?;
        self.mine.insert(channel.to_owned());
        self.pending
            .insert(channel.to_owned(), (Instant::now(), failures));
        Ok(())
    }

    fn unsubscribe_command(&self) -> &'static str {
        if self.sharded() {
            "SUNSUBSCRIBE"
        } else {
            "UNSUBSCRIBE"
        }
    }

    fn send(&self, conn: &mut PubSubConnection, command: &str, channel: &str) -> RedisResult<()> {
        self.shared.store.counters.sent(1);
        conn.send(command, channel)
    }

    /// RESP2 only: a value the server sent was skipped (see `crate::topology::pubsub_connection`). A
    /// release may have gone unheard, so every waiter of this listener looks again; and a
    /// confirmation may have been lost, so the unconfirmed subscriptions are sent again
    /// (a second confirmation of one is ignored).
    fn missed(&mut self, conn: &mut PubSubConnection) -> RedisResult<()> {
        log::debug!(
            "pub/sub listener for {}: a value may have been missed; waiters look again",
            self.addr
        );
        self.shared.wake_waiters_of(self.addr);
        let command = if self.sharded() {
            "SSUBSCRIBE"
        } else {
            "SUBSCRIBE"
        };
        let unconfirmed: Vec<String> = self.pending.keys().cloned().collect();
        for channel in unconfirmed {
            self.send(conn, command, &channel)?;
        }
        Ok(())
    }

    /// A subscription the server has not confirmed within a response timeout was refused or
    /// went to a node that no longer serves the channel's slot (its MOVED error reply may
    /// have been skipped, see the module's notes): ask where the masters are, and subscribe
    /// again where the channel belongs now.
    fn retry_unconfirmed(&mut self, conn: &mut PubSubConnection) -> RedisResult<()> {
        self.give_up_unanswered_unsubscribes();
        let late = self.late_subscriptions();
        if late.is_empty() {
            return Ok(());
        }
        let topology = self.shared.store.topology();
        if topology.capabilities().masters_move {
            topology.refresh(topology.map().generation);
        }
        for (channel, failures) in late {
            self.retry_subscription(conn, channel, failures)?;
        }
        Ok(())
    }

    /// An unsubscribe answered by an error (MOVED on a cluster, after a resharding) gets no
    /// confirmation: after a response timeout the connection is taken to be off the channel.
    fn give_up_unanswered_unsubscribes(&mut self) {
        let timeout = self.shared.response_timeout;
        let unanswered: Vec<String> = self
            .unsubscribing
            .iter()
            .filter(|(_, (_, sent))| sent.elapsed() >= timeout)
            .map(|(channel, _)| channel.clone())
            .collect();
        for channel in unanswered {
            self.unsubscribing.remove(&channel);
            self.uncount_unless_mine(&channel);
        }
    }

    /// The subscriptions whose confirmation is late, with how many times each went
    /// unconfirmed before.
    fn late_subscriptions(&self) -> Vec<(String, u32)> {
        let timeout = self.shared.response_timeout;
        // Refused again and again (no channel rights): ask less and less often.
        self.pending
            .iter()
            .filter(|(_, (sent, failures))| {
                sent.elapsed() >= timeout * 2u32.pow((*failures).min(5))
            })
            .map(|(channel, (_, failures))| (channel.clone(), *failures))
            .collect()
    }

    /// Subscribes again to `channel`, whose subscription went unconfirmed, where it belongs
    /// now (if anyone still waits on it).
    fn retry_subscription(
        &mut self,
        conn: &mut PubSubConnection,
        channel: String,
        failures: u32,
    ) -> RedisResult<()> {
        let timeout = self.shared.response_timeout;
        if !self.is_mine(&channel) {
            // The slot moved (a resharding, a failover): subscribed again where it is now.
            log::debug!(
                "the subscription to {channel:?} at {} was not confirmed; its slot is \
                 served elsewhere now, subscribing there",
                self.addr
            );
        } else if failures == 0 {
            log::error!(
                "Redis refused the subscription to {channel:?} at {}, or did not confirm it \
                 within {timeout:?}: its waiters wait by the holder's TTL until a \
                 subscription is confirmed (asking again)",
                self.addr
            );
        }
        self.mine.remove(&channel);
        self.uncount_unless_mine(&channel);
        if self.shared.waiters(&channel).is_none() {
            self.pending.remove(&channel);
            return Ok(());
        }
        if self.is_mine(&channel) {
            self.pending
                .insert(channel.clone(), (Instant::now(), failures + 1));
            self.subscribe(conn, &channel)?;
        } else {
            self.pending.remove(&channel);
            self.shared
                .send(&channel, Order::Subscribe(channel.clone()));
        }
        Ok(())
    }

    /// Counts `channel` as subscribed on this listener's connection (once).
    fn count(&mut self, channel: &str) {
        if self.counted.insert(channel.to_owned()) {
            self.shared.count_listener(channel);
        }
    }

    /// Stops counting `channel` as subscribed on this listener's connection.
    fn uncount(&mut self, channel: &str) {
        if self.counted.remove(channel) {
            self.shared.uncount_listener(channel);
        }
    }

    /// Stops counting `channel` unless it was subscribed again meanwhile or an unsubscribe
    /// of it still awaits its confirmation.
    fn uncount_unless_mine(&mut self, channel: &str) {
        if !self.mine.contains(channel) && !self.unsubscribing.contains_key(channel) {
            self.uncount(channel);
        }
    }

    /// The connection is gone, and with it every subscription it had.
    fn forget_subscriptions(&mut self) {
        self.mine.clear();
        self.pending.clear();
        self.unsubscribing.clear();
        for channel in std::mem::take(&mut self.counted) {
            self.shared.uncount_listener(&channel);
        }
    }

    /// What the server sent: a message, a confirmation, a server-side unsubscribe, an error.
    fn received(&mut self, heard: Heard) {
        let (kind, data) = match heard {
            Heard::Push(PushKind::Invalidate, data) => return self.invalidated(data.first()),
            Heard::Push(kind, data) => (kind, data),
            Heard::Error(err) => return self.error_reply(&err),
            _ => return, // a reply to nothing we wait for (see the module's notes)
        };
        let channel = match data.first() {
            Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            _ => return,
        };
        match kind {
            PushKind::Message if channel == INVALIDATE_CHANNEL => self.invalidated(data.get(1)),
            PushKind::Message | PushKind::SMessage if channel != self.control => {
                let payload = match data.get(1) {
                    Some(Value::BulkString(bytes)) => bytes.as_slice(),
                    _ => b"",
                };
                self.message(&channel, payload);
            }
            PushKind::Subscribe | PushKind::SSubscribe
                if self.pending.remove(&channel).is_some() =>
            {
                self.count(&channel);
                if let Some(waiters) = self.shared.waiters(&channel) {
                    waiters.mark_subscribed();
                }
            }
            PushKind::Unsubscribe | PushKind::SUnsubscribe
                if self.unsubscribing.contains_key(&channel) =>
            {
                self.unsubscribe_confirmed(&channel);
            }
            PushKind::SUnsubscribe if self.mine.contains(&channel) => {
                self.unsubscribed_by_server(&channel);
            }
            _ => {}
        }
    }

    fn error_reply(&self, err: &ServerError) {
        // Which subscription it answers is not said: the late-confirmation check sorts
        // it out within a response timeout, and logs a subscription really lost. A
        // MOVED is a slot that moved (a resharding, a failover): routine.
        if err.code() == "MOVED" {
            log::debug!("pub/sub listener for {}: {err:?}", self.addr);
        } else {
            log::warn!("pub/sub listener for {}: {err:?}", self.addr);
        }
    }

    /// A message on a waited channel: a grant to one waiter, or a release that wakes some.
    fn message(&self, channel: &str, payload: &[u8]) {
        self.shared.count_message(channel);
        let Some(waiters) = self.shared.waiters(channel) else {
            return;
        };
        if let Some(ours) = waiters.granted(channel, payload) {
            if ours {
                self.shared.store.counters.wakeup();
            }
            return;
        }
        let wake = Wake::of(channel, payload);
        if wake != Wake::Nobody {
            // Counted first: a woken waiter's caller may look at the stats.
            self.shared.store.counters.wakeup();
        }
        wake.apply(&waiters);
    }

    /// The confirmation of an unsubscribe of ours (they come back in order).
    fn unsubscribe_confirmed(&mut self, channel: &str) {
        if let Some((owed, _)) = self.unsubscribing.get_mut(channel) {
            *owed -= 1;
            if *owed == 0 {
                self.unsubscribing.remove(channel);
                self.uncount_unless_mine(channel);
            }
        }
    }

    /// The server ended a subscription: the slot moved (a failover demoted this master, or a
    /// resharding). Subscribe where the channel is now, and let its waiters look again, since
    /// releases may have been missed meanwhile.
    fn unsubscribed_by_server(&mut self, channel: &str) {
        self.mine.remove(channel);
        self.pending.remove(channel);
        self.uncount(channel);
        let topology = self.shared.store.topology();
        topology.refresh(topology.map().generation);
        if let Some(waiters) = self.shared.waiters(channel) {
            waiters.release_all();
            self.shared
                .send(channel, Order::Subscribe(channel.to_owned()));
        }
    }
}

/// Client tracking (see `crate::pubsub::tracking`).
impl Listener<'_> {
    /// Prepares client tracking on the listener's new connection, before it subscribes to
    /// anything.
    fn start_tracking(&mut self, conn: &mut PubSubConnection) -> RedisResult<()> {
        let (tracker, refused) = Tracker::start(conn, self.shared.response_timeout)?;
        match refused {
            Some(err) => self.shared.tracking_refused(self.addr, &err),
            None => self.shared.tracking_accepted(),
        }
        self.tracker = tracker;
        Ok(())
    }

    /// Whether the lock key `key` belongs to this listener's master now.
    fn is_key_mine(&self, key: &str) -> bool {
        self.shared.master_of_key(key).as_deref() == Some(self.addr)
    }

    /// Has the server watch `keys` (those still waited on), sends those of other masters to
    /// their listeners, and tells their waiters how it went.
    fn track(&mut self, keys: Vec<String>) {
        let (mine, others): (Vec<String>, Vec<String>) = keys
            .into_iter()
            .filter(|key| self.shared.tracked.contains(key))
            .partition(|key| self.is_key_mine(key));
        for key in others {
            // Routed here by an older map: to the listener of its master now.
            self.shared.track_by(&key, None);
        }
        if mine.is_empty() {
            return;
        }
        let outcome = match self.shared.store.topology().node(self.addr) {
            Ok(pool) => {
                let (shared, addr) = (self.shared, self.addr);
                let wanted = || {
                    shared
                        .tracked
                        .keys(|key| shared.master_of_key(key).as_deref() == Some(addr))
                };
                self.tracker.cover(&pool, &mine, &wanted)
            }
            Err(err) => Outcome::Failed(redis::RedisError::from(std::io::Error::other(err))),
        };
        self.tracked(outcome, &mine);
    }

    /// Tells the waiters of `keys` (and of every key of this master, when the outcome
    /// concerns them all) what asking for their tracking came to.
    fn tracked(&self, outcome: Outcome, keys: &[String]) {
        let tracked = &self.shared.tracked;
        let all = || tracked.keys(|key| self.is_key_mine(key));
        match outcome {
            Outcome::Live => tracked.set_state(keys, TrackState::Live, false),
            Outcome::Rebuilt(missed) => tracked.set_state(&all(), TrackState::Live, missed),
            Outcome::Refused(err) => {
                self.shared.tracking_refused(self.addr, &err);
                tracked.set_state(&all(), TrackState::Off, false);
            }
            Outcome::Failed(err) => {
                log::debug!(
                    "client tracking at {} failed ({err}); its waiters look by their back-off",
                    self.addr
                );
                tracked.set_state(&all(), TrackState::Off, false);
            }
        }
    }

    /// Keys whose last waiter left stay registered, and known as watched (their next waiter
    /// asks nothing), until idle keys outnumber the waited ones by `IDLE_KEYS_ALLOWED`, or
    /// the prefixes are `IDLE_KEYS_KEPT` old; then the idle keys are forgotten and the
    /// prefixes registered again without them (every change of a watched key costs an
    /// invalidation, wanted or not). Looked at once a second.
    fn forget_idle_keys(&mut self) {
        if self.idle_checked.elapsed() < IDLE_CHECK_EVERY {
            return;
        }
        self.idle_checked = Instant::now();
        let (shared, addr) = (self.shared, self.addr);
        let mine = |key: &str| shared.master_of_key(key).as_deref() == Some(addr);
        let (waited, idle) = shared.tracked.counts();
        let due =
            idle > waited + IDLE_KEYS_ALLOWED || (idle > 0 && self.tracker.age() >= IDLE_KEYS_KEPT);
        if !due || shared.tracked.drop_idle(mine) == 0 {
            return;
        }
        let Ok(pool) = shared.store.topology().node(addr) else {
            return;
        };
        let wanted = shared.tracked.keys(mine);
        let outcome = self.tracker.rebuild(&pool, &wanted);
        self.tracked(outcome, &wanted);
    }

    /// The connection is gone, and its tracking with it: the keys of this master count as
    /// unconfirmed until the next connection registers them again.
    fn forget_tracking(&self) {
        let mine = self.shared.tracked.keys(|key| self.is_key_mine(key));
        self.shared
            .tracked
            .set_state(&mine, TrackState::Pending, false);
    }

    /// The server reported changed keys (`None` or nil: every key, after a flush): their
    /// waiters look again. Keys nobody here waits on (others under a watched prefix) wake
    /// nobody.
    fn invalidated(&self, keys: Option<&Value>) {
        match keys {
            Some(Value::Array(keys)) => {
                for key in keys {
                    if let Value::BulkString(key) = key {
                        if self.shared.tracked.changed(key) {
                            self.shared.store.counters.wakeup();
                        }
                    }
                }
            }
            _ => {
                for key in self.shared.tracked.keys(|key| self.is_key_mine(key)) {
                    self.shared.tracked.changed(key.as_bytes());
                }
            }
        }
    }
}
