//! Waiters woken by the server: a release that publishes nothing (a `DEL` by hand, Redisson's
//! `RSpinLock`, redis-py's `Lock` released, a lease cut short and expired) reaches a waiter through client tracking of the
//! lock's key on the manager's pub/sub connection, within milliseconds, where the back-off
//! alone took up to seconds. Also: names that are prefixes of each other, how few commands a
//! waiter behind a 3 s lease sends, the fallback when `CLIENT` is refused, a reconnect of the
//! listener, RESP2, a cluster before and after a failover, and a Sentinel failover.

use redis_rlock_testkit as support;

use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, PubSubProtocol, Result};
use support::cluster::RedisCluster;
use support::proxy::Proxy;
use support::redis_py::PyLock;
use support::redisson_spin::JavaSpinLock;
use support::sentinel::RedisSentinel;
use support::RedisServer;

/// A Java holder's owner field.
const JAVA_OWNER: &str = "a8f1e6d4-0000-4000-8000-000000000001:1";

/// What the waits below must beat: the back-off of a waiter nobody announces a release to
/// grows to about 2 s, so a release found by it comes up to seconds late.
const WOKEN_WITHIN: Duration = Duration::from_millis(100);

/// A Java holder's hash with a 30 s lease, which nothing will announce the end of.
fn hold_as_java(conn: &mut redis::Connection, name: &str, lease_ms: u64) {
    let _: () = conn.hset(name, JAVA_OWNER, 1).unwrap();
    let _: () = conn.pexpire(name, lease_ms as i64).unwrap();
}

/// How long a waiter waits at most (a failover included).
const WAIT: Duration = Duration::from_secs(60);

/// A thread waiting (up to `WAIT`) for `name`, by a plain lock or a spin lock; its channel says
/// when it got the lock.
fn spawn_waiter(manager: &LockManager, name: &str, spin: bool) -> mpsc::Receiver<Instant> {
    let (tx, rx) = mpsc::channel();
    let manager = manager.clone();
    let name = name.to_owned();
    std::thread::spawn(move || {
        let guard = if spin {
            manager.get_spin_lock(&name).try_lock(WAIT)
        } else {
            manager.try_lock(&name, WAIT)
        };
        let guard = guard.expect("try_lock").expect("the waiter got the lock");
        let at = Instant::now();
        guard.unlock().expect("unlock");
        tx.send(at).unwrap();
    });
    rx
}

/// A thread waiting (up to `WAIT`) for `name` by a string lock (redis-py's format); its
/// channel says when it got the lock.
fn spawn_string_waiter(manager: &LockManager, name: &str) -> mpsc::Receiver<Instant> {
    let (tx, rx) = mpsc::channel();
    let lock = manager.get_string_lock(name);
    std::thread::spawn(move || {
        let guard = lock
            .try_lock(WAIT)
            .expect("try_lock")
            .expect("the waiter got the lock");
        let at = Instant::now();
        guard.unlock().expect("unlock");
        tx.send(at).unwrap();
    });
    rx
}

/// redis-py's `Lock` holds `name` on the server at `port` (30 s timeout) while our string-lock
/// waiter of `manager` waits; returns how long after redis-py's release the waiter got it.
fn woken_after_a_redis_py_release(manager: &LockManager, port: u16, name: &str) -> Duration {
    let url = format!("redis://127.0.0.1:{port}/");
    let mut conn = support::connect(&url).unwrap();
    let mut py = PyLock::new(
        support::connect(&url).unwrap(),
        name,
        Duration::from_secs(30),
        7,
    );
    assert!(py.attempt(), "redis-py takes the lock");
    let before = support::command_calls(&mut conn, "evalsha");
    let acquired = spawn_string_waiter(manager, name);
    await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
    // A string waiter without tracking polls at most 128 ms apart, within the callers' bound
    // by chance: the tracking itself is checked.
    assert!(tracks_broadcast(port), "the server tracks the key");
    let released = Instant::now();
    assert!(py.release(), "redis-py released");
    woken_after(&acquired, released)
}

#[test]
fn a_redis_py_release_wakes_a_string_lock_waiter() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut server.conn(), &manager);
    let after = woken_after_a_redis_py_release(&manager, server.port(), "py-held");
    println!("woken {after:?} after redis-py's release");
    assert!(
        after < WOKEN_WITHIN,
        "woken only {after:?} after the release"
    );
    Ok(())
}

