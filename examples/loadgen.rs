//! Load generator: runs workloads W1–W6 of BENCHMARKS.md (and W6s, W6 on a spin lock), W7 (the fair lock's handoff) and W8
//! (a read-write lock's throughput) against one Redis server and prints one
//! table with each figure, the floor it is measured against (in the same run) and the ratio.
//! A row measures semaphore acquire/release cycles the same way W1 measures locks, and the
//! last ones a Redlock over 5 masters (this server and 4 throwaway ones) against one master,
//! on loopback and with every reply delayed as by a network (`redlock-net`).
//!
//! ```sh
//! cargo run --release --example loadgen            # the full run (about a minute)
//! cargo run --release --example loadgen -- --quick # seconds; CI's smoke test
//! ```
//!
//! It uses `REDIS_URL` when a server answers there, else starts a throwaway `redis-server`.
//! Correctness is checked in every mode (exact counters, no lost lock, every waiter served)
//! and a violation exits non-zero; timings are reported, never asserted.
//!
//! W6 runs this binary again as child processes (`--w6-child`, see [`w6_child`]).

use redis_rlock_testkit as support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockGuard, LockManager, RedLock};

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
    w6_duration: Duration,
    semaphore_cycles: usize,
}

const FULL: Scale = Scale {
    w1_cycles: 5_000,
    w2_duration: Duration::from_secs(3),
    w3_handoffs: 300,
    w4_locks: 10_000,
    w4_timeout: Duration::from_secs(3),
    w4_hold: Duration::from_secs(30),
    w5_waiters: 1_000,
    w6_duration: Duration::from_secs(6),
    semaphore_cycles: 5_000,
};

const QUICK: Scale = Scale {
    w1_cycles: 300,
    w2_duration: Duration::from_millis(400),
    w3_handoffs: 20,
    w4_locks: 1_000,
    w4_timeout: Duration::from_millis(900),
    w4_hold: Duration::from_secs(2),
    w5_waiters: 100,
    w6_duration: Duration::from_millis(500),
    semaphore_cycles: 300,
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
    if std::env::args().nth(1).as_deref() == Some(W6_CHILD) {
        return w6_child();
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let mut scale = if quick { QUICK } else { FULL };
    // `--w5-waiters N`: W5 with N blocked threads (10,000 measures the back-off's cost at scale).
    let args: Vec<String> = std::env::args().collect();
    if let Some(n) = args
        .iter()
        .position(|a| a == "--w5-waiters")
        .and_then(|i| args.get(i + 1))
    {
        scale.w5_waiters = n.parse().expect("--w5-waiters takes a number");
    }
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
        "redis-rlock loadgen ({} mode), redis {version}, {} CPUs",
        if quick { "quick" } else { "full" },
        thread::available_parallelism().map_or(0, |n| n.get())
    );

    // `--only NAME[,NAME...]` runs only those workloads (w1 w2 w6 w6s w3 w7 w8 w4 w5 semaphore
    // permit-semaphore redlock redlock-net cluster); without it, all of them.
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|list| list.split(',').map(str::to_owned).collect());
    let wants = |name: &str| {
        only.as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    };

    let mut rows = Vec::new();
    let ping = ping_round_trips(&mut conn, if quick { 200 } else { 2_000 });
    rows.push(row("floor", "PING round trip p50", micros(ping.p50)));
    if wants("w1") {
        rows.extend(w1_uncontended(&url, &scale));
    }
    if wants("w2") {
        for threads in [4, 16] {
            rows.extend(w2_contended(&url, &scale, threads));
        }
    }
    if wants("w6") {
        rows.extend(w6_fairness(&url, &scale));
    }
    if wants("w6s") {
        rows.extend(w6s_spin_fairness(&url, &scale));
    }
    if wants("w3") {
        rows.extend(w3_handoff(&url, &scale));
        rows.extend(w3_in_process(&url, &scale));
    }
    if wants("w7") {
        rows.extend(w7_fair_handoff(&url, &scale));
    }
    if wants("w8") {
        rows.extend(w8_read_write(&url, &scale));
    }
    if wants("w4") {
        rows.extend(w4_watchdog_scale(&url, &scale));
    }
    if wants("w5") {
        rows.extend(w5_waiter_scale(&url, &scale));
    }
    if wants("semaphore") {
        rows.extend(semaphore_cycles(&url, &scale));
    }
    if wants("permit-semaphore") {
        rows.extend(permit_semaphore_cycles(&url, &scale));
    }
    if wants("redlock") {
        rows.extend(redlock_cycles(&url, &scale, None));
    }
    if wants("redlock-net") {
        for network in NETWORK_DELAYS {
            rows.extend(redlock_cycles(&url, &scale, Some(network)));
        }
    }
    if wants("cluster") {
        rows.extend(cluster_workloads(&scale));
    }
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

/// How much later than on loopback every reply arrives in `redlock-net`: about a round trip
/// within one availability zone, and across zones, so that a round trip is network time, as
/// between separate machines, rather than this machine's CPU shared by every server.
const NETWORK_DELAYS: [(Duration, &str); 2] = [
    (
        Duration::from_micros(250),
        "Redlock over 5 masters, replies 0.25 ms late",
    ),
    (
        Duration::from_millis(1),
        "Redlock over 5 masters, replies 1 ms late",
    ),
];

