//! Replica acknowledgement (`LockManagerBuilder::replica_sync`) on a single master with a
//! real replica: acquires wait for it, and an acquire no replica acknowledged is rolled back
//! and reported, leaving nothing behind. On Sentinel, a replica in its full sync counts too.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::{AcquireOptions, LockManager};
use support::proxy::Proxy;
use support::sentinel::RedisSentinel;
use support::RedisServer;

#[test]
fn acquires_wait_for_the_replica_and_are_rolled_back_without_it() {
    let (master, replica) = support::master_with_replica();
    let manager = LockManager::builder(&master.url())
        .replica_sync_timeout(Duration::from_secs(1))
        .build()
        .expect("manager");

    // With the replica up, the lock is on the replica as soon as lock() returns.
    let guard = manager.lock("replicated").expect("lock");
    let on_replica: bool = redis::cmd("EXISTS")
        .arg("replicated")
        .query(&mut replica.conn())
        .expect("EXISTS on the replica");
    assert!(
        on_replica,
        "lock() returned before the replica had the lock"
    );
    let before = manager.stats().commands;
    guard.unlock().expect("unlock");
    assert!(
        manager.stats().commands >= before + 2,
        "the release was not followed by WAIT"
    );

    // A frozen replica acknowledges nothing: the acquire fails, and nothing is left.
    replica.freeze();
    let started = Instant::now();
    let err = manager.lock("unreplicated").unwrap_err();
    assert!(err.is_not_replicated(), "{err}");
    assert!(err.to_string().contains("rolled back"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let left: bool = redis::cmd("EXISTS")
        .arg("unreplicated")
        .query(&mut master.conn())
        .expect("EXISTS on the master");
    assert!(!left, "the unreplicated acquire was left in place");
    // A hold taken before is not touched by the failed call.
    replica.thaw();
    let held = manager
        .lock("held-before")
        .expect("lock with the replica back");
    replica.freeze();
    let err = manager.lock("held-before").unwrap_err();
    assert!(err.is_not_replicated(), "{err}");
    assert_eq!(held.lock().hold_count().expect("hold count"), 1);
    replica.thaw();
    held.unlock().expect("unlock");

    // Without replica sync, nobody waits for the replica.
    let unsynced = LockManager::builder(&master.url())
        .replica_sync(false)
        .build()
        .expect("manager");
    replica.freeze();
    let guard = unsynced
        .lock("not-waiting")
        .expect("lock without replica sync");
    guard.unlock().expect("unlock");
    replica.thaw();
}

#[test]
fn a_master_without_replicas_sends_no_wait() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).expect("manager");
    support::await_listener(&mut server.conn(), &manager);
    let before = manager.stats();
    manager
        .lock("alone")
        .expect("lock")
        .unlock()
        .expect("unlock");
    let after = manager.stats();
    assert_eq!(
        after.commands - before.commands,
        2,
        "one acquire and one release only"
    );
}

#[test]
fn a_replica_added_later_is_waited_for_once_counted_again() {
    let master = RedisServer::start();
    let manager = LockManager::new(&master.url()).expect("manager");
    manager
        .lock("before")
        .expect("lock")
        .unlock()
        .expect("unlock");
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    assert!(
        support::eventually(Duration::from_secs(20), || {
            support::role_lists_replicas(&mut master.conn()) == 1
        }),
        "the replica linked"
    );
    // Replicas are counted again by an acquire or release once the count is 10 s old.
    std::thread::sleep(Duration::from_millis(10_500));
    manager
        .lock("recount")
        .expect("lock")
        .unlock()
        .expect("unlock");
    let before = manager.stats().commands;
    let guard = manager.lock("after").expect("lock");
    assert_eq!(
        manager.stats().commands - before,
        2,
        "the acquire and a WAIT for the new replica"
    );
    let on_replica: bool = redis::cmd("EXISTS")
        .arg("after")
        .query(&mut replica.conn())
        .expect("EXISTS on the replica");
    assert!(on_replica);
    guard.unlock().expect("unlock");
}

#[test]
fn an_attempt_that_finds_the_lock_held_waits_for_no_replica() {
    let (master, replica) = support::master_with_replica();
    let holder = LockManager::new(&master.url()).expect("holder");
    let waiter = LockManager::builder(&master.url())
        .replica_sync_timeout(Duration::from_millis(500))
        .build()
        .expect("waiter");
    let guard = holder.lock("taken").expect("lock");
    // While the replica lags, an attempt that took nothing must not wait for it (and fail
    // with NotReplicated): it wrote nothing.
    replica.freeze();
    // Counted by the server: the managers' own counts include their listeners' traffic.
    let before = wait_calls(&master);
    let outcome = waiter.try_lock("taken", Duration::ZERO);
    let waits = wait_calls(&master) - before;
    replica.thaw();
    assert!(
        matches!(outcome, Ok(None)),
        "an attempt on a held lock: {:?}",
        outcome.map(|g| g.is_some())
    );
    assert_eq!(waits, 0, "the attempt was followed by a WAIT");
    guard.unlock().expect("unlock");
}

