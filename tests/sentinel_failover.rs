//! The guarantees through a `SENTINEL FAILOVER` (a maintenance failover: the old master stays
//! up and writable until the sentinels demote it), with replica sync on (the default), on a
//! master with one replica, as small deployments run, and with two. Threads of two managers
//! keep taking one lock through the failover: fencing tokens are never handed out twice, and
//! afterwards every thread keeps getting the lock (no hold the failover brought back starves
//! anyone), and the lock is free once they stop.

use redis_rlock_testkit as support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_rlock::LockManager;
use support::sentinel::RedisSentinel;

/// Managers, and threads in each, taking the lock.
const MANAGERS: usize = 2;
const THREADS: usize = 2;
/// How long each thread waits for the lock before it counts a wait that timed out.
const WAIT: Duration = Duration::from_secs(5);
/// How long each keeps it.
const HOLD: Duration = Duration::from_millis(20);
/// How many acquisitions every thread must make after the demotion: more than one lease
/// would allow if a hold left behind by the failover kept the others out.
const AFTER: u64 = 5;
/// How long after the demotion they may take for it (a thread gets the lock about every
/// 100 ms while all four take turns; a phantom hold would keep the others out for good).
const AFTER_LIMIT: Duration = Duration::from_secs(45);

fn manager(sentinel: &RedisSentinel) -> LockManager {
    sentinel.manager()
}

/// What the threads saw: every token with the thread that got it, and acquisitions per
/// thread after the demotion.
#[derive(Default)]
struct History {
    tokens: Mutex<Vec<(u64, usize)>>,
    after: Vec<AtomicU64>,
    errors: Mutex<Vec<String>>,
}

fn run_through_failover(replicas: usize, fenced: bool) {
    let sentinel = RedisSentinel::with_replicas(replicas);
    let managers: Vec<LockManager> = (0..MANAGERS).map(|_| manager(&sentinel)).collect();
    let history = Arc::new(History {
        after: (0..MANAGERS * THREADS).map(|_| AtomicU64::new(0)).collect(),
        ..History::default()
    });
    let demoted = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (m, manager) in managers.iter().enumerate() {
        for t in 0..THREADS {
            let index = m * THREADS + t;
            let lock = manager.get_lock("through-failover");
            let (history, demoted, stop) = (history.clone(), demoted.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let taken = if fenced {
                        lock.try_lock_fenced(WAIT)
                    } else {
                        lock.try_lock(WAIT)
                    };
                    let guard = match taken {
                        Ok(Some(guard)) => guard,
                        Ok(None) => continue,
                        Err(err) => {
                            history.errors.lock().unwrap().push(err.to_string());
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    };
                    if let Some(token) = guard.fencing_token() {
                        history.tokens.lock().unwrap().push((token, index));
                    }
                    if demoted.load(Ordering::SeqCst) {
                        history.after[index].fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(HOLD);
                    if let Err(err) = guard.unlock() {
                        history.errors.lock().unwrap().push(err.to_string());
                    }
                }
            }));
        }
    }

    // Some rounds before the failover, so that the counter and the lock exist.
    let started = Instant::now();
    while history.tokens.lock().unwrap().len() < 20 && fenced
        || !fenced && started.elapsed() < Duration::from_millis(500)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let old = sentinel.graceful_failover();
    let promoted = sentinel.wait_for_failover(old);
    sentinel.wait_for_demotion(old);
    demoted.store(true, Ordering::SeqCst);
    let since = Instant::now();
    while since.elapsed() < AFTER_LIMIT
        && history
            .after
            .iter()
            .any(|n| n.load(Ordering::SeqCst) < AFTER)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().expect("a locking thread panicked");
    }

    let after: Vec<u64> = history
        .after
        .iter()
        .map(|n| n.load(Ordering::SeqCst))
        .collect();
    let errors = history.errors.lock().unwrap();
    assert!(
        after.iter().all(|&n| n >= AFTER),
        "after the demotion, the threads acquired {after:?} times in {AFTER_LIMIT:?} \
         (errors: {errors:?})"
    );
    let tokens = history.tokens.lock().unwrap();
    let mut seen = HashMap::new();
    for &(token, index) in tokens.iter() {
        if let Some(first) = seen.insert(token, index) {
            panic!(
                "token {token} was handed out twice (threads {first} and {index}) of {} \
                 (errors: {errors:?})",
                tokens.len()
            );
        }
    }
    // Everyone unlocked: no hold is left on the new master.
    let mut conn = support::connect(&format!("redis://127.0.0.1:{promoted}/")).expect("conn");
    let left: bool = redis::cmd("EXISTS")
        .arg("through-failover")
        .query(&mut conn)
        .expect("EXISTS");
    assert!(
        !left,
        "a hold was left on the new master (errors: {errors:?})"
    );
}

#[test]
fn fencing_tokens_are_never_handed_out_twice_through_a_failover_with_one_replica() {
    run_through_failover(1, true);
}

#[test]
fn fencing_tokens_are_never_handed_out_twice_through_a_failover_with_two_replicas() {
    run_through_failover(2, true);
}

#[test]
fn no_hold_outlives_its_release_through_a_failover_with_one_replica() {
    run_through_failover(1, false);
}

#[test]
fn no_hold_outlives_its_release_through_a_failover_with_two_replicas() {
    run_through_failover(2, false);
}

/// A write that only some of the master's replicas acknowledged counts only when the
/// sentinels vouch that no failover of the master is under way: a replica being promoted
/// leaves its master first, and the others drop what the old master wrote once they follow
/// the new one. Sentinels that do not answer vouch for nothing.
#[test]
fn a_write_some_replicas_missed_needs_the_sentinels_word() {
    let sentinel = RedisSentinel::start();
    let urls = sentinel.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let manager = LockManager::sentinel_builder(&urls, sentinel.master_name())
        .replica_sync_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(500))
        .build()
        .expect("manager");
    manager
        .lock("warm")
        .expect("lock")
        .unlock()
        .expect("unlock");
    let replicas = sentinel.replica_ports();
    // One replica of two answers nothing (its connection stays up: the master still counts it).
    sentinel.pause(replicas[0]);
    sentinel.signal_sentinels("-STOP");
    let err = manager.lock("partly").unwrap_err();
    sentinel.signal_sentinels("-CONT");
    assert!(err.is_not_replicated(), "{err}");
    let left = support::connect(&format!("redis://127.0.0.1:{}/", sentinel.master_port()))
        .and_then(|mut conn| redis::cmd("EXISTS").arg("partly").query::<bool>(&mut conn))
        .expect("EXISTS");
    assert!(!left, "the acquire was not rolled back");
    // With the sentinels' word that the master is settled, one replica is enough.
    let guard = manager
        .lock("partly")
        .expect("lock with the sentinels' word");
    guard.unlock().expect("unlock");
    sentinel.resume(replicas[0]);
}