#[test]
fn on_a_cluster_a_redis_py_release_wakes_a_string_lock_waiter() -> Result<()> {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds).build()?;
    let name = "py-held-on-a-cluster";
    let master = cluster.master_for_slot(RedisCluster::slot_of(name));
    let after = woken_after_a_redis_py_release(&manager, master, name);
    println!("{name} on {master}: woken {after:?} after redis-py's release");
    assert!(
        after < WOKEN_WITHIN,
        "woken only {after:?} after the release"
    );
    Ok(())
}

/// Waits until the waiter has made `attempts` attempts since `before` (its first, and the one
/// after its subscription and tracking are live), then lets its back-off grow for `grow`.
fn await_waiting(conn: &mut redis::Connection, before: u64, attempts: u64, grow: Duration) {
    assert!(
        support::eventually(Duration::from_secs(10), || {
            support::command_calls(conn, "evalsha") >= before + attempts
        }),
        "the waiter attempted"
    );
    std::thread::sleep(grow);
}

/// How long after `released` the waiter got the lock.
fn woken_after(acquired: &mpsc::Receiver<Instant>, released: Instant) -> Duration {
    let at = acquired
        .recv_timeout(WAIT)
        .expect("the waiter got the lock");
    at.saturating_duration_since(released)
}

#[test]
fn a_del_by_hand_wakes_a_waiting_lock_within_milliseconds() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    hold_as_java(&mut conn, "by-hand", 30_000);
    let before = support::command_calls(&mut conn, "evalsha");
    let acquired = spawn_waiter(&manager, "by-hand", false);
    // Long enough for the back-off to pass a second.
    await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
    let released = Instant::now();
    let _: () = conn.del("by-hand").unwrap();
    let after = woken_after(&acquired, released);
    println!("woken {after:?} after the DEL");
    assert!(after < WOKEN_WITHIN, "woken only {after:?} after the DEL");
    Ok(())
}

#[test]
fn over_resp2_the_invalidation_channel_wakes_the_waiter() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::builder(&server.url())
        .pubsub_protocol(PubSubProtocol::Resp2)
        .build()?;
    support::await_listener(&mut conn, &manager);
    hold_as_java(&mut conn, "resp2", 30_000);
    let before = support::command_calls(&mut conn, "evalsha");
    let acquired = spawn_waiter(&manager, "resp2", false);
    await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
    let released = Instant::now();
    let _: () = conn.del("resp2").unwrap();
    let after = woken_after(&acquired, released);
    println!("woken {after:?} after the DEL (RESP2)");
    assert!(after < WOKEN_WITHIN, "woken only {after:?} after the DEL");
    Ok(())
}

#[test]
fn a_java_spin_lock_release_wakes_a_plain_lock_and_a_spin_lock_waiter() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    for spin in [false, true] {
        let name = format!("java-spin:{spin}");
        let mut java = JavaSpinLock::new(server.conn(), 1);
        assert_eq!(java.attempt(&name), None, "Java takes the lock");
        let before = support::command_calls(&mut conn, "evalsha");
        let acquired = spawn_waiter(&manager, &name, spin);
        await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
        // A spin waiter without tracking polls at most 128 ms apart, within the bound below
        // by chance: the tracking itself is checked.
        assert!(tracks_broadcast(server.port()), "the server tracks the key");
        let released = Instant::now();
        assert_eq!(java.unlock(&name), Some(1), "Java released");
        let after = woken_after(&acquired, released);
        println!(
            "{} waiter woken {after:?} after the Java release",
            kind(spin)
        );
        assert!(
            after < WOKEN_WITHIN,
            "woken only {after:?} after the release"
        );
    }
    Ok(())
}

fn kind(spin: bool) -> &'static str {
    if spin {
        "spin-lock"
    } else {
        "plain-lock"
    }
}

#[test]
fn a_lease_cut_short_wakes_the_waiter_when_it_expires() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    hold_as_java(&mut conn, "cut-short", 30_000);
    let before = support::command_calls(&mut conn, "evalsha");
    let acquired = spawn_waiter(&manager, "cut-short", false);
    await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
    // The waiter last saw a 30 s lease; the key now ends in 20 ms, and nothing announces it.
    let cut = Instant::now();
    let _: () = conn.pexpire("cut-short", 20).unwrap();
    let after = woken_after(&acquired, cut);
    println!("woken {after:?} after the lease was cut to 20 ms");
    // The server expires keys in its cycle (10 times a second) or when touched.
    assert!(
        after < Duration::from_millis(500),
        "woken only {after:?} after the cut"
    );
    Ok(())
}

