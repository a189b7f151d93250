//! The lost-lock signal: every guard knows, without I/O, whether its lease as last confirmed
//! by Redis still holds, and can be told the moment the lock is found lost.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::{manager_with_watchdog, RedisServer};

#[test]
fn a_renewed_lock_stays_confirmed_well_past_its_lease() -> Result<()> {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(600);
    let manager = manager_with_watchdog(&server, timeout);
    let guard = manager.lock("lost:renewed")?;
    let lost = guard.lost_signal();
    let left = guard.remaining_lease().expect("confirmed");
    assert!(left <= timeout && left > timeout / 2, "{left:?}");
    // Three leases long: only renewals keep it.
    assert!(lost.recv_timeout(timeout * 3).is_err(), "no loss reported");
    assert!(!guard.is_lost());
    assert!(guard.remaining_lease().is_some());
    guard.unlock()?;
    Ok(())
}

#[test]
fn a_lock_deleted_behind_the_holders_back_is_reported_within_one_renewal_period() -> Result<()> {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(900); // renewal period 300 ms
    let manager = manager_with_watchdog(&server, timeout);
    let guard = manager.lock("lost:deleted")?;
    let lost = guard.lost_signal();
    let _: () = server.conn().del("lost:deleted").unwrap();
    let deleted = Instant::now();
    lost.recv_timeout(Duration::from_secs(10))
        .expect("the loss is signalled");
    let after = deleted.elapsed();
    // One period, plus scheduling slack for a loaded machine.
    assert!(
        after < timeout / 3 + Duration::from_millis(700),
        "{after:?}"
    );
    assert!(guard.is_lost());
    assert_eq!(guard.remaining_lease(), None);
    assert!(guard.unlock().unwrap_err().is_not_held());
    Ok(())
}

#[test]
fn a_fixed_lease_is_known_lost_when_it_runs_out() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lease = Duration::from_millis(300);
    let acquired = Instant::now();
    let guard = manager.lock_with_lease("lost:fixed", lease)?;
    let lost = guard.lost_signal();
    assert!(!guard.is_lost());
    assert!(guard.remaining_lease().unwrap() <= lease);
    lost.recv_timeout(Duration::from_secs(30))
        .expect("the end of the lease is signalled");
    // Never before the lease was over on Redis' side, which counts from the acquire, and
    // promptly after (not at the watchdog's next 5 s tick).
    let after = acquired.elapsed();
    assert!(
        after >= lease - lease / 100 - Duration::from_millis(2),
        "{after:?}"
    );
    assert!(after < lease + Duration::from_secs(2), "{after:?}");
    assert!(guard.is_lost());
    Ok(())
}

#[test]
fn redis_unreachable_past_the_lease_is_reported_lost() -> Result<()> {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(600);
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(timeout)
        .response_timeout(Duration::from_millis(200))
        .build()?;
    let guard = manager.lock("lost:frozen")?;
    let lost = guard.lost_signal();
    server.freeze();
    let frozen = Instant::now();
    let signalled = lost.recv_timeout(Duration::from_secs(10));
    let after = frozen.elapsed();
    server.thaw();
    signalled.expect("the loss is signalled while Redis does not answer");
    assert!(after <= timeout + Duration::from_secs(1), "{after:?}");
    assert!(guard.is_lost());
    drop(guard);
    Ok(())
}

#[test]
fn the_signal_disconnects_when_the_guard_is_released_normally() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let guard = manager.lock("lost:released")?;
    let lost = guard.lost_signal();
    guard.unlock()?;
    assert!(
        matches!(
            lost.recv_timeout(Duration::from_secs(5)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ),
        "released, not lost"
    );
    Ok(())
}

#[test]
fn a_reply_too_late_to_leave_a_useful_lease_is_not_a_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lease = Duration::from_millis(300);
    // The server is frozen before the request is sent: it runs the acquire only when thawed,
    // long after the client's clock for the lease started.
    server.freeze();
    let (tx, rx) = std::sync::mpsc::channel();
    let attempt = {
        let manager = manager.clone();
        std::thread::spawn(move || {
            let got = manager.try_lock_with_lease("lost:late", Duration::from_millis(100), lease);
            tx.send(()).unwrap();
            got.map(|g| g.is_some())
        })
    };
    // Let the lease pass on the client's clock while the request sits in the server's socket.
    assert!(
        rx.recv_timeout(lease * 2).is_err(),
        "the call waits for the reply"
    );
    server.thaw();
    let acquired = attempt.join().expect("thread")?;
    assert!(!acquired, "a late grant is not reported as a lock");
    assert!(
        !manager.get_lock("lost:late").is_locked()?,
        "and it was released, not left to expire"
    );
    Ok(())
}

