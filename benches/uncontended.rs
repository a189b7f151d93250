//! W1 of BENCHMARKS.md under criterion: one thread, one key, lock+unlock cycles (watchdog
//! mode), against the floor Redis allows, measured in the same run: the crate's own acquire
//! and release scripts sent raw with EVALSHA on one dedicated connection, and a PING.
//!
//! ```sh
//! cargo bench --bench uncontended
//! ```
//!
//! It starts its own redis-server (the test fixtures, testkit/). After the group it prints the lock's
//! median cycle time as a ratio to the raw floor's (the target is ≤ 1.15).

use redis_rlock_testkit as support;

use std::path::PathBuf;

use criterion::{criterion_group, Criterion};
use redis_rlock::LockManager;

const GROUP: &str = "w1_uncontended";

fn uncontended(c: &mut Criterion) {
    let server = support::RedisServer::start();
    let url = server.url();
    let manager = LockManager::new(&url).expect("manager");
    let mut raw = support::nodelay_conn(&url);
    let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
    let release = redis::Script::new(redis_rlock::lua::RELEASE);
    acquire.load(&mut raw).expect("SCRIPT LOAD");
    release.load(&mut raw).expect("SCRIPT LOAD");

    let mut group = c.benchmark_group(GROUP);
    group.bench_function("ping", |b| {
        b.iter(|| redis::cmd("PING").query::<String>(&mut raw).expect("PING"))
    });
    let mut request = 0u64;
    group.bench_function("raw_scripts_floor", |b| {
        b.iter(|| {
            request += 1;
            let held_by: Option<i64> = acquire
                .key("bench:raw")
                .key("redis_rlock__attempt:{bench:raw}:00000000-0000-0000-0000-000000000000:1")
                .key("redis_rlock__waiters:{bench:raw}")
                .arg(30_000)
                .arg("00000000-0000-0000-0000-000000000000:1")
                .arg(request) // the attempt id: a new one per attempt
                .arg(11_000)
                .invoke(&mut raw)
                .expect("raw acquire");
            assert!(held_by.is_none());
            let released: Option<i64> = release
                .key("bench:raw")
                .key("redisson_lock__channel:{bench:raw}")
                .key(format!("redisson_unlock_latch:{{bench:raw}}:{request}"))
                .key("redis_rlock__waiters:{bench:raw}")
                // The previous call's latch, deleted by this one, as the lock's releases do.
                .key(format!(
                    "redisson_unlock_latch:{{bench:raw}}:{}",
                    request - 1
                ))
                .arg("0")
                .arg(30_000)
                .arg("00000000-0000-0000-0000-000000000000:1")
                .arg("publish")
                .arg(11_000)
                .arg(0) // no listener of our own
                .arg("") // no handoff
                .arg(0)
                .arg(0) // not listening
                .arg("numsub") // looks for registered waiters, as the lock's releases do
                .invoke(&mut raw)
                .expect("raw release");
            assert_eq!(released, Some(1));
        })
    });
    group.bench_function("lock_unlock", |b| {
        b.iter(|| {
            let guard = manager.lock("bench:lock").expect("lock");
            guard.unlock().expect("unlock");
        })
    });
    group.finish();
}

criterion_group!(benches, uncontended);

/// The median of one benchmark from criterion's saved estimates, in nanoseconds.
fn median_ns(function: &str) -> Option<f64> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let path = target
        .join("criterion")
        .join(GROUP)
        .join(function)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if let (Some(lock), Some(floor), Some(ping)) = (
        median_ns("lock_unlock"),
        median_ns("raw_scripts_floor"),
        median_ns("ping"),
    ) {
        println!(
            "\nW1: lock+unlock median {:.1} µs, raw scripts floor {:.1} µs, ratio {:.3} \
             (target ≤ 1.15); PING {:.1} µs",
            lock / 1e3,
            floor / 1e3,
            lock / floor,
            ping / 1e3
        );
    }
}