/// Redlock lock+unlock cycles over 5 masters (the run's server and 4 started here, all on
/// this machine), against lock+unlock cycles on one of them, rounds alternating as in W1.
/// A Redlock round tries every master at once on the process' fan-out workers (no thread is
/// started per round), so its cycle is about the slowest master's plus the handoffs to the
/// workers and back. With all five servers on this machine's cores, five masters also cost
/// five times the CPU of one: the floor rows send the lock's two scripts raw to all five at
/// once from one thread (every request written before any reply is read), against one master.
///
/// With `network` (a delay and the rows' name), every connection goes through a proxy in
/// front of its server that delivers each reply that much later (this kernel has no
/// `tc netem`), standing in for masters on separate machines: a round trip is then mostly
/// network time, which five masters spend at once, rather than CPU, which they share here.
fn redlock_cycles(url: &str, scale: &Scale, network: Option<(Duration, &'static str)>) -> Vec<Row> {
    /// The lock's acquire and release scripts sent raw, at once, to every connection of
    /// `conns`: each request is written to all before any reply is read.
    struct RawMasters {
        conns: Vec<redis::Connection>,
        acquire: String,
        release: String,
        request: u64,
        latch_prefix: String,
    }
    const KEY: &str = "loadgen:redlock:raw";
    const OWNER: &str = "00000000-0000-0000-0000-000000000000:1";
    impl RawMasters {
        fn connect(urls: &[String]) -> Self {
            let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
            let release = redis::Script::new(redis_rlock::lua::RELEASE);
            let conns = urls
                .iter()
                .map(|url| {
                    let mut conn = support::nodelay_conn(url);
                    acquire.load(&mut conn).expect("SCRIPT LOAD");
                    release.load(&mut conn).expect("SCRIPT LOAD");
                    conn
                })
                .collect();
            RawMasters {
                conns,
                acquire: acquire.get_hash().to_owned(),
                release: release.get_hash().to_owned(),
                request: 0,
                latch_prefix: format!(
                    "redisson_unlock_latch:{{{KEY}}}:{}",
                    uuid::Uuid::new_v4().simple()
                ),
            }
        }

        fn all_at_once(&mut self, packed: &[u8]) -> Vec<redis::Value> {
            for conn in &mut self.conns {
                conn.send_packed_command(packed).expect("raw send");
            }
            let conns = self.conns.iter_mut();
            conns
                .map(|conn| conn.recv_response().expect("raw reply"))
                .collect()
        }

        fn cycle(&mut self) {
            let acquire = redis::cmd("EVALSHA")
                .arg(&self.acquire)
                .arg(3)
                .arg(KEY)
                .arg(format!("redis_rlock__attempt:{{{KEY}}}:{OWNER}"))
                .arg(format!("redis_rlock__waiters:{{{KEY}}}"))
                .arg(30_000)
                .arg(OWNER)
                .arg(self.request) // the attempt id: a new one per attempt
                .arg(11_000)
                .get_packed_command();
            for reply in self.all_at_once(&acquire) {
                assert_eq!(reply, redis::Value::Nil, "the raw lock is uncontended");
            }
            self.request += 1;
            let release = redis::cmd("EVALSHA")
                .arg(&self.release)
                .arg(4)
                .arg(KEY)
                .arg(format!("redisson_lock__channel:{{{KEY}}}"))
                .arg(format!("{}-{}", self.latch_prefix, self.request))
                .arg(format!("{}-{}", self.latch_prefix, self.request - 1))
                .arg("0")
                .arg(30_000)
                .arg(OWNER)
                .arg("publish")
                .arg(11_000)
                .arg(0) // no listener of our own
                .arg("") // no handoff
                .arg(0)
                .get_packed_command();
            for reply in self.all_at_once(&release) {
                assert_eq!(reply, redis::Value::Int(1), "the raw lock was held");
            }
        }
    }

    let others: Vec<_> = (0..4).map(|_| support::RedisServer::start()).collect();
    let mut urls = vec![url.to_owned()];
    urls.extend(others.iter().map(support::RedisServer::url));
    let proxies: Vec<support::proxy::Proxy> = match network {
        None => Vec::new(),
        Some((delay, _)) => urls
            .iter()
            .map(|url| {
                let port = url
                    .trim_end_matches('/')
                    .rsplit(':')
                    .next()
                    .and_then(|port| port.parse().ok())
                    .expect("a redis://host:port/ URL");
                let proxy = support::proxy::Proxy::start(port);
                proxy.delay_replies(delay);
                proxy
            })
            .collect(),
    };
    if !proxies.is_empty() {
        urls = proxies.iter().map(support::proxy::Proxy::url).collect();
    }
    let managers: Vec<_> = urls
        .iter()
        .map(|url| LockManager::new(url).expect("manager"))
        .collect();
    let red = RedLock::new(
        managers
            .iter()
            .map(|m| m.get_lock("loadgen:redlock"))
            .collect(),
    );
    let single = managers[0].get_lock("loadgen:redlock:single");
    let mut raw_five = RawMasters::connect(&urls);
    let mut raw_one = RawMasters::connect(&urls[..1]);
    // A cycle over the network takes milliseconds: fewer of them.
    let cycles = if network.is_some() {
        scale.w1_cycles / 10
    } else {
        scale.w1_cycles / 2
    };
    let rounds = 10;
    let mut samples: [Vec<Duration>; 4] = Default::default();
    for _ in 0..rounds {
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            single.lock().expect("lock").unlock().expect("unlock");
            samples[0].push(start.elapsed());
        }
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            let guard = red.lock().expect("redlock");
            if guard.guards().len() != 5 {
                violation(format!(
                    "redlock held {} of 5 uncontended masters",
                    guard.guards().len()
                ));
            }
            guard.unlock().expect("unlock");
            samples[1].push(start.elapsed());
        }
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            raw_one.cycle();
            samples[2].push(start.elapsed());
        }
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            raw_five.cycle();
            samples[3].push(start.elapsed());
        }
    }
    let [single, red, raw_one, raw_five] = samples.map(|mut s| percentiles(&mut s));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let workload = network.map_or("Redlock over 5 masters", |(_, name)| name);
    vec![
        row(workload, "cycle p50, against one master's", micros(red.p50)).against(
            micros(single.p50),
            ratio(red.p50, single.p50),
            "≤ 1.3",
        ),
        row(workload, "cycle p99, against one master's", micros(red.p99)).against(
            micros(single.p99),
            ratio(red.p99, single.p99),
            "",
        ),
        row(
            workload,
            "floor: raw scripts to 5 at once p50, against to 1",
            micros(raw_five.p50),
        )
        .against(micros(raw_one.p50), ratio(raw_five.p50, raw_one.p50), ""),
        row(
            workload,
            "floor: raw scripts to 5 at once p99, against to 1",
            micros(raw_five.p99),
        )
        .against(micros(raw_one.p99), ratio(raw_five.p99, raw_one.p99), ""),
        row(
            workload,
            "cycle p50, against the raw floor to 5",
            micros(red.p50),
        )
        .against(micros(raw_five.p50), ratio(red.p50, raw_five.p50), ""),
    ]
}

