//! Locks on a real Redis Cluster (3 masters + 3 replicas, Debian's redis-server): routing by
//! slot, sharded pub/sub both ways with Redisson's scripts, renewals per master, one listener
//! per master, a failover, a killed master and a resharding while locks are held.
//!
//! One cluster per test: the tests that break it (failover, kill, reshard) must not disturb
//! the others, and a cluster starts in a few seconds.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis_rlock::{Lease, LockManager, ShardedPubSubMode};
use support::cluster::RedisCluster;
use support::redisson::REDISSON_UNLOCK;

/// The lease of the tests that kill or fail over a master: long enough that the lease left
/// after the last renewal before the kill (two thirds of it) outlasts the failover (node
/// timeout 2 s plus the election).
const FAILOVER_LEASE: Duration = Duration::from_secs(9);

fn manager(cluster: &RedisCluster) -> LockManager {
    manager_with_lease(cluster, Duration::from_secs(3))
}

fn manager_with_lease(cluster: &RedisCluster, lease: Duration) -> LockManager {
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    LockManager::cluster_builder(&seeds)
        .watchdog_timeout(lease)
        .build()
        .expect("a manager on the cluster")
}

fn conn(port: u16) -> redis::Connection {
    support::connect(&format!("redis://127.0.0.1:{port}/")).expect("connection to a cluster node")
}

/// A name whose slot a master other than `not_on` serves (to spread locks over masters).
fn name_on(cluster: &RedisCluster, master: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == master)
        .expect("a name on that master")
}

#[test]
fn locks_live_on_their_slots_master_and_each_master_has_one_listener() {
    let cluster = RedisCluster::start();
    let manager = manager(&cluster);
    for master in cluster.master_ports() {
        let name = name_on(&cluster, master, "routed");
        let guard = manager.lock(&name).expect("lock");
        let again = manager.lock(&name).expect("re-entered");
        let on_master: bool = redis::cmd("EXISTS")
            .arg(&name)
            .query(&mut conn(master))
            .expect("EXISTS");
        assert!(on_master, "{name} is not on its slot's master {master}");
        assert_eq!(guard.lock().hold_count().expect("hold count"), 2);
        drop(again);
        guard.unlock().expect("unlock");
        assert!(!manager.get_lock(&name).is_locked().expect("is_locked"));
    }
    assert_eq!(manager.listener_count(), 3, "one listener per master");

    // Replica sync (on by default): the replica has the lock when lock() returns, and each
    // acquire and release is followed by a WAIT.
    let master = cluster.master_ports()[0];
    let name = name_on(&cluster, master, "synced");
    let before = manager.stats();
    let guard = manager.lock(&name).expect("lock");
    let mut replica = conn(cluster.replica_of(master));
    let _: () = redis::cmd("READONLY")
        .query(&mut replica)
        .expect("READONLY");
    let on_replica: bool = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut replica)
        .expect("EXISTS on the replica");
    assert!(
        on_replica,
        "lock() returned before the replica had the lock"
    );
    guard.unlock().expect("unlock");
    assert_eq!(
        manager.stats().commands - before.commands,
        4,
        "two scripts, two WAITs"
    );

    // The URL form reaches the same cluster.
    let url = cluster.url();
    let by_url = LockManager::new(&url).expect("manager from a redis-cluster:// URL");
    let guard = by_url.lock("by-url").expect("lock");
    assert!(manager.get_lock("by-url").is_locked().expect("is_locked"));
    guard.unlock().expect("unlock");

    // Names whose keys would hash to different slots are refused before anything is sent
    // (the server would answer CROSSSLOT); a name with a hash tag works, on its tag's slot.
    let sent = manager.stats().commands;
    for name in ["a{b", "x{}y", "a}b"] {
        let err = manager.lock(name).unwrap_err();
        assert!(err.is_invalid_argument(), "{name}: {err}");
        let err = manager.get_semaphore(name).try_set_permits(1).unwrap_err();
        assert!(err.is_invalid_argument(), "{name}: {err}");
    }
    let err = manager
        .get_count_down_latch("{job}:7")
        .try_set_count(1)
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(manager.stats().commands, sent, "nothing was sent");
    let tagged = manager.lock("{orders}:42").expect("a tagged name");
    let master = cluster.master_for_slot(RedisCluster::slot_of("orders"));
    let on_master: bool = redis::cmd("EXISTS")
        .arg("{orders}:42")
        .query(&mut conn(master))
        .expect("EXISTS");
    assert!(on_master, "on the tag's master");
    tagged.unlock().expect("unlock");
}