#[test]
fn a_key_nobody_waits_on_any_more_stops_being_watched() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    hold_as_java(&mut conn, "idle", 30_000);
    let before = support::command_calls(&mut conn, "evalsha");
    let acquired = spawn_waiter(&manager, "idle", true);
    await_waiting(&mut conn, before, 2, Duration::ZERO);
    assert!(tracks_broadcast(server.port()), "the key is watched");
    let _: () = conn.del("idle").unwrap();
    woken_after(&acquired, Instant::now());
    // Idle keys stay watched for 10 s at most (looked at once a second).
    assert!(
        support::eventually(Duration::from_secs(20), || !tracks_broadcast(server.port())),
        "the key is still watched"
    );
    Ok(())
}

#[test]
fn names_that_are_prefixes_of_each_other_are_woken_each_by_its_own_key() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    // The longer name first: the shorter one's prefix then covers it.
    for name in ["pfx:ab", "pfx:a"] {
        hold_as_java(&mut conn, name, 30_000);
    }
    let before = support::command_calls(&mut conn, "evalsha");
    let long = spawn_waiter(&manager, "pfx:ab", false);
    await_waiting(&mut conn, before, 2, Duration::ZERO);
    let before = support::command_calls(&mut conn, "evalsha");
    let short = spawn_waiter(&manager, "pfx:a", false);
    await_waiting(&mut conn, before, 2, Duration::from_millis(2500));

    // A hot key under the short name's prefix wakes nobody: the waiters look only by their
    // back-off, a handful of times in a second.
    let before = support::command_calls(&mut conn, "evalsha");
    let churn_until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < churn_until {
        let _: () = conn.set("pfx:abc", "hot").unwrap();
    }
    let looks = support::command_calls(&mut conn, "evalsha") - before;
    println!("{looks} looks while pfx:abc was written for 1 s");
    assert!(looks <= 4, "{looks} looks: the hot key woke the waiters");

    let released = Instant::now();
    let _: () = conn.del("pfx:a").unwrap();
    let after = woken_after(&short, released);
    println!("pfx:a woken {after:?} after its DEL");
    assert!(
        after < WOKEN_WITHIN,
        "pfx:a woken only {after:?} after its DEL"
    );
    assert!(
        long.try_recv().is_err(),
        "pfx:a's release woke pfx:ab's waiter into the lock"
    );
    let released = Instant::now();
    let _: () = conn.del("pfx:ab").unwrap();
    let after = woken_after(&long, released);
    println!("pfx:ab woken {after:?} after its DEL");
    assert!(
        after < WOKEN_WITHIN,
        "pfx:ab woken only {after:?} after its DEL"
    );
    Ok(())
}

/// How many attempts a waiter (a spin lock's, or a plain lock's) makes behind a holder whose
/// 3 s lease runs out unannounced, its own unlock excluded.
fn attempts_behind_a_three_second_lease(spin: bool) -> Result<u64> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    hold_as_java(&mut conn, "three-seconds", 3_000);
    let before = support::command_calls(&mut conn, "evalsha");
    let started = Instant::now();
    let acquired = spawn_waiter(&manager, "three-seconds", spin);
    let waited = woken_after(&acquired, started);
    let attempts = support::command_calls(&mut conn, "evalsha") - before - 1;
    println!("{} waiter: {attempts} attempts in {waited:?}", kind(spin));
    assert!(
        waited >= Duration::from_millis(2500),
        "got it after {waited:?}"
    );
    Ok(attempts)
}

#[test]
fn a_spin_waiter_behind_a_three_second_lease_sends_a_handful_of_attempts() -> Result<()> {
    let attempts = attempts_behind_a_three_second_lease(true)?;
    assert!(attempts <= 8, "{attempts} attempts behind a 3 s lease");
    Ok(())
}

#[test]
fn a_lock_waiter_behind_a_three_second_lease_sends_a_handful_of_attempts() -> Result<()> {
    let attempts = attempts_behind_a_three_second_lease(false)?;
    assert!(attempts <= 8, "{attempts} attempts behind a 3 s lease");
    Ok(())
}

/// The warnings logged by this test binary.
struct Recorder(Mutex<Vec<String>>);

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap().push(format!("{}", record.args()));
        }
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));