/// Semaphore acquire(1)+release(1) cycles on one name from one thread, against the same two
/// scripts sent raw with EVALSHA on one dedicated connection (rounds alternate, as in W1).
/// The semaphore has permits to spare, so no cycle waits: this is the cost of the handle
/// (name check, pool, script invocation) over the two round trips.
fn semaphore_cycles(url: &str, scale: &Scale) -> Vec<Row> {
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
fn permit_semaphore_cycles(url: &str, scale: &Scale) -> Vec<Row> {
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
    /// Unique to this RawLock: a later one on the same key must not meet this one's latches.
    latch_prefix: String,
    /// `publish`, or `spublish` on a cluster with sharded pub/sub (as the lock's scripts).
    publish: &'static str,
    /// What counts the channel's subscribers for grants: `numsub`, or `shardnumsub` with
    /// sharded pub/sub (as the lock's scripts).
    numsub: &'static str,
}

impl RawLock {
    fn connect(url: &str, key: &str) -> Self {
        let mut conn = support::nodelay_conn(url);
        let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
        let release = redis::Script::new(redis_rlock::lua::RELEASE);
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
            latch_prefix: format!(
                "redisson_unlock_latch:{{{key}}}:{}",
                uuid::Uuid::new_v4().simple()
            ),
            publish: "publish",
            numsub: "numsub",
        }
    }

    /// Announces releases with `command` (`spublish` on a Redis 7 cluster).
    fn publishing_with(mut self, command: &'static str) -> Self {
        self.publish = command;
        self.numsub = if command == "spublish" {
            "shardnumsub"
        } else {
            "numsub"
        };
        self
    }

    fn acquire(&mut self) {
        let held_by_other: Option<i64> = self
            .acquire
            .key(&self.key)
            .key(format!(
                "redis_rlock__attempt:{{{}}}:{}",
                self.key, self.owner
            ))
            .key(format!("redis_rlock__waiters:{{{}}}", self.key))
            .arg(30_000)
            .arg(&self.owner)
            .arg(self.request) // the attempt id: the release below moves it on
            .arg(11_000)
            .invoke(&mut self.conn)
            .expect("raw acquire");
        assert!(held_by_other.is_none(), "the raw lock is uncontended");
    }

    fn release(&mut self) {
        self.request += 1;
        let latch = format!("{}-{}", self.latch_prefix, self.request);
        let released: Option<i64> = self
            .release
            .key(&self.key)
            .key(&self.channel)
            .key(latch)
            .key(format!("redis_rlock__waiters:{{{}}}", self.key))
            // The previous call's latch, deleted by this one, as the lock's releases do.
            .key(format!("{}-{}", self.latch_prefix, self.request - 1))
            .arg("0")
            .arg(30_000)
            .arg(&self.owner)
            .arg(self.publish)
            .arg(11_000)
            .arg(0) // no listener of our own
            .arg("") // no handoff
            .arg(0)
            .arg(0) // not listening
            .arg(self.numsub) // looks for registered waiters, as the lock's releases do
            .invoke(&mut self.conn)
            .expect("raw release");
        // 3: released, and a waiter (W3's raw one) heard the unlock message.
        assert!(
            matches!(released, Some(1 | 3)),
            "the raw lock was held: {released:?}"
        );
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

/// The argument that makes this binary a W6 child process ([`w6_child`]).
const W6_CHILD: &str = "--w6-child";
/// How a W6 child learns the server's URL: not an argument, because it may carry a password
/// and every user can read a process's arguments.
const W6_URL: &str = "LOADGEN_W6_URL";
/// W6's parties (managers in this process, or processes) and threads in each.
const W6_PARTIES: usize = 3;
const W6_THREADS: usize = 4;
/// W6's critical section, besides its exclusion checks. A sleep, not a busy loop: on 2 cores,
/// 12 spinning threads would starve redis-server and the listeners, and W6 would measure the
/// scheduler instead of the lock.
const W6_CRITICAL_SECTION: Duration = Duration::from_micros(200);

/// What the threads of one manager did in a W6 run.
struct Share {
    critical_sections: u64,
    /// Commands the manager sent meanwhile (the lock's own: the critical section's checks go
    /// through their own connections).
    commands: u64,
    waits: Vec<Duration>,
}

/// One W6 thread: lock → critical section → unlock until `stop`. The critical section checks
/// exclusion in Redis, which threads of every process see: an "inside" key that must be
/// absent on entry, and a counter incremented non-atomically (GET, then SET after the work),
/// which an overlap would make lose an update.
fn w6_worker(manager: &LockManager, url: &str, keys: &str, stop: &AtomicBool) -> Share {
    let mut conn = support::nodelay_conn(url);
    let (lock, inside, counter) = (
        format!("{keys}:lock"),
        format!("{keys}:inside"),
        format!("{keys}:counter"),
    );
    let mut share = Share {
        critical_sections: 0,
        commands: 0,
        waits: Vec::new(),
    };
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let guard = manager.lock(&lock).expect("lock");
        share.waits.push(start.elapsed());
        let entered: bool = conn.set_nx(&inside, 1).expect("SET NX");
        if !entered {
            violation(format!("W6: two holders of {lock} at once"));
        }
        let value: Option<u64> = conn.get(&counter).expect("GET");
        thread::sleep(W6_CRITICAL_SECTION);
        let _: () = conn.set(&counter, value.unwrap_or(0) + 1).expect("SET");
        let _: () = conn.del(&inside).expect("DEL");
        guard.unlock().expect("unlock");
        share.critical_sections += 1;
    }
    share
}

/// Runs [`W6_THREADS`] threads per manager on one lock from a common start until
/// `wait_for_stop` returns; one [`Share`] per manager.
fn w6_run(
    managers: &[LockManager],
    url: &str,
    keys: &str,
    wait_for_stop: impl FnOnce(),
) -> Vec<Share> {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(managers.len() * W6_THREADS + 1);
    let before: Vec<u64> = managers.iter().map(|m| m.stats().commands).collect();
    let per_thread: Vec<Vec<Share>> = thread::scope(|s| {
        let handles: Vec<Vec<_>> = managers
            .iter()
            .map(|manager| {
                (0..W6_THREADS)
                    .map(|_| {
                        let (start, stop) = (&start, &stop);
                        s.spawn(move || {
                            start.wait();
                            w6_worker(manager, url, keys, stop)
                        })
                    })
                    .collect()
            })
            .collect();
        start.wait();
        wait_for_stop();
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|threads| {
                threads
                    .into_iter()
                    .map(|t| t.join().expect("W6 thread"))
                    .collect()
            })
            .collect()
    });
    per_thread
        .into_iter()
        .zip(managers.iter().zip(before))
        .map(|(threads, (manager, before))| Share {
            critical_sections: threads.iter().map(|t| t.critical_sections).sum(),
            commands: manager.stats().commands - before,
            waits: threads.into_iter().flat_map(|t| t.waits).collect(),
        })
        .collect()
}

/// W6 in a child process: one manager's threads, started and stopped by the parent through
/// Redis lists so that all processes run over the same interval. Prints its [`Share`].
fn w6_child() -> ExitCode {
    let keys = std::env::args().nth(2).expect("W6 key prefix");
    let url = std::env::var(W6_URL).expect("the parent passes the URL");
    let manager = LockManager::new(&url).expect("manager");
    let mut conn = support::nodelay_conn(&url);
    support::await_listener(&mut conn, &manager);
    println!("READY");
    let go: Option<(String, String)> = conn.blpop(format!("{keys}:go"), 30.0).expect("BLPOP");
    if go.is_none() {
        eprintln!("W6 child: no start signal");
        return ExitCode::FAILURE;
    }
    let shares = w6_run(std::slice::from_ref(&manager), &url, &keys, || {
        let _: Option<(String, String)> = conn.blpop(format!("{keys}:stop"), 120.0).expect("BLPOP");
    });
    let share = &shares[0];
    let waits: Vec<String> = share
        .waits
        .iter()
        .map(|w| w.as_micros().to_string())
        .collect();
    println!(
        "W6 RESULT {} {} {}",
        share.critical_sections,
        share.commands,
        waits.join(" ")
    );
    if VIOLATIONS.lock().unwrap().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// W6 across processes: [`W6_PARTIES`] copies of this binary in [`W6_CHILD`] mode. `None`
/// (and a violation) when a child fails.
fn w6_processes(url: &str, keys: &str, duration: Duration) -> Option<Vec<Share>> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut conn = support::nodelay_conn(url);
    let exe = std::env::current_exe().expect("own path");
    let mut children: Vec<_> = (0..W6_PARTIES)
        .map(|_| {
            Command::new(&exe)
                .args([W6_CHILD, keys])
                .env(W6_URL, url)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a W6 child process")
        })
        .collect();
    // The line after `marker` in a child's output, or None if its output ends first.
    let read_line_after = |out: &mut BufReader<std::process::ChildStdout>, marker: &str| {
        let mut line = String::new();
        loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    if let Some(rest) = line.strip_prefix(marker) {
                        return Some(rest.trim_end().to_owned());
                    }
                }
            }
        }
    };
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("piped stdout")))
        .collect();
    let ready = outputs
        .iter_mut()
        .all(|out| read_line_after(out, "READY").is_some());
    if ready {
        let _: () = conn
            .rpush(format!("{keys}:go"), vec![1; W6_PARTIES])
            .expect("RPUSH");
        thread::sleep(duration);
        let _: () = conn
            .rpush(format!("{keys}:stop"), vec![1; W6_PARTIES])
            .expect("RPUSH");
    }
    let mut shares = Vec::new();
    for (mut child, mut out) in children.into_iter().zip(outputs) {
        let result = if ready {
            read_line_after(&mut out, "W6 RESULT ")
        } else {
            let _ = child.kill();
            None
        };
        let status = child.wait().expect("W6 child exit status");
        let parsed = result.and_then(|line| {
            let mut fields = line.split_whitespace().map(|f| f.parse::<u64>().ok());
            let critical_sections = fields.next()??;
            let commands = fields.next()??;
            let waits: Option<Vec<Duration>> =
                fields.map(|w| w.map(Duration::from_micros)).collect();
            Some(Share {
                critical_sections,
                commands,
                waits: waits?,
            })
        });
        match parsed {
            Some(share) if status.success() => shares.push(share),
            _ => violation(format!("W6: a child process failed ({status})")),
        }
    }
    (shares.len() == W6_PARTIES).then_some(shares)
}

