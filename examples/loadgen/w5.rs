//! W5: many threads blocked, each on its own lock, then all released at once.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use redis_rlock::{LockGuard, LockManager};
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation, LIVE_BYTES};
use crate::table::{micros, row, Row};

/// How long W5 counts the waiters' looks while nothing is released: several back-off caps.
const W5_LOOK_WINDOW: Duration = Duration::from_secs(12);

/// W5: many threads each blocked on its own lock, then all released at once.
pub(crate) fn w5_waiter_scale(url: &str, scale: &Scale) -> Vec<Row> {
    let mut conn = support::nodelay_conn(url);
    let holder = LockManager::new(url).expect("holder manager");
    // Thousands of threads start at once on a small pool: their first attempts queue for a
    // connection longer than the default response timeout on a 2-core machine.
    let waiters = LockManager::builder(url)
        .response_timeout(Duration::from_secs(60))
        .build()
        .expect("waiter manager");
    let n = scale.w5_waiters;
    let names: Vec<String> = (0..n).map(|i| format!("loadgen:w5:{i}")).collect();
    let guards: Vec<LockGuard> = names
        .iter()
        .map(|name| holder.lock(name).expect("holder lock"))
        .collect();

    let bytes_before = LIVE_BYTES.load(Ordering::Relaxed);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Instant)>();
    let threads: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (manager, name, tx) = (waiters.clone(), name.clone(), tx.clone());
            thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let guard = manager.lock(&name).expect("waiter lock");
                    tx.send((i, Instant::now())).expect("report");
                    guard.unlock().expect("waiter unlock");
                })
                .expect("spawn waiter")
        })
        .collect();
    let subscribed = support::eventually(Duration::from_secs(60), || {
        waiters.waiting_channel_count() == n
            && names.iter().all(|name| {
                support::numsub(&mut conn, &format!("redisson_lock__channel:{{{name}}}")) == 1
            })
    });
    assert!(subscribed, "all {n} waiters subscribed");
    thread::sleep(Duration::from_millis(50)); // each waiter's second attempt is done
    let per_waiter = (LIVE_BYTES.load(Ordering::Relaxed) - bytes_before) as f64 / n as f64;
    // What the waiters send while nothing is released: only their back-off's looks.
    let (looks_before, window) = (waiters.stats().commands, Instant::now());
    thread::sleep(W5_LOOK_WINDOW);
    let looks_per_second =
        (waiters.stats().commands - looks_before) as f64 / window.elapsed().as_secs_f64();
    // Every pub/sub connection and how many channels it has; the waiting manager's is the one
    // with the lock channels (plus its own control channel).
    let client_list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut conn)
        .expect("CLIENT LIST");
    let subscriptions: Vec<usize> = client_list
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("sub="))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    let pubsub_connections = subscriptions.iter().filter(|&&sub| sub > 1).count();
    let carries_all = subscriptions.contains(&(n + 1));

    let mut released_at = vec![Instant::now(); n];
    for (i, guard) in guards.into_iter().enumerate() {
        guard.unlock().expect("holder unlock");
        released_at[i] = Instant::now();
    }
    let mut samples = Vec::with_capacity(n);
    let mut served = 0;
    while let Ok((i, at)) = rx.recv_timeout(Duration::from_secs(30)) {
        samples.push(at.saturating_duration_since(released_at[i]));
        served += 1;
        if served == n {
            break;
        }
    }
    for thread in threads {
        thread.join().expect("waiter thread");
    }
    if served != n || pubsub_connections != 1 || !carries_all {
        violation(format!(
            "W5: {served} of {n} waiters acquired; {pubsub_connections} pub/sub \
             connections carry lock channels: {subscriptions:?}"
        ));
    }
    let handoff = percentiles(&mut samples);
    let label = "W5 waiter scale";
    vec![
        row(
            label,
            format!("{n} blocked threads: subscriber connections"),
            "1",
        )
        .target("1"),
        row(label, "waiters that acquired", format!("{served} / {n}")).target("all"),
        row(
            label,
            "handoff p50 / p99",
            format!("{} / {}", micros(handoff.p50), micros(handoff.p99)),
        ),
        row(
            label,
            "heap bytes per waiting thread",
            format!("{per_waiter:.0}"),
        ),
        row(
            label,
            "commands a second while all wait (back-off looks)",
            format!("{looks_per_second:.0}"),
        )
        .target("<= ~1000"),
    ]
}
