//! The pub/sub listener survives a dropped connection, and waiters survive a server restart.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::{LockManager, Result};
use support::RedisServer;

const CHANNEL: &str = "redisson_lock__channel:{reconnect}";

#[test]
fn waiters_still_wake_after_the_subscriber_connection_is_killed() -> Result<()> {
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?; // 30 s lease
    let waiter = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let guard = holder.lock("reconnect")?;

    let waiting = support::Waiter::spawn(&waiter, "reconnect");
    assert!(support::await_subscribers(&mut conn, CHANNEL, 1));
    // Cut every pub/sub connection (both managers' listeners); they must come back.
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut conn)
        .unwrap();
    assert!(
        support::await_subscribers(&mut conn, CHANNEL, 1),
        "the waiter's channel is subscribed again after the reconnect"
    );
    assert!(
        waiting.is_waiting(),
        "still waiting: the holder has the lock"
    );

    guard.unlock()?;
    let handoff = waiting.acquired_since(Instant::now());
    assert!(
        handoff < Duration::from_secs(3),
        "took {handoff:?}: not woken by pub/sub"
    );
    Ok(())
}

#[test]
fn a_waiter_acquires_after_the_server_restarts_empty() -> Result<()> {
    let mut server = RedisServer::start();
    let holder = LockManager::new(&server.url())?; // 30 s lease
    let waiter = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let _guard = holder.lock("reconnect")?;

    let waiting = support::Waiter::spawn(&waiter, "reconnect");
    assert!(support::await_subscribers(&mut conn, CHANNEL, 1));
    drop(conn);

    // Every lock is gone with the restart; the waiter's listener reconnects, resubscribes and
    // tells the waiter to look again, long before the old holder's 30 s lease would have run out.
    server.restart();
    let took = waiting.acquired_since(Instant::now());
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} after the restart"
    );
    Ok(())
}

/// A single server dying under a blocked waiter is an error after the outage grace (one
/// connect timeout), not a wait for the rest of the holder's lease: the listener's lost
/// connection sends its waiters to look. (With Sentinel, `tests/sentinel.rs` shows a waiter
/// riding out a failover instead.)
#[test]
fn a_waiter_reports_redis_down_after_the_outage_grace_not_the_holders_lease() -> Result<()> {
    const LEASE: Duration = Duration::from_secs(60);
    let mut server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&server.url())
        .connect_timeout(Duration::from_secs(1))
        .build()?;
    let mut conn = server.conn();
    let _guard = holder.lock_with_lease("reconnect", LEASE)?;

    let (done_tx, done) = std::sync::mpsc::channel();
    let waiting = {
        let waiter = waiter.clone();
        std::thread::spawn(move || {
            let outcome = waiter.lock("reconnect").map(drop);
            done_tx.send(Instant::now()).expect("test alive");
            outcome
        })
    };
    assert!(support::await_subscribers(&mut conn, CHANNEL, 1));
    drop(conn);

    server.kill();
    let killed = Instant::now();
    let ended = done
        .recv_timeout(LEASE)
        .expect("lock() returned before the holder's lease ran out");
    let err = waiting
        .join()
        .expect("waiter thread")
        .expect_err("Redis is down");
    assert!(err.is_connection_error(), "{err:?}");
    let took = ended.saturating_duration_since(killed);
    assert!(
        took < Duration::from_secs(15),
        "took {took:?} to report Redis down (the holder's lease is {LEASE:?})"
    );
    Ok(())
}

/// A server that stops answering (frozen) but keeps its connections is not "down": the
/// listener reconnects without waking the waiters, whose attempts would only time out, and a
/// waiter blocked through the freeze acquires once the server is back and the lock released.
#[test]
fn a_waiter_rides_out_a_frozen_server() -> Result<()> {
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&server.url())
        .response_timeout(Duration::from_secs(1))
        .build()?;
    let mut conn = server.conn();
    let guard = holder.lock_with_lease("reconnect", Duration::from_secs(60))?;
    let waiting = support::Waiter::spawn(&waiter, "reconnect");
    assert!(support::await_subscribers(&mut conn, CHANNEL, 1));
    drop(conn);

    // Longer than the listener's liveness check (5 s without traffic, then one response
    // timeout): it gives the connection up while the server is frozen.
    server.freeze();
    std::thread::sleep(Duration::from_secs(8));
    server.thaw();
    let released = Instant::now();
    guard.unlock()?;
    let took = waiting.acquired_since(released);
    assert!(took < Duration::from_secs(10), "took {took:?}");
    Ok(())
}

/// A restart that reads its data back (an RDB here) answers LOADING for a while: a waiter
/// rides that out within the outage grace, as it does the refused connections before it, and
/// acquires once the lock is released.
#[test]
fn a_waiter_rides_out_a_restart_that_loads_its_data() -> Result<()> {
    let mut server = RedisServer::start();
    let mut conn = server.conn();
    // Enough data that loading it back takes a while (about a second on a 2-core machine),
    // several times the 100 ms between a waiter's attempts during an outage.
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(2_000_000)
        .query(&mut conn)
        .expect("DEBUG POPULATE");
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&server.url())
        .connect_timeout(Duration::from_secs(20))
        .build()?;
    let guard = holder.lock_with_lease("reconnect", Duration::from_secs(60))?;
    let waiting = support::Waiter::spawn(&waiter, "reconnect");
    assert!(support::await_subscribers(&mut conn, CHANNEL, 1));
    // The lock is saved with the data, and is held again once the server is back.
    let _: () = redis::cmd("SAVE").query(&mut conn).expect("SAVE");
    drop(conn);

    server.restart();
    let released = Instant::now();
    guard.unlock()?;
    let took = waiting.acquired_since(released);
    assert!(took < Duration::from_secs(10), "took {took:?}");
    Ok(())
}
