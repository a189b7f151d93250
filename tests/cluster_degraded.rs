//! Managers built while part of the deployment is down (issue 23, items 4 and 5): a cluster
//! with a master down still gives a manager, whose names on live masters work at once and
//! whose names on the failed master's slots work once its replica is promoted; and a build
//! that fails says which node or sentinel refused.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::LockManager;
use support::cluster::RedisCluster;

/// A name whose slot `master` serves now.
fn name_on(cluster: &RedisCluster, master: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
        .expect("a name on that master")
}

/// Invariant: with a master killed and not yet replaced, a manager builds from the seeds (the
/// dead master among them, first of all), locks names of the live masters at once, and
/// locks a name of the dead master's slots once its replica is promoted. Before, `build()`
/// failed in a few milliseconds with "Connection refused", naming no node.
#[test]
fn a_manager_builds_while_a_master_is_down() {
    let cluster = RedisCluster::start();
    let masters = cluster.master_ports();
    // The master of slot 0: discovery's and every "any master" command's first choice.
    let dead = cluster.master_for_slot(0);
    let live = *masters.iter().find(|&&m| m != dead).expect("a live master");
    let on_live = name_on(&cluster, live, "degraded-live");
    let on_dead = name_on(&cluster, dead, "degraded-dead");
    cluster.kill(dead);
    let killed = Instant::now();
    let mut seeds = vec![format!("redis://127.0.0.1:{dead}/")];
    seeds.extend(cluster.seed_urls());
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds)
        .build()
        .expect("a manager while a master is down");
    let started = Instant::now();
    let guard = manager.lock(&on_live).expect("a name on a live master");
    guard.unlock().expect("unlock");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a name on a live master took {:?}",
        started.elapsed()
    );
    // Before the replica is promoted (if it is not yet), a name of the dead master's slots
    // fails with an error that names that master.
    if let Err(err) = manager.try_lock(&on_dead, Duration::ZERO) {
        let message = err.to_string();
        assert!(message.contains(&format!("127.0.0.1:{dead}")), "{message}");
    }
    let promoted = cluster.wait_for_new_master_of_slot(RedisCluster::slot_of(&on_dead), dead);
    let guard = manager
        .try_lock(&on_dead, Duration::from_secs(10))
        .expect("a name on the dead master's slots, once its replica is promoted")
        .expect("free");
    guard.unlock().expect("unlock on the promoted replica");
    assert_ne!(
        promoted,
        dead,
        "promoted {:?} after the kill",
        killed.elapsed()
    );
}

/// Invariant: a cluster build that no node answers names the nodes it tried and what each
/// said. Before, it said "cannot connect to Redis: Connection refused (os error 111)".
#[test]
fn a_cluster_build_error_names_the_nodes() {
    let (a, b) = (support::free_port(), support::free_port());
    let seeds = [
        format!("redis://127.0.0.1:{a}/"),
        format!("redis://127.0.0.1:{b}/"),
    ];
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let err = LockManager::cluster_builder(&seeds).build().unwrap_err();
    let message = err.to_string();
    assert!(err.is_connection_error(), "{message}");
    for port in [a, b] {
        assert!(
            message.contains(&format!("127.0.0.1:{port}: ")),
            "{message}"
        );
    }
    assert!(message.contains("refused"), "{message}");
}

/// Invariant: a Sentinel build that no sentinel answers names every sentinel it asked and
/// what each said.
#[test]
fn a_sentinel_build_error_names_the_sentinels() {
    let (a, b) = (support::free_port(), support::free_port());
    let urls = [
        format!("redis://127.0.0.1:{a}/"),
        format!("redis://127.0.0.1:{b}/"),
    ];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let err = LockManager::sentinel_builder(&urls, "mymaster")
        .build()
        .unwrap_err();
    let message = err.to_string();
    assert!(err.is_connection_error(), "{message}");
    for port in [a, b] {
        assert!(
            message.contains(&format!("127.0.0.1:{port}: ")),
            "{message}"
        );
    }
}
