//! The writes a lock cycle keeps or drops for its repeated sends (docs/design/guarantees.md,
//! "What the attempt marker and the unlock latch repair"), checked through a TCP proxy
//! (testkit/src/proxy.rs) that cuts a reply so that the client sends the call again, and with
//! raw script calls for the orders a late first send can take:
//!
//! - a fresh acquire writes no attempt marker, and sent twice it still takes one hold, in
//!   whatever order its sends and the owner's newer attempt reach the server;
//! - a re-entry keeps its marker, so that sent twice it counts once;
//! - a release keeps its latch, so that its first send, run after its resend and after the
//!   owner took the lock again, does not free the newer hold.

use redis_rlock_testkit as support;

use std::time::Duration;

use redis::Commands;
use redis_rlock::{Lock, LockManager, Result};
use support::proxy::Proxy;
use support::RedisServer;

fn manager_through(proxy: &Proxy) -> LockManager {
    LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("manager through the proxy")
}

/// The attempt markers on the server of lock `name`.
fn markers(conn: &mut redis::Connection, name: &str) -> Vec<String> {
    conn.keys(format!("redis_rlock__attempt:{{{name}}}:*"))
        .expect("KEYS")
}

/// Runs `call` with the next reply the server sends cut off with its connection, until that
/// reply was the call's (it was then sent twice, on a new connection): the listener's check
/// of its subscription may take the cut instead, and then the round is run again.
fn with_its_reply_cut<T>(
    conn: &mut redis::Connection,
    manager: &LockManager,
    proxy: &Proxy,
    mut call: impl FnMut() -> Result<T>,
    mut undo: impl FnMut(T) -> Result<()>,
) -> Result<T> {
    for _ in 0..5 {
        support::await_listener(conn, manager);
        let (sent, dropped) = (manager.stats().commands, proxy.dropped());
        proxy.cut_at_next_reply();
        let outcome = call()?;
        if manager.stats().commands - sent >= 2 {
            return Ok(outcome);
        }
        undo(outcome)?;
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped
        }));
    }
    panic!("the call's reply was never the one cut off");
}

/// A manager through `proxy` and its lock `name`, taken and released once so that the server
/// has the scripts (the reply cut off must be a script's run, not its NOSCRIPT refusal) and
/// the pool a connection to reuse.
fn warmed(proxy: &Proxy, name: &str) -> Result<(LockManager, Lock)> {
    let manager = manager_through(proxy);
    let lock = manager.get_lock(name);
    lock.lock()?.unlock()?;
    Ok((manager, lock))
}

#[test]
fn a_fresh_acquire_sent_twice_takes_one_hold_and_writes_no_marker() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let name = "repeated:fresh";
    let (manager, lock) = warmed(&proxy, name)?;
    let mut conn = server.conn();
    let guard = with_its_reply_cut(&mut conn, &manager, &proxy, || lock.lock(), |g| g.unlock())?;
    assert_eq!(lock.hold_count()?, 1, "the second send took nothing more");
    assert_eq!(
        markers(&mut conn, name),
        Vec::<String>::new(),
        "a fresh acquire writes no attempt marker"
    );
    guard.unlock()?;
    assert!(!lock.is_locked()?, "one unlock frees it");
    Ok(())
}

#[test]
fn a_reentry_sent_twice_counts_once_by_its_marker() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let name = "repeated:reentry";
    let (manager, lock) = warmed(&proxy, name)?;
    let mut conn = server.conn();
    let outer = lock.lock()?;
    let inner = with_its_reply_cut(&mut conn, &manager, &proxy, || lock.lock(), |g| g.unlock())?;
    assert_eq!(lock.hold_count()?, 2, "the re-entry counted once");
    assert_eq!(markers(&mut conn, name).len(), 1, "the re-entry's marker");
    inner.unlock()?;
    outer.unlock()?;
    assert!(!lock.is_locked()?, "two unlocks free it");
    Ok(())
}

const OWNER: &str = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:1";

/// One send of a fresh acquire attempt as the engine sends it on a single server (the waiters
/// hash named, no attempt id), raw: nil when it took the lock.
fn fresh_attempt(conn: &mut redis::Connection, name: &str) -> Option<i64> {
    redis::Script::new(redis_rlock::lua::ACQUIRE)
        .key(name)
        .key(format!("redis_rlock__attempt:{{{name}}}:{OWNER}"))
        .key(format!("redis_rlock__waiters:{{{name}}}"))
        .arg(30_000)
        .arg(OWNER)
        .arg("")
        .arg(10_000)
        .invoke(conn)
        .expect("acquire")
}

/// One send of a release with latch `latch`, raw: its reply.
fn release(conn: &mut redis::Connection, name: &str, latch: &str) -> Option<i64> {
    redis::Script::new(redis_rlock::lua::RELEASE)
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!("redisson_unlock_latch:{{{name}}}:{latch}"))
        .key(format!("redis_rlock__waiters:{{{name}}}"))
        .arg(0)
        .arg(30_000)
        .arg(OWNER)
        .arg("publish")
        .arg(10_000)
        .arg(0)
        .arg("")
        .arg(0)
        .arg(0)
        .arg("numsub")
        .invoke(conn)
        .expect("release")
}

fn holds(conn: &mut redis::Connection, name: &str) -> Option<i64> {
    conn.hget(name, OWNER).expect("HGET")
}

/// The first send of a fresh acquire reaches the server late (a retransmission, a proxy), in
/// any order against the owner's newer attempt: the lock is held once either way, and one
/// release frees it. No marker is written.
#[test]
fn a_fresh_acquire_run_late_leaves_one_hold() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let name = "repeated:late-acquire";
    assert_eq!(fresh_attempt(&mut conn, name), None);
    assert_eq!(fresh_attempt(&mut conn, name), None, "the newer attempt");
    assert_eq!(fresh_attempt(&mut conn, name), None, "the late first send");
    assert_eq!(holds(&mut conn, name), Some(1), "one hold");
    assert_eq!(markers(&mut conn, name), Vec::<String>::new());
    assert_eq!(
        release(&mut conn, name, "a"),
        Some(1),
        "released on the last hold"
    );
    assert!(
        !conn.exists::<_, bool>(name).unwrap(),
        "one release frees it"
    );
}

/// A release's first send runs only after its resend freed the lock and the owner took it
/// again: the latch that the resend left answers it, and the newer hold stays. This is why
/// every release keeps its latch (a last hold's release too).
#[test]
fn a_release_run_late_after_the_owner_took_the_lock_again_frees_nothing() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let name = "repeated:late-release";
    assert_eq!(fresh_attempt(&mut conn, name), None);
    assert_eq!(
        release(&mut conn, name, "a"),
        Some(1),
        "the resend releases"
    );
    assert_eq!(fresh_attempt(&mut conn, name), None, "taken again");
    assert_eq!(
        release(&mut conn, name, "a"),
        Some(1),
        "the late first send: the latch answers"
    );
    assert_eq!(holds(&mut conn, name), Some(1), "the newer hold stays");
}
