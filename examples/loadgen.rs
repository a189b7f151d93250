//! Load generator: runs workloads W1–W5 of BENCHMARKS.md against one Redis server and prints one
//! table with each figure, the floor it is measured against (in the same run) and the ratio.
//!
//! ```sh
//! cargo run --release --example loadgen            # the full run (about a minute)
//! cargo run --release --example loadgen -- --quick # seconds; CI's smoke test
//! ```
//!
//! It uses `REDIS_URL` when a server answers there, else starts a throwaway `redis-server`.
//! Correctness is checked in every mode (exact counters, no lost lock, every waiter served)
//! and a violation exits non-zero; timings are reported, never asserted.

#[path = "../tests/support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock::{LockGuard, LockManager};

/// Counts live heap bytes, so the memory figures are measured, not estimated.
struct CountingAllocator;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Correctness violations seen; any makes the run fail (after the table is printed and the
/// throwaway server is stopped).
static VIOLATIONS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn violation(what: String) {
    eprintln!("VIOLATION: {what}");
    VIOLATIONS.lock().unwrap().push(what);
}

/// How big each workload is.
struct Scale {
    w1_cycles: usize,
    w2_duration: Duration,
    w3_handoffs: usize,
    w4_locks: usize,
    w4_timeout: Duration,
    w4_hold: Duration,
    w5_waiters: usize,
}

const FULL: Scale = Scale {
    w1_cycles: 5_000,
    w2_duration: Duration::from_secs(3),
    w3_handoffs: 300,
    w4_locks: 10_000,
    w4_timeout: Duration::from_secs(3),
    w4_hold: Duration::from_secs(30),
    w5_waiters: 1_000,
};

const QUICK: Scale = Scale {
    w1_cycles: 300,
    w2_duration: Duration::from_millis(400),
    w3_handoffs: 20,
    w4_locks: 1_000,
    w4_timeout: Duration::from_millis(900),
    w4_hold: Duration::from_secs(2),
    w5_waiters: 100,
};

/// One line of the table.
struct Row {
    workload: &'static str,
    figure: String,
    value: String,
    floor: String,
    ratio: String,
    target: &'static str,
}

fn row(workload: &'static str, figure: impl Into<String>, value: impl Into<String>) -> Row {
    Row {
        workload,
        figure: figure.into(),
        value: value.into(),
        floor: String::new(),
        ratio: String::new(),
        target: "",
    }
}

impl Row {
    fn against(mut self, floor: impl Into<String>, ratio: f64, target: &'static str) -> Self {
        self.floor = floor.into();
        self.ratio = format!("{ratio:.2}");
        self.target = target;
        self
    }
    fn target(mut self, target: &'static str) -> Self {
        self.target = target;
        self
    }
}

fn main() -> ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = if quick { QUICK } else { FULL };
    let (url, _server) = support::url_from_env_or_start();
    let mut conn = support::nodelay_conn(&url);
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut conn)
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_owned))
        })
        .unwrap_or_default();
    println!(
        "redis-lock loadgen ({} mode), redis {version}, {} CPUs",
        if quick { "quick" } else { "full" },
        thread::available_parallelism().map_or(0, |n| n.get())
    );

    let mut rows = Vec::new();
    let ping = ping_round_trips(&mut conn, if quick { 200 } else { 2_000 });
    rows.push(row("floor", "PING round trip p50", micros(ping.p50)));
    rows.extend(w1_uncontended(&url, &scale));
    for threads in [4, 16] {
        rows.extend(w2_contended(&url, &scale, threads));
    }
    rows.extend(w3_handoff(&url, &scale));
    rows.extend(w4_watchdog_scale(&url, &scale));
    rows.extend(w5_waiter_scale(&url, &scale));
    print_table(&rows);
    let violations = VIOLATIONS.lock().unwrap();
    if violations.is_empty() {
        println!("\nno correctness violation (exact counters, no lock lost, every waiter served)");
        ExitCode::SUCCESS
    } else {
        eprintln!("\n{} correctness violations", violations.len());
        ExitCode::FAILURE
    }
}

/// Latency percentiles of a sample.
struct Percentiles {
    p50: Duration,
    p99: Duration,
}

fn percentiles(samples: &mut [Duration]) -> Percentiles {
    assert!(!samples.is_empty(), "no samples");
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Percentiles {
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ping_round_trips(conn: &mut redis::Connection, n: usize) -> Percentiles {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let _: String = redis::cmd("PING").query(conn).expect("PING");
        samples.push(start.elapsed());
    }
    percentiles(&mut samples)
}

/// W1: lock+unlock cycles on one key from one thread, against the same two scripts sent raw
/// with EVALSHA on one dedicated connection. Rounds alternate so drift hits both alike.
fn w1_uncontended(url: &str, scale: &Scale) -> Vec<Row> {
    let manager = LockManager::new(url).expect("manager");
    let mut raw = RawLock::connect(url, "loadgen:w1:raw");
    let mut lock_samples = Vec::with_capacity(scale.w1_cycles);
    let mut raw_samples = Vec::with_capacity(scale.w1_cycles);
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
            let guard = manager.lock("loadgen:w1").expect("lock");
            guard.unlock().expect("unlock");
            lock_samples.push(start.elapsed());
        }
    }
    let lock = percentiles(&mut lock_samples);
    let raw = percentiles(&mut raw_samples);
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
    ]
}

