//! MultiLock (all or nothing over several locks) and RedLock (a quorum of independent
//! masters), against real servers started by each test.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, MultiLock, RedLock, Result};
use support::RedisServer;

/// A manager for `server` with a short connect timeout, so that a killed master costs a
/// round little time, and the given watchdog timeout.
fn manager(server: &RedisServer, watchdog: Duration) -> LockManager {
    LockManager::builder(&server.url())
        .watchdog_timeout(watchdog)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("manager")
}

fn five_servers() -> Vec<RedisServer> {
    (0..5).map(|_| RedisServer::start()).collect()
}

fn red_lock(managers: &[LockManager], name: &str) -> RedLock {
    RedLock::new(managers.iter().map(|m| m.get_lock(name)).collect())
}

fn key_exists(server: &RedisServer, key: &str) -> bool {
    server.conn().exists(key).unwrap()
}

#[test]
fn a_multi_lock_takes_nothing_when_one_lock_is_held_elsewhere() -> Result<()> {
    let server = RedisServer::start();
    let ours = LockManager::new(&server.url())?;
    let theirs = LockManager::new(&server.url())?;
    let held = theirs.lock("multi:b")?;
    let multi = MultiLock::new(vec![
        ours.get_lock("multi:a"),
        ours.get_lock("multi:b"),
        ours.get_lock("multi:c"),
    ]);
    let started = Instant::now();
    assert!(multi.try_lock(Duration::from_millis(300))?.is_none());
    // The wait bounds the whole call, not each lock.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // "multi:a" was taken before "multi:b" refused: it was given back; "multi:c" never taken.
    assert!(!key_exists(&server, "multi:a"));
    assert!(!key_exists(&server, "multi:c"));
    assert!(theirs
        .get_lock("multi:a")
        .try_lock(Duration::ZERO)?
        .is_some());
    held.unlock()?;
    // Once free, all three are taken.
    let guard = multi.try_lock(Duration::from_secs(2))?.expect("all free");
    assert_eq!(guard.guards().len(), 3);
    guard.unlock()?;
    assert!(!key_exists(&server, "multi:b"));
    Ok(())
}

#[test]
fn a_multi_lock_spans_two_servers_and_releases_both() -> Result<()> {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let (m1, m2) = (LockManager::new(&one.url())?, LockManager::new(&two.url())?);
    let multi = MultiLock::new(vec![m1.get_lock("span:x"), m2.get_lock("span:y")]);
    let guard = multi.lock()?;
    assert!(key_exists(&one, "span:x") && key_exists(&two, "span:y"));
    let other = LockManager::new(&two.url())?;
    assert!(other.try_lock("span:y", Duration::ZERO)?.is_none());
    guard.unlock()?;
    assert!(!key_exists(&one, "span:x") && !key_exists(&two, "span:y"));
    // Drop releases too.
    drop(multi.lock()?);
    assert!(!key_exists(&one, "span:x") && !key_exists(&two, "span:y"));
    Ok(())
}

#[test]
fn a_red_lock_is_acquired_with_two_of_five_masters_down() -> Result<()> {
    let mut servers = five_servers();
    let managers: Vec<_> = servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect();
    servers[0].kill();
    servers[3].kill();
    let lease = Duration::from_secs(10);
    let guard = red_lock(&managers, "red:two-down")
        .try_lock_with_lease(Duration::from_secs(3), lease)?
        .expect("a quorum of 3 is up");
    assert_eq!(guard.guards().len(), 3);
    let validity = guard.validity();
    assert!(
        validity > Duration::ZERO && validity <= lease,
        "{validity:?}"
    );
    // lease - 1 % drift - 2 ms is the ceiling.
    assert!(validity <= lease - lease / 100, "{validity:?}");
    for live in [1, 2, 4] {
        assert!(key_exists(&servers[live], "red:two-down"));
    }
    assert!(!guard.is_lost());
    guard.unlock()?;
    for live in [1, 2, 4] {
        assert!(!key_exists(&servers[live], "red:two-down"));
    }
    Ok(())
}

#[test]
fn a_red_lock_fails_fast_with_three_of_five_down_and_leaves_nothing() {
    let mut servers = five_servers();
    let managers: Vec<_> = servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect();
    for down in [0, 2, 4] {
        servers[down].kill();
    }
    let started = Instant::now();
    let outcome = red_lock(&managers, "red:three-down").try_lock(Duration::from_secs(10));
    let took = started.elapsed();
    let err = outcome.expect_err("no quorum can be reached");
    assert!(err.is_connection_error() || err.is_timeout(), "{err}");
    // Well before the 10 s wait: more than N/2 errors end the call.
    assert!(took < Duration::from_secs(3), "{took:?}");
    for live in [1, 3] {
        assert!(!key_exists(&servers[live], "red:three-down"));
    }
}

