//! `LockManager::shutdown` (issue 24): every waiting call of the manager and its clones
//! returns `Error::Shutdown` at once, of every kind, leaving nothing behind; later acquires
//! fail so without I/O; guards and permits taken before keep working until dropped.

use redis_rlock_testkit as support;

use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{Error, LockManager, Result};
use support::cluster::RedisCluster;
use support::{eventually, RedisServer};

/// How long a woken wait may take to return (the target is a few ms).
const PROMPT: Duration = Duration::from_secs(1);
const SETTLE: Duration = Duration::from_secs(10);

fn manager(server: &RedisServer) -> LockManager {
    LockManager::new(&server.url()).expect("manager")
}

/// Shuts `manager` down and checks that every call in `waiters` returns `Shutdown` within
/// [`PROMPT`]; prints the slowest.
fn shut_down_and_expect(
    manager: &LockManager,
    waiters: Vec<(&str, thread::JoinHandle<Result<()>>)>,
) {
    let shut = Instant::now();
    manager.shutdown();
    assert!(manager.is_shut_down());
    for (what, waiter) in waiters {
        let outcome = waiter.join().expect("waiter thread");
        let latency = shut.elapsed();
        println!("{what}: returned within {latency:?} of shutdown()");
        match outcome {
            Err(err @ Error::Shutdown { .. }) => assert!(err.is_shutdown() && !err.is_cancelled()),
            other => panic!("{what}: expected Shutdown, got {other:?}"),
        }
        assert!(latency < PROMPT, "{what}: {latency:?}");
    }
}

#[test]
fn a_shutdown_ends_the_waits_of_every_kind_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let (holder, waiting) = (manager(&server), manager(&server));
    let mut conn = server.conn();
    let _lock = holder.lock("shut:lock").unwrap();
    let _fair = holder.get_fair_lock("shut:fair").lock().unwrap();
    let _read = holder
        .get_read_write_lock("shut:rw")
        .read_lock()
        .lock()
        .unwrap();
    assert!(waiting
        .get_semaphore("shut:sem")
        .try_set_permits(0)
        .unwrap());
    assert!(waiting
        .get_count_down_latch("shut:latch")
        .try_set_count(1)
        .unwrap());
    assert!(waiting
        .get_permit_expirable_semaphore("shut:pes")
        .try_set_permits(0)
        .unwrap());
    // Each wait on a clone of the manager: the shutdown reaches them all.
    let spawn = |body: Box<dyn FnOnce(LockManager) -> Result<()> + Send>| {
        let clone = waiting.clone();
        thread::spawn(move || body(clone))
    };
    let waiters = vec![
        ("lock", spawn(Box::new(|m| m.lock("shut:lock").map(drop)))),
        (
            "fair lock",
            spawn(Box::new(|m| m.get_fair_lock("shut:fair").lock().map(drop))),
        ),
        (
            "write lock",
            spawn(Box::new(|m| {
                m.get_read_write_lock("shut:rw")
                    .write_lock()
                    .lock()
                    .map(drop)
            })),
        ),
        (
            "semaphore",
            spawn(Box::new(|m| m.get_semaphore("shut:sem").acquire(1))),
        ),
        (
            "latch",
            spawn(Box::new(|m| m.get_count_down_latch("shut:latch").wait())),
        ),
        (
            "permit-expirable semaphore",
            spawn(Box::new(|m| {
                m.get_permit_expirable_semaphore("shut:pes")
                    .acquire(Some(Duration::from_secs(60)))
                    .map(drop)
            })),
        ),
    ];
    assert!(eventually(SETTLE, || waiting.waiting_channel_count() == 6));
    shut_down_and_expect(&waiting, waiters);
    assert_eq!(waiting.waiting_channel_count(), 0);
    let permits: usize = conn.zcard("{shut:pes}:timeout").unwrap();
    assert_eq!(permits, 0, "no permit taken");
    let queue: usize = conn.llen("redisson_lock_queue:{shut:fair}").unwrap();
    assert_eq!(queue, 0, "out of the fair queue");
    let registered: Vec<String> = conn.hkeys("redis_rlock__waiters:{shut:lock}").unwrap();
    assert!(
        registered.iter().all(|f| f == "#"),
        "no registration left: {registered:?}"
    );
}

#[test]
fn after_a_shutdown_acquires_fail_without_io_and_guards_keep_working() {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_millis(500));
    let guard = manager.lock("shut:held").unwrap();
    let semaphore = manager.get_semaphore("shut:permits");
    assert!(semaphore.try_set_permits(2).unwrap());
    let permits = semaphore.acquire_guard(1).unwrap();
    manager.clone().shutdown();
    // The watchdog keeps renewing (every 167 ms) and its commands count too: the calls are
    // checked over a pass that no renewal sweep overlapped.
    let sent_by_the_calls = (0..20).find_map(|_| {
        let before = manager.stats();
        let refused = [
            manager.lock("shut:other").map(drop),
            manager.try_lock("shut:other", Duration::ZERO).map(drop),
            manager.get_fair_lock("shut:other").lock().map(drop),
            semaphore.try_acquire(1, Duration::ZERO).map(drop),
            manager
                .get_count_down_latch("shut:latch")
                .wait_timeout(Duration::ZERO)
                .map(drop),
            manager
                .get_permit_expirable_semaphore("shut:pes")
                .try_acquire(Duration::ZERO, None)
                .map(drop),
        ];
        for outcome in refused {
            assert!(outcome.unwrap_err().is_shutdown());
        }
        let after = manager.stats();
        (after.renewal_sweeps == before.renewal_sweeps).then(|| after.commands - before.commands)
    });
    assert_eq!(sent_by_the_calls, Some(0), "nothing sent");
    // The watchdog renews the hold taken before: twice more, past its 500 ms lease.
    let renewals = manager.stats().renewals;
    assert!(eventually(SETTLE, || manager.stats().renewals >= renewals + 2));
    let other = LockManager::new(&server.url()).unwrap();
    assert!(
        other.get_lock("shut:held").is_locked().unwrap(),
        "still held"
    );
    guard.unlock().unwrap();
    assert!(!other.get_lock("shut:held").is_locked().unwrap());
    permits.release().unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 2);
}

#[test]
fn a_shutdown_ends_a_wait_on_a_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let build = || {
        LockManager::cluster_builder(&seeds)
            .build()
            .expect("a manager on the cluster")
    };
    let (holder, waiting) = (build(), build());
    let guard = holder.lock("shut:cluster").unwrap();
    let waiter = {
        let waiting = waiting.clone();
        thread::spawn(move || waiting.lock("shut:cluster").map(drop))
    };
    assert!(eventually(SETTLE, || waiting.waiting_channel_count() == 1));
    shut_down_and_expect(&waiting, vec![("lock on a cluster", waiter)]);
    guard.unlock().unwrap();
    assert!(!holder.get_lock("shut:cluster").is_locked().unwrap());
}
