//! W3: the handoff from a release to a waiter already blocked, across managers and within
//! one, against the floors of `handoff_floors`.

use std::thread;
use std::time::{Duration, Instant};

use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::handoff_floors::{
    blpop_handoff, raw_own_subscription_handoff, raw_pubsub_handoff, RawAcquire, RawSender,
};
use crate::measure::percentiles;
use crate::table::{micros, row, Row};

/// W3 alternates between its handoffs this many times.
const W3_ROUNDS: usize = 10;

/// How long every W3 waiter has been asleep when the release is sent, in every handoff.
/// A wake-up costs more the longer the thread (and, on a virtual machine, its vCPU) was idle:
/// on the 2-vCPU machine of BENCHMARKS.md the raw pub/sub handoff took 91 µs after 2 ms and
/// 152 µs after 14 ms, as much again as the whole handoff. Handoffs compared with one another
/// must therefore start from the same idle time.
const W3_IDLE: Duration = Duration::from_millis(10);

/// Waits until `ready` (polled every 100 µs, up to 10 s), then sleeps [`W3_IDLE`]; `false`
/// if it never became ready. `support::eventually` polls in 10 ms steps, which would leave
/// each sample asleep for a different time.
pub(crate) fn settle_w3(mut ready: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while !ready() {
        if started.elapsed() > Duration::from_secs(10) {
            return false;
        }
        thread::sleep(Duration::from_micros(100));
    }
    thread::sleep(W3_IDLE);
    true
}

/// W3: a waiter already blocked (its subscription live) for [`W3_IDLE`]; time from the
/// holder's release being sent to the waiter's lock returning. Holder and waiter use separate
/// managers, so the wake-up crosses Redis pub/sub as it would between processes.
pub(crate) fn w3_handoff(url: &str, scale: &Scale) -> Vec<Row> {
    let holder = LockManager::new(url).expect("holder manager");
    let waiter = LockManager::new(url).expect("waiter manager");
    let mut conn = support::nodelay_conn(url);
    let name = "loadgen:w3";
    let channel = "redisson_lock__channel:{loadgen:w3}";
    let mut samples = Vec::with_capacity(scale.w3_handoffs);
    let mut raw_samples = Vec::with_capacity(scale.w3_handoffs);
    let mut presend_samples = Vec::with_capacity(scale.w3_handoffs);
    let mut blpop_samples = Vec::with_capacity(scale.w3_handoffs);
    let mut own_samples = Vec::with_capacity(scale.w3_handoffs);
    let mut own_set_samples = Vec::with_capacity(scale.w3_handoffs);
    let mut pings = Vec::with_capacity(scale.w3_handoffs * 3);
    let mut cold_pings = Vec::with_capacity(scale.w3_handoffs);
    // Ten rounds of each handoff in turn, so that the machine's drift over the run lands on
    // all of them alike rather than in their ratios.
    let per_round = scale.w3_handoffs.div_ceil(W3_ROUNDS);
    for i in 0..scale.w3_handoffs {
        if i % per_round == 0 && i > 0 {
            raw_samples.extend(raw_pubsub_handoff(url, per_round, RawSender::Waiter));
            presend_samples.extend(raw_pubsub_handoff(url, per_round, RawSender::Listener));
            blpop_samples.extend(blpop_handoff(url, per_round));
            own_samples.extend(raw_own_subscription_handoff(
                url,
                per_round,
                RawAcquire::Script,
            ));
            own_set_samples.extend(raw_own_subscription_handoff(
                url,
                per_round,
                RawAcquire::SetNx,
            ));
        }
        // The floor, measured in the same loop so that both see the same machine.
        for _ in 0..3 {
            let start = Instant::now();
            let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
            pings.push(start.elapsed());
        }
        let guard = holder.lock(name).expect("holder lock");
        let blocked = support::Waiter::spawn(&waiter, name);
        // The subscription is live; the waiter finishes its attempt after subscribing and
        // sleeps. (The probes wake nobody: the waiter sleeps on its condvar, the listener in
        // its read.)
        assert!(settle_w3(|| support::numsub(&mut conn, channel) == 1));
        // A round trip from a thread that just slept, as the woken waiter's acquire is.
        let start = Instant::now();
        let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
        cold_pings.push(start.elapsed());
        // From when the release is sent: a BLPOP waiter is answered by the server in the same
        // pass as the release, often before the releasing thread reads its own reply, so
        // only the send is a start that every handoff shares.
        let released = Instant::now();
        guard.unlock().expect("holder unlock");
        samples.push(blocked.acquired_since(released));
        assert!(support::await_subscribers(&mut conn, channel, 0));
    }
    raw_samples.extend(raw_pubsub_handoff(url, per_round, RawSender::Waiter));
    presend_samples.extend(raw_pubsub_handoff(url, per_round, RawSender::Listener));
    blpop_samples.extend(blpop_handoff(url, per_round));
    own_samples.extend(raw_own_subscription_handoff(
        url,
        per_round,
        RawAcquire::Script,
    ));
    own_set_samples.extend(raw_own_subscription_handoff(
        url,
        per_round,
        RawAcquire::SetNx,
    ));
    let handoff = percentiles(&mut samples);
    let ping = percentiles(&mut pings).p50;
    let cold_ping = percentiles(&mut cold_pings).p50;
    let raw = percentiles(&mut raw_samples);
    let blpop = percentiles(&mut blpop_samples);
    let presend = percentiles(&mut presend_samples);
    let own = percentiles(&mut own_samples);
    let own_set = percentiles(&mut own_set_samples);
    vec![
        row(
            "W3 handoff",
            "release → waiter acquired p50",
            micros(handoff.p50),
        )
        .against(
            micros(ping),
            handoff.p50.as_secs_f64() / ping.as_secs_f64(),
            "≤ 3 × PING",
        ),
        row(
            "W3 handoff",
            "same p50, against the same handoff done raw",
            micros(handoff.p50),
        )
        .against(
            micros(raw.p50),
            handoff.p50.as_secs_f64() / raw.p50.as_secs_f64(),
            "≤ 1.0",
        ),
        row(
            "W3 handoff",
            "same p50, against python-redis-lock's BLPOP handoff raw",
            micros(handoff.p50),
        )
        .against(
            micros(blpop.p50),
            handoff.p50.as_secs_f64() / blpop.p50.as_secs_f64(),
            "< 1.0",
        ),
        row(
            "W3 handoff",
            "BLPOP handoff raw p50, against the pub/sub one raw",
            micros(blpop.p50),
        )
        .against(
            micros(raw.p50),
            blpop.p50.as_secs_f64() / raw.p50.as_secs_f64(),
            "",
        ),
        row(
            "W3 handoff",
            "raw pub/sub p50 with the listener sending the acquire, against BLPOP's",
            micros(presend.p50),
        )
        .against(
            micros(blpop.p50),
            presend.p50.as_secs_f64() / blpop.p50.as_secs_f64(),
            "",
        ),
        row(
            "W3 handoff",
            "raw pub/sub p50 with the waiter reading its own subscription, against BLPOP's",
            micros(own.p50),
        )
        .against(
            micros(blpop.p50),
            own.p50.as_secs_f64() / blpop.p50.as_secs_f64(),
            "",
        ),
        row(
            "W3 handoff",
            "same, with SET NX instead of the acquire script, against BLPOP's",
            micros(own_set.p50),
        )
        .against(
            micros(blpop.p50),
            own_set.p50.as_secs_f64() / blpop.p50.as_secs_f64(),
            "",
        ),
        row(
            "W3 handoff",
            "same p50, against a PING sent after a sleep",
            micros(handoff.p50),
        )
        .against(
            micros(cold_ping),
            handoff.p50.as_secs_f64() / cold_ping.as_secs_f64(),
            "",
        ),
        row(
            "W3 handoff",
            "release → waiter acquired p99",
            micros(handoff.p99),
        ),
        row(
            "W3 handoff",
            "handoffs granted by the release (taken without a request)",
            format!("{} / {}", waiter.stats().grants_taken, scale.w3_handoffs),
        ),
    ]
}