/// The floor's lock: this crate's own acquire and release scripts, sent raw with EVALSHA on
/// one connection, with no pool, no watchdog and no bookkeeping.
struct RawLock {
    conn: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
    key: String,
    channel: String,
    owner: String,
    request: u64,
}

impl RawLock {
    fn connect(url: &str, key: &str) -> Self {
        let mut conn = support::nodelay_conn(url);
        let acquire = redis::Script::new(redis_lock::lua::ACQUIRE);
        let release = redis::Script::new(redis_lock::lua::RELEASE);
        acquire.load(&mut conn).expect("SCRIPT LOAD");
        release.load(&mut conn).expect("SCRIPT LOAD");
        RawLock {
            conn,
            acquire,
            release,
            key: key.to_owned(),
            channel: format!("redisson_lock__channel:{{{key}}}"),
            owner: "00000000-0000-0000-0000-000000000000:1".to_owned(),
            request: 0,
        }
    }

    fn acquire(&mut self) {
        let held_by_other: Option<i64> = self
            .acquire
            .key(&self.key)
            .arg(30_000)
            .arg(&self.owner)
            .invoke(&mut self.conn)
            .expect("raw acquire");
        assert!(held_by_other.is_none(), "the raw lock is uncontended");
    }

    fn release(&mut self) {
        self.request += 1;
        let latch = format!("redisson_unlock_latch:{{{}}}:{}", self.key, self.request);
        let released: Option<i64> = self
            .release
            .key(&self.key)
            .key(&self.channel)
            .key(latch)
            .arg("0")
            .arg(30_000)
            .arg(&self.owner)
            .arg("publish")
            .arg(11_000)
            .invoke(&mut self.conn)
            .expect("raw release");
        assert_eq!(released, Some(1), "the raw lock was held");
    }
}

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
fn increment(conn: &mut redis::Connection, key: &str) {
    let value: Option<u64> = conn.get(key).expect("GET");
    let _: () = conn.set(key, value.unwrap_or(0) + 1).expect("SET");
}

/// W2: threads contend on one key; against a raw `SET NX PX` spin-retry loop.
fn w2_contended(url: &str, scale: &Scale, threads: usize) -> Vec<Row> {
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
            format!("{} / {}", lock.cycles, spin.cycles),
        ),
    ]
}

/// W3: a waiter already blocked (its subscription live); time from the holder's unlock
/// returning to the waiter's lock returning. Holder and waiter use separate managers, so the
/// wake-up crosses Redis pub/sub as it would between processes.
fn w3_handoff(url: &str, scale: &Scale) -> Vec<Row> {
    let holder = LockManager::new(url).expect("holder manager");
    let waiter = LockManager::new(url).expect("waiter manager");
    let mut conn = support::nodelay_conn(url);
    let name = "loadgen:w3";
    let channel = "redisson_lock__channel:{loadgen:w3}";
    let mut samples = Vec::with_capacity(scale.w3_handoffs);
    let mut pings = Vec::with_capacity(scale.w3_handoffs * 3);
    let mut cold_pings = Vec::with_capacity(scale.w3_handoffs);
    for _ in 0..scale.w3_handoffs {
        // The floor, measured in the same loop so that both see the same machine.
        for _ in 0..3 {
            let start = Instant::now();
            let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
            pings.push(start.elapsed());
        }
        let guard = holder.lock(name).expect("holder lock");
        let blocked = support::Waiter::spawn(&waiter, name);
        assert!(support::await_subscribers(&mut conn, channel, 1));
        // The subscription is live; let the waiter finish its attempt after subscribing.
        thread::sleep(Duration::from_millis(2));
        // A round trip from a thread that just slept, as the woken waiter's acquire is.
        let start = Instant::now();
        let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
        cold_pings.push(start.elapsed());
        thread::sleep(Duration::from_millis(2));
        guard.unlock().expect("holder unlock");
        let released = Instant::now();
        samples.push(blocked.acquired_since(released));
        assert!(support::await_subscribers(&mut conn, channel, 0));
    }
    let handoff = percentiles(&mut samples);
    let ping = percentiles(&mut pings).p50;
    let cold_ping = percentiles(&mut cold_pings).p50;
    let raw = raw_pubsub_handoff(url, scale.w3_handoffs);
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
    ]
}

