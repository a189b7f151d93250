//! W6s: W6 on a spin lock, shared with Redisson's spin lock as a Java client runs it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation};
use crate::table::{human, row, Row};

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
pub(crate) fn w6s_spin_fairness(url: &str, scale: &Scale) -> Vec<Row> {
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