#[test]
fn two_red_locks_on_the_same_masters_exclude_each_other() -> Result<()> {
    let servers = five_servers();
    let first: Vec<_> = servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect();
    let second: Vec<_> = servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect();
    let guard = red_lock(&first, "red:mutex").lock()?;
    assert_eq!(guard.guards().len(), 5);
    let started = Instant::now();
    assert!(red_lock(&second, "red:mutex")
        .try_lock(Duration::from_millis(400))?
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(400));
    // The loser's rounds released what they took: the first still holds all five.
    for server in &servers {
        assert!(key_exists(server, "red:mutex"));
    }
    assert_eq!(guard.guards().iter().filter(|g| g.is_lost()).count(), 0);
    guard.unlock()?;
    let taken = red_lock(&second, "red:mutex")
        .try_lock(Duration::from_secs(2))?
        .expect("free now");
    assert!(taken.validity() > Duration::ZERO);
    assert!(taken.validity() <= Duration::from_secs(30));
    drop(taken);
    for server in &servers {
        assert!(!key_exists(server, "red:mutex"));
    }
    Ok(())
}

#[test]
fn losing_three_of_five_holds_is_reported_but_losing_two_is_not() -> Result<()> {
    let servers = five_servers();
    let watchdog = Duration::from_millis(600); // renewals every 200 ms
    let managers: Vec<_> = servers.iter().map(|s| manager(s, watchdog)).collect();
    let guard = red_lock(&managers, "red:lost").lock()?;
    let lost = guard.lost_signal();
    for server in &servers[..2] {
        let _: () = server.conn().del("red:lost").unwrap();
    }
    // Within a few renewal periods both losses are found; the quorum of 3 still holds.
    assert!(support::eventually(Duration::from_secs(5), || {
        guard.guards().iter().filter(|g| g.is_lost()).count() == 2
    }));
    assert!(lost.try_recv().is_err(), "a quorum still holds");
    assert!(!guard.is_lost());
    assert!(guard.validity() > Duration::ZERO);
    let _: () = servers[2].conn().del("red:lost").unwrap();
    let deleted = Instant::now();
    lost.recv_timeout(Duration::from_secs(5))
        .expect("the lost quorum is signalled");
    assert!(
        deleted.elapsed() < watchdog / 3 + Duration::from_millis(1000),
        "{:?}",
        deleted.elapsed()
    );
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    // The two holds left are still released; the lost ones report NotHeld.
    assert!(guard.unlock().unwrap_err().is_not_held());
    for server in &servers {
        assert!(!key_exists(server, "red:lost"));
    }
    Ok(())
}

#[test]
fn a_multi_lock_unlock_tries_every_lock_and_reports_the_first_failure() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let multi = MultiLock::new(vec![
        manager.get_lock("report:a"),
        manager.get_lock("report:b"),
        manager.get_lock("report:c"),
    ]);
    let guard = multi.lock()?;
    assert!(manager.get_lock("report:b").force_unlock()?);
    assert!(guard.unlock().unwrap_err().is_not_held());
    assert!(!key_exists(&server, "report:a") && !key_exists(&server, "report:c"));
    Ok(())
}

#[test]
fn a_released_red_lock_disconnects_its_lost_signal_and_drop_releases_everywhere() -> Result<()> {
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let managers: Vec<_> = servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect();
    let guard = red_lock(&managers, "red:drop").lock()?;
    let lost = guard.lost_signal();
    drop(guard);
    for server in &servers {
        assert!(!key_exists(server, "red:drop"));
    }
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(5)),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected),
        "released, not lost"
    );
    Ok(())
}

#[test]
fn a_red_lock_without_masters_is_refused() {
    let err = RedLock::new(Vec::new()).lock().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = MultiLock::new(Vec::new()).lock().unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = MultiLock::new(Vec::new())
        .try_lock(Duration::ZERO)
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
}

/// The same lock of one manager twice is one lock on one server: no round could win, so
/// `lock()` would retry forever. It is refused before anything is sent.
#[test]
fn a_red_lock_given_one_managers_lock_twice_is_refused() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let twice = RedLock::new(vec![manager.get_lock("rr"), manager.get_lock("rr")]);
    let sent = manager.stats().commands;
    let err = twice.lock().map(drop).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = twice
        .try_lock(Duration::from_secs(1))
        .map(drop)
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(manager.stats().commands, sent, "nothing was sent");
    // Two names on one manager are two locks: allowed (Redisson's own example does it).
    let two = RedLock::new(vec![manager.get_lock("rr:1"), manager.get_lock("rr:2")]);
    two.try_lock(Duration::from_secs(5))?
        .expect("both free")
        .unlock()?;
    Ok(())
}