#[test]
fn without_the_right_to_client_tracking_waiters_fall_back_to_the_back_off() -> Result<()> {
    log::set_logger(&RECORDER).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Warn);
    let server = RedisServer::start();
    let mut conn = server.conn();
    let rights = ["SETUSER", "locker", "on", ">pw", "~*", "+@all", "-client"];
    server.acl(&[&rights[..], &["allchannels"]].concat());
    let url = format!("redis://locker:pw@127.0.0.1:{}/", server.port());
    let manager = LockManager::new(&url)?;
    support::await_listener(&mut conn, &manager);
    found_by_the_back_off(&manager, &mut conn);
    assert_eq!(
        support::command_calls(&mut conn, "client|tracking"),
        0,
        "no CLIENT TRACKING ran"
    );
    let refusals = RECORDER
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("refused client tracking"))
        .filter(|line| line.contains(&format!(":{}", server.port())))
        .count();
    assert_eq!(refusals, 1, "the refusal is logged once");
    Ok(())
}

/// A DEL of a held lock reaches a waiting plain lock, then a waiting spin lock, of `manager`
/// (which has no client tracking) by their back-offs: within seconds.
fn found_by_the_back_off(manager: &LockManager, conn: &mut redis::Connection) {
    for spin in [false, true] {
        let name = format!("refused:{spin}");
        hold_as_java(conn, &name, 30_000);
        let before = support::command_calls(conn, "evalsha");
        let acquired = spawn_waiter(manager, &name, spin);
        await_waiting(conn, before, 2, Duration::from_millis(500));
        let released = Instant::now();
        let _: () = conn.del(&name).unwrap();
        let after = woken_after(&acquired, released);
        println!("{} waiter without tracking: {after:?}", kind(spin));
        assert!(after < Duration::from_secs(4), "found after {after:?}");
    }
}

#[test]
fn behind_a_proxy_that_refuses_client_waiters_fall_back_to_the_back_off() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.refuse("CLIENT", "ERR unknown command 'CLIENT'");
    let manager = LockManager::new(&proxy.url())?;
    let mut conn = server.conn();
    support::await_listener(&mut conn, &manager);
    found_by_the_back_off(&manager, &mut conn);
    assert!(proxy.refused() >= 1, "CLIENT was asked for, and refused");
    assert_eq!(support::command_calls(&mut conn, "client|tracking"), 0);
    Ok(())
}

#[test]
fn tracking_is_set_up_again_after_the_listener_reconnects() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let manager = LockManager::new(&server.url())?;
    support::await_listener(&mut conn, &manager);
    hold_as_java(&mut conn, "reconnect", 30_000);
    let before = support::command_calls(&mut conn, "evalsha");
    let acquired = spawn_waiter(&manager, "reconnect", false);
    await_waiting(&mut conn, before, 2, Duration::ZERO);
    // Drop every connection but this one: the listener's and its tracking connection too.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut conn)
        .unwrap();
    // Once the waiter looked again after the reconnect, tracking is back.
    let before = support::command_calls(&mut conn, "evalsha");
    await_waiting(&mut conn, before, 1, Duration::from_millis(2500));
    let released = Instant::now();
    let _: () = conn.del("reconnect").unwrap();
    let after = woken_after(&acquired, released);
    println!("woken {after:?} after the DEL, after a reconnect");
    assert!(after < WOKEN_WITHIN, "woken only {after:?} after the DEL");
    Ok(())
}

#[test]
fn on_a_cluster_the_keys_master_wakes_the_waiter() -> Result<()> {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds).build()?;
    // One name per master.
    let mut names: Vec<(u16, String)> = Vec::new();
    for i in 0.. {
        let name = format!("cluster:{i}");
        let master = cluster.master_for_slot(RedisCluster::slot_of(&name));
        if !names.iter().any(|(m, _)| *m == master) {
            names.push((master, name));
        }
        if names.len() == 3 {
            break;
        }
    }
    for (master, name) in names {
        let mut conn = support::connect(&format!("redis://127.0.0.1:{master}/")).unwrap();
        let mut java = JavaSpinLock::new(
            support::connect(&format!("redis://127.0.0.1:{master}/")).unwrap(),
            1,
        );
        assert_eq!(java.attempt(&name), None, "Java takes the lock");
        let before = support::command_calls(&mut conn, "evalsha");
        let acquired = spawn_waiter(&manager, &name, false);
        await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
        let released = Instant::now();
        assert_eq!(java.unlock(&name), Some(1), "Java released");
        let after = woken_after(&acquired, released);
        println!("{name} on {master}: woken {after:?} after the Java spin release");
        assert!(
            after < WOKEN_WITHIN,
            "woken only {after:?} after the release"
        );
        // The same key held again, and deleted by hand.
        hold_as_java(&mut conn, &name, 30_000);
        let before = support::command_calls(&mut conn, "evalsha");
        let acquired = spawn_waiter(&manager, &name, false);
        await_waiting(&mut conn, before, 2, Duration::from_millis(2500));
        let released = Instant::now();
        let _: () = conn.del(&name).unwrap();
        let after = woken_after(&acquired, released);
        println!("{name} on {master}: woken {after:?} after a DEL");
        assert!(after < WOKEN_WITHIN, "woken only {after:?} after the DEL");
    }
    Ok(())
}