/// W6: [`W6_PARTIES`] managers (then processes) × [`W6_THREADS`] threads on one lock; each
/// party's share of the critical sections, the worst single wait and the requests per
/// acquisition. The local line of each manager must not keep the others out.
fn w6_fairness(url: &str, scale: &Scale) -> Vec<Row> {
    let mut conn = support::nodelay_conn(url);
    let mut rows = Vec::new();
    for in_processes in [false, true] {
        let keys = if in_processes {
            "loadgen:w6:processes"
        } else {
            "loadgen:w6:managers"
        };
        let _: () = conn
            .del(
                ["lock", "inside", "counter", "go", "stop"]
                    .map(|k| format!("{keys}:{k}"))
                    .to_vec(),
            )
            .expect("DEL");
        let shares = if in_processes {
            match w6_processes(url, keys, scale.w6_duration) {
                Some(shares) => shares,
                None => continue,
            }
        } else {
            let managers: Vec<LockManager> = (0..W6_PARTIES)
                .map(|_| LockManager::new(url).expect("manager"))
                .collect();
            for manager in &managers {
                support::await_listener(&mut conn, manager);
            }
            w6_run(&managers, url, keys, || thread::sleep(scale.w6_duration))
        };
        let counts: Vec<u64> = shares.iter().map(|s| s.critical_sections).collect();
        let total: u64 = counts.iter().sum();
        let counter: Option<u64> = conn.get(format!("{keys}:counter")).expect("GET");
        if counter.unwrap_or(0) != total {
            violation(format!(
                "{keys}:counter is {counter:?} after {total} critical sections"
            ));
        }
        let commands: u64 = shares.iter().map(|s| s.commands).sum();
        // A party that polls while it waits shows here: few acquisitions, many requests.
        let worst_party = shares
            .iter()
            .map(|s| s.commands as f64 / s.critical_sections.max(1) as f64)
            .fold(0.0, f64::max);
        let min_share = counts.iter().min().copied().unwrap_or(0) as f64 / total.max(1) as f64;
        let mut waits: Vec<Duration> = shares.into_iter().flat_map(|s| s.waits).collect();
        let worst = waits.iter().copied().max().unwrap_or_default();
        let label = if in_processes {
            "W6 fairness, 3 processes x 4 threads"
        } else {
            "W6 fairness, 3 managers x 4 threads"
        };
        let counts: Vec<String> = counts.iter().map(u64::to_string).collect();
        rows.push(
            row(
                label,
                "critical sections per party (min share)",
                format!("{} ({:.1} %)", counts.join(" / "), min_share * 100.0),
            )
            .target("≥ 25 % each"),
        );
        rows.push(row(label, "worst single wait", human(worst)).target("< 2 s"));
        if !waits.is_empty() {
            let waits = percentiles(&mut waits);
            rows.push(row(
                label,
                "acquire wait p50 / p99",
                format!("{} / {}", human(waits.p50), human(waits.p99)),
            ));
        }
        rows.push(row(
            label,
            "lock requests per acquisition (all / worst party)",
            format!(
                "{:.2} / {worst_party:.2}",
                commands as f64 / total.max(1) as f64
            ),
        ));
    }
    rows
}

/// W6s's threads in each manager.
const W6S_THREADS: usize = 8;
/// W6s's critical section: long enough that a poller seldom finds the lock free by chance
/// between a release and the holder's next acquire (with W6's 200 µs it often does).
const W6S_CRITICAL_SECTION: Duration = Duration::from_millis(5);
/// What a Redisson poller does outside the lock between its acquisitions: without it, a
/// client that takes the lock again at once after its own unlock keeps every poller out.
const W6S_JAVA_PAUSE: Duration = Duration::from_millis(10);

/// What one W6s thread did.
#[derive(Default)]
struct SpinTurns {
    critical_sections: u64,
    waits: Vec<Duration>,
}

/// One W6s critical section, with W6's exclusion checks in Redis.
fn w6s_critical_section(conn: &mut redis::Connection, keys: &str) {
    let (inside, counter) = (format!("{keys}:inside"), format!("{keys}:counter"));
    let entered: bool = conn.set_nx(&inside, 1).expect("SET NX");
    if !entered {
        violation(format!("W6s: two holders of {keys}:lock at once"));
    }
    let value: Option<u64> = conn.get(&counter).expect("GET");
    thread::sleep(W6S_CRITICAL_SECTION);
    let _: () = conn.set(&counter, value.unwrap_or(0) + 1).expect("SET");
    let _: () = conn.del(&inside).expect("DEL");
}

/// One W6s thread of a manager: spin lock → critical section → unlock until `stop`.
fn w6s_worker(manager: &LockManager, url: &str, keys: &str, stop: &AtomicBool) -> SpinTurns {
    let mut conn = support::nodelay_conn(url);
    let spin = manager.get_spin_lock(&format!("{keys}:lock"));
    let mut turns = SpinTurns::default();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let guard = spin.lock().expect("spin lock");
        turns.waits.push(start.elapsed());
        w6s_critical_section(&mut conn, keys);
        guard.unlock().expect("unlock");
        turns.critical_sections += 1;
    }
    turns
}

