//! A re-entered lock whose count on the server fell below what its owner's guards release
//! (docs/design/guarantees.md, "What the attempt marker and the unlock latch repair"), made
//! with raw sends of the acquire script as a late first send of a fresh acquire runs, or by
//! deleting the key under its holder:
//!
//! - the inner unlock of a lock leaves the outer hold held: its release, told that it is not
//!   the owner's last, keeps the key rather than freeing it under the outer guard;
//! - the inner unlock of a spin lock (whose release is Redisson's and frees the key) tells the
//!   outer guard at once that its hold is lost, rather than at the next renewal;
//! - a re-entry that waits (its hold on the server was lost) is sent as a re-entry: it
//!   registers for no grant, and counts its hold by its attempt marker.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::RedisServer;

/// A watchdog timeout far past each test, so that no renewal finds a lost hold first.
const WATCHDOG: Duration = Duration::from_secs(300);

fn manager(server: &RedisServer) -> LockManager {
    LockManager::builder(&server.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .expect("manager")
}

/// The one owner field of the lock `name`.
fn owner_of(conn: &mut redis::Connection, name: &str) -> String {
    let fields: Vec<String> = conn.hkeys(name).expect("HKEYS");
    assert_eq!(fields.len(), 1, "one owner holds {name}: {fields:?}");
    fields.into_iter().next().unwrap()
}

/// A fresh acquire's send as the engine sends it on a single server (the waiters hash named,
/// no attempt id), run late, raw: it sets the owner's count to one.
fn late_fresh_send(conn: &mut redis::Connection, name: &str, owner: &str) {
    let taken: Option<i64> = redis::Script::new(redis_rlock::lua::ACQUIRE)
        .key(name)
        .key(format!("redis_rlock__attempt:{{{name}}}:{owner}"))
        .key(format!("redis_rlock__waiters:{{{name}}}"))
        .arg(30_000)
        .arg(owner)
        .arg("")
        .arg(10_000)
        .invoke(conn)
        .expect("acquire");
    assert_eq!(taken, None, "the late send finds the owner's hold");
    let count: i64 = conn.hget(name, owner).expect("HGET");
    assert_eq!(count, 1, "the late send set the owner's count to one");
}

#[test]
fn a_late_fresh_send_after_a_reentry_leaves_the_outer_hold_held() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let (ours, theirs) = (manager(&server), manager(&server));
    let name = "reentry:late-fresh";
    let lock = ours.get_lock(name);
    let outer = lock.lock()?;
    let inner = lock.lock()?;
    let owner = owner_of(&mut conn, name);
    late_fresh_send(&mut conn, name, &owner);
    inner.unlock()?;
    assert!(lock.is_locked()?, "the inner unlock kept the lock");
    assert_eq!(lock.hold_count()?, 1, "the count of the holds left");
    assert!(!outer.is_lost(), "the outer hold is intact");
    let other = theirs.get_lock(name).try_lock(Duration::ZERO)?;
    assert!(other.is_none(), "nobody else gets in under the outer guard");
    outer.unlock()?;
    assert!(!lock.is_locked()?, "the outer unlock frees it");
    Ok(())
}

#[test]
fn a_spin_lock_freed_by_an_inner_unlock_tells_the_outer_guard_at_once() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let ours = manager(&server);
    let name = "reentry:spin-freed";
    let lock = ours.get_spin_lock(name);
    let outer = lock.lock()?;
    let lost = outer.lost_signal();
    let inner = lock.lock()?;
    let owner = owner_of(&mut conn, name);
    late_fresh_send(&mut conn, name, &owner);
    inner.unlock()?;
    assert!(!lock.is_locked()?, "Redisson's spin release freed the key");
    assert!(outer.is_lost(), "the outer guard knows at once");
    assert!(
        lost.try_recv().is_ok(),
        "the lost signal fired before the unlock returned"
    );
    assert!(outer.unlock().is_err(), "nothing is left to release");
    Ok(())
}

#[test]
fn a_reentry_that_waits_registers_for_no_grant_and_counts_by_its_marker() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let (ours, theirs) = (manager(&server), manager(&server));
    let name = "reentry:waits";
    let waiters = format!("redis_rlock__waiters:{{{name}}}");
    let lock = ours.get_lock(name);
    let outer = lock.lock()?;
    let owner = owner_of(&mut conn, name);
    // The outer hold is lost on the server (its owner does not know yet), and another
    // client takes the lock: the re-entry waits for it.
    let _: i64 = conn.del(name).expect("DEL");
    let (taken, their_hold) = mpsc::channel();
    let (seen, registered) = mpsc::channel();
    let watcher = {
        let (url, owner) = (server.url(), owner.clone());
        let channel = format!("redisson_lock__channel:{{{name}}}");
        thread::spawn(move || -> Result<()> {
            let guard = theirs.get_lock(name).lock()?;
            taken.send(()).expect("send");
            let mut conn = support::connect(&url).expect("connect");
            assert!(support::await_subscribers(&mut conn, &channel, 1));
            // A registration follows the subscription at once when there is one.
            let found = support::eventually(Duration::from_secs(2), || {
                conn.hexists(&waiters, &owner).expect("HEXISTS")
            });
            seen.send(found).expect("send");
            guard.unlock()
        })
    };
    their_hold.recv().expect("their hold");
    let inner = lock.lock()?;
    watcher.join().expect("watcher")?;
    assert!(
        !registered.recv().expect("seen"),
        "the waiting re-entry registered for a grant"
    );
    let marker: Option<String> = conn
        .get(format!("redis_rlock__attempt:{{{name}}}:{owner}"))
        .expect("GET");
    assert!(
        marker.is_some(),
        "the re-entry counted by its attempt marker"
    );
    inner.unlock()?;
    assert!(lock.is_locked()?, "the inner unlock leaves the outer hold");
    outer.unlock()?;
    assert!(!lock.is_locked()?, "the outer unlock frees it");
    Ok(())
}
