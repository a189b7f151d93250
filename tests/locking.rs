//! Lock semantics against a real redis-server: the wire layout, reentrancy, ownership,
//! leases, the watchdog, release and inspection.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::{manager_with_watchdog, RedisServer};

fn manager(server: &RedisServer) -> LockManager {
    LockManager::new(&server.url()).expect("manager")
}

#[test]
fn a_held_lock_is_a_hash_with_one_owner_field_and_the_watchdog_ttl() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let mut conn = server.conn();

    let guard = manager.lock("orders:42")?;
    let fields: Vec<(String, String)> = conn.hgetall("orders:42").unwrap();
    assert_eq!(fields.len(), 1);
    let (field, count) = &fields[0];
    assert_eq!(count, "1");
    let (uuid, thread) = field.rsplit_once(':').expect("uuid:thread");
    assert_eq!(uuid, manager.client_id());
    assert_eq!(uuid.len(), 36, "hyphenated uuid: {uuid}");
    assert_eq!(uuid, uuid.to_lowercase());
    thread.parse::<u64>().expect("decimal thread number");
    let pttl: i64 = conn.pttl("orders:42").unwrap();
    assert!(pttl > 25_000 && pttl <= 30_000, "pttl {pttl}");

    guard.unlock()?;
    let exists: bool = conn.exists("orders:42").unwrap();
    assert!(!exists, "the key is deleted on the last release");
    Ok(())
}

#[test]
fn release_publishes_zero_on_the_unlock_channel() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let mut listener = server.conn();
    let mut pubsub = support::watch_channel(&mut listener, "redisson_lock__channel:{orders:42}");

    manager.lock("orders:42")?.unlock()?;
    let msg = pubsub.get_message().expect("an unlock message");
    assert_eq!(msg.get_channel_name(), "redisson_lock__channel:{orders:42}");
    assert_eq!(msg.get_payload_bytes(), b"0");
    Ok(())
}

#[test]
fn unlock_leaves_a_short_lived_latch_with_the_outcome() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let mut conn = server.conn();

    manager.lock("latched")?.unlock()?;
    let latches: Vec<String> = conn.keys("redisson_unlock_latch:{latched}:*").unwrap();
    assert_eq!(latches.len(), 1, "{latches:?}");
    let id = latches[0].rsplit(':').next().unwrap();
    assert_eq!(id.len(), 32);
    assert!(id
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let value: String = conn.get(&latches[0]).unwrap();
    assert_eq!(value, "1", "the latch records 'released'");
    let ttl: i64 = conn.pttl(&latches[0]).unwrap();
    assert!(ttl > 0, "the latch expires by itself");
    Ok(())
}

#[test]
fn the_same_thread_reenters_and_each_guard_releases_one_hold() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let lock = manager.get_lock("reentrant");

    let first = lock.lock()?;
    let second = lock.lock()?;
    let third = lock
        .try_lock(Duration::ZERO)?
        .expect("re-entry never waits");
    assert_eq!(lock.hold_count()?, 3);
    assert!(lock.is_held_by_current_thread()?);
    assert_eq!(
        manager.renewing_count(),
        1,
        "one renewal per thread and lock"
    );

    drop(third);
    assert_eq!(lock.hold_count()?, 2);
    second.unlock()?;
    assert_eq!(lock.hold_count()?, 1);
    assert!(lock.is_locked()?);
    first.unlock()?;
    assert_eq!(lock.hold_count()?, 0);
    assert!(!lock.is_locked()?);
    assert_eq!(manager.renewing_count(), 0);
    Ok(())
}

#[test]
fn another_thread_of_the_same_manager_waits() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let guard = manager.lock("shared")?;

    let other = manager.clone();
    let got = thread::spawn(move || -> Result<bool> {
        let lock = other.get_lock("shared");
        assert!(!lock.is_held_by_current_thread()?);
        assert_eq!(lock.hold_count()?, 0);
        Ok(lock.try_lock(Duration::from_millis(200))?.is_some())
    })
    .join()
    .unwrap()?;
    assert!(!got, "another thread must not enter a held lock");
    guard.unlock()?;
    Ok(())
}

