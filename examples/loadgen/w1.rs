//! W1: uncontended lock+unlock cycles.

use std::time::Instant;

use redis_rlock::LockManager;

use crate::args::Scale;
use crate::measure::percentiles;
use crate::raw_lock::RawLock;
use crate::redisson_raw::RedissonCycle;
use crate::table::{micros, row, Row};

/// W1: lock+unlock cycles on one key from one thread, against the same two scripts sent raw
/// with EVALSHA on one dedicated connection, and against Redisson's two scripts sent so
/// (issue 32's peer floor). Rounds alternate so drift hits all alike.
pub(crate) fn w1_uncontended(url: &str, scale: &Scale) -> Vec<Row> {
    let manager = LockManager::new(url).expect("manager");
    let mut raw = RawLock::connect(url, "loadgen:w1:raw");
    let mut lock_samples = Vec::with_capacity(scale.w1_cycles);
    let mut raw_samples = Vec::with_capacity(scale.w1_cycles);
    let mut redisson = RedissonCycle::connect(url, "loadgen:w1:redisson");
    let mut redisson_samples = Vec::with_capacity(scale.w1_cycles);
    let rounds = 10;
    for _ in 0..rounds {
        for _ in 0..scale.w1_cycles / rounds {
            let start = Instant::now();
            raw.acquire();
            raw.release();
            raw_samples.push(start.elapsed());
        }
        for _ in 0..scale.w1_cycles / rounds {
            let start = Instant::now();
            redisson.cycle();
            redisson_samples.push(start.elapsed());
        }
        for _ in 0..scale.w1_cycles / rounds {
            let start = Instant::now();
            let guard = manager.lock("loadgen:w1").expect("lock");
            guard.unlock().expect("unlock");
            lock_samples.push(start.elapsed());
        }
    }
    let lock = percentiles(&mut lock_samples);
    let raw = percentiles(&mut raw_samples);
    let redisson = percentiles(&mut redisson_samples);
    let ratio = lock.p50.as_secs_f64() / raw.p50.as_secs_f64();
    vec![
        row("W1 uncontended", "cycle p50", micros(lock.p50)).against(
            micros(raw.p50),
            ratio,
            "≤ 1.15",
        ),
        row("W1 uncontended", "cycle p99", micros(lock.p99)).against(
            micros(raw.p99),
            lock.p99.as_secs_f64() / raw.p99.as_secs_f64(),
            "",
        ),
        // Throughput against Redisson's: cycles/s is the inverse of the p50 cycle.
        row(
            "W1 uncontended",
            "cycles/s at p50, against Redisson's scripts raw",
            format!("{:.0}", 1.0 / lock.p50.as_secs_f64()),
        )
        .against(
            format!("{:.0}", 1.0 / redisson.p50.as_secs_f64()),
            redisson.p50.as_secs_f64() / lock.p50.as_secs_f64(),
            "≥ 0.95",
        ),
    ]
}
