//! The pub/sub listener survives a dropped connection, and waiters survive a server restart.

mod support;

use std::time::{Duration, Instant};

use redis_lock::{LockManager, Result};
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