#[test]
fn another_manager_waits_until_release() -> Result<()> {
    let server = RedisServer::start();
    let first = manager(&server);
    let second = manager(&server);
    assert_ne!(first.client_id(), second.client_id());

    let guard = first.lock("between-managers")?;
    assert!(second
        .try_lock("between-managers", Duration::ZERO)?
        .is_none());
    guard.unlock()?;
    let taken = second.try_lock("between-managers", Duration::ZERO)?;
    assert!(taken.is_some(), "free after release");
    Ok(())
}

#[test]
fn a_fixed_lease_expires_and_the_late_unlock_reports_not_held() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let lock = manager.get_lock("leased");

    let guard = lock.lock_with_lease(Duration::from_millis(300))?;
    let acquired = Instant::now();
    assert_eq!(guard.lease(), Some(Duration::from_millis(300)));
    let ttl = lock.remaining_ttl()?.expect("a lease");
    assert!(ttl <= Duration::from_millis(300));
    assert_eq!(manager.renewing_count(), 0, "no watchdog for fixed leases");

    // Another client can take it once the lease has run out, without any release.
    let other = LockManager::new(&server.url())?;
    let taken = other.try_lock("leased", Duration::from_secs(10))?;
    assert!(taken.is_some());
    // The lease started just before `acquired`; allow a little for that and for clock grain.
    let held = acquired.elapsed();
    assert!(
        held >= Duration::from_millis(250),
        "taken after {held:?}: released early"
    );

    let err = guard.unlock().expect_err("the lease expired");
    assert!(err.is_not_held(), "{err}");
    assert!(
        other.get_lock("leased").is_locked()?,
        "the new owner keeps it"
    );
    Ok(())
}

#[test]
fn the_watchdog_keeps_a_lock_alive_past_several_timeouts() -> Result<()> {
    let server = RedisServer::start();
    let timeout = Duration::from_secs(1);
    let manager = manager_with_watchdog(&server, timeout);
    let mut conn = server.conn();

    let guard = manager.lock("kept")?;
    assert_eq!(guard.lease(), None);
    // Sample the TTL over four timeouts: it must never run low, because it is renewed.
    let started = Instant::now();
    let mut min_pttl = i64::MAX;
    while started.elapsed() < timeout * 4 {
        let pttl: i64 = conn.pttl("kept").unwrap();
        min_pttl = min_pttl.min(pttl);
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        min_pttl > 0,
        "the lock expired while held (min pttl {min_pttl})"
    );
    assert!(!guard.is_lost());
    guard.unlock()?;
    Ok(())
}

#[test]
fn a_stale_guard_cannot_release_the_new_owners_lock() -> Result<()> {
    let server = RedisServer::start();
    let first = manager(&server);
    let second = manager(&server);

    let stale = first.lock_with_lease("stale", Duration::from_millis(100))?;
    let fresh = second.lock("stale")?; // waits for the lease to run out
    let err = stale.unlock().expect_err("not ours any more");
    assert!(err.is_not_held());
    let lock = second.get_lock("stale");
    assert_eq!(lock.hold_count()?, 1, "the new owner's hold is untouched");
    assert!(lock.remaining_ttl()?.unwrap() > Duration::from_secs(20));
    fresh.unlock()?;
    Ok(())
}

#[test]
fn force_unlock_takes_the_lock_from_its_owner() -> Result<()> {
    let server = RedisServer::start();
    let owner = manager(&server);
    let admin = manager(&server);

    let guard = owner.lock("forced")?;
    assert!(admin.get_lock("forced").force_unlock()?);
    assert!(
        !admin.get_lock("forced").force_unlock()?,
        "nothing left to delete"
    );
    assert!(!admin.get_lock("forced").is_locked()?);
    let err = guard.unlock().expect_err("force-unlocked");
    assert!(err.is_not_held());
    Ok(())
}

#[test]
fn a_lost_watchdog_lock_is_detected_and_no_longer_renewed() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, Duration::from_millis(600));
    let guard = manager.lock("lost")?;
    manager.get_lock("lost").force_unlock()?;
    assert!(
        support::eventually(Duration::from_secs(10), || guard.is_lost()),
        "the watchdog must notice the missing owner field"
    );
    assert_eq!(manager.renewing_count(), 0);
    let mut conn = server.conn();
    let exists: bool = conn.exists("lost").unwrap();
    assert!(!exists, "a lost lock must not be recreated by renewal");
    assert!(guard.unlock().unwrap_err().is_not_held());
    Ok(())
}

