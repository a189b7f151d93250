//! Replies lost and connections cut by a TCP proxy between the client and Redis
//! (testkit/src/proxy.rs). Each test names the invariant it checks.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::proxy::Proxy;
use support::RedisServer;

fn manager_through(proxy: &Proxy, watchdog: Duration) -> LockManager {
    LockManager::builder(&proxy.url())
        .watchdog_timeout(watchdog)
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("manager through the proxy")
}

/// Invariant: an unlock that took effect but whose reply was lost is sent again and reports
/// success (its latch answers), not "not held".
#[test]
fn an_unlock_whose_reply_was_lost_reports_success() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy, Duration::from_secs(30));
    // As below: the swallowed reply may be the listener's, not the unlock's; then the unlock
    // went through in one send and the scenario is run again.
    let mut attempts = 0;
    loop {
        attempts += 1;
        assert!(
            attempts <= 5,
            "the unlock's reply was never the one dropped"
        );
        support::await_listener(&mut server.conn(), &manager);
        let guard = manager.lock("lost-reply:unlock")?;
        let dropped_before = proxy.dropped();
        let sent_before = manager.stats().commands;
        proxy.drop_next_reply();
        guard.unlock()?;
        if manager.stats().commands - sent_before == 2 {
            break; // sent twice: the first reply was lost, and the unlock still succeeded
        }
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped_before
        }));
    }
    let exists: bool = server.conn().exists("lost-reply:unlock").unwrap();
    assert!(!exists, "released exactly once");
    Ok(())
}

/// Invariant: an acquire that took effect but whose reply was lost is an error to the caller
/// and leaves no hold that anyone renews: it expires with its lease.
#[test]
fn an_acquire_whose_reply_was_lost_leaves_no_hold_renewed_forever() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let watchdog = Duration::from_millis(900);
    let manager = manager_through(&proxy, watchdog);
    let mut conn = server.conn();
    // The reply the proxy swallows is the next one on any connection: the listener's own
    // check of its subscription (a PING) may still be in flight after it shows as subscribed.
    // Then the acquire succeeds and the scenario is run again once things settled.
    let mut attempts = 0;
    let err = loop {
        attempts += 1;
        support::await_listener(&mut conn, &manager);
        let dropped_before = proxy.dropped();
        proxy.drop_next_reply();
        match manager.lock("lost-reply:acquire") {
            Err(err) => break err,
            Ok(guard) => {
                assert!(
                    attempts < 5,
                    "the acquire's reply was never the one dropped"
                );
                guard.unlock()?;
                assert!(support::eventually(Duration::from_secs(10), || {
                    proxy.dropped() > dropped_before
                }));
            }
        }
    };
    assert!(err.is_timeout(), "{err}");
    let exists: bool = conn.exists("lost-reply:acquire").unwrap();
    assert!(exists, "the acquire ran on the server");
    assert_eq!(manager.renewing_count(), 0, "nobody renews it");
    assert!(
        support::eventually(Duration::from_secs(10), || {
            !conn.exists::<_, bool>("lost-reply:acquire").unwrap()
        }),
        "the orphaned hold expires with its lease"
    );
    manager.lock("lost-reply:acquire")?.unlock()?;
    Ok(())
}

/// Invariant: when every connection of a waiting client is cut, its waiters resubscribe and
/// still acquire promptly after the release, never hang.
#[test]
fn waiters_acquire_promptly_after_their_connections_are_cut() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = LockManager::new(&server.url())?;
    let waiter = manager_through(&proxy, Duration::from_secs(30));
    let mut conn = server.conn();
    let channel = "redisson_lock__channel:{lost-reply:cut}";
    let guard = holder.lock("lost-reply:cut")?;
    let waiting = support::Waiter::spawn(&waiter, "lost-reply:cut");
    assert!(support::await_subscribers(&mut conn, channel, 1));

    proxy.cut_all();
    // The listener reconnects through the proxy and subscribes again.
    assert!(
        support::eventually(Duration::from_secs(10), || {
            support::client_count(&mut conn, "pubsub") >= 2
                && support::numsub(&mut conn, channel) == 1
        }),
        "resubscribed"
    );
    assert!(waiting.is_waiting());
    guard.unlock()?;
    let took = waiting.acquired_since(Instant::now());
    assert!(took < Duration::from_secs(3), "took {took:?}");
    Ok(())
}