/// Whether a client of the node at `port` has broadcast tracking on (`CLIENT LIST` flags `t`
/// and `B`).
fn tracks_broadcast(port: u16) -> bool {
    let Ok(mut conn) = support::connect(&format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut conn)
        .unwrap_or_default();
    list.lines().any(|line| {
        line.split(' ')
            .find_map(|field| field.strip_prefix("flags="))
            .is_some_and(|flags| flags.contains('t') && flags.contains('B'))
    })
}

#[test]
fn after_a_cluster_failover_the_new_master_wakes_the_waiter() -> Result<()> {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds).build()?;
    let failing = cluster.master_ports()[0];
    let name = (0..)
        .map(|i| format!("failover:{i}"))
        .find(|name| cluster.master_for_slot(RedisCluster::slot_of(name)) == failing)
        .unwrap();
    let mut old = support::connect(&format!("redis://127.0.0.1:{failing}/")).unwrap();
    hold_as_java(&mut old, &name, 60_000);
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query(&mut old)
        .unwrap();
    let before = support::command_calls(&mut old, "evalsha");
    let acquired = spawn_waiter(&manager, &name, false);
    await_waiting(&mut old, before, 3, Duration::ZERO);
    assert!(tracks_broadcast(failing), "the old master tracks the key");

    let promoted = cluster.replica_of(failing);
    cluster.failover(promoted);
    // The listener of the new master registers the key there, and the waiter looks again.
    assert!(
        support::eventually(Duration::from_secs(20), || tracks_broadcast(promoted)),
        "the new master tracks the key"
    );
    let mut new = support::connect(&format!("redis://127.0.0.1:{promoted}/")).unwrap();
    let before = support::command_calls(&mut new, "evalsha");
    await_waiting(&mut new, before, 1, Duration::from_millis(2500));
    let released = Instant::now();
    let _: () = new.del(&name).unwrap();
    let after = woken_after(&acquired, released);
    println!("woken {after:?} after the DEL on the new master");
    assert!(after < WOKEN_WITHIN, "woken only {after:?} after the DEL");
    Ok(())
}

/// A Sentinel failover moves the waited key to another master, whose listener registers its
/// tracking there.
#[test]
fn after_a_sentinel_failover_the_new_master_wakes_the_waiter() -> Result<()> {
    let sentinel = RedisSentinel::start();
    let manager = sentinel.manager();
    let old_port = sentinel.master_port();
    let mut old = support::connect(&format!("redis://127.0.0.1:{old_port}/")).unwrap();
    hold_as_java(&mut old, "sentinel", 60_000);
    let _: i64 = redis::cmd("WAIT")
        .arg(2)
        .arg(5_000)
        .query(&mut old)
        .unwrap();
    let before = support::command_calls(&mut old, "evalsha");
    let acquired = spawn_waiter(&manager, "sentinel", true);
    await_waiting(&mut old, before, 2, Duration::ZERO);
    assert!(tracks_broadcast(old_port), "the old master tracks the key");

    sentinel.graceful_failover();
    let promoted = sentinel.wait_for_failover(old_port);
    assert!(
        support::eventually(Duration::from_secs(20), || tracks_broadcast(promoted)),
        "the new master tracks the key"
    );
    let mut new = support::connect(&format!("redis://127.0.0.1:{promoted}/")).unwrap();
    let wakeups = manager.stats().wakeups;
    let released = Instant::now();
    let _: () = new.del("sentinel").unwrap();
    // The wake-up is what tracking delivers; the acquire that follows may wait for a replica's
    // acknowledgement (replica sync) while the replicas resynchronise after the failover.
    assert!(
        support::eventually(WOKEN_WITHIN, || manager.stats().wakeups > wakeups),
        "no wake-up within {WOKEN_WITHIN:?} of the DEL"
    );
    let woken = released.elapsed();
    let after = woken_after(&acquired, released);
    println!("woken within {woken:?}, acquired {after:?} after the DEL on the new master");
    Ok(())
}
