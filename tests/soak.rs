//! A bounded soak: several processes × threads take one lock at random (fenced, blocking or
//! with a bounded wait) for a few seconds while the test stops processes past their leases
//! (SIGSTOP), cuts every client connection (CLIENT KILL) and restarts the server (SIGKILL and
//! start again; with an append-only file, fsynced always, since a server that forgets its
//! fencing counter restarts the tokens: fencing needs a durable counter). Afterwards, over the critical
//! sections whose holder still held the lock when it left (not lost, unlock confirmed): no
//! two overlapped on the machine's monotonic clock, and their fencing tokens strictly
//! increase in the order they were entered.
//!
//! `REDIS_RLOCK_SOAK_SECS` sets the length (default 8 s; keep it ≤ 60 in CI).

use redis_rlock_testkit as support;

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use redis_rlock::LockManager;
use support::{child_process, read_until_marker, RedisServer};

const URL: &str = "REDIS_RLOCK_TEST_URL";
const UNTIL: &str = "REDIS_RLOCK_TEST_UNTIL_MS";
const LOCK: &str = "soak:lock";
const PROCESSES: usize = 3;
const THREADS: usize = 2;

/// CLOCK_MONOTONIC in ns: one clock for every process on the machine.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A small xorshift generator: enough randomness for choosing operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Entry point of the child processes; does nothing useful when run directly.
#[test]
#[ignore = "entry point for child processes spawned by the other tests"]
fn child_role() {
    let url = std::env::var(URL).expect("spawned with a URL");
    let until: u64 = std::env::var(UNTIL).unwrap().parse().unwrap();
    let manager = LockManager::builder(&url)
        .watchdog_timeout(Duration::from_millis(600))
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    println!("READY");
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let manager = manager.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(monotonic_ns() ^ (std::process::id() as u64) << 8 ^ t as u64 | 1);
                let mut lines = Vec::new();
                while monotonic_ns() < until * 1_000_000 {
                    let got = if rng.next(2) == 0 {
                        manager.lock_fenced(LOCK).map(Some)
                    } else {
                        manager.try_lock_fenced(LOCK, Duration::from_millis(rng.next(50)))
                    };
                    let guard = match got {
                        Ok(Some(guard)) => guard,
                        Ok(None) => continue,
                        Err(_) => {
                            lines.push("ERROR".to_string());
                            std::thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    let enter = monotonic_ns();
                    std::thread::sleep(Duration::from_micros(rng.next(3_000)));
                    let exit = monotonic_ns();
                    let lost = guard.is_lost();
                    let token = guard.fencing_token().unwrap();
                    let released = guard.unlock().is_ok();
                    lines.push(format!("CS {token} {enter} {exit} {}", !lost && released));
                }
                lines
            })
        })
        .collect();
    for thread in threads {
        for line in thread.join().unwrap() {
            println!("{line}");
        }
    }
    println!("DONE");
}

#[test]
fn random_operations_under_faults_never_overlap_and_tokens_increase() {
    let secs: u64 = std::env::var("REDIS_RLOCK_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
        .min(60);
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let until_ms = monotonic_ns() / 1_000_000 + secs * 1_000 + 500;
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let mut child = child_process(
                "child_role",
                &[(URL, server.url()), (UNTIL, until_ms.to_string())],
            )
            .spawn()
            .expect("spawn a soak process");
            let mut out = BufReader::new(child.stdout.take().unwrap());
            read_until_marker(&mut out, "READY");
            (child, out)
        })
        .collect();

    // Faults, one at a time, until the children's time is up.
    let mut rng = Rng(monotonic_ns() | 1);
    let (mut stops, mut kills, mut restarts) = (0, 0, 0);
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() + Duration::from_millis(1_500) < end {
        std::thread::sleep(Duration::from_millis(300 + rng.next(500)));
        let fault = rng.next(3);
        if fault == 0 {
            let pid = children[rng.next(PROCESSES as u64) as usize]
                .0
                .id()
                .to_string();
            let kill = |sig: &str| Command::new("kill").args([sig, &pid]).status().unwrap();
            kill("-STOP");
            std::thread::sleep(Duration::from_millis(900)); // past the 600 ms lease
            kill("-CONT");
            stops += 1;
        } else if fault == 1 {
            let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query(&mut server.conn());
            kills += 1;
        } else {
            server.restart();
            restarts += 1;
        }
    }

    let mut sections = Vec::new();
    let mut errors = 0;
    for (child, out) in &mut children {
        let mut done = false;
        for line in out.lines() {
            let line = line.expect("child output");
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["CS", token, enter, exit, valid] => sections.push((
                    enter.parse::<u64>().unwrap(),
                    exit.parse::<u64>().unwrap(),
                    token.parse::<u64>().unwrap(),
                    *valid == "true",
                )),
                ["ERROR"] => errors += 1,
                ["DONE"] => done = true,
                _ => {}
            }
        }
        assert!(done, "a soak process did not finish");
        assert!(child.wait().unwrap().success());
    }
    let mut valid: Vec<_> = sections.iter().filter(|s| s.3).collect();
    valid.sort();
    eprintln!(
        "soak: {} critical sections ({} valid), {errors} errors, {stops} stops, {kills} kills, \
         {restarts} restarts",
        sections.len(),
        valid.len()
    );
    assert!(valid.len() >= 20, "too little progress: {}", valid.len());
    assert!(stops + kills + restarts > 0, "no fault was injected");
    for pair in valid.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(b.0 >= a.1, "critical sections overlapped: {a:?} and {b:?}");
        assert!(b.2 > a.2, "tokens out of order: {a:?} then {b:?}");
    }
}