/// Invariant: a latch count-down and a semaphore release, which would count twice, are not
/// sent again when the pooled connection they went out on dies after the server ran them:
/// the caller gets a connection error (the outcome is unknown to it), the count moved once,
/// and the next call goes through on a new connection.
#[test]
fn calls_that_would_count_twice_are_not_sent_again_after_their_connection_died() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy, Duration::from_secs(30));
    let mut conn = server.conn();
    let latch = manager.get_count_down_latch("no-repeat:latch");
    assert!(latch.try_set_count(10)?);
    let semaphore = manager.get_semaphore("no-repeat:semaphore");
    assert!(semaphore.try_set_permits(10)?);
    // Once each, so that the server has their scripts: the reply cut off must be the one of
    // the script's run, not of its NOSCRIPT refusal.
    latch.count_down()?;
    semaphore.release(1)?;

    // The reply cut off is the next one on any connection: when it was the listener's, the
    // call went through and the scenario is run again. Either way the count moves once.
    let mut cut = |call: &dyn Fn() -> Result<()>, count: &dyn Fn() -> Result<u64>, step: i64| {
        for _ in 0..5 {
            support::await_listener(&mut conn, &manager);
            let before = count()? as i64;
            let dropped = proxy.dropped();
            proxy.cut_at_next_reply();
            let outcome = call();
            assert_eq!(count()? as i64, before + step, "the call ran once");
            match outcome {
                Err(err) => {
                    assert!(err.is_connection_error(), "{err}");
                    return Ok(());
                }
                Ok(()) => assert!(support::eventually(Duration::from_secs(10), || {
                    proxy.dropped() > dropped
                })),
            }
        }
        panic!("the call's reply was never the one cut off");
    };
    cut(&|| latch.count_down(), &|| latch.count(), -1)?;
    cut(
        &|| semaphore.release(1),
        &|| semaphore.available_permits(),
        1,
    )?;
    latch.count_down()?;
    semaphore.release(1)?;
    Ok(())
}

/// Runs `call` with the next reply the server sends (on any connection) cut off with its
/// connection. Returns the call's outcome and whether the cut reply was the call's: then it
/// was sent twice (again on a new connection). When the cut met another connection (the
/// listener's check of its subscription), this waits until it happened, so that the next
/// round starts clean.
fn cut_reply_of<T>(
    conn: &mut redis::Connection,
    manager: &LockManager,
    proxy: &Proxy,
    call: impl FnOnce() -> Result<T>,
) -> Result<(T, bool)> {
    support::await_listener(conn, manager);
    let sent = manager.stats().commands;
    let dropped = proxy.dropped();
    proxy.cut_at_next_reply();
    let outcome = call()?;
    if manager.stats().commands - sent >= 2 {
        return Ok((outcome, true));
    }
    assert!(support::eventually(Duration::from_secs(10), || {
        proxy.dropped() > dropped
    }));
    Ok((outcome, false))
}

/// Invariant: an acquire whose pooled connection dies after the server ran it is sent again
/// on a new connection and takes what it asked for once, not twice: one hold of a lock (new
/// or re-entered), the same fencing token, one semaphore permit. Its attempt id answers the
/// second send (docs/design/deployments.md, "Never twice blindly").
#[test]
fn an_acquire_sent_again_after_its_connection_died_takes_one_hold() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy, Duration::from_secs(30));
    let mut conn = server.conn();
    let lock = manager.get_lock("resent:lock");
    let semaphore = manager.get_semaphore("resent:semaphore");
    assert!(semaphore.try_set_permits(10)?);
    // Once each, so that the server has the scripts (the reply cut off must be a script's
    // run, not its NOSCRIPT refusal) and the pool a connection to reuse.
    lock.lock_fenced()?.unlock()?;
    semaphore.acquire(1)?;
    semaphore.release(1)?;

    let mut resent = [false; 4];
    for _ in 0..5 {
        let (guard, again) = cut_reply_of(&mut conn, &manager, &proxy, || lock.lock())?;
        assert_eq!(lock.hold_count()?, 1, "a new hold, taken once");
        guard.unlock()?;
        assert!(!lock.is_locked()?, "one unlock frees it");
        resent[0] |= again;

        let outer = lock.lock()?;
        let (inner, again) = cut_reply_of(&mut conn, &manager, &proxy, || lock.lock())?;
        assert_eq!(lock.hold_count()?, 2, "a re-entry, counted once");
        inner.unlock()?;
        outer.unlock()?;
        assert!(!lock.is_locked()?, "two unlocks free it");
        resent[1] |= again;

        let (guard, again) = cut_reply_of(&mut conn, &manager, &proxy, || lock.lock_fenced())?;
        let counter: u64 = conn.get("redisson_lock_token:{resent:lock}").unwrap();
        assert_eq!(
            guard.fencing_token(),
            Some(counter),
            "the token the first send took"
        );
        assert_eq!(lock.hold_count()?, 1);
        guard.unlock()?;
        resent[2] |= again;

        let before = semaphore.available_permits()?;
        let ((), again) = cut_reply_of(&mut conn, &manager, &proxy, || semaphore.acquire(1))?;
        assert_eq!(
            semaphore.available_permits()?,
            before - 1,
            "one permit taken"
        );
        semaphore.release(1)?;
        resent[3] |= again;

        if resent.iter().all(|&again| again) {
            return Ok(());
        }
    }
    panic!("some acquire's reply was never the one cut off: {resent:?}");
}