#[test]
fn a_guard_moved_to_another_thread_releases_its_owners_hold() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let lock = manager.get_lock("moved");
    let outer = lock.lock()?;
    let inner = lock.lock()?;

    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(inner.unlock()).unwrap());
    rx.recv().unwrap()?;
    assert_eq!(
        lock.hold_count()?,
        1,
        "the acquiring thread's hold went down"
    );
    outer.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

#[test]
fn dropping_a_guard_releases_it() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    {
        let _guard = manager.lock("scoped")?;
        assert!(manager.get_lock("scoped").is_locked()?);
    }
    assert!(!manager.get_lock("scoped").is_locked()?);
    assert_eq!(manager.renewing_count(), 0);
    Ok(())
}

#[test]
fn inspection_of_a_free_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let lock = manager.get_lock("free");
    assert_eq!(lock.name(), "free");
    assert!(!lock.is_locked()?);
    assert!(!lock.is_held_by_current_thread()?);
    assert_eq!(lock.hold_count()?, 0);
    assert_eq!(lock.remaining_ttl()?, None);
    assert!(!lock.force_unlock()?);
    Ok(())
}

#[test]
fn scripts_are_reloaded_after_script_flush() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, Duration::from_secs(1));
    let mut conn = server.conn();
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut conn)
        .unwrap();
    let guard = manager.lock("flushed")?;
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut conn)
        .unwrap();
    // Renewal (a pipelined EVALSHA) must survive the flush too: outlive two timeouts.
    thread::sleep(Duration::from_secs(2));
    assert!(!guard.is_lost());
    assert!(manager.get_lock("flushed").is_locked()?);
    guard.unlock()?;
    Ok(())
}

#[test]
fn renewals_of_many_locks_are_batched() -> Result<()> {
    const LOCKS: usize = 250;
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, Duration::from_millis(600));
    let mut conn = server.conn();
    let guards: Vec<_> = (0..LOCKS)
        .map(|i| manager.lock(&format!("batch:{i}")))
        .collect::<Result<_>>()?;

    let before = support::command_calls(&mut conn, "evalsha");
    let window = Duration::from_millis(1_200); // six renewal periods of 200 ms
    thread::sleep(window);
    let calls = support::command_calls(&mut conn, "evalsha") - before;
    // A sweep renews everything due within half a period, 100 keys per call: 3 calls per
    // sweep and at most ~2 sweeps per period. One call per lock would be 250 per period.
    assert!(calls > 0, "renewals happened");
    assert!(
        calls <= 3 * 2 * 8,
        "{calls} renewal calls for {LOCKS} locks in {window:?}"
    );
    for i in 0..LOCKS {
        let exists: bool = conn.exists(format!("batch:{i}")).unwrap();
        assert!(exists, "lock {i} expired while held");
    }
    assert!(guards.iter().all(|g| !g.is_lost()));
    Ok(())
}

/// A failover can bring back a hold whose release it lost: the new master got the acquire from
/// its replica, not the release. The owner, holding nothing as far as it knows, takes the lock
/// with one hold, not a second one on top of the lost one; its unlock then frees it.
#[test]
fn a_hold_the_owner_no_longer_has_is_not_counted_on() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager(&server);
    let mut conn = server.conn();
    let lock = manager.get_lock("brought-back");
    for fenced in [false, true] {
        let guard = lock.lock()?;
        let fields: Vec<(String, String)> = conn.hgetall("brought-back").unwrap();
        guard.unlock()?;
        // The release lost: the owner's hold is there again.
        let _: () = conn.hset("brought-back", &fields[0].0, 1).unwrap();
        let _: () = conn.pexpire("brought-back", 30_000).unwrap();

        let guard = if fenced {
            lock.lock_fenced()?
        } else {
            lock.lock()?
        };
        assert_eq!(lock.hold_count()?, 1, "fenced: {fenced}");
        // A re-entry still counts.
        let again = lock.lock()?;
        assert_eq!(lock.hold_count()?, 2, "fenced: {fenced}");
        again.unlock()?;
        guard.unlock()?;
        let left: bool = conn.exists("brought-back").unwrap();
        assert!(
            !left,
            "the lock stayed held after the last unlock (fenced: {fenced})"
        );
    }
    Ok(())
}