/// How many WAIT commands the server has run (`INFO commandstats`).
fn wait_calls(server: &RedisServer) -> u64 {
    calls(server, "wait")
}

/// How many `command` commands the server has run (`INFO commandstats`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a call count"))
}

/// An acquire that took its hold but whose replica acknowledgement never came back (the
/// WAIT's reply lost, so whether a replica has the hold is unknown) is rolled back and
/// reported like one no replica acknowledged, not left in place with an I/O error.
#[test]
fn an_acquire_whose_acknowledgement_was_lost_is_rolled_back() {
    let (master, _replica) = support::master_with_replica();
    let proxy = Proxy::start(master.port());
    let manager = LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .replica_sync_timeout(Duration::from_secs(1))
        .build()
        .expect("manager through the proxy");
    support::await_listener(&mut master.conn(), &manager);
    // The reply let through and the one lost are the acquire's and the WAIT's, unless the
    // listener's connection check came in between (then the acquire went through, or its own
    // reply was lost and it timed out): the scenario is run again, under another name.
    let mut attempts = 0;
    let name = loop {
        attempts += 1;
        assert!(attempts <= 5, "the WAIT's reply was never the one lost");
        let name = format!("acknowledgement-lost-{attempts}");
        let dropped = proxy.dropped();
        proxy.drop_reply_after(1);
        let outcome = manager.lock(&name);
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped
        }));
        match outcome {
            Err(err) if err.is_not_replicated() => break name,
            Err(err) => assert!(err.is_timeout(), "{err}"),
            Ok(guard) => guard.unlock().expect("unlock"),
        }
    };
    let left: bool = redis::cmd("EXISTS")
        .arg(&name)
        .query(&mut master.conn())
        .expect("EXISTS on the master");
    assert!(
        !left,
        "the hold whose acknowledgement was lost was left in place"
    );
    let guard = manager
        .lock(&name)
        .expect("lock once the replies come through");
    assert_eq!(guard.lock().hold_count().expect("hold count"), 1);
    guard.unlock().expect("unlock");
}

/// An acquire sent again on a new connection after its first send ran (the connection died
/// before the reply) is answered by its attempt id, and is still waited for: the replica must
/// have what the *first* send wrote. With the replica frozen, it is rolled back and reported.
#[test]
fn an_acquire_answered_by_its_attempt_id_still_waits_for_the_replica() {
    let (master, replica) = support::master_with_replica();
    let proxy = Proxy::start(master.port());
    let manager = LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(500))
        .replica_sync_timeout(Duration::from_secs(1))
        .build()
        .expect("manager through the proxy");
    // Scripts loaded, the replicas counted, a pooled connection to reuse.
    manager
        .lock("warm-up")
        .expect("lock")
        .unlock()
        .expect("unlock");
    replica.freeze();
    // The reply cut off is the next one on any connection: when it was not the acquire's
    // (the listener's check of its subscription), the acquire went out once, and the
    // scenario is run again under another name. Either way nothing may be acknowledged.
    let mut resent = false;
    for round in 0..5 {
        let name = format!("replayed-{round}");
        support::await_listener(&mut master.conn(), &manager);
        let evalsha = calls(&master, "evalsha");
        let dropped = proxy.dropped();
        proxy.cut_at_next_reply();
        let err = manager
            .lock(&name)
            .expect_err("acknowledged although the replica is frozen");
        assert!(err.is_not_replicated(), "{err}");
        let left: bool = redis::cmd("EXISTS")
            .arg(&name)
            .query(&mut master.conn())
            .expect("EXISTS on the master");
        assert!(!left, "the unacknowledged hold was left in place");
        // Sent twice, then the rollback's release: three script calls.
        if calls(&master, "evalsha") - evalsha >= 3 {
            resent = true;
            break;
        }
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped
        }));
    }
    replica.thaw();
    assert!(resent, "the acquire's reply was never the one cut off");
}