#[test]
fn waiters_on_every_master_are_woken_by_sharded_pub_sub() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster);
    let waiter = manager(&cluster);
    let names: Vec<String> = cluster
        .master_ports()
        .into_iter()
        .map(|master| name_on(&cluster, master, "woken"))
        .collect();
    let guards: Vec<_> = names
        .iter()
        .map(|name| holder.lock(name).expect("lock"))
        .collect();
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = names
        .iter()
        .map(|name| {
            let waiter = waiter.clone();
            let name = name.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let got = waiter
                    .try_lock(&name, Duration::from_secs(20))
                    .expect("try_lock");
                tx.send(Instant::now()).expect("report");
                got.expect("acquired").unlock().expect("unlock");
            })
        })
        .collect();
    assert!(
        support::eventually(Duration::from_secs(10), || waiter.waiting_channel_count()
            == 3),
        "the three waiters are waiting"
    );
    std::thread::sleep(Duration::from_millis(200));
    // Leases are 3 s: a waiter woken within 2 s of the unlock heard it.
    for guard in guards {
        guard.unlock().expect("unlock");
    }
    let released = Instant::now();
    for _ in 0..3 {
        let at = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a waiter got in");
        assert!(
            at.saturating_duration_since(released) < Duration::from_secs(2),
            "a waiter was not woken by the unlock"
        );
    }
    for thread in threads {
        thread.join().expect("waiter");
    }
    assert!(waiter.stats().wakeups >= 3, "{:?}", waiter.stats());
    assert_eq!(waiter.listener_count(), 3);
}

/// Whether the cluster's servers have sharded pub/sub (Redis 7, every Valkey). Without it
/// (Redis 6.2) the crate finds `PUBSUB SHARDNUMSUB` missing and falls back to SUBSCRIBE and
/// PUBLISH, as Redisson does; the tests below check that fallback there.
fn sharded_pub_sub() -> bool {
    support::server_version().at_least_redis(7, 0)
}

#[test]
fn redisson_and_this_crate_wake_each_other_through_spublish() {
    let cluster = RedisCluster::start();
    // Redisson's default (AUTO): sharded where the server has it, plain on Redis 6.
    wake_each_other(&cluster, &manager(&cluster), sharded_pub_sub());
}

#[test]
fn with_sharded_pub_sub_off_redisson_and_this_crate_wake_each_other_through_publish() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    // A Java cluster client set to `shardedSubscriptionMode(OFF)` publishes with PUBLISH.
    let manager = LockManager::cluster_builder(&seeds)
        .sharded_pubsub_mode(ShardedPubSubMode::Off)
        .build()
        .expect("a manager on the cluster");
    wake_each_other(&cluster, &manager, false);
}

