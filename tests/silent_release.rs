//! A waiter behind a holder that never announces its release (a Java spin lock, a client that
//! deletes the key itself) looks again with a bounded back-off, and gets the lock within a few
//! seconds of the release rather than at the holder's TTL.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use support::RedisServer;

#[test]
fn a_release_nobody_announced_is_found_within_seconds_not_at_the_ttl() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // A Java holder's field with the watchdog's 30 s TTL; nothing will announce its end.
    let _: () = conn
        .hset("silent", "a8f1e6d4-0000-4000-8000-000000000001:1", 1)
        .unwrap();
    let _: () = conn.pexpire("silent", 30_000).unwrap();
    let manager = LockManager::new(&server.url()).expect("manager");
    let waiter = {
        let manager = manager.clone();
        std::thread::spawn(move || {
            let guard = manager.try_lock("silent", Duration::from_secs(20));
            (guard.map(|g| g.map(|g| g.unlock())), Instant::now())
        })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.waiting_channel_count() == 1
    }));
    // Let the back-off grow to its cap first.
    std::thread::sleep(Duration::from_secs(4));
    let _: () = conn.del("silent").unwrap();
    let released = Instant::now();
    let (got, at) = waiter.join().expect("waiter");
    got.expect("try_lock")
        .expect("the waiter never got the lock")
        .expect("unlock");
    let after = at.saturating_duration_since(released);
    println!("acquired {after:?} after the silent release");
    assert!(
        after < Duration::from_secs(8),
        "found the silent release only after {after:?}"
    );
}