/// A Redisson client's `RSpinLock` loop, as raw scripts with Redisson's back-off, pausing
/// [`W6S_JAVA_PAUSE`] outside the lock between its acquisitions.
fn w6s_java(url: &str, keys: &str, stop: &AtomicBool) -> SpinTurns {
    let mut conn = support::nodelay_conn(url);
    let mut java = support::redisson_spin::JavaSpinLock::new(support::nodelay_conn(url), 1);
    let lock = format!("{keys}:lock");
    let mut turns = SpinTurns::default();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        if !java.try_lock(&lock, Duration::from_secs(60)) {
            violation(format!(
                "W6s: the Redisson poller waited a minute for {lock}"
            ));
            break;
        }
        turns.waits.push(start.elapsed());
        w6s_critical_section(&mut conn, keys);
        if java.unlock(&lock) != Some(1) {
            violation(format!(
                "W6s: the Redisson poller's unlock of {lock} failed"
            ));
        }
        turns.critical_sections += 1;
        thread::sleep(W6S_JAVA_PAUSE);
    }
    turns
}

/// W6 on a spin lock (issue 29): 2 managers × [`W6S_THREADS`] threads, the same with a
/// Redisson poller besides, and one manager with twice the threads (what the gaps cost when
/// nobody else comes). Each party's share, the least share of one thread, the worst single
/// wait and the critical sections per second.
fn w6s_spin_fairness(url: &str, scale: &Scale) -> Vec<Row> {
    let mut conn = support::nodelay_conn(url);
    let mut rows = Vec::new();
    for (managers, threads, java) in [
        (2, W6S_THREADS, false),
        (2, W6S_THREADS, true),
        (1, 2 * W6S_THREADS, false),
    ] {
        let keys = match (managers, java) {
            (_, true) => "loadgen:w6s:java",
            (1, _) => "loadgen:w6s:alone",
            _ => "loadgen:w6s",
        };
        let _: () = conn
            .del(
                ["lock", "inside", "counter"]
                    .map(|k| format!("{keys}:{k}"))
                    .to_vec(),
            )
            .expect("DEL");
        let managers: Vec<LockManager> = (0..managers)
            .map(|_| LockManager::new(url).expect("manager"))
            .collect();
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let (parties, elapsed): (Vec<Vec<SpinTurns>>, Duration) = thread::scope(|s| {
            let stop = &stop;
            let mut handles: Vec<Vec<_>> = managers
                .iter()
                .map(|manager| {
                    (0..threads)
                        .map(|_| s.spawn(move || w6s_worker(manager, url, keys, stop)))
                        .collect()
                })
                .collect();
            if java {
                handles.push(vec![s.spawn(move || w6s_java(url, keys, stop))]);
            }
            thread::sleep(scale.w6_duration);
            stop.store(true, Ordering::Relaxed);
            let parties = handles
                .into_iter()
                .map(|threads| {
                    threads
                        .into_iter()
                        .map(|t| t.join().expect("W6s thread"))
                        .collect()
                })
                .collect();
            (parties, started.elapsed())
        });
        rows.extend(w6s_rows(&mut conn, keys, java, parties, elapsed));
    }
    rows
}

/// The rows of one W6s run, after checking its counter.
fn w6s_rows(
    conn: &mut redis::Connection,
    keys: &str,
    java: bool,
    parties: Vec<Vec<SpinTurns>>,
    elapsed: Duration,
) -> Vec<Row> {
    let label = match (parties.len(), java) {
        (_, true) => "W6s spin lock, 2 managers x 8 threads + a Redisson poller",
        (1, _) => "W6s spin lock, 1 manager x 16 threads",
        _ => "W6s spin lock, 2 managers x 8 threads",
    };
    let managers = parties.len() - usize::from(java);
    let per_party: Vec<u64> = parties
        .iter()
        .map(|threads| threads.iter().map(|t| t.critical_sections).sum())
        .collect();
    let total: u64 = per_party.iter().sum();
    let counter: Option<u64> = conn.get(format!("{keys}:counter")).expect("GET");
    if counter.unwrap_or(0) != total {
        violation(format!(
            "{keys}:counter is {counter:?} after {total} critical sections"
        ));
    }
    let share = |n: u64| n as f64 / total.max(1) as f64 * 100.0;
    let managers_least = per_party[..managers].iter().min().copied().unwrap_or(0);
    let java_turns = java.then(|| {
        let turns = &parties[managers][0];
        (turns.critical_sections, turns.waits.iter().copied().max())
    });
    let thread_least = parties[..managers]
        .iter()
        .flatten()
        .map(|t| t.critical_sections)
        .min()
        .unwrap_or(0);
    let mut waits: Vec<Duration> = parties
        .into_iter()
        .flatten()
        .flat_map(|t| t.waits)
        .collect();
    let worst = waits.iter().copied().max().unwrap_or_default();
    let counts: Vec<String> = per_party.iter().map(u64::to_string).collect();
    let mut rows = vec![
        row(
            label,
            "critical sections per party (least manager's share)",
            format!("{} ({:.1} %)", counts.join(" / "), share(managers_least)),
        ),
        row(
            label,
            "least critical sections of one thread (share)",
            format!("{thread_least} ({:.2} %)", share(thread_least)),
        ),
        row(label, "worst single wait", human(worst)),
        row(
            label,
            "critical sections/s",
            format!("{:.0}", total as f64 / elapsed.as_secs_f64()),
        ),
    ];
    if let Some((critical_sections, worst)) = java_turns {
        rows.push(row(
            label,
            "the Redisson poller: critical sections, worst wait",
            format!("{critical_sections}, {}", human(worst.unwrap_or_default())),
        ));
    }
    if !waits.is_empty() {
        let waits = percentiles(&mut waits);
        rows.push(row(
            label,
            "acquire wait p50 / p99",
            format!("{} / {}", human(waits.p50), human(waits.p99)),
        ));
    }
    rows
}