/// A Java holder released by Redisson's script (with SPUBLISH when `sharded`, else PUBLISH)
/// wakes a waiter of `manager` by its message, and a subscriber of the same kind on the slot's
/// master hears this crate's unlock.
fn wake_each_other(cluster: &RedisCluster, manager: &LockManager, sharded: bool) {
    let name = "interop";
    let master = cluster.master_for_slot(RedisCluster::slot_of(name));
    let mut node = conn(master);
    let (publish, subscribe, kind) = if sharded {
        ("spublish", "SSUBSCRIBE", redis::PushKind::SMessage)
    } else {
        ("publish", "SUBSCRIBE", redis::PushKind::Message)
    };
    let java = "a8f1e6d4-0000-4000-8000-000000000001:1";
    let _: () = redis::cmd("HSET")
        .arg(name)
        .arg(java)
        .arg(1)
        .query(&mut node)
        .expect("HSET");
    let _: () = redis::cmd("PEXPIRE")
        .arg(name)
        .arg(30_000)
        .query(&mut node)
        .expect("PEXPIRE");
    let waiter = {
        let manager = manager.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = manager
                .try_lock(name, Duration::from_secs(20))
                .expect("try_lock");
            (got.map(|g| g.unlock()), started.elapsed())
        })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.waiting_channel_count() == 1
    }));
    std::thread::sleep(Duration::from_millis(200));
    let released: Option<i64> = redis::Script::new(REDISSON_UNLOCK)
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!("redisson_unlock_latch:{{{name}}}:req1"))
        .arg(0)
        .arg(30_000)
        .arg(java)
        .arg(publish)
        .arg(5_000)
        .invoke(&mut node)
        .expect("Redisson's unlock");
    assert_eq!(released, Some(1));
    let (unlocked, waited) = waiter.join().expect("waiter");
    unlocked.expect("acquired").expect("unlock");
    assert!(
        waited < Duration::from_secs(10),
        "woken by {publish}, not by the 30 s lease: {waited:?}"
    );
    // By the message itself, not by a look of the waiter's back-off.
    assert!(
        manager.stats().wakeups >= 1,
        "the {publish} woke nobody: {:?}",
        manager.stats()
    );

    // The reverse: a (sharded) subscriber on the slot's master hears this crate's unlock.
    let mut listener = support::connect(&format!("redis://127.0.0.1:{master}/?protocol=resp3"))
        .expect("RESP3 connection");
    listener
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    listener
        .send_packed_command(&redis::cmd(subscribe).arg(&channel).get_packed_command())
        .expect(subscribe);
    let guard = manager.lock(name).expect("lock");
    guard.unlock().expect("unlock");
    let heard = (0..5).find_map(|_| match listener.recv_response() {
        Ok(redis::Value::Push { kind: heard, data }) if heard == kind => Some(data),
        _ => None,
    });
    let data = heard.unwrap_or_else(|| panic!("the unlock was announced with {kind:?}"));
    assert_eq!(data[1], redis::Value::BulkString(b"0".to_vec()));
}

