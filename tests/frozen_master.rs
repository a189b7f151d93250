//! Masters that hang (SIGSTOP: a stalled VM, a long fork, a swap storm) rather than die
//! (issue 29, items 4 and 5). A master that stops answering is replaced like a dead one, and
//! the manager must treat its silence (a response timeout) as a failover under way: waiters
//! and fresh acquires ride it out within their wait, new acquires and the watchdog's renewals
//! go to the promoted replica as soon as it serves the slots, while the old master stays
//! stopped.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::{AcquireOptions, Lease, LockGuard, LockManager};
use support::cluster::RedisCluster;
use support::sentinel::RedisSentinel;

/// Longer than any failover here takes, and short of what a test may wait.
const WAIT: Duration = Duration::from_secs(40);

/// A hold with a fixed lease that ends while the master is stopped (so that its waiter looks
/// again during the failover).
fn hold(manager: &LockManager, name: &str, lease: Duration) -> LockGuard {
    manager
        .acquire(name, AcquireOptions::new().lease(Lease::Fixed(lease)))
        .expect("acquire")
        .expect("free")
}

/// `try_lock(name, WAIT)` on a thread of its own; the result says when it acquired, or how
/// it ended.
fn spawn_waiter(
    manager: &LockManager,
    name: &str,
) -> std::thread::JoinHandle<Result<Instant, String>> {
    let (manager, name) = (manager.clone(), name.to_owned());
    std::thread::spawn(move || {
        let started = Instant::now();
        match manager.try_lock(&name, WAIT) {
            Ok(Some(guard)) => {
                let at = Instant::now();
                drop(guard); // its release may meet the stopped master: not the point here
                Ok(at)
            }
            Ok(None) => Err(format!("not acquired within {WAIT:?}")),
            Err(err) => Err(format!("failed after {:?}: {err}", started.elapsed())),
        }
    })
}

/// Four threads of `manager` looping fenced acquires of `name` until `stop` is set, so that
/// its pool is busy (with the stopped master too) while its waiters wait, as in the issue.
fn keep_busy(
    manager: &LockManager,
    name: &str,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|_| {
            let (manager, name, stop) = (manager.clone(), name.to_owned(), stop.clone());
            std::thread::spawn(move || {
                let lock = manager.get_lock(&name);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(Some(guard)) = lock.try_lock_fenced(Duration::from_millis(500)) {
                        drop(guard);
                    }
                }
            })
        })
        .collect()
}

/// A name whose slot `master` serves now.
fn name_on(cluster: &RedisCluster, master: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
        .expect("a name on that master")
}

/// Invariant: on Sentinel, with the master stopped (not killed), a waiter whose holder's
/// lease ends during the stop, a fresh `try_lock` and a semaphore's `try_acquire` started
/// during it all acquire on the promoted replica, within their wait, while their manager is
/// busy with other acquires; and a hold renewed by a 6 s watchdog survives, renewed on the
/// promoted replica. Before, the lock's waiters failed with "acquire timed out after 3.2 s",
/// and the semaphore with "semaphore acquire timed out after 3.1 s".
#[test]
fn sentinel_waiters_ride_out_a_frozen_master() {
    let sentinel = RedisSentinel::with_replicas(1);
    let urls = sentinel.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let build = || {
        LockManager::sentinel_builder(&urls, sentinel.master_name())
            .build()
            .expect("manager")
    };
    let (holder, waiters) = (build(), build());
    let renewer = LockManager::sentinel_builder(&urls, sentinel.master_name())
        .watchdog_timeout(Duration::from_secs(6))
        .build()
        .expect("manager");
    let renewed = renewer
        .lock("frozen-sentinel-renewed")
        .expect("a hold the watchdog renews");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = keep_busy(&waiters, "frozen-sentinel-busy", &stop);
    let permits = "frozen-sentinel-permits";
    assert!(waiters
        .get_semaphore(permits)
        .try_set_permits(1)
        .expect("set permits"));
    let replica = sentinel.replica_ports()[0];
    assert!(support::eventually(Duration::from_secs(10), || {
        let mut conn = support::connect(&format!("redis://127.0.0.1:{replica}/")).expect("connect");
        support::query::<Option<String>>(&mut conn, redis::cmd("GET").arg(permits))
            .is_ok_and(|value| value.is_some())
    }));
    let held = hold(&holder, "frozen-sentinel", Duration::from_secs(2));
    let waiting = spawn_waiter(&waiters, "frozen-sentinel");
    assert!(support::eventually(Duration::from_secs(10), || {
        waiters.waiting_channel_count() >= 1
    }));
    let old = sentinel.master_port();
    sentinel.pause(old);
    let paused = Instant::now();
    let fresh = spawn_waiter(&waiters, "frozen-sentinel-fresh");
    let semaphore = {
        let waiters = waiters.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            match waiters.get_semaphore(permits).try_acquire(1, WAIT) {
                Ok(true) => Ok(Instant::now()),
                Ok(false) => Err(format!("no permit within {WAIT:?}")),
                Err(err) => Err(format!("failed after {:?}: {err}", started.elapsed())),
            }
        })
    };
    let new = sentinel.wait_for_failover(old);
    let promoted = paused.elapsed();
    // Past the lease of the last renewal before the stop: only renewals on the promoted
    // replica keep the hold.
    std::thread::sleep((paused + Duration::from_secs(8)).saturating_duration_since(Instant::now()));
    let mut on_new = support::connect(&format!("redis://127.0.0.1:{new}/")).expect("connect");
    let ttl: i64 = support::query(
        &mut on_new,
        redis::cmd("PTTL").arg("frozen-sentinel-renewed"),
    )
    .expect("PTTL");
    let lost = renewed.is_lost();
    let waited = waiting.join().expect("waiter");
    let fresh = fresh.join().expect("fresh acquire");
    let permit = semaphore.join().expect("semaphore acquire");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for thread in busy {
        thread.join().expect("busy thread");
    }
    sentinel.resume(old);
    drop(held);
    let waited =
        waited.unwrap_or_else(|err| panic!("the waiter (promoted after {promoted:?}) {err}"));
    let fresh =
        fresh.unwrap_or_else(|err| panic!("the fresh acquire (promoted after {promoted:?}) {err}"));
    let permit =
        permit.unwrap_or_else(|err| panic!("the semaphore (promoted after {promoted:?}) {err}"));
    eprintln!(
        "promoted {promoted:?} after the stop; the waiter acquired {:?}, the fresh call {:?} \
         and the semaphore {:?} after the stop; the renewed hold's PTTL {ttl} ms 8 s after it",
        waited - paused,
        fresh - paused,
        permit - paused
    );
    assert!(waited > paused && fresh > paused);
    assert!(
        ttl > 0 && !lost,
        "the watchdog's hold on the promoted replica: PTTL {ttl}, lost {lost}"
    );
}

