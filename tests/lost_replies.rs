//! Replies lost and connections cut by a TCP proxy between the client and Redis
//! (tests/support/proxy.rs). Each test names the invariant it checks.

mod support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock::{LockManager, Result};
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

/// Invariant: an acquire that ran on a pooled connection which then died is never sent again
/// blindly: the owner's hold count says it ran, so a re-entrant acquire counts once.
#[test]
fn an_acquire_whose_connection_died_after_it_ran_counts_once() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy, Duration::from_secs(30));
    let mut conn = server.conn();
    let name = "lost-reply:cut-acquire";
    let outer = manager.lock(name)?;
    with_the_next_reply_cut_off(&proxy, &manager, &mut conn, |conn| {
        let inner = manager.lock(name)?;
        // Whichever reply was cut off, the lock has exactly the two holds its guards know.
        let counts: Vec<i64> = conn.hvals(name).unwrap();
        assert_eq!(counts, vec![2], "holds in Redis after a re-entrant acquire");
        inner.unlock()
    })?;
    outer.unlock()?;
    let exists: bool = conn.exists(name).unwrap();
    assert!(!exists, "a hold was left behind");

    // A fenced acquire that ran gets the token it took: the counter's value, since only the
    // holder moves it.
    with_the_next_reply_cut_off(&proxy, &manager, &mut conn, |conn| {
        let fenced = manager.lock_fenced(name)?;
        let counts: Vec<i64> = conn.hvals(name).unwrap();
        assert_eq!(counts, vec![1], "holds in Redis after a fenced acquire");
        let counter: u64 = conn.get(format!("redisson_lock_token:{{{name}}}")).unwrap();
        assert_eq!(fenced.fencing_token(), Some(counter));
        fenced.unlock()
    })
}

/// Runs `scenario` with the next reply the server sends cut off (its connection dropped after
/// the command ran), until the reply cut off was the scenario's own first command's: then it
/// sent more than the one command (on a new connection), else the cut hit the listener's
/// connection check and the scenario went through in one send.
fn with_the_next_reply_cut_off(
    proxy: &Proxy,
    manager: &LockManager,
    conn: &mut redis::Connection,
    mut scenario: impl FnMut(&mut redis::Connection) -> Result<()>,
) -> Result<()> {
    for _ in 0..5 {
        support::await_listener(conn, manager);
        let dropped_before = proxy.dropped();
        let sent_before = manager.stats().commands;
        proxy.cut_at_next_reply();
        scenario(conn)?;
        // The release in the scenario is one more command.
        if manager.stats().commands - sent_before > 2 {
            return Ok(());
        }
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped_before
        }));
    }
    panic!("the acquire's reply was never the one cut off");
}
