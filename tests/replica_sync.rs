//! Replica acknowledgement (`LockManagerBuilder::replica_sync`) on a single master with a
//! real replica: acquires wait for it, and an acquire no replica acknowledged is rolled back
//! and reported, leaving nothing behind.

mod support;

use std::time::{Duration, Instant};

use redis_lock::LockManager;
use support::proxy::Proxy;
use support::RedisServer;

/// A master and one replica that has caught up with it.
fn master_with_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.conn())
            .expect("INFO on the replica");
        let linked = info.contains("master_link_status:up");
        if linked && support::role_lists_replicas(&mut master.conn()) == 1 {
            return (master, replica);
        }
        assert!(
            Instant::now() < deadline,
            "the replica never linked:\n{info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn acquires_wait_for_the_replica_and_are_rolled_back_without_it() {
    let (master, replica) = master_with_replica();
    let manager = LockManager::builder(&master.url())
        .replica_sync_timeout(Duration::from_millis(300))
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
    let (master, replica) = master_with_replica();
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
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a WAIT call count"))
}

/// An acquire that took its hold but whose replica acknowledgement never came back (the
/// WAIT's reply lost, so whether a replica has the hold is unknown) is rolled back and
/// reported like one no replica acknowledged, not left in place with an I/O error.
#[test]
fn an_acquire_whose_acknowledgement_was_lost_is_rolled_back() {
    let (master, _replica) = master_with_replica();
    let proxy = Proxy::start(master.port());
    let manager = LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .replica_sync_timeout(Duration::from_millis(300))
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
