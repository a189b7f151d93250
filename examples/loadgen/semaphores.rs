//! Semaphore and permit-expirable semaphore cycles, each against its own scripts sent raw.

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation};
use crate::table::{micros, row, Row};

/// Semaphore acquire(1)+release(1) cycles on one name from one thread, against the same two
/// scripts sent raw with EVALSHA on one dedicated connection (rounds alternate, as in W1).
/// The semaphore has permits to spare, so no cycle waits: this is the cost of the handle
/// (name check, pool, script invocation) over the two round trips.
pub(crate) fn semaphore_cycles(url: &str, scale: &Scale) -> Vec<Row> {
    let manager = LockManager::new(url).expect("manager");
    let semaphore = manager.get_semaphore("loadgen:semaphore");
    semaphore.try_set_permits(4).expect("try_set_permits");
    let mut raw = RawSemaphore::connect(url, "loadgen:semaphore:raw");
    let mut handle_samples = Vec::with_capacity(scale.semaphore_cycles);
    let mut raw_samples = Vec::with_capacity(scale.semaphore_cycles);
    let rounds = 10;
    for _ in 0..rounds {
        for _ in 0..scale.semaphore_cycles / rounds {
            let start = Instant::now();
            raw.acquire();
            raw.release();
            raw_samples.push(start.elapsed());
        }
        for _ in 0..scale.semaphore_cycles / rounds {
            let start = Instant::now();
            semaphore.acquire(1).expect("acquire");
            semaphore.release(1).expect("release");
            handle_samples.push(start.elapsed());
        }
    }
    for (what, left) in [
        ("semaphore", semaphore.available_permits().expect("permits")),
        ("raw semaphore", raw.available()),
    ] {
        if left != 4 {
            violation(format!(
                "{what}: {left} permits left after the cycles, not 4"
            ));
        }
    }
    let handle = percentiles(&mut handle_samples);
    let raw = percentiles(&mut raw_samples);
    vec![
        row(
            "semaphore, uncontended",
            "acquire/release cycle p50",
            micros(handle.p50),
        )
        .against(
            micros(raw.p50),
            handle.p50.as_secs_f64() / raw.p50.as_secs_f64(),
            "",
        ),
        row(
            "semaphore, uncontended",
            "acquire/release cycle p99",
            micros(handle.p99),
        )
        .against(
            micros(raw.p99),
            handle.p99.as_secs_f64() / raw.p99.as_secs_f64(),
            "",
        ),
    ]
}

/// The semaphore floor: this crate's own semaphore scripts, sent raw with EVALSHA on one
/// connection, with no pool and no handle.
struct RawSemaphore {
    conn: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
    key: String,
    channel: String,
    marker: String,
    attempts: u64,
}

impl RawSemaphore {
    fn connect(url: &str, key: &str) -> Self {
        let mut conn = support::nodelay_conn(url);
        let acquire = redis::Script::new(redis_rlock::lua::SEMAPHORE_TRY_ACQUIRE);
        let release = redis::Script::new(redis_rlock::lua::SEMAPHORE_RELEASE);
        acquire.load(&mut conn).expect("SCRIPT LOAD");
        release.load(&mut conn).expect("SCRIPT LOAD");
        let _: () = conn.set(key, 4).expect("SET the raw semaphore");
        RawSemaphore {
            conn,
            acquire,
            release,
            key: key.to_owned(),
            channel: format!("redisson_sc:{{{key}}}"),
            marker: format!(
                "redis_rlock__attempt:{{{key}}}:00000000-0000-0000-0000-000000000000:1"
            ),
            attempts: 0,
        }
    }

    fn acquire(&mut self) {
        self.attempts += 1;
        let taken: i64 = self
            .acquire
            .key(&self.key)
            .key(&self.marker)
            .arg(1)
            .arg(self.attempts)
            .arg(11_000)
            .invoke(&mut self.conn)
            .expect("raw semaphore acquire");
        assert_eq!(taken, 1, "the raw semaphore has permits to spare");
    }

    fn release(&mut self) {
        let free: Option<i64> = self
            .release
            .key(&self.key)
            .key(&self.channel)
            .arg(1)
            .arg("publish")
            .arg(i32::MAX)
            .invoke(&mut self.conn)
            .expect("raw semaphore release");
        assert!(free.is_some(), "far from the maximum");
    }

    fn available(&mut self) -> u64 {
        self.conn.get(&self.key).expect("GET the raw semaphore")
    }
}

