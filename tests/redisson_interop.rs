//! Interoperability with Redisson: the other party here is a stand-in that follows Redisson's
//! wire behaviour, as docs/design/wire-format.md ("On the wire") describes it, with plain Redis commands,
//! the way a Java service's `RLock` would act on the same server.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::RedisServer;

/// What a Redisson client does to one lock, in raw commands.
struct JavaClient {
    conn: redis::Connection,
    owner: String,
}

impl JavaClient {
    fn new(server: &RedisServer, thread_id: u64) -> Self {
        JavaClient {
            conn: server.conn(),
            owner: format!("{}:{thread_id}", "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f"),
        }
    }

    /// `tryLock()` with the default 30 s watchdog lease: `true` if acquired.
    fn try_lock(&mut self, name: &str) -> bool {
        let exists: bool = self.conn.exists(name).unwrap();
        let mine: bool = self.conn.hexists(name, &self.owner).unwrap();
        if exists && !mine {
            return false;
        }
        let _: () = redis::pipe()
            .atomic()
            .hincr(name, &self.owner, 1)
            .ignore()
            .pexpire(name, 30_000)
            .ignore()
            .query(&mut self.conn)
            .unwrap();
        true
    }

    /// `unlock()` of the last hold: delete and announce `0` on the unlock channel.
    fn unlock(&mut self, name: &str) {
        let _: () = redis::pipe()
            .atomic()
            .del(name)
            .ignore()
            .publish(format!("redisson_lock__channel:{{{name}}}"), 0)
            .ignore()
            .query(&mut self.conn)
            .unwrap();
    }
}

#[test]
fn a_rust_waiter_is_woken_by_a_java_release() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = JavaClient::new(&server, 1);
    assert!(java.try_lock("shared:order"));

    let lock = manager.get_lock("shared:order");
    assert!(lock.is_locked()?, "Rust sees Java's lock");
    assert_eq!(lock.hold_count()?, 0, "but not as its own");
    assert!(lock.try_lock(Duration::ZERO)?.is_none());

    let waiting = support::Waiter::spawn(&manager, "shared:order");
    let mut conn = server.conn();
    assert!(support::await_subscribers(
        &mut conn,
        "redisson_lock__channel:{shared:order}",
        1
    ));
    java.unlock("shared:order");
    let handoff = waiting.acquired_since(Instant::now());
    assert!(
        handoff < Duration::from_secs(3),
        "woken by Java's message, not by the 30 s TTL: {handoff:?}"
    );
    Ok(())
}

#[test]
fn a_java_waiter_sees_the_rust_lock_and_its_release_message() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = JavaClient::new(&server, 7);
    let mut java_listener = server.conn();
    let mut pubsub =
        support::watch_channel(&mut java_listener, "redisson_lock__channel:{shared:stock}");

    let guard = manager.lock("shared:stock")?;
    assert!(
        !java.try_lock("shared:stock"),
        "Java must wait for Rust's lock"
    );
    let pttl: i64 = java.conn.pttl("shared:stock").unwrap();
    assert!(pttl > 0, "Java's tryLock gets a TTL to wait on: {pttl}");
    guard.unlock()?;

    let msg = pubsub.get_message().expect("Java is told of the release");
    let payload: String = msg.get_payload().unwrap();
    assert_eq!(payload.parse::<i64>().unwrap(), 0, "Java parses a number");
    assert!(java.try_lock("shared:stock"), "and then acquires");
    java.unlock("shared:stock");
    Ok(())
}

#[test]
fn reentrant_java_holds_and_force_unlock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = JavaClient::new(&server, 3);
    assert!(java.try_lock("shared:report"));
    assert!(java.try_lock("shared:report"), "Java re-enters");
    let count: i64 = java.conn.hget("shared:report", &java.owner).unwrap();
    assert_eq!(count, 2);

    let lock = manager.get_lock("shared:report");
    assert!(lock.remaining_ttl()?.unwrap() > Duration::from_secs(20));
    assert!(
        lock.force_unlock()?,
        "an admin in Rust can force Java's lock open"
    );
    assert!(!lock.is_locked()?);
    Ok(())
}

#[test]
fn braces_in_the_name_follow_redissons_channel_rule() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut listener = server.conn();
    let mut pubsub = support::watch_channel(&mut listener, "redisson_lock__channel:{tenant}:job");
    manager.lock("{tenant}:job")?.unlock()?;
    let msg = pubsub
        .get_message()
        .expect("published without extra braces");
    assert_eq!(
        msg.get_channel_name(),
        "redisson_lock__channel:{tenant}:job"
    );
    Ok(())
}