/// W3 in one process: a holder thread and a waiting thread of one manager (the waiter blocked
/// in Redis, its subscription live, for [`W3_IDLE`]); time from the holder's `unlock()`
/// returning to the waiter's `lock()` returning (zero when the waiter was already running).
/// The floor is the same two threads handing over through a channel, sample by sample in the
/// same loop: the release should cost the waiter a thread wake-up, not a round trip.
pub(crate) fn w3_in_process(url: &str, scale: &Scale) -> Vec<Row> {
    let manager = LockManager::new(url).expect("manager");
    let mut conn = support::nodelay_conn(url);
    let name = "loadgen:w3:local";
    let channel = "redisson_lock__channel:{loadgen:w3:local}";
    let mut samples = Vec::with_capacity(scale.w3_handoffs);
    let mut floor_samples = Vec::with_capacity(scale.w3_handoffs);
    let before = manager.stats();
    for _ in 0..scale.w3_handoffs {
        let guard = manager.lock(name).expect("holder lock");
        let blocked = support::Waiter::spawn(&manager, name);
        assert!(settle_w3(|| support::numsub(&mut conn, channel) == 1));
        guard.unlock().expect("holder unlock");
        samples.push(blocked.acquired_since(Instant::now()));
        assert!(support::await_subscribers(&mut conn, channel, 0));
        floor_samples.push(channel_handoff());
    }
    let handoffs = manager.stats().local_handoffs - before.local_handoffs;
    let handoff = percentiles(&mut samples);
    let floor = percentiles(&mut floor_samples);
    let share = handoffs as f64 / scale.w3_handoffs as f64;
    vec![
        row(
            "W3 in-process",
            "unlock() returned → waiter's lock() returned p50",
            micros(handoff.p50),
        )
        .against(
            micros(floor.p50),
            handoff.p50.as_secs_f64() / floor.p50.as_secs_f64(),
            "≤ 2 × channel",
        ),
        row(
            "W3 in-process",
            "same p99, against the channel's p99",
            micros(handoff.p99),
        )
        .against(
            micros(floor.p99),
            handoff.p99.as_secs_f64() / floor.p99.as_secs_f64(),
            "",
        ),
        row(
            "W3 in-process",
            "rounds handed over in the release's script call",
            format!("{handoffs} / {}", scale.w3_handoffs),
        )
        .against("", share, "≥ 0.90"),
    ]
}

/// One handoff between two threads through a channel, the receiver blocked for [`W3_IDLE`]:
/// from the send returning to the receive returning (zero when the receiver ran first).
fn channel_handoff() -> Duration {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
    let receiver = thread::spawn(move || {
        ready_tx.send(()).unwrap();
        rx.recv().unwrap();
        Instant::now()
    });
    ready.recv().unwrap();
    thread::sleep(W3_IDLE);
    tx.send(()).unwrap();
    let sent = Instant::now();
    let received = receiver.join().expect("channel receiver");
    received.saturating_duration_since(sent)
}