/// The least any pub/sub-woken lock can do, with no crate code: a listener thread blocked on
/// a subscribed connection wakes a waiting thread through a condvar, which sends the acquire
/// script on its own connection. Measured from the release (raw EVALSHA, which publishes)
/// returning to the waiter's acquire returning.
fn raw_pubsub_handoff(url: &str, n: usize) -> Percentiles {
    use std::sync::{mpsc, Arc, Condvar};
    let key = "loadgen:w3:raw";
    let channel = "redisson_lock__channel:{loadgen:w3:raw}";
    let woken = Arc::new((Mutex::new(0u64), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));

    let mut listener_conn = support::nodelay_conn(url);
    let listener = {
        let (woken, stop) = (Arc::clone(&woken), Arc::clone(&stop));
        let (ready_tx, ready) = mpsc::channel();
        let handle = thread::spawn(move || {
            let mut pubsub = listener_conn.as_pubsub();
            pubsub.subscribe(channel).expect("SUBSCRIBE");
            pubsub
                .set_read_timeout(Some(Duration::from_millis(200)))
                .expect("read timeout");
            ready_tx.send(()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                if pubsub.get_message().is_ok() {
                    let (count, wake) = &*woken;
                    *count.lock().unwrap() += 1;
                    wake.notify_one();
                }
            }
        });
        ready.recv().expect("listener subscribed");
        handle
    };
    let (done_tx, done) = mpsc::channel::<Instant>();
    let (go_tx, go) = mpsc::channel::<()>();
    let waiter = {
        let woken = Arc::clone(&woken);
        let mut conn = support::nodelay_conn(url);
        let acquire = redis::Script::new(redis_lock::lua::ACQUIRE);
        acquire.load(&mut conn).expect("SCRIPT LOAD");
        thread::spawn(move || {
            let mut seen = 0;
            while go.recv().is_ok() {
                let (count, wake) = &*woken;
                let mut count = count.lock().unwrap();
                while *count == seen {
                    count = wake.wait(count).unwrap();
                }
                seen = *count;
                drop(count);
                let held_by: Option<i64> = acquire
                    .key(key)
                    .arg(30_000)
                    .arg("00000000-0000-0000-0000-000000000000:2")
                    .invoke(&mut conn)
                    .expect("raw acquire");
                let acquired = Instant::now();
                assert!(held_by.is_none(), "the raw waiter gets the lock");
                let _: () = redis::cmd("DEL").arg(key).query(&mut conn).expect("DEL");
                done_tx.send(acquired).unwrap();
            }
        })
    };
    let mut holder = RawLock::connect(url, key);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        holder.acquire();
        go_tx.send(()).unwrap();
        thread::sleep(Duration::from_millis(2)); // the waiter is asleep on the condvar
        holder.release();
        let released = Instant::now();
        let acquired = done.recv().expect("raw waiter");
        samples.push(acquired.saturating_duration_since(released));
    }
    drop(go_tx);
    stop.store(true, Ordering::Relaxed);
    waiter.join().expect("raw waiter");
    listener.join().expect("raw listener");
    percentiles(&mut samples)
}

/// CPU time a thread of this process has used, found by name (Linux).
fn thread_cpu_time(name: &str) -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        // The kernel keeps the first 15 bytes of a thread's name.
        if comm.trim_end() == &name[..name.len().min(15)] {
            let schedstat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let ns: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
            return Some(Duration::from_nanos(ns));
        }
    }
    None
}

/// W4: many locks held at once, renewed by one watchdog thread; memory per held lock.
fn w4_watchdog_scale(url: &str, scale: &Scale) -> Vec<Row> {
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
    let cpu_before = thread_cpu_time("redis-lock-watchdog").unwrap_or_default();
    let start = Instant::now();
    thread::sleep(scale.w4_hold);
    let cpu = thread_cpu_time("redis-lock-watchdog").unwrap_or_default() - cpu_before;
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

/// W5: many threads each blocked on its own lock, then all released at once.
fn w5_waiter_scale(url: &str, scale: &Scale) -> Vec<Row> {
    let mut conn = support::nodelay_conn(url);
    let holder = LockManager::new(url).expect("holder manager");
    let waiters = LockManager::new(url).expect("waiter manager");
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
    ]
}

fn print_table(rows: &[Row]) {
    let header = ["workload", "figure", "value", "floor", "ratio", "target"];
    let cells: Vec<[&str; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.workload,
                r.figure.as_str(),
                r.value.as_str(),
                r.floor.as_str(),
                r.ratio.as_str(),
                r.target,
            ]
        })
        .collect();
    let mut widths = BTreeMap::new();
    for (i, h) in header.iter().enumerate() {
        let widest = cells
            .iter()
            .map(|c| c[i].chars().count())
            .max()
            .unwrap_or(0);
        widths.insert(i, widest.max(h.len()));
    }
    let line = |cols: [&str; 6]| {
        let padded: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[&i]))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    println!();
    line(header);
    let rule: Vec<String> = (0..6).map(|i| "-".repeat(widths[&i])).collect();
    println!("|-{}-|", rule.join("-|-"));
    for c in cells {
        line(c);
    }
}