#[test]
fn renewals_take_one_pipeline_per_master_and_holds_survive_a_failover() {
    let cluster = RedisCluster::start();
    let manager = manager(&cluster);
    // Ten holds on each master.
    let mut guards = Vec::new();
    for master in cluster.master_ports() {
        for i in 0..10 {
            let name = name_on(&cluster, master, &format!("renewed{i}"));
            guards.push(manager.lock(&name).expect("lock"));
        }
    }
    let before = manager.stats();
    std::thread::sleep(Duration::from_millis(3_500)); // more than a lease (3 s)
    let after = manager.stats();
    let sweeps = after.renewal_sweeps - before.renewal_sweeps;
    let trips = after.round_trips - before.round_trips;
    assert!(sweeps >= 1, "{after:?}");
    assert!(
        trips <= sweeps * 3 + 2,
        "{trips} round trips for {sweeps} sweeps over 3 masters"
    );
    assert!(guards.iter().all(|g| !g.is_lost()));

    drop(guards);
    // A waiter on the lock whose master fails over, held meanwhile.
    let manager = manager_with_lease(&cluster, FAILOVER_LEASE);
    let mut guards: Vec<_> = cluster
        .master_ports()
        .into_iter()
        .map(|master| {
            manager
                .lock(&name_on(&cluster, master, "failover"))
                .expect("lock")
        })
        .collect();
    let failing = cluster.master_ports()[0];
    let held = guards.swap_remove(0);
    assert_eq!(
        cluster.master_for_slot(RedisCluster::slot_of(held.name())),
        failing
    );
    let name = held.name().to_owned();
    // The waiter is another manager's: only its listener can tell it of the release.
    let other = manager_with_lease(&cluster, FAILOVER_LEASE);
    let waiter = {
        let other = other.clone();
        let name = name.clone();
        std::thread::spawn(move || {
            let got = other.try_lock(&name, Duration::from_secs(60));
            let at = Instant::now();
            got.map(|g| (g.map(|g| g.unlock()), at))
        })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        other.waiting_channel_count() == 1
    }));
    cluster.failover(cluster.replica_of(failing));
    assert!(
        support::eventually(Duration::from_secs(20), || {
            cluster.master_for_slot(RedisCluster::slot_of(&name)) != failing
        }),
        "the replica took over"
    );
    std::thread::sleep(FAILOVER_LEASE + Duration::from_secs(1)); // renewed on the new master
    assert!(!held.is_lost(), "the hold survived the failover");
    assert!(guards.iter().all(|g| !g.is_lost()));
    held.unlock().expect("unlock on the new master");
    let unlocked = Instant::now();
    let (unlocked_by_waiter, acquired) = waiter.join().expect("waiter").expect("try_lock");
    unlocked_by_waiter
        .expect("acquired after the failover")
        .expect("unlock");
    // Its lease is 9 s: a waiter in by 3 s heard the release, on the new master (the old one
    // ended its sharded subscription, and the listener subscribed again where the slot is).
    assert!(
        acquired.saturating_duration_since(unlocked) < Duration::from_secs(3),
        "the waiter was not woken after the failover: {:?}",
        acquired.saturating_duration_since(unlocked)
    );
    // New locks on that slot go to the new master.
    let guard = manager.lock(&name).expect("lock after the failover");
    guard.unlock().expect("unlock");
}

#[test]
fn a_killed_masters_holds_live_on_in_its_replica() {
    let cluster = RedisCluster::start();
    let manager = manager_with_lease(&cluster, FAILOVER_LEASE);
    let master = cluster.master_ports()[1];
    let name = name_on(&cluster, master, "killed");
    // Replica sync (on by default) made sure the replica has the hold.
    let held = manager.lock(&name).expect("lock");
    let lost = held.lost_signal();
    cluster.kill(master);
    let promoted = cluster.wait_for_new_master_of_slot(RedisCluster::slot_of(&name), master);
    assert_ne!(promoted, master);
    // A lease and more later, the watchdog renewed it on the new master.
    std::thread::sleep(FAILOVER_LEASE + Duration::from_secs(1));
    assert!(lost.try_recv().is_err(), "the lost signal fired");
    assert!(!held.is_lost());
    let on_new: bool = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut conn(promoted))
        .expect("EXISTS");
    assert!(on_new);
    held.unlock().expect("unlock on the promoted replica");
    let other = manager
        .acquire(
            &name,
            redis_rlock::AcquireOptions::new().lease(Lease::Fixed(Duration::from_secs(5))),
        )
        .expect("acquire")
        .expect("free");
    other.unlock().expect("unlock");
}

