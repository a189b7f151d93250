//! Several processes on one lock: mutual exclusion across processes, and a holder killed with
//! SIGKILL whose lock expires after the watchdog timeout.
//!
//! The children are this test binary run again with only the ignored test `child_role`, which
//! reads what to do from environment variables.

use redis_rlock_testkit as support;

use std::io::BufReader;
use std::process::Child;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::{child_process, read_until_marker, RedisServer};

const ROLE: &str = "REDIS_RLOCK_TEST_ROLE";
const URL: &str = "REDIS_RLOCK_TEST_URL";
const ROUNDS: &str = "REDIS_RLOCK_TEST_ROUNDS";

/// Entry point of the child processes spawned below; does nothing useful when run directly.
#[test]
#[ignore = "entry point for child processes spawned by the other tests"]
fn child_role() {
    let role = std::env::var(ROLE).expect("spawned with a role");
    let url = std::env::var(URL).expect("spawned with a URL");
    match role.as_str() {
        "hold-forever" => {
            let manager = LockManager::builder(&url)
                .watchdog_timeout(Duration::from_secs(1))
                .build()
                .unwrap();
            let _guard = manager.lock("killed-holder").unwrap();
            println!("LOCKED");
            loop {
                std::thread::park();
            }
        }
        "count" => {
            let rounds: usize = std::env::var(ROUNDS).unwrap().parse().unwrap();
            let manager = LockManager::new(&url).unwrap();
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            println!("READY");
            // All processes start counting together, so they really contend.
            let _: Option<(String, String)> = conn.blpop("go", 30.0).unwrap();
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let manager = manager.clone();
                    let url = url.clone();
                    std::thread::spawn(move || count(&manager, &url, rounds))
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let _: () = conn.incr("finished", 1).unwrap();
            println!("DONE");
        }
        other => panic!("unknown role {other}"),
    }
}

/// The critical section: a non-atomic read-modify-write, plus an "inside" marker that must be
/// empty on entry (another process inside would have set it).
fn count(manager: &LockManager, url: &str, rounds: usize) {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    for _ in 0..rounds {
        let guard = manager.lock("process-counter-lock").unwrap();
        let was_inside: bool = conn.set_nx("inside", 1).map(|set: bool| !set).unwrap();
        assert!(
            !was_inside,
            "another process was inside the critical section"
        );
        let value: i64 = conn.get("counter").unwrap_or(0);
        let _: () = conn.set("counter", value + 1).unwrap();
        let _: () = conn.del("inside").unwrap();
        guard.unlock().unwrap();
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn processes_never_overlap_in_the_critical_section() {
    const PROCESSES: usize = 3;
    const ROUNDS_PER_THREAD: usize = 30;
    let server = RedisServer::start();
    let mut children: Vec<KillOnDrop> = (0..PROCESSES)
        .map(|_| {
            let child = child_process(
                "child_role",
                &[
                    (ROLE, "count".into()),
                    (URL, server.url()),
                    (ROUNDS, ROUNDS_PER_THREAD.to_string()),
                ],
            )
            .spawn()
            .expect("spawn child");
            KillOnDrop(child)
        })
        .collect();
    // Kept open until the children exit: they print again when done.
    let mut outputs = Vec::new();
    for child in &mut children {
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        read_until_marker(&mut out, "READY");
        outputs.push(out);
    }
    let mut conn = server.conn();
    let _: () = conn.rpush("go", vec![1; PROCESSES]).unwrap();
    for (mut child, mut out) in children.into_iter().zip(outputs) {
        read_until_marker(&mut out, "DONE");
        let status = child.0.wait().unwrap();
        assert!(status.success(), "a child failed: {status}");
    }
    let finished: usize = conn.get("finished").unwrap();
    assert_eq!(finished, PROCESSES);
    let total: usize = conn.get("counter").unwrap();
    assert_eq!(
        total,
        PROCESSES * 2 * ROUNDS_PER_THREAD,
        "lost updates mean overlap"
    );
}

#[test]
fn a_killed_holders_lock_expires_after_the_watchdog_timeout() -> Result<()> {
    let server = RedisServer::start();
    let mut child = KillOnDrop(
        child_process(
            "child_role",
            &[(ROLE, "hold-forever".into()), (URL, server.url())],
        )
        .spawn()
        .expect("spawn child"),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    read_until_marker(&mut out, "LOCKED");

    // While the holder lives, its watchdog (1 s timeout) keeps the lock past two timeouts.
    let manager = LockManager::new(&server.url())?;
    assert!(manager
        .try_lock("killed-holder", Duration::from_millis(2_500))?
        .is_none());

    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let killed = Instant::now();
    let guard = manager
        .try_lock("killed-holder", Duration::from_secs(20))?
        .expect("the dead holder's lock expires");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(5), "expired only after {took:?}");
    guard.unlock()?;
    Ok(())
}