/// Releasing a hold already lost must not touch a newer hold of the same thread on the same
/// lock: the owner field is the same, so a release sent in its name would take the new one.
#[test]
fn releasing_a_lost_hold_leaves_the_same_threads_newer_hold_alone() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, Duration::from_millis(600));
    let other = LockManager::new(&server.url())?;
    let lock = manager.get_lock("lost:newer");

    // A watchdog hold, lost to a force unlock elsewhere, then a new hold of the same thread.
    let stale = lock.lock()?;
    let lost = stale.lost_signal();
    assert!(other.get_lock("lost:newer").force_unlock()?);
    lost.recv_timeout(Duration::from_secs(10))
        .expect("the watchdog finds the hold gone");
    let fresh = lock.lock()?;
    let sent_before = manager.stats().commands;
    let err = stale.unlock().unwrap_err();
    assert!(err.is_not_held(), "{err}");
    assert_eq!(manager.stats().commands, sent_before, "nothing was sent");
    assert_eq!(lock.hold_count()?, 1, "the newer hold is still there");
    assert!(other.try_lock("lost:newer", Duration::ZERO)?.is_none());
    assert!(!fresh.is_lost());
    fresh.unlock()?;

    // A fixed lease that ran out (on the server too), then a new hold of the same thread.
    let stale = lock.lock_with_lease(Duration::from_millis(100))?;
    stale
        .lost_signal()
        .recv_timeout(Duration::from_secs(10))
        .expect("the watchdog reports the lease's end");
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock.is_locked()? {
        assert!(Instant::now() < deadline, "the server's key expires");
        std::thread::sleep(Duration::from_millis(10));
    }
    let fresh = lock.lock()?;
    assert!(stale.unlock().unwrap_err().is_not_held());
    assert_eq!(lock.hold_count()?, 1, "the newer hold is still there");
    assert!(other.try_lock("lost:newer", Duration::ZERO)?.is_none());
    fresh.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

/// A thread whose hold was found lost gives up its turn in the line: while it keeps its lost
/// guard, the other threads of its manager still ask Redis, and get the free lock.
#[test]
fn a_lost_hold_does_not_keep_its_manager_from_the_free_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, Duration::from_millis(600));
    let other = LockManager::new(&server.url())?;
    let name = "lost:turn";

    // Thread A takes the turn while another client holds the lock, then gets the lock.
    let remote = other.lock(name)?;
    let a = {
        let manager = manager.clone();
        std::thread::spawn(move || manager.lock(name))
    };
    assert!(support::await_subscribers(
        &mut server.conn(),
        "redisson_lock__channel:{lost:turn}",
        1
    ));
    drop(remote);
    let a_guard = a.join().unwrap()?;

    // The hold is deleted behind A's back; A keeps its guard.
    let lost = a_guard.lost_signal();
    let _: () = server.conn().del(name).unwrap();
    lost.recv_timeout(Duration::from_secs(10))
        .expect("the watchdog tells A");
    let guard = manager
        .try_lock(name, Duration::ZERO)?
        .expect("the lock is free, and this thread may ask Redis for it");
    guard.unlock()?;
    drop(a_guard);
    Ok(())
}

/// A hold this side gave up while it was still on the server (the renewals ran, their replies
/// came too late) is released like any other: nothing newer of the thread is there, and
/// leaving it would keep everyone out until its lease ran out.
#[test]
fn a_hold_lost_only_on_this_side_is_still_released() -> Result<()> {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let manager = LockManager::builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(3))
        .build()?;
    let other = LockManager::new(&server.url())?;
    let name = "lost:late-renewals";
    let guard = manager.lock(name)?;
    let lost = guard.lost_signal();
    proxy.delay_replies(Duration::from_millis(1_500));
    lost.recv_timeout(Duration::from_secs(10))
        .expect("no renewal confirmed within the lease");
    proxy.delay_replies(Duration::ZERO);
    assert!(
        other.get_lock(name).is_locked()?,
        "still held on the server"
    );
    guard.unlock()?;
    assert!(!other.get_lock(name).is_locked()?, "released");
    Ok(())
}

/// A force unlock through the holder's own manager ends its holds there too: the thread that
/// locks again gets a new hold, which its older guard's release leaves alone.
#[test]
fn after_a_force_unlock_by_its_own_manager_an_old_guard_leaves_a_new_hold_alone() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let other = LockManager::new(&server.url())?;
    let lock = manager.get_lock("lost:forced");
    let old = lock.lock()?;
    assert!(lock.force_unlock()?);
    assert!(old.is_lost(), "force-unlocked here: known at once");
    let new = lock.lock()?;
    assert!(old.unlock().unwrap_err().is_not_held());
    assert_eq!(lock.hold_count()?, 1);
    assert!(other.try_lock("lost:forced", Duration::ZERO)?.is_none());
    assert!(!new.is_lost());
    new.unlock()?;
    Ok(())
}