#[test]
fn a_resharding_moves_a_held_lock_with_its_slot() {
    let cluster = RedisCluster::start();
    let manager = manager(&cluster);
    let masters = cluster.master_ports();
    let name = name_on(&cluster, masters[0], "resharded");
    let slot = RedisCluster::slot_of(&name);
    let held = manager.lock(&name).expect("lock");

    // Half-way: the slot is migrating and its key is at the target already (ASK).
    cluster.begin_reshard(slot, masters[1]);
    let again = manager
        .lock(&name)
        .expect("re-entered while the slot migrates");
    assert_eq!(again.lock().hold_count().expect("hold count"), 2);
    // A release's script also names a latch key that does not exist yet, so the target
    // answers TRYAGAIN until the migration ends: the unlock waits for that (within its
    // response timeout) and takes effect once.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            cluster.finish_reshard(slot, masters[1]);
        });
        again
            .unlock()
            .expect("the unlock waits for the migration to end");
    });
    assert_eq!(cluster.master_for_slot(slot), masters[1]);
    assert_eq!(held.lock().hold_count().expect("hold count"), 1);

    std::thread::sleep(Duration::from_millis(3_500)); // renewed at the new owner (MOVED)
    assert!(!held.is_lost());
    held.unlock().expect("unlock after the resharding");
    assert!(!manager.get_lock(&name).is_locked().expect("is_locked"));
    let left: bool = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut conn(masters[1]))
        .expect("EXISTS");
    assert!(!left);
}

#[test]
fn an_acquire_whose_reply_came_too_late_is_never_sent_again() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds)
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("manager");
    let master = cluster.master_ports()[2];
    let name = name_on(&cluster, master, "once");
    let held = manager.lock(&name).expect("lock");
    // A paused master (well within the cluster's node timeout: no failover) answers nothing:
    // the re-entrant acquire (one attempt: a waiter would ride the timeout out and look
    // again with the same attempt id) times out, and is not sent again (redis-rs' cluster
    // client would send it up to 16 times, each one more hold).
    cluster.pause(master);
    let err = manager.try_lock(&name, Duration::ZERO).unwrap_err();
    cluster.resume(master);
    assert!(err.is_timeout(), "{err}");
    // The one request that was sent runs when the master wakes up: two holds, never more.
    let count = || -> Vec<i64> {
        let fields: Vec<(String, i64)> = redis::cmd("HGETALL")
            .arg(&name)
            .query(&mut conn(master))
            .expect("HGETALL");
        fields.into_iter().map(|(_, count)| count).collect()
    };
    assert!(
        support::eventually(Duration::from_secs(5), || count() == vec![2]),
        "{:?}",
        count()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(), vec![2], "sent more than once");
    drop(held);
    manager
        .get_lock(&name)
        .force_unlock()
        .expect("force unlock");
}

/// Runs `wait` (a blocking call of `waiter`) on a thread until it blocks, then `release`;
/// returns how long after the release `wait` returned.
fn woken_after(
    waiter: &LockManager,
    wait: impl FnOnce() + Send + 'static,
    release: impl FnOnce(),
) -> Duration {
    let thread = std::thread::spawn(move || {
        wait();
        Instant::now()
    });
    assert!(
        support::eventually(Duration::from_secs(10), || waiter.waiting_channel_count()
            == 1),
        "the waiter blocked"
    );
    std::thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    release();
    thread
        .join()
        .expect("waiter")
        .saturating_duration_since(released)
}