/// A replayed acquire (same attempt id) writes, so that `WAIT` on its connection covers what
/// the first send wrote on another one: `WAIT` counts the replicas that have the connection's
/// own last write, and a replay that only read would leave that at the connection's earlier
/// write, which the replica may have acknowledged long ago. Raw script calls: the waiting
/// loop's retry after a connection error takes such a pooled connection.
#[test]
fn a_replayed_acquire_is_covered_by_wait_on_its_connection() {
    let (master, replica) = support::master_with_replica();
    let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
    let owner = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:1";
    let marker = format!("redis_rlock__attempt:{{replayed}}:{owner}");
    let attempt = |conn: &mut redis::Connection| -> Option<i64> {
        acquire
            .key("replayed")
            .key(&marker)
            .arg(30_000)
            .arg(owner)
            .arg("attempt-1")
            .arg(10_000)
            .invoke(conn)
            .expect("acquire")
    };
    let wait = |conn: &mut redis::Connection| -> i64 {
        redis::cmd("WAIT")
            .arg(1)
            .arg(300)
            .query(conn)
            .expect("WAIT")
    };
    // The connection the replay goes out on wrote before, and the replica has that.
    let mut replaying = master.conn();
    let _: () = redis::cmd("SET")
        .arg("earlier")
        .arg(1)
        .query(&mut replaying)
        .expect("SET");
    assert_eq!(wait(&mut replaying), 1, "the replica has the earlier write");

    replica.freeze();
    let mut first = master.conn();
    assert_eq!(attempt(&mut first), None, "the first send takes the lock");
    assert_eq!(attempt(&mut replaying), None, "the replay answers acquired");
    let held: i64 = redis::cmd("HGET")
        .arg("replayed")
        .arg(owner)
        .query(&mut first)
        .expect("HGET");
    assert_eq!(held, 1, "the replay took nothing");
    let acked = wait(&mut replaying);
    replica.thaw();
    assert_eq!(
        acked, 0,
        "WAIT after the replay was answered without the replica having the first send's hold"
    );
}

/// Thread `a` holds `name` through `manager` and thread `b` is queued behind it in the line;
/// returns a's guard and the receiver of b's `lock()` result.
fn holder_and_queued_successor(
    server: &RedisServer,
    manager: &LockManager,
    name: &'static str,
) -> (
    redis_rlock::LockGuard,
    std::sync::mpsc::Receiver<redis_rlock::Result<redis_rlock::LockGuard>>,
) {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    // a takes the turn while another thread holds the lock, so that the line exists.
    let first = manager.lock(name).expect("the first holder");
    let (tx, rx) = std::sync::mpsc::channel();
    let spawn_locker = |tx: std::sync::mpsc::Sender<_>| {
        let manager = manager.clone();
        std::thread::spawn(move || tx.send(manager.lock(name)).unwrap())
    };
    spawn_locker(tx.clone());
    assert!(support::await_subscribers(&mut server.conn(), &channel, 1));
    drop(first);
    let a = rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("a holds");
    spawn_locker(tx);
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.queued_thread_count() == 1
    }));
    (a, rx)
}

/// The successor's own acquire cannot be acknowledged: it is refused with NotReplicated and
/// rolled back, never leaving a hold on the master that nobody renews or releases.
fn assert_refused_and_rolled_back(
    successor: &std::sync::mpsc::Receiver<redis_rlock::Result<redis_rlock::LockGuard>>,
    master: &RedisServer,
    name: &str,
) {
    let err = successor
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .map(drop)
        .unwrap_err();
    assert!(err.is_not_replicated(), "{err}");
    let held: Vec<String> = redis::cmd("HGETALL")
        .arg(name)
        .query(&mut master.conn())
        .unwrap();
    assert!(held.is_empty(), "rolled back: {held:?}");
}

/// A release that hands the lock to the next local thread acquires in its name: with replica
/// sync on, that acquire must be acknowledged by a replica like any other, so the successor
/// acquires itself (and is refused, and rolled back, when no replica answers).
#[test]
fn a_local_successor_gets_no_lock_that_no_replica_acknowledged() {
    let (master, replica) = support::master_with_replica();
    let manager = LockManager::builder(&master.url())
        .replica_sync_timeout(Duration::from_secs(1))
        .build()
        .expect("manager");
    let name = "sync:handoff";
    let (a, b) = holder_and_queued_successor(&master, &manager, name);

    replica.freeze();
    let direct = manager.lock("sync:direct").map(drop).unwrap_err();
    assert!(direct.is_not_replicated(), "{direct}");
    a.unlock()
        .expect("a release is done whatever the replicas say");
    assert_refused_and_rolled_back(&b, &master, name);
    replica.thaw();
}

/// Asking for the replicas' acknowledgement of a release can fail after the release ran (here
/// the user may not run INFO, which follows a WAIT that nobody answered): the unlock still
/// succeeded, and is reported so.
#[test]
fn a_release_whose_replica_check_fails_is_still_a_release() {
    let (master, replica) = support::master_with_replica();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-info",
        ])
        .query(&mut master.conn())
        .unwrap();
    let url = format!("redis://locker:pw@127.0.0.1:{}/", master.port());
    let manager = LockManager::builder(&url)
        .replica_sync_timeout(Duration::from_secs(1))
        .build()
        .expect("manager");
    let name = "sync:release-check";
    let (a, b) = holder_and_queued_successor(&master, &manager, name);

    replica.freeze();
    a.unlock()
        .expect("released, whatever the replica check says");
    assert_refused_and_rolled_back(&b, &master, name);
    replica.thaw();
}

