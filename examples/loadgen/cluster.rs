//! W1, W4 and W5 on a real cluster (3 masters, 3 replicas) started here.

use std::thread;
use std::time::{Duration, Instant};

use redis_rlock::{LockGuard, LockManager};
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation};
use crate::raw_lock::RawLock;
use crate::table::{micros, row, Row};

/// W1, W4 and W5 on a real cluster (3 masters, 3 replicas, all on this machine) started
/// here: the lock against its two scripts sent raw to the same node, renewals per master, and
/// the listeners of many waiters spread over the masters.
pub(crate) fn cluster_workloads(scale: &Scale) -> Vec<Row> {
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
        .publishing_with("spublish")
        .marked();
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