#[test]
fn a_red_lock_with_watchdog_leases_is_renewed_past_them() -> Result<()> {
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let watchdog = Duration::from_millis(600);
    let managers: Vec<_> = servers.iter().map(|s| manager(s, watchdog)).collect();
    // The holds belong to the round's helper threads, gone by now: renewals must not care.
    let guard = red_lock(&managers, "red:renewed").lock()?;
    let lost = guard.lost_signal();
    let validity = guard.validity();
    assert!(
        validity > Duration::ZERO && validity <= watchdog,
        "{validity:?}"
    );
    assert!(lost.recv_timeout(watchdog * 3).is_err(), "no loss reported");
    assert!(!guard.is_lost());
    assert!(guard.validity() > Duration::ZERO);
    for server in &servers {
        assert!(key_exists(server, "red:renewed"));
    }
    guard.unlock()?;
    Ok(())
}

/// The owner fields of the lock `key` on `server`, with their hold counts.
fn holders(server: &RedisServer, key: &str) -> std::collections::HashMap<String, i64> {
    server.conn().hgetall(key).unwrap()
}

/// Five masters, managers with a long watchdog: nothing expires during a test.
fn five_managers(servers: &[RedisServer]) -> Vec<LockManager> {
    servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect()
}

#[test]
fn the_holder_re_enters_a_red_lock_and_releases_it_in_two_unlocks() -> Result<()> {
    let servers = five_servers();
    let managers = five_managers(&servers);
    let red = red_lock(&managers, "red:reentered");
    let outer = red.lock()?;
    let inner = red
        .try_lock(Duration::ZERO)?
        .expect("the holder re-enters at once");
    assert_eq!(inner.guards().len(), 5);
    for server in &servers {
        let held = holders(server, "red:reentered");
        assert_eq!(held.values().collect::<Vec<_>>(), [&2], "{held:?}");
    }
    for lock in red.locks() {
        assert_eq!(lock.hold_count()?, 2);
    }
    inner.unlock()?;
    for server in &servers {
        let held = holders(server, "red:reentered");
        assert_eq!(held.values().collect::<Vec<_>>(), [&1], "{held:?}");
    }
    outer.unlock()?;
    for server in &servers {
        assert!(!key_exists(server, "red:reentered"));
    }
    Ok(())
}

#[test]
fn a_red_lock_is_held_by_the_thread_that_took_it_and_by_no_other() -> Result<()> {
    let servers = five_servers();
    let managers = five_managers(&servers);
    let red = red_lock(&managers, "red:whose");
    let guard = red.lock()?;
    for lock in red.locks() {
        assert!(lock.is_held_by_current_thread()?);
        assert_eq!(lock.hold_count()?, 1);
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                for lock in red.locks() {
                    assert!(!lock.is_held_by_current_thread().expect("asked"));
                    assert_eq!(lock.hold_count().expect("asked"), 0);
                }
                // Not the holder: it waits like anyone else.
                assert!(red.try_lock(Duration::ZERO).expect("tried").is_none());
            })
            .join()
            .expect("the other thread's checks");
    });
    guard.unlock()?;
    for lock in red.locks() {
        assert!(!lock.is_held_by_current_thread()?);
    }
    Ok(())
}

#[test]
fn a_red_lock_guard_moved_to_another_thread_is_released_there() -> Result<()> {
    let servers = five_servers();
    let managers = five_managers(&servers);
    let red = red_lock(&managers, "red:moved");
    let guard = red.lock()?;
    std::thread::spawn(move || guard.unlock())
        .join()
        .expect("the releasing thread")?;
    for server in &servers {
        assert!(!key_exists(server, "red:moved"));
    }
    for lock in red.locks() {
        assert!(!lock.is_held_by_current_thread()?);
    }
    // The holder's count went back to zero: its next acquire is a fresh hold.
    let again = red.lock()?;
    for server in &servers {
        let held = holders(server, "red:moved");
        assert_eq!(held.values().collect::<Vec<_>>(), [&1], "{held:?}");
    }
    again.unlock()?;
    Ok(())
}

#[test]
fn threads_of_one_process_sharing_a_red_lock_exclude_each_other() -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let managers: Vec<_> = servers
        .iter()
        .map(|s| manager(s, Duration::from_secs(30)))
        .collect();
    let red = red_lock(&managers, "red:shared");
    let inside = AtomicBool::new(false);
    let sections = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..10 {
                    let guard = red.lock().expect("lock");
                    assert!(guard.guards().len() >= 2, "a quorum of 3");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    std::thread::sleep(Duration::from_millis(2));
                    inside.store(false, Ordering::SeqCst);
                    sections.fetch_add(1, Ordering::SeqCst);
                    guard.unlock().expect("unlock");
                }
            });
        }
    });
    assert_eq!(sections.load(Ordering::SeqCst), 40);
    for server in &servers {
        assert!(!key_exists(server, "red:shared"));
    }
    Ok(())
}