/// Permit-expirable semaphore `acquire(None)` + `release(id)` cycles on one name from one
/// thread, in rounds alternating with two floors: the same two scripts sent raw with EVALSHA
/// on one dedicated connection, and the plain semaphore's handle cycle. Permits to spare, so
/// no cycle waits: this is the handle's cost (id, clock, name check, pool) over two round
/// trips, and what ids and the expiry sweep cost over a plain semaphore.
pub(crate) fn permit_semaphore_cycles(url: &str, scale: &Scale) -> Vec<Row> {
    let manager = LockManager::new(url).expect("manager");
    let permits = manager.get_permit_expirable_semaphore("loadgen:permits");
    permits.try_set_permits(4).expect("try_set_permits");
    let plain = manager.get_semaphore("loadgen:permits:plain");
    plain.try_set_permits(4).expect("try_set_permits");
    let mut raw = RawPermits::connect(url, "loadgen:permits:raw");
    let n = scale.semaphore_cycles / 10;
    let (mut handle, mut raw_samples, mut plain_samples) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..10 {
        for _ in 0..n {
            let start = Instant::now();
            raw.cycle();
            raw_samples.push(start.elapsed());
        }
        for _ in 0..n {
            let start = Instant::now();
            let id = permits.acquire(None).expect("acquire");
            permits.release(&id).expect("release");
            handle.push(start.elapsed());
        }
        for _ in 0..n {
            let start = Instant::now();
            plain.acquire(1).expect("acquire");
            plain.release(1).expect("release");
            plain_samples.push(start.elapsed());
        }
    }
    let left = permits.available_permits().expect("permits");
    let held = permits.acquired_permits().expect("acquired");
    if (left, held) != (4, 0) {
        violation(format!(
            "permit semaphore: {left} free and {held} acquired, not 4 and 0"
        ));
    }
    let (handle, raw, plain) = (
        percentiles(&mut handle),
        percentiles(&mut raw_samples),
        percentiles(&mut plain_samples),
    );
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let workload = "permit-expirable semaphore, uncontended";
    vec![
        row(workload, "acquire/release cycle p50", micros(handle.p50)).against(
            micros(raw.p50),
            ratio(handle.p50, raw.p50),
            "",
        ),
        row(workload, "acquire/release cycle p99", micros(handle.p99)).against(
            micros(raw.p99),
            ratio(handle.p99, raw.p99),
            "",
        ),
        row(
            workload,
            "cycle p50, against the plain semaphore's",
            micros(handle.p50),
        )
        .against(micros(plain.p50), ratio(handle.p50, plain.p50), ""),
    ]
}

/// The permit semaphore floor: this crate's own acquire and release scripts, sent raw with
/// EVALSHA on one connection, with ids from a counter and no handle.
struct RawPermits {
    conn: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
    keys: [String; 3],
    next_id: u128,
}

impl RawPermits {
    /// Redisson's score of a permit without a lease.
    const NO_EXPIRY: u64 = 922_337_203_685_477;

    fn connect(url: &str, key: &str) -> Self {
        let mut conn = support::nodelay_conn(url);
        let acquire = redis::Script::new(redis_rlock::lua::PERMIT_SEMAPHORE_ACQUIRE);
        let release = redis::Script::new(redis_rlock::lua::PERMIT_SEMAPHORE_RELEASE);
        acquire.load(&mut conn).expect("SCRIPT LOAD");
        release.load(&mut conn).expect("SCRIPT LOAD");
        let _: () = conn.set(key, 4).expect("SET the raw permit semaphore");
        let keys = [
            key.to_owned(),
            format!("{{{key}}}:timeout"),
            format!("redisson_sc:{{{key}}}"),
        ];
        RawPermits {
            conn,
            acquire,
            release,
            keys,
            next_id: 1,
        }
    }

    fn cycle(&mut self) {
        self.next_id += 1;
        let id = self.next_id.to_be_bytes();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as u64;
        let [name, timeout, channel] = &self.keys;
        let taken: i64 = self
            .acquire
            .key(name)
            .key(timeout)
            .key(channel)
            .arg(now)
            .arg("publish")
            .arg(Self::NO_EXPIRY)
            .arg(&id[..])
            .arg(Self::NO_EXPIRY)
            .invoke(&mut self.conn)
            .expect("raw permit acquire");
        assert_eq!(taken, 0, "the raw permit semaphore has permits to spare");
        let released: i64 = self
            .release
            .key(name)
            .key(timeout)
            .key(channel)
            .arg(now)
            .arg("publish")
            .arg(&id[..])
            .invoke(&mut self.conn)
            .expect("raw permit release");
        assert_eq!(released, 1, "the id just taken");
    }
}
