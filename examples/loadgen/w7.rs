//! W7: the fair lock's handoff, against the plain lock's.

use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation};
use crate::table::{micros, row, Row};

/// W7: the fair lock's handoff to a waiter already queued and subscribed, against the plain
/// lock's (as W3), sample by sample in the same loop. Holder and waiter use separate
/// managers. The fair waiter is told on its own channel; its attempt also leaves the queue.
pub(crate) fn w7_fair_handoff(url: &str, scale: &Scale) -> Vec<Row> {
    let holder = LockManager::new(url).expect("holder manager");
    let waiter = LockManager::new(url).expect("waiter manager");
    let mut conn = support::nodelay_conn(url);
    let (plain_name, fair_name) = ("loadgen:w7:plain", "loadgen:w7:fair");
    let plain_channel = "redisson_lock__channel:{loadgen:w7:plain}";
    let queue = "redisson_lock_queue:{loadgen:w7:fair}";
    let mut plain = Vec::with_capacity(scale.w3_handoffs);
    let mut fair = Vec::with_capacity(scale.w3_handoffs);
    for _ in 0..scale.w3_handoffs {
        let guard = holder.lock(plain_name).expect("holder lock");
        let blocked = support::Waiter::spawn(&waiter, plain_name);
        assert!(support::await_subscribers(&mut conn, plain_channel, 1));
        thread::sleep(Duration::from_millis(2));
        let released = Instant::now();
        guard.unlock().expect("holder unlock");
        plain.push(blocked.acquired_since(released));
        assert!(support::await_subscribers(&mut conn, plain_channel, 0));

        let guard = holder
            .get_fair_lock(fair_name)
            .lock()
            .expect("holder fair lock");
        let lock = waiter.get_fair_lock(fair_name);
        let (tx, rx) = std::sync::mpsc::channel();
        let blocked = thread::spawn(move || {
            let guard = lock.lock().expect("waiter fair lock");
            tx.send(Instant::now()).expect("report");
            guard.unlock().expect("waiter fair unlock");
        });
        assert!(support::eventually(Duration::from_secs(10), || {
            conn.llen::<_, usize>(queue).expect("LLEN") == 1
        }));
        let head: String = conn.lindex(queue, 0).expect("LINDEX");
        let channel = format!("redisson_lock__channel:{{{fair_name}}}:{head}");
        assert!(support::await_subscribers(&mut conn, &channel, 1));
        thread::sleep(Duration::from_millis(2));
        let released = Instant::now();
        guard.unlock().expect("holder fair unlock");
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(at) => fair.push(at.saturating_duration_since(released)),
            Err(_) => violation("a queued fair-lock waiter was never served".into()),
        }
        blocked.join().expect("fair waiter");
        assert!(support::await_subscribers(&mut conn, &channel, 0));
    }
    if fair.is_empty() {
        return Vec::new();
    }
    let plain = percentiles(&mut plain);
    let fair = percentiles(&mut fair);
    vec![
        row(
            "W7 fair lock",
            "release → queued waiter acquired p50, against the plain lock's",
            micros(fair.p50),
        )
        .against(
            micros(plain.p50),
            fair.p50.as_secs_f64() / plain.p50.as_secs_f64(),
            "",
        ),
        row(
            "W7 fair lock",
            "same p99, against the plain lock's",
            micros(fair.p99),
        )
        .against(
            micros(plain.p99),
            fair.p99.as_secs_f64() / plain.p99.as_secs_f64(),
            "",
        ),
    ]
}
