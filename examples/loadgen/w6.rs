//! W6: fairness between managers in one process and between processes (this binary run
//! again as children).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation, VIOLATIONS};
use crate::table::{human, row, Row};

/// The argument that makes this binary a W6 child process ([`w6_child`]).
pub(crate) const W6_CHILD: &str = "--w6-child";
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
pub(crate) fn w6_child() -> ExitCode {
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
pub(crate) fn w6_fairness(url: &str, scale: &Scale) -> Vec<Row> {
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
