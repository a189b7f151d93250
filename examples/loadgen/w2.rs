//! W2: threads contending for one lock, against raw spin loops (`SET NX PX`, Redisson's hash
//! script) contending the same way.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation, Percentiles};
use crate::redisson_raw::RedissonRaw;
use crate::table::{micros, row, Row};

/// What one contended run measured.
struct Contended {
    cycles: u64,
    elapsed: Duration,
    requests: u64,
    waits: Percentiles,
}

impl Contended {
    fn per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
    fn requests_per_cycle(&self) -> f64 {
        self.requests as f64 / self.cycles as f64
    }
}

/// Runs `threads` threads for `duration`, each repeating `cycle` (which returns its acquire
/// wait and how many requests it sent), and checks the counter the cycles incremented.
fn contend(
    url: &str,
    threads: usize,
    duration: Duration,
    counter_key: &str,
    cycle: impl Fn(&mut redis::Connection) -> (Duration, u64) + Sync,
) -> Contended {
    let mut conn = support::nodelay_conn(url);
    let _: () = conn.del(counter_key).expect("DEL");
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let cycles = AtomicU64::new(0);
    let requests = AtomicU64::new(0);
    let mut waits = Vec::new();
    let elapsed = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut conn = support::nodelay_conn(url);
                    let mut waits = Vec::new();
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let (wait, sent) = cycle(&mut conn);
                        waits.push(wait);
                        requests.fetch_add(sent, Ordering::Relaxed);
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                    waits
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            waits.extend(worker.join().expect("worker"));
        }
        start.elapsed()
    });
    let cycles = cycles.into_inner();
    let counter: u64 = conn.get(counter_key).expect("GET counter");
    if counter != cycles {
        violation(format!(
            "{counter_key} is {counter} after {cycles} critical sections"
        ));
    }
    Contended {
        cycles,
        elapsed,
        requests: requests.into_inner(),
        waits: percentiles(&mut waits),
    }
}

/// The critical section of W2: a non-atomic increment, two requests.
pub(crate) fn increment(conn: &mut redis::Connection, key: &str) {
    let value: Option<u64> = conn.get(key).expect("GET");
    let _: () = conn.set(key, value.unwrap_or(0) + 1).expect("SET");
}

/// W2: threads contend on one key; against a raw `SET NX PX` spin-retry loop and Redisson's
/// hash acquire script retried the same way.
pub(crate) fn w2_contended(url: &str, scale: &Scale, threads: usize) -> Vec<Row> {
    let manager = LockManager::new(url).expect("manager");
    let before = manager.stats().commands;
    let lock = contend(
        url,
        threads,
        scale.w2_duration,
        "loadgen:w2:counter",
        |conn| {
            let start = Instant::now();
            let guard = manager.lock("loadgen:w2").expect("lock");
            let wait = start.elapsed();
            increment(conn, "loadgen:w2:counter");
            guard.unlock().expect("unlock");
            (wait, 2) // the lock's own requests are counted by the manager
        },
    );
    let lock = Contended {
        requests: lock.requests + manager.stats().commands - before,
        ..lock
    };

    let release = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    );
    let spin = contend(
        url,
        threads,
        scale.w2_duration,
        "loadgen:w2:spin-counter",
        |conn| {
            let token = format!("{:?}", thread::current().id());
            let start = Instant::now();
            let mut sent = 0;
            loop {
                sent += 1;
                let ok: Option<String> = redis::cmd("SET")
                    .arg("loadgen:w2:spin")
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query(conn)
                    .expect("SET NX");
                if ok.is_some() {
                    break;
                }
            }
            let wait = start.elapsed();
            increment(conn, "loadgen:w2:spin-counter");
            let _: i64 = release
                .key("loadgen:w2:spin")
                .arg(&token)
                .invoke(conn)
                .expect("release");
            (wait, sent + 3)
        },
    );

    // Issue 32's peer floor: Redisson's hash acquire retried at once until it takes the
    // lock, then its latched unlock.
    let hash = RedissonRaw::new(&mut support::nodelay_conn(url), "loadgen:w2:hash");
    let hash_spin = contend(
        url,
        threads,
        scale.w2_duration,
        "loadgen:w2:hash-counter",
        |conn| {
            let owner = format!(
                "00000000-0000-0000-0000-000000000000:{:?}",
                thread::current().id()
            );
            let start = Instant::now();
            let mut sent = 0;
            loop {
                sent += 1;
                if hash.try_lock(conn, &owner) {
                    break;
                }
            }
            let wait = start.elapsed();
            increment(conn, "loadgen:w2:hash-counter");
            hash.unlock(conn, &owner);
            (wait, sent + 3)
        },
    );

    let label = if threads == 4 {
        "W2 contended, 4 threads"
    } else {
        "W2 contended, 16 threads"
    };
    vec![
        row(label, "cycles/s", format!("{:.0}", lock.per_second())).against(
            format!("{:.0}", spin.per_second()),
            lock.per_second() / spin.per_second(),
            "≥ 0.8",
        ),
        row(
            label,
            "cycles/s, against Redisson's hash spin loop raw",
            format!("{:.0}", lock.per_second()),
        )
        .against(
            format!("{:.0}", hash_spin.per_second()),
            lock.per_second() / hash_spin.per_second(),
            "≥ 0.85",
        ),
        row(
            label,
            "requests per critical section",
            format!("{:.2}", lock.requests_per_cycle()),
        )
        .against(
            format!("{:.2}", spin.requests_per_cycle()),
            lock.requests_per_cycle() / spin.requests_per_cycle(),
            "≤ 5 requests",
        ),
        row(
            label,
            "acquire wait p50 / p99",
            format!("{} / {}", micros(lock.waits.p50), micros(lock.waits.p99)),
        )
        .against(
            format!("{} / {}", micros(spin.waits.p50), micros(spin.waits.p99)),
            lock.waits.p50.as_secs_f64() / spin.waits.p50.as_secs_f64(),
            "",
        ),
        row(
            label,
            "critical sections (counter exact)",
            format!("{} / {} / {}", lock.cycles, spin.cycles, hash_spin.cycles),
        ),
    ]
}