#[test]
fn every_lock_kind_is_woken_by_sharded_pub_sub() {
    let cluster = RedisCluster::start();
    let (holder, waiter) = (manager(&cluster), manager(&cluster));
    // Leases are 3 s: woken within 2 s means by the release's message.
    let prompt = Duration::from_secs(2);

    let fair = holder
        .get_fair_lock("kinds:fair")
        .lock()
        .expect("fair lock");
    let w = waiter.clone();
    let after = woken_after(
        &waiter,
        move || {
            w.get_fair_lock("kinds:fair")
                .lock()
                .expect("fair")
                .unlock()
                .expect("unlock")
        },
        || fair.unlock().expect("unlock"),
    );
    assert!(after < prompt, "fair lock: {after:?}");

    let write = holder
        .get_read_write_lock("kinds:rw")
        .write_lock()
        .lock()
        .expect("write lock");
    let w = waiter.clone();
    let after = woken_after(
        &waiter,
        move || {
            let rw = w.get_read_write_lock("kinds:rw");
            rw.read_lock()
                .lock()
                .expect("read")
                .unlock()
                .expect("unlock");
        },
        || write.unlock().expect("unlock"),
    );
    assert!(after < prompt, "read-write lock: {after:?}");

    let semaphore = holder.get_semaphore("kinds:semaphore");
    assert!(semaphore.try_set_permits(1).expect("set permits"));
    semaphore.acquire(1).expect("the only permit");
    let w = waiter.clone();
    let after = woken_after(
        &waiter,
        move || {
            w.get_semaphore("kinds:semaphore")
                .acquire(1)
                .expect("acquire")
        },
        || semaphore.release(1).expect("release"),
    );
    assert!(after < prompt, "semaphore: {after:?}");

    let latch = holder.get_count_down_latch("kinds:latch");
    assert!(latch.try_set_count(1).expect("set count"));
    let w = waiter.clone();
    let after = woken_after(
        &waiter,
        move || {
            let opened = w
                .get_count_down_latch("kinds:latch")
                .wait_timeout(Duration::from_secs(30))
                .expect("wait");
            assert!(opened);
        },
        || latch.count_down().expect("count down"),
    );
    assert!(after < prompt, "count-down latch: {after:?}");

    // The plain lock: once the waiter is registered, the release grants it the lock (the
    // master counts the channel's subscribers with SHARDNUMSUB, docs/design/engine.md "Grants").
    // Only without replica sync: with it, only a waiter's own attempt may take the lock.
    // Without sharded pub/sub no node can count the listeners: the waiter does not register,
    // and is woken by the release's PUBLISH to take the lock itself.
    let without_replica_sync = || {
        let seeds = cluster.seed_urls();
        let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
        LockManager::cluster_builder(&seeds)
            .watchdog_timeout(Duration::from_secs(3))
            .replica_sync(false)
            .build()
            .expect("a manager on the cluster")
    };
    let (holder, waiter) = (without_replica_sync(), without_replica_sync());
    let name = "kinds:plain";
    let plain = holder.lock(name).expect("plain lock");
    let mut master = conn(cluster.master_for_slot(RedisCluster::slot_of(name)));
    let w = waiter.clone();
    let blocked = std::thread::spawn(move || {
        let guard = w.lock(name).expect("plain");
        let at = Instant::now();
        guard.unlock().expect("unlock");
        at
    });
    let mut registered = || {
        redis::cmd("EXISTS")
            .arg("redis_rlock__waiters:{kinds:plain}")
            .query(&mut master)
            .unwrap_or(false)
    };
    if sharded_pub_sub() {
        assert!(
            support::eventually(Duration::from_secs(10), &mut registered),
            "the waiter registered"
        );
    } else {
        assert!(
            support::eventually(Duration::from_secs(10), || waiter.waiting_channel_count()
                == 1),
            "the waiter blocked"
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(!registered(), "no registration without sharded pub/sub");
    }
    let released = Instant::now();
    plain.unlock().expect("unlock");
    let after = blocked
        .join()
        .expect("waiter")
        .saturating_duration_since(released);
    assert!(after < prompt, "plain lock: {after:?}");
    let grants = u64::from(sharded_pub_sub());
    assert_eq!(
        holder.stats().grants_given,
        grants,
        "granted on the cluster"
    );
    assert_eq!(waiter.stats().grants_taken, grants);
}

#[test]
fn renewals_follow_ask_and_a_stalled_master_costs_the_others_nothing() {
    let cluster = RedisCluster::start();
    let lease = Duration::from_millis(1_500);
    let manager = manager_with_lease(&cluster, lease);
    let masters = cluster.master_ports();

    // A slot half-way through a migration: its key is at the target already, which answers
    // its renewals only after ASKING. Another lock of the same master must not pay for it.
    let moving = manager
        .lock(&name_on(&cluster, masters[0], "moving"))
        .expect("lock");
    let staying = manager
        .lock(&name_on(&cluster, masters[0], "staying"))
        .expect("lock");
    let slot = RedisCluster::slot_of(moving.name());
    assert_ne!(slot, RedisCluster::slot_of(staying.name()));
    cluster.begin_reshard(slot, masters[1]);
    let before = manager.stats();
    std::thread::sleep(lease * 3);
    assert!(manager.stats().renewal_sweeps - before.renewal_sweeps >= 3);
    assert!(
        !staying.is_lost(),
        "a renewal refused for another slot cost this one"
    );
    assert!(
        !moving.is_lost(),
        "the migrating slot's hold was not renewed through ASK"
    );
    // The target answers for an importing slot only after ASKING.
    let (at_target,): (i64,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("PTTL")
        .arg(moving.name())
        .query(&mut conn(masters[1]))
        .expect("PTTL");
    assert!(
        at_target > 0,
        "the moved key is gone from the target: {at_target}"
    );
    cluster.finish_reshard(slot, masters[1]);
    moving.unlock().expect("unlock after the migration");
    staying.unlock().expect("unlock");

    // A master that answers nothing for two leases (paused clients, no failover) holds up
    // only its own renewals: the other masters' holds stay renewed. Each master in turn, since
    // the order in which a sweep reads the masters is not the test's to choose.
    for (i, &stalling) in masters.iter().enumerate() {
        let guards: Vec<_> = masters
            .iter()
            .map(|&master| {
                manager
                    .lock(&name_on(&cluster, master, &format!("stall{i}")))
                    .expect("lock")
            })
            .collect();
        let pause = lease * 2;
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(pause.as_millis() as u64)
            .arg("ALL")
            .query(&mut conn(stalling))
            .expect("CLIENT PAUSE");
        std::thread::sleep(pause + lease / 2);
        for guard in &guards {
            let master = cluster.master_for_slot(RedisCluster::slot_of(guard.name()));
            if master == stalling {
                continue; // its own hold may or may not have outlived the pause
            }
            assert!(
                !guard.is_lost(),
                "{} was lost while {stalling} stalled",
                guard.name()
            );
            let pttl: i64 = redis::cmd("PTTL")
                .arg(guard.name())
                .query(&mut conn(master))
                .expect("PTTL");
            assert!(
                pttl > 0,
                "{} expired while {stalling} stalled",
                guard.name()
            );
        }
        drop(guards);
    }
}

#[test]
fn a_stalled_master_does_not_hold_up_waiters_on_another() {
    let cluster = RedisCluster::start();
    // Commands routed nowhere in particular used to go to the master of slot 0, the listeners'
    // wake-ups among them: stall that master, and wait on a lock of another one.
    let first = cluster.master_for_slot(0);
    let other = cluster
        .master_ports()
        .into_iter()
        .find(|&master| master != first)
        .expect("another master");
    let name = name_on(&cluster, other, "wake-elsewhere");
    let holder = manager_with_lease(&cluster, FAILOVER_LEASE);
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let waiter = LockManager::cluster_builder(&seeds)
        .watchdog_timeout(FAILOVER_LEASE)
        .response_timeout(Duration::from_secs(3))
        .build()
        .expect("manager");
    let held = holder.lock(&name).expect("lock");
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4_000)
        .arg("ALL")
        .query(&mut conn(first))
        .expect("CLIENT PAUSE");
    let w = waiter.clone();
    let after = woken_after(
        &waiter,
        move || {
            w.try_lock(&name, Duration::from_secs(20))
                .expect("try_lock")
                .expect("acquired")
                .unlock()
                .expect("unlock")
        },
        || held.unlock().expect("unlock"),
    );
    // The lease is 9 s, and a wake-up sent to the stalled master would have held the waiter
    // for its 3 s response timeout.
    assert!(
        after < Duration::from_millis(1_500),
        "the waiter was woken {after:?} after the release"
    );
}
