//! Waiters that ride out a master failover (issue 23, item 3): on Sentinel and Cluster, a
//! master that dies is most likely being replaced, so every waiter (the one with its
//! manager's turn, and the threads queued behind it) keeps waiting through the failover,
//! within its own wait limit, and acquires once the new master answers. (A waiter on a single
//! server still reports the outage after one connect timeout: tests/faults.rs.)

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::{AcquireOptions, Lease, LockManager};
use support::cluster::RedisCluster;
use support::sentinel::RedisSentinel;

/// Longer than any failover here takes, and short of what a test may wait.
const WAIT: Duration = Duration::from_secs(40);

/// A hold with a fixed lease that ends while the master is down (so the waiter looks again
/// during the failover) and that replica sync put on the replica first.
fn hold(manager: &LockManager, name: &str, lease: Duration) -> redis_rlock::LockGuard {
    manager
        .acquire(name, AcquireOptions::new().lease(Lease::Fixed(lease)))
        .expect("acquire")
        .expect("free")
}

/// `try_lock(name, WAIT)` on a thread of its own; the result says how it ended.
fn spawn_waiter(
    manager: &LockManager,
    name: &str,
) -> std::thread::JoinHandle<Result<Instant, String>> {
    let (manager, name) = (manager.clone(), name.to_owned());
    std::thread::spawn(move || match manager.try_lock(&name, WAIT) {
        Ok(Some(guard)) => {
            let at = Instant::now();
            guard.unlock().map_err(|err| format!("unlock: {err}"))?;
            Ok(at)
        }
        Ok(None) => Err(format!("not acquired within {WAIT:?}")),
        Err(err) => Err(format!("failed: {err}")),
    })
}

/// Invariant: on a cluster, a thread queued behind another of its manager (whose patience
/// runs out during the failover, so that it probes the dead master) and the thread with the
/// turn both ride out a killed master and acquire on its promoted replica. Before, the
/// queued thread's probe returned its error at once.
#[test]
fn queued_waiters_ride_out_a_killed_cluster_master() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let holder = LockManager::cluster_builder(&seeds)
        .build()
        .expect("holder");
    // A short watchdog timeout makes the queued thread's patience (a third of it) run out,
    // and its probe go to the dead master, several times during the failover; a connect
    // timeout shorter than the failover shows that the wait limit, not it, bounds the ride.
    let waiters = LockManager::cluster_builder(&seeds)
        .watchdog_timeout(Duration::from_millis(1_500))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("waiters");
    let master = cluster.master_ports()[0];
    let name = (0..10_000)
        .map(|i| format!("ride-{i}"))
        .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
        .expect("a name on that master");
    let held = hold(&holder, &name, Duration::from_secs(3));
    let first = spawn_waiter(&waiters, &name);
    assert!(support::eventually(Duration::from_secs(10), || {
        waiters.waiting_channel_count() == 1
    }));
    let second = spawn_waiter(&waiters, &name);
    assert!(support::eventually(Duration::from_secs(10), || {
        waiters.queued_thread_count() == 1
    }));
    let killed = Instant::now();
    cluster.kill(master);
    drop(held); // its release fails (the master is gone); the lease runs out on the replica
    cluster.wait_for_new_master_of_slot(RedisCluster::slot_of(&name), master);
    let promoted = killed.elapsed();
    let first = first.join().expect("first waiter");
    let second = second.join().expect("second waiter");
    let first = first.expect("the waiter with the turn acquired after the failover");
    let second = second.expect("the queued waiter acquired after the failover");
    assert!(
        first.max(second) > killed,
        "acquired after the kill (failover took {promoted:?})"
    );
}

/// Invariant: a Sentinel waiter whose look at the lock (its holder's lease ended) falls into
/// the failover rides it out and acquires on the new master, although the failover takes
/// longer than its connect and response timeouts. Before, its attempt ended with "connecting
/// to Redis timed out" after one response timeout, a timeout being reported at once.
#[test]
fn a_sentinel_waiter_rides_out_a_failover_longer_than_its_timeouts() {
    let sentinel = RedisSentinel::with_replicas(1);
    let urls = sentinel.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let holder = LockManager::sentinel_builder(&urls, sentinel.master_name())
        .build()
        .expect("holder");
    let waiter = LockManager::sentinel_builder(&urls, sentinel.master_name())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .build()
        .expect("waiter");
    // Its lease ends during the failover (down-after 1 s, then the election), and leaves the
    // setup below time to put the waiter in place before the kill on a busy machine.
    let held = hold(&holder, "ride-sentinel", Duration::from_secs(2));
    let waiting = spawn_waiter(&waiter, "ride-sentinel");
    assert!(support::eventually(Duration::from_secs(10), || {
        waiter.waiting_channel_count() == 1
    }));
    let killed = Instant::now();
    let old = sentinel.kill_master();
    drop(held);
    sentinel.wait_for_failover(old);
    let promoted = killed.elapsed();
    let acquired = waiting
        .join()
        .expect("waiter")
        .expect("the waiter acquired after the failover");
    assert!(
        acquired > killed,
        "acquired after the kill (failover took {promoted:?})"
    );
}

/// Invariant: on a cluster, a fresh `try_lock` started while a master is killed and not yet
/// replaced waits for the promotion within its wait, as a waiter already waiting does, and
/// acquires on the promoted replica. Before, it failed after 3.0 s with "Connection refused"
/// (issue 29, item 6).
#[test]
fn a_fresh_acquire_rides_out_a_cluster_failover() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds)
        .build()
        .expect("manager");
    let master = cluster.master_ports()[0];
    let name = (0..10_000)
        .map(|i| format!("fresh-{i}"))
        .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
        .expect("a name on that master");
    cluster.kill(master);
    let killed = Instant::now();
    let got = manager.try_lock(&name, Duration::from_secs(30));
    let took = killed.elapsed();
    let guard = got
        .unwrap_or_else(|err| panic!("failed after {took:?}: {err}"))
        .unwrap_or_else(|| panic!("not acquired after {took:?}"));
    guard.unlock().expect("unlock on the promoted replica");
}