/// Invariant: on a cluster, with a master stopped (not killed), a waiter and a fresh
/// `try_lock` on its slots acquire on its promoted replica within their wait; a new acquire
/// there succeeds within one response timeout (3 s) and a margin of the promotion, while
/// the old master is still stopped; and a hold renewed by a 6 s watchdog survives, renewed on
/// the promoted replica. Before, the waiters failed with "acquire timed out after 3.2 s", new
/// acquires kept going to the stopped node, and the watchdog's hold was lost.
#[test]
fn a_cluster_follows_a_frozen_masters_failover() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let build = |watchdog: Duration| {
        LockManager::cluster_builder(&seeds)
            .watchdog_timeout(watchdog)
            .build()
            .expect("manager")
    };
    let holder = build(Duration::from_secs(6));
    let waiters = build(Duration::from_secs(30));
    let master = cluster.master_ports()[0];
    let replica = cluster.replica_of(master);
    let [renewed, waited, fresh, after] = [
        "frozen-renewed",
        "frozen-waited",
        "frozen-fresh",
        "frozen-after",
    ]
    .map(|prefix| name_on(&cluster, master, prefix));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = keep_busy(&waiters, &name_on(&cluster, master, "frozen-busy"), &stop);
    let renewed_guard = holder.lock(&renewed).expect("a hold the watchdog renews");
    let held = hold(&holder, &waited, Duration::from_secs(2));
    let waiting = spawn_waiter(&waiters, &waited);
    assert!(support::eventually(Duration::from_secs(10), || {
        waiters.waiting_channel_count() >= 1
    }));
    cluster.pause(master);
    let paused = Instant::now();
    let fresh_waiting = spawn_waiter(&waiters, &fresh);
    assert!(
        support::eventually(Duration::from_secs(60), || cluster.is_master(replica)),
        "the replica was never promoted"
    );
    let promoted = Instant::now();
    // New acquires on the stopped master's slots: one attempt each, until one works.
    let followed = loop {
        match waiters.try_lock(&after, Duration::ZERO) {
            Ok(Some(guard)) => {
                let at = promoted.elapsed();
                drop(guard);
                break at;
            }
            Ok(None) => panic!("nobody holds {after:?}"),
            Err(err) => assert!(
                promoted.elapsed() < Duration::from_secs(20),
                "no acquire on the promoted replica 20 s after its promotion: {err}"
            ),
        }
    };
    let waited_outcome = waiting.join().expect("waiter");
    let fresh_outcome = fresh_waiting.join().expect("fresh acquire");
    // Past the lease of the last renewal before the stop: only renewals on the promoted
    // replica keep the hold.
    let lease_end = paused + Duration::from_secs(8);
    std::thread::sleep(lease_end.saturating_duration_since(Instant::now()));
    let mut on_replica =
        support::connect(&format!("redis://127.0.0.1:{replica}/")).expect("connect");
    let ttl: i64 = support::query(&mut on_replica, redis::cmd("PTTL").arg(&renewed)).expect("PTTL");
    let lost = renewed_guard.is_lost();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    cluster.resume(master);
    for thread in busy {
        thread.join().expect("busy thread");
    }
    drop(held);
    let took = paused.elapsed();
    eprintln!(
        "promoted {:?} after the stop; a new acquire {followed:?} after that; the renewed \
         hold's PTTL {ttl} ms {took:?} after the stop",
        promoted - paused
    );
    // Every figure is told, whichever fails.
    let mut failures = Vec::new();
    if let Err(err) = waited_outcome {
        failures.push(format!("the waiter {err}"));
    }
    if let Err(err) = fresh_outcome {
        failures.push(format!("the fresh acquire {err}"));
    }
    if followed >= Duration::from_secs(5) {
        failures.push(format!(
            "a new acquire worked {followed:?} after the promotion"
        ));
    }
    if ttl <= 0 || lost {
        failures.push(format!(
            "the watchdog's hold on the promoted replica: PTTL {ttl}, lost {lost}, {took:?} \
             after the stop"
        ));
    }
    assert!(
        failures.is_empty(),
        "promoted {:?} after the stop, a new acquire {followed:?} after that: {failures:#?}",
        promoted - paused
    );
}