/// A duration in the unit that suits it (W6's waits range from microseconds to seconds).
fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        micros(d)
    }
}

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
fn settle_w3(mut ready: impl FnMut() -> bool) -> bool {
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
fn w3_handoff(url: &str, scale: &Scale) -> Vec<Row> {
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
fn w3_in_process(url: &str, scale: &Scale) -> Vec<Row> {
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

/// W7: the fair lock's handoff to a waiter already queued and subscribed, against the plain
/// lock's (as W3), sample by sample in the same loop. Holder and waiter use separate
/// managers. The fair waiter is told on its own channel; its attempt also leaves the queue.
fn w7_fair_handoff(url: &str, scale: &Scale) -> Vec<Row> {
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

/// W8: 4 readers and 1 writer on one read-write lock for the W2 duration, against the same 5
/// threads taking the plain lock for everything. The writer increments a counter
/// non-atomically; a reader reads it twice and finds it unchanged (else a writer overlapped a
/// reader). Readers pause 100 µs between holds: without any pause their holds overlap
/// without a gap and, as in Redisson, the writer would wait for all of them to stop.
fn w8_read_write(url: &str, scale: &Scale) -> Vec<Row> {
    const READERS: usize = 4;
    let manager = LockManager::new(url).expect("manager");
    let counter = "loadgen:w8:counter";
    // Returns (read holds, write holds) done in the duration.
    let run = |exclusive: bool| -> (u64, u64) {
        let mut conn = support::nodelay_conn(url);
        let _: () = conn.del(counter).expect("DEL");
        let name = if exclusive {
            "loadgen:w8:plain"
        } else {
            "loadgen:w8:rw"
        };
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(READERS + 2);
        let (reads, writes) = (AtomicU64::new(0), AtomicU64::new(0));
        thread::scope(|s| {
            for i in 0..=READERS {
                let writer = i == READERS;
                let (manager, stop, barrier) = (&manager, &stop, &barrier);
                let (reads, writes) = (&reads, &writes);
                s.spawn(move || {
                    let mut conn = support::nodelay_conn(url);
                    let rw = manager.get_read_write_lock(name);
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let guard = match (exclusive, writer) {
                            (true, _) => manager.lock(name),
                            (false, true) => rw.write_lock().lock(),
                            (false, false) => rw.read_lock().lock(),
                        }
                        .expect("lock");
                        if writer {
                            increment(&mut conn, counter);
                            writes.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let first: Option<u64> = conn.get(counter).expect("GET");
                            let second: Option<u64> = conn.get(counter).expect("GET");
                            if first != second {
                                violation(format!("{name}: a write overlapped a read hold"));
                            }
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        guard.unlock().expect("unlock");
                        if !writer {
                            thread::sleep(Duration::from_micros(100));
                        }
                    }
                });
            }
            barrier.wait();
            thread::sleep(scale.w2_duration);
            stop.store(true, Ordering::Relaxed);
        });
        let (reads, writes) = (reads.into_inner(), writes.into_inner());
        let value: Option<u64> = conn.get(counter).expect("GET counter");
        if value.unwrap_or(0) != writes {
            violation(format!("{counter} is {value:?} after {writes} writes"));
        }
        (reads, writes)
    };
    let start = Instant::now();
    let (reads, writes) = run(false);
    let rw_elapsed = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let (plain_reads, plain_writes) = run(true);
    let plain_elapsed = start.elapsed().as_secs_f64();
    let rw_total = (reads + writes) as f64 / rw_elapsed;
    let plain_total = (plain_reads + plain_writes) as f64 / plain_elapsed;
    vec![
        row(
            "W8 rw lock",
            "4 readers + 1 writer: holds/s, against all 5 on the plain lock",
            format!("{rw_total:.0}/s"),
        )
        .against(format!("{plain_total:.0}/s"), rw_total / plain_total, ""),
        row(
            "W8 rw lock",
            "of which read holds/s, write holds/s",
            format!(
                "{:.0}/s, {:.0}/s",
                reads as f64 / rw_elapsed,
                writes as f64 / rw_elapsed
            ),
        ),
    ]
}

/// The acquire script (`redis_rlock::lua::ACQUIRE`, loaded as `acquire`) for `owner` on lock
/// `key`, with a 30 s lease, as the raw handoffs' waiters send it.
fn raw_acquire_call(
    acquire: &redis::Script,
    key: &str,
    owner: &str,
    attempt_id: u64,
) -> redis::Cmd {
    let mut call = redis::cmd("EVALSHA");
    call.arg(acquire.get_hash())
        .arg(3)
        .arg(key)
        .arg(format!("redis_rlock__attempt:{{{key}}}:{owner}"))
        .arg(format!("redis_rlock__waiters:{{{key}}}"))
        .arg(30_000)
        .arg(owner)
        .arg(attempt_id)
        .arg(11_000);
    call
}

/// Who sends a raw pub/sub-woken waiter's acquire.
#[derive(Clone, Copy, PartialEq)]
enum RawSender {
    /// The waiting thread, once the listener has woken it: what this crate does.
    Waiter,
    /// The listener thread, on the waiter's connection, before it wakes the waiter, who then
    /// only reads the reply: the thread wake-up overlaps the round trip (the idea in the
    /// fairness issue's W3 section, at its floor).
    Listener,
}

/// The least a pub/sub-woken lock can do, with no crate code: a listener thread blocked on
/// a subscribed connection wakes a waiting thread through a condvar, and the acquire script
/// goes out on the waiter's own connection, sent by `sender`. Measured from the release being
/// sent (raw EVALSHA, which publishes) to the waiter's acquire returning.
fn raw_pubsub_handoff(url: &str, n: usize, sender: RawSender) -> Vec<Duration> {
    use std::sync::{mpsc, Arc, Condvar};
    let key = "loadgen:w3:raw";
    let channel = "redisson_lock__channel:{loadgen:w3:raw}";
    let owner = "00000000-0000-0000-0000-000000000000:2";
    /// What the listener and the waiter share.
    #[derive(Default)]
    struct Wake {
        messages: u64,
        /// `RawSender::Listener`: the waiter's connection and its packed acquire, left for
        /// the listener to send on the next message.
        armed: Option<(redis::Connection, Vec<u8>)>,
        /// The connection the listener sent the acquire on, its reply unread.
        in_flight: Option<redis::Connection>,
    }
    let woken = Arc::new((Mutex::new(Wake::default()), Condvar::new()));
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
                    let (state, wake) = &*woken;
                    let mut state = state.lock().unwrap();
                    state.messages += 1;
                    if let Some((mut conn, packed)) = state.armed.take() {
                        conn.send_packed_command(&packed).expect("send the acquire");
                        state.in_flight = Some(conn);
                    }
                    drop(state);
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
        let mut conn = Some(support::nodelay_conn(url));
        let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
        acquire
            .load(conn.as_mut().expect("a connection"))
            .expect("SCRIPT LOAD");
        thread::spawn(move || {
            let mut seen = 0;
            while go.recv().is_ok() {
                // One attempt id per wake-up.
                let call = |attempt_id| raw_acquire_call(&acquire, key, owner, attempt_id);
                let (state, wake) = &*woken;
                let mut state = state.lock().unwrap();
                if sender == RawSender::Listener {
                    let packed = call(seen + 1).get_packed_command();
                    state.armed = Some((conn.take().expect("the connection"), packed));
                }
                while state.messages == seen {
                    state = wake.wait(state).unwrap();
                }
                seen = state.messages;
                let reply = match state.in_flight.take() {
                    Some(sent) => {
                        drop(state);
                        let sent = conn.insert(sent);
                        sent.recv_response().expect("raw acquire")
                    }
                    None => {
                        if let Some((own, _)) = state.armed.take() {
                            conn = Some(own);
                        }
                        drop(state);
                        let own = conn.as_mut().expect("the connection");
                        call(seen).query(own).expect("raw acquire")
                    }
                };
                let acquired = Instant::now();
                let held_by: Option<i64> = redis::from_redis_value(reply).expect("a PTTL or nil");
                assert!(held_by.is_none(), "the raw waiter gets the lock");
                let own = conn.as_mut().expect("the connection");
                let _: () = redis::cmd("DEL").arg(key).query(own).expect("DEL");
                done_tx.send(acquired).unwrap();
            }
        })
    };
    let samples = time_raw_handoffs(url, key, n, go_tx, &done);
    stop.store(true, Ordering::Relaxed);
    waiter.join().expect("raw waiter");
    listener.join().expect("raw listener");
    samples
}

/// The holder's side of a raw handoff, `n` times: take `key` with the raw scripts, tell the
/// waiter (`go`) to wait, let it settle as long as every W3 waiter, release, and time from the
/// release being sent (as in [`w3_handoff`]) to the instant the waiter reports on `done`.
/// Dropping `go` at the end tells the waiter to finish.
fn time_raw_handoffs(
    url: &str,
    key: &str,
    n: usize,
    go: std::sync::mpsc::Sender<()>,
    done: &std::sync::mpsc::Receiver<Instant>,
) -> Vec<Duration> {
    let mut holder = RawLock::connect(url, key);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        holder.acquire();
        go.send(()).unwrap();
        // The waiter blocks at once; then it sleeps as long as the other handoffs' waiters.
        settle_w3(|| true);
        let released = Instant::now();
        holder.release();
        let acquired = done.recv().expect("raw waiter");
        samples.push(acquired.saturating_duration_since(released));
    }
    samples
}

/// What the raw own-subscription waiter sends to take the lock.
#[derive(Clone, Copy)]
enum RawAcquire {
    /// This crate's acquire script (Redisson's hash and the attempt marker).
    Script,
    /// `SET NX PX`, as python-redis-lock's waiter: what the script costs beyond it.
    SetNx,
}

/// The floor of any pub/sub-woken handoff, with no crate code: the waiting thread itself
/// reads its own subscribed RESP3 connection (RESP3 lets a subscribed connection send other
/// commands) and, on the unlock message, sends its acquire (`acquire_with`) on that same
/// connection.
/// One thread wake-up and one round trip on a connection that just read, as a BLPOP waiter;
/// but each waiter holds a connection of its own, as with BLPOP. Measured as
/// [`raw_pubsub_handoff`].
fn raw_own_subscription_handoff(url: &str, n: usize, acquire_with: RawAcquire) -> Vec<Duration> {
    use redis::IntoConnectionInfo;
    use std::sync::mpsc;
    let key = "loadgen:w3:own";
    let channel = "redisson_lock__channel:{loadgen:w3:own}";
    let owner = "00000000-0000-0000-0000-000000000000:3";
    let info = url.into_connection_info().expect("URL");
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let info = info
        .set_redis_settings(settings)
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    let mut conn = redis::Client::open(info)
        .and_then(|c| c.get_connection())
        .expect("RESP3 connection");
    let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
    acquire.load(&mut conn).expect("SCRIPT LOAD");
    conn.send_packed_command(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command())
        .expect("SUBSCRIBE");
    match conn.recv_response().expect("SUBSCRIBE confirmed") {
        redis::Value::Push { .. } => {}
        other => panic!("SUBSCRIBE answered {other:?}"),
    }
    let (go_tx, go) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<Instant>();
    let waiter = thread::spawn(move || {
        let mut attempt = 0u64;
        while go.recv().is_ok() {
            // Blocked in the read until the unlock message.
            loop {
                match conn.recv_response().expect("unlock message") {
                    redis::Value::Push {
                        kind: redis::PushKind::Message,
                        ..
                    } => break,
                    _ => continue,
                }
            }
            attempt += 1;
            let call = match acquire_with {
                RawAcquire::Script => raw_acquire_call(&acquire, key, owner, attempt),
                RawAcquire::SetNx => {
                    let mut call = redis::cmd("SET");
                    call.arg(key).arg(owner).arg("NX").arg("PX").arg(30_000);
                    call
                }
            };
            conn.send_packed_command(&call.get_packed_command())
                .expect("send the acquire");
            let reply = loop {
                match conn.recv_response().expect("raw acquire") {
                    redis::Value::Push { .. } => continue,
                    reply => break reply,
                }
            };
            let acquired = Instant::now();
            let acquired_now = match acquire_with {
                RawAcquire::Script => reply == redis::Value::Nil,
                RawAcquire::SetNx => reply == redis::Value::Okay,
            };
            assert!(acquired_now, "the raw waiter gets the lock: {reply:?}");
            conn.send_packed_command(&redis::cmd("DEL").arg(key).get_packed_command())
                .expect("DEL");
            loop {
                if !matches!(
                    conn.recv_response().expect("DEL"),
                    redis::Value::Push { .. }
                ) {
                    break;
                }
            }
            done_tx.send(acquired).unwrap();
        }
    });
    let samples = time_raw_handoffs(url, key, n, go_tx, &done);
    waiter.join().expect("raw waiter");
    samples
}

/// The release of python-redis-lock's handoff (ionelmc's library), written here from its
/// documented algorithm: if the caller still owns the lock, empty the signal list, push one
/// token onto it (so that exactly one `BLPOP` waiter wakes), let the list expire, and delete
/// the lock. KEYS: the lock, the signal list; ARGV: the owner's token, the list's expiry in ms.
const BLPOP_RELEASE: &str = r#"
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call("del", KEYS[2])
redis.call("lpush", KEYS[2], 1)
redis.call("pexpire", KEYS[2], ARGV[2])
redis.call("del", KEYS[1])
return 1
"#;

/// python-redis-lock's handoff done raw, for comparison with pub/sub: the waiter retries
/// `SET NX PX` and, while that fails, blocks in `BLPOP lock-signal:<name>` on its own
/// connection; the release pushes a token there. Measured as in [`raw_pubsub_handoff`]: from
/// the release returning to the waiter's successful `SET NX` returning. A waiter needs no
/// listener thread, but each one blocks a connection of its own.
fn blpop_handoff(url: &str, n: usize) -> Vec<Duration> {
    use std::sync::mpsc;
    let key = "loadgen:w3:blpop";
    let signal = "lock-signal:loadgen:w3:blpop";
    let mut waiter_conn = support::nodelay_conn(url);
    let waiter_id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(&mut waiter_conn)
        .expect("CLIENT ID");
    let (go_tx, go) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<Instant>();
    let waiter = thread::spawn(move || {
        let mut conn = waiter_conn;
        while go.recv().is_ok() {
            loop {
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg("waiter")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query(&mut conn)
                    .expect("SET NX");
                if set.is_some() {
                    break;
                }
                // python-redis-lock blocks for the lock's expiry; 5 s is longer than any
                // handoff here and bounds a lost signal.
                let _: Option<(String, String)> = conn.blpop(signal, 5.0).expect("BLPOP");
            }
            let acquired = Instant::now();
            let _: () = conn.del(key).expect("DEL");
            done_tx.send(acquired).unwrap();
        }
    });

    let mut conn = support::nodelay_conn(url);
    let release = redis::Script::new(BLPOP_RELEASE);
    release.load(&mut conn).expect("SCRIPT LOAD");
    let mut observer = support::nodelay_conn(url);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let _: () = conn.del(&[key, signal]).expect("DEL");
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("holder")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut conn)
            .expect("SET NX");
        assert!(set.is_some(), "the BLPOP holder gets the free lock");
        go_tx.send(()).unwrap();
        // The waiter is blocked once the server lists its connection as blocked in BLPOP.
        let blocked = settle_w3(|| {
            let line: String = redis::cmd("CLIENT")
                .arg("LIST")
                .arg("ID")
                .arg(waiter_id)
                .query(&mut observer)
                .expect("CLIENT LIST");
            line.contains("cmd=blpop") && line.contains("flags=b")
        });
        assert!(blocked, "the BLPOP waiter blocked");
        let released_at = Instant::now(); // from the send, as in w3_handoff
        let released: i64 = release
            .key(key)
            .key(signal)
            .arg("holder")
            .arg(1_000)
            .invoke(&mut conn)
            .expect("BLPOP release");
        assert_eq!(released, 1, "the BLPOP holder held the lock");
        let acquired = done.recv().expect("BLPOP waiter");
        samples.push(acquired.saturating_duration_since(released_at));
    }
    drop(go_tx);
    waiter.join().expect("BLPOP waiter");
    samples
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

/// How long W5 counts the waiters' looks while nothing is released: several back-off caps.
const W5_LOOK_WINDOW: Duration = Duration::from_secs(12);

/// W5: many threads each blocked on its own lock, then all released at once.
fn w5_waiter_scale(url: &str, scale: &Scale) -> Vec<Row> {
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

/// W1, W4 and W5 on a real cluster (3 masters, 3 replicas, all on this machine) started
/// here: the lock against its two scripts sent raw to the same node, renewals per master, and
/// the listeners of many waiters spread over the masters.
fn cluster_workloads(scale: &Scale) -> Vec<Row> {
    let cluster = support::cluster::RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let mut rows = Vec::new();

    // W1: lock+unlock of one name against the raw scripts on its slot's master. Replica sync
    // adds a WAIT (and the replica's acknowledgement) to each acquire and release: measured
    // both ways, the floor being the scripts alone.
    let key = "loadgen:cluster:w1";
    let master = cluster.master_for_slot(support::cluster::RedisCluster::slot_of(key));
    // A raw key on the same master (a script's keys must share a slot, so not a tagged one).
    let raw_key = (0..)
        .map(|i| format!("loadgen:cluster:w1:raw{i}"))
        .find(|k| cluster.master_for_slot(support::cluster::RedisCluster::slot_of(k)) == master)
        .expect("a key on the same master");
    let mut raw = RawLock::connect(&format!("redis://127.0.0.1:{master}/"), &raw_key)
        .publishing_with("spublish");
    let unsynced = LockManager::cluster_builder(&seeds)
        .replica_sync(false)
        .build()
        .expect("cluster manager");
    let synced = LockManager::cluster_builder(&seeds)
        .build()
        .expect("cluster manager");
    let cycles = scale.w1_cycles;
    let rounds = 10;
    let (mut raw_samples, mut lock_samples, mut synced_samples) = (
        Vec::with_capacity(cycles),
        Vec::with_capacity(cycles),
        Vec::with_capacity(cycles),
    );
    for _ in 0..rounds {
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            raw.acquire();
            raw.release();
            raw_samples.push(start.elapsed());
        }
        for (manager, samples) in [
            (&unsynced, &mut lock_samples),
            (&synced, &mut synced_samples),
        ] {
            for _ in 0..cycles / rounds {
                let start = Instant::now();
                manager.lock(key).expect("lock").unlock().expect("unlock");
                samples.push(start.elapsed());
            }
        }
    }
    let raw = percentiles(&mut raw_samples);
    let lock = percentiles(&mut lock_samples);
    let synced_cycle = percentiles(&mut synced_samples);
    let label = "W1 on a cluster";
    rows.push(
        row(label, "cycle p50, replica sync off", micros(lock.p50)).against(
            micros(raw.p50),
            lock.p50.as_secs_f64() / raw.p50.as_secs_f64(),
            "≤ 1.1",
        ),
    );
    rows.push(
        row(
            label,
            "cycle p50, replica sync on (WAIT)",
            micros(synced_cycle.p50),
        )
        .against(
            micros(raw.p50),
            synced_cycle.p50.as_secs_f64() / raw.p50.as_secs_f64(),
            "",
        ),
    );
    drop((unsynced, synced));

    // W4: many watchdog holds over the three masters.
    let manager = LockManager::cluster_builder(&seeds)
        .watchdog_timeout(scale.w4_timeout)
        .build()
        .expect("cluster manager");
    let n = scale.w4_locks;
    let guards: Vec<LockGuard> = (0..n)
        .map(|i| {
            manager
                .lock(&format!("loadgen:cluster:w4:{i}"))
                .expect("lock")
        })
        .collect();
    let before = manager.stats();
    thread::sleep(scale.w4_hold);
    let after = manager.stats();
    let sweeps = after.renewal_sweeps - before.renewal_sweeps;
    let trips = after.round_trips - before.round_trips;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let not_held = guards
        .into_iter()
        .filter(|g| g.lock().hold_count().ok() != Some(1))
        .count();
    if lost + not_held > 0 {
        violation(format!(
            "cluster W4: {lost} holds lost, {not_held} not held"
        ));
    }
    let label = "W4 on a cluster";
    rows.push(
        row(
            label,
            format!(
                "{n} locks over 3 masters, {:?} timeout: locks lost",
                scale.w4_timeout
            ),
            format!("{}", lost + not_held),
        )
        .target("0"),
    );
    rows.push(
        row(
            label,
            "round trips per renewal sweep",
            format!(
                "{:.2} ({trips} in {sweeps} sweeps)",
                trips as f64 / sweeps.max(1) as f64
            ),
        )
        .target("≤ 3 (one pipeline per master)"),
    );
    drop(manager);

    // W5: blocked waiters on locks spread over the masters, one listener per master.
    let holder = LockManager::cluster_builder(&seeds)
        .build()
        .expect("holder");
    let waiters = LockManager::cluster_builder(&seeds)
        .build()
        .expect("waiters");
    let n = scale.w5_waiters;
    let names: Vec<String> = (0..n).map(|i| format!("loadgen:cluster:w5:{i}")).collect();
    let guards: Vec<LockGuard> = names
        .iter()
        .map(|name| holder.lock(name).expect("holder lock"))
        .collect();
    let threads: Vec<_> = names
        .iter()
        .map(|name| {
            let (manager, name) = (waiters.clone(), name.clone());
            thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    manager
                        .lock(&name)
                        .expect("waiter lock")
                        .unlock()
                        .expect("unlock")
                })
                .expect("spawn waiter")
        })
        .collect();
    let all_waiting = support::eventually(Duration::from_secs(60), || {
        waiters.waiting_channel_count() == n
    });
    let listeners = waiters.listener_count();
    let started = Instant::now();
    drop(guards);
    let served = threads.into_iter().filter_map(|t| t.join().ok()).count();
    let all_served = started.elapsed();
    if !all_waiting || served != n || listeners != 3 {
        violation(format!(
            "cluster W5: {served} of {n} waiters served, {listeners} listeners"
        ));
    }
    let label = "W5 on a cluster";
    rows.push(
        row(
            label,
            format!("{n} blocked threads: subscriber connections"),
            listeners.to_string(),
        )
        .target("3 (one per master)"),
    );
    rows.push(row(
        label,
        "all waiters served after the releases",
        format!("{served} / {n} in {:.1} ms", all_served.as_secs_f64() * 1e3),
    ));
    rows
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
