//! W4: many locks held at once, renewed by one watchdog thread.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Instant;

use redis_rlock::{LockGuard, LockManager};

use crate::args::Scale;
use crate::measure::{thread_cpu_time, violation, LIVE_BYTES};
use crate::table::{row, Row};

/// W4: many locks held at once, renewed by one watchdog thread; memory per held lock.
pub(crate) fn w4_watchdog_scale(url: &str, scale: &Scale) -> Vec<Row> {
    let manager = LockManager::builder(url)
        .watchdog_timeout(scale.w4_timeout)
        .build()
        .expect("manager");
    let names: Vec<String> = (0..scale.w4_locks)
        .map(|i| format!("loadgen:w4:{i}"))
        .collect();
    let bytes_before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut guards: Vec<LockGuard> = Vec::with_capacity(names.len());
    let vec_bytes = LIVE_BYTES.load(Ordering::Relaxed) - bytes_before;
    for name in &names {
        guards.push(manager.lock(name).expect("lock"));
    }
    let per_lock =
        (LIVE_BYTES.load(Ordering::Relaxed) - bytes_before - vec_bytes) as f64 / names.len() as f64;

    let stats_before = manager.stats();
    let cpu_before = thread_cpu_time("redis-rlock-watchdog").unwrap_or_default();
    let start = Instant::now();
    thread::sleep(scale.w4_hold);
    let cpu = thread_cpu_time("redis-rlock-watchdog").unwrap_or_default() - cpu_before;
    let held_for = start.elapsed();
    let stats = manager.stats();
    let sweeps = stats.renewal_sweeps - stats_before.renewal_sweeps;
    let round_trips = stats.round_trips - stats_before.round_trips;
    let lost = guards.iter().filter(|g| g.is_lost()).count() as u64
        + (stats.holds_lost - stats_before.holds_lost);
    let mut not_held = 0;
    for guard in guards {
        if guard.unlock().is_err() {
            not_held += 1;
        }
    }
    if lost > 0 || not_held > 0 {
        violation(format!(
            "W4: {lost} holds lost, {not_held} unlocks found the lock gone"
        ));
    }
    let label = "W4 watchdog scale";
    let cpu_share = cpu.as_secs_f64() / held_for.as_secs_f64() * 100.0;
    vec![
        row(
            label,
            format!(
                "{} locks, {:?} timeout, held {:?}: locks lost",
                names.len(),
                scale.w4_timeout,
                scale.w4_hold
            ),
            format!("{}", lost + not_held),
        )
        .target("0"),
        row(
            label,
            "round trips per renewal sweep",
            format!(
                "{:.2} ({round_trips} in {sweeps} sweeps)",
                round_trips as f64 / sweeps.max(1) as f64
            ),
        )
        .target("≤ 100"),
        row(
            label,
            "watchdog CPU, % of one core",
            format!("{cpu_share:.2} %"),
        )
        .target("≤ 2 %"),
        row(label, "heap bytes per held lock", format!("{per_lock:.0}")).target("≤ 256"),
    ]
}