/// `CONFIG SET parameter value` on the server at `port`.
fn config_set(port: u16, parameter: &str, value: &str) {
    let mut conn = support::connect(&format!("redis://127.0.0.1:{port}/")).expect("connect");
    let _: () = support::query(
        &mut conn,
        redis::cmd("CONFIG").arg("SET").arg(parameter).arg(value),
    )
    .expect("CONFIG SET");
}

/// The only replica of a Sentinel master, restarted empty, waits for its full sync (held back
/// by `repl-diskless-sync-delay`): the master's `ROLE` lists no replica then, but a failover
/// may promote it once synced. A fenced acquire by a manager built meanwhile (as every
/// `redis-rlock run` is) must wait for it or fail (a fresh acquire fails at a first attempt
/// that no replica acknowledged), never count unreplicated. Once the replica has synced, an
/// acquire is on it when it returns, and after a `kill -9` of the master and the replica's
/// promotion, the token counter has not gone back.
#[test]
fn a_replica_in_its_full_sync_is_waited_for() {
    const NAME: &str = "replica-syncing";
    let token_key = format!("redisson_lock_token:{{{NAME}}}");
    let deployment = RedisSentinel::with_replicas(1);
    let master = deployment.master_port();
    let replica = deployment.replica_ports()[0];
    config_set(master, "repl-diskless-sync", "yes");
    config_set(master, "repl-diskless-sync-delay", "600");
    deployment.restart_without_data(replica);
    let mut on_master = support::connect(&format!("redis://127.0.0.1:{master}/")).expect("master");
    let mut info = String::new();
    assert!(
        support::eventually(Duration::from_secs(20), || {
            info = support::query(&mut on_master, redis::cmd("INFO").arg("replication")).unwrap();
            info.contains("state=wait_bgsave")
        }),
        "the master never listed the restarted replica as waiting for its sync:\n{info}"
    );

    let urls = deployment.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let manager = LockManager::sentinel_builder(&urls, deployment.master_name())
        .replica_sync_timeout(Duration::from_millis(500))
        .build()
        .expect("a manager through the sentinels");
    let lock = manager.get_lock(NAME);
    let fenced = || AcquireOptions::new().fenced(true);
    let outcome = lock.acquire(fenced().wait(Duration::from_secs(2)));
    let left: bool = support::query(&mut on_master, redis::cmd("EXISTS").arg(NAME)).unwrap();
    match &outcome {
        Ok(Some(guard)) => panic!(
            "acquired (token {:?}) while the only replica waited for its sync",
            guard.fencing_token()
        ),
        Ok(None) => {}
        Err(err) => assert!(err.is_not_replicated(), "{err}"),
    }
    assert!(!left, "the unreplicated acquire was left on the master");
    drop(outcome);

    // The sync goes ahead; once the replica has synced, an acquire is on it when it returns.
    config_set(master, "repl-diskless-sync-delay", "0");
    assert!(
        support::eventually(Duration::from_secs(30), || {
            info = support::query(&mut on_master, redis::cmd("INFO").arg("replication")).unwrap();
            info.contains("state=online")
        }),
        "the replica never synced:\n{info}"
    );
    let guard = lock
        .acquire(fenced().wait(Duration::from_secs(30)))
        .expect("acquire")
        .expect("acquired once the replica synced");
    let token = guard.fencing_token().expect("a token");
    let mut on_replica =
        support::connect(&format!("redis://127.0.0.1:{replica}/")).expect("replica");
    let replicated: bool = support::query(&mut on_replica, redis::cmd("EXISTS").arg(NAME)).unwrap();
    assert!(replicated, "the acquire returned before the replica had it");

    deployment.wait_until_sentinels_know(replica);
    let old = deployment.kill_master();
    let promoted = deployment.wait_for_failover(old);
    assert_eq!(promoted, replica);
    let mut on_promoted =
        support::connect(&format!("redis://127.0.0.1:{promoted}/")).expect("new master");
    let counter: Option<u64> =
        support::query(&mut on_promoted, redis::cmd("GET").arg(&token_key)).unwrap();
    assert!(
        counter.is_some_and(|c| c >= token),
        "the promoted replica's token counter is {counter:?}, below token {token}: the next \
         acquire would hand it out again"
    );
    drop(guard);
}
