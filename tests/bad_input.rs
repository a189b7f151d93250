//! Bad input gets a clear error, never a panic, a hang or a silent success, and nothing
//! already held is lost because of a bad call.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{Error, FailureKind, LockManager, Result};
use support::RedisServer;

#[test]
fn empty_and_oversized_names_are_refused_by_every_operation() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let huge = "n".repeat(64 * 1024 + 1);
    for name in ["", huge.as_str()] {
        let lock = manager.get_lock(name);
        let wait = Duration::from_millis(10);
        let lease = Duration::from_secs(1);
        let errors = [
            lock.lock().map(drop).unwrap_err(),
            lock.try_lock(wait).map(drop).unwrap_err(),
            lock.lock_with_lease(lease).map(drop).unwrap_err(),
            lock.try_lock_with_lease(wait, lease).map(drop).unwrap_err(),
            lock.is_locked().map(drop).unwrap_err(),
            lock.is_held_by_current_thread().map(drop).unwrap_err(),
            lock.hold_count().map(drop).unwrap_err(),
            lock.remaining_ttl().map(drop).unwrap_err(),
            lock.force_unlock().map(drop).unwrap_err(),
            manager.lock(name).map(drop).unwrap_err(),
        ];
        let semaphore = manager.get_semaphore(name);
        let latch = manager.get_count_down_latch(name);
        let others = [
            semaphore.try_set_permits(1).map(drop).unwrap_err(),
            semaphore.try_acquire(1, wait).map(drop).unwrap_err(),
            semaphore.available_permits().map(drop).unwrap_err(),
            latch.try_set_count(1).map(drop).unwrap_err(),
            latch.wait_timeout(wait).map(drop).unwrap_err(),
        ];
        for err in errors.into_iter().chain(others) {
            assert!(matches!(err, Error::InvalidName { .. }), "{err}");
            // Not "lock name": the same words serve semaphores and latches.
            assert!(err.to_string().starts_with("invalid name: "), "{err}");
        }
    }
    // The longest accepted name works end to end.
    let longest = "n".repeat(64 * 1024);
    manager.lock(&longest)?.unlock()?;
    Ok(())
}

#[test]
fn out_of_range_durations_are_refused_and_the_held_lock_survives() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .build()?;
    let held = manager.lock("durations")?;
    let other = std::thread::scope(|s| {
        s.spawn(|| {
            let lock = manager.get_lock("durations");
            let bad_leases = [Duration::ZERO, Duration::from_micros(500), Duration::MAX];
            for lease in bad_leases {
                let err = lock.lock_with_lease(lease).unwrap_err();
                assert!(err.is_invalid_argument(), "{err}");
                assert!(err.to_string().contains("lease"), "{err}");
                let err = lock.try_lock_with_lease(Duration::ZERO, lease).unwrap_err();
                assert!(err.is_invalid_argument(), "{err}");
            }
            let err = lock.try_lock(Duration::MAX).unwrap_err();
            assert!(err.is_invalid_argument(), "{err}");
            assert!(err.to_string().contains("wait"), "{err}");
            lock.try_lock(Duration::ZERO).map(|g| g.is_none())
        })
        .join()
        .unwrap()
    })?;
    assert!(other, "a zero wait is one failed attempt, not an error");
    // The same thread's bad calls on the lock it holds change nothing either.
    let lock = manager.get_lock("durations");
    assert!(lock.lock_with_lease(Duration::ZERO).is_err());
    assert!(lock.try_lock(Duration::MAX).is_err());
    assert_eq!(lock.hold_count()?, 1);
    // Still renewed: it outlives two watchdog timeouts.
    std::thread::sleep(Duration::from_secs(2));
    assert!(lock.is_locked()?);
    assert!(!held.is_lost());
    held.unlock()?;
    Ok(())
}

#[test]
fn bad_settings_are_reported_by_build() {
    let url = "redis://127.0.0.1:1/"; // never contacted: validation comes first
    let cases = [
        LockManager::builder(url).watchdog_timeout(Duration::ZERO),
        LockManager::builder(url).watchdog_timeout(Duration::MAX),
        LockManager::builder(url).pool_size(0),
        LockManager::builder(url).connect_timeout(Duration::ZERO),
        LockManager::builder(url).response_timeout(Duration::ZERO),
    ];
    for builder in cases {
        let err = builder.build().unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
    }
}

#[test]
fn unparseable_urls_are_refused_without_echoing_them() {
    for url in ["", "not a url", "http://127.0.0.1/", "redis://:secret@[::1"] {
        let err = LockManager::new(url).unwrap_err();
        assert!(matches!(err, Error::InvalidUrl { .. }), "{url:?}: {err}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}

#[test]
fn a_database_number_the_server_does_not_have_is_an_invalid_url() {
    let server = RedisServer::start_with(&["--databases", "4"]);
    let url = |db: u32| format!("redis://127.0.0.1:{}/{db}", server.port());
    let err = LockManager::new(&url(4)).unwrap_err();
    // The URL's fault, not the server's: no retry mends it.
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err}");
    assert!(
        err.is_invalid_argument() && !err.is_connection_error(),
        "{err}"
    );
    assert!(
        err.to_string().contains("DB index is out of range"),
        "{err}"
    );
    // The server's reply, as the crate's own data.
    let Error::InvalidUrl { source } = &err else {
        unreachable!()
    };
    assert_eq!(source.kind(), FailureKind::Server, "{err}");
    assert_eq!(source.code(), Some("ERR"), "{err}");
    assert_eq!(source.detail(), Some("DB index is out of range"), "{err}");
    let client_error = std::error::Error::source(&err).expect("the client's error");
    assert_eq!(client_error.to_string(), source.to_string());
    // The last one it has works.
    let manager = LockManager::new(&url(3)).expect("database 3 of 4");
    manager.lock("db3").unwrap().unlock().unwrap();
}

#[test]
fn a_wrong_password_is_a_connect_error() {
    let server = RedisServer::start_with(&["--requirepass", "right-password"]);
    let wrong = format!("redis://:wrong-password@127.0.0.1:{}/", server.port());
    let err = LockManager::new(&wrong).unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(!err.to_string().contains("wrong-password"), "{err}");
    let failure = err.redis_failure().expect("the refusal");
    assert_eq!(failure.kind(), FailureKind::Authentication, "{err}");
    let none = format!("redis://127.0.0.1:{}/", server.port());
    let err = LockManager::new(&none).unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    let Error::Connect { source } = &err else {
        unreachable!()
    };
    assert_eq!(source.kind(), FailureKind::Authentication, "{err}");
    assert_eq!(source.code(), Some("NOAUTH"), "{err}");
    // And the right one works.
    let manager = LockManager::new(&server.url()).expect("right password");
    manager.lock("authed").unwrap().unlock().unwrap();
}

#[test]
fn redis_down_at_start_is_a_connect_error() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let started = Instant::now();
    let err = LockManager::new(&url).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Nobody listens on the port any more: refused, with no reply from a server.
    let Error::Connect { source } = &err else {
        panic!("not a connect error: {err:?}")
    };
    assert_eq!(source.kind(), FailureKind::Refused, "{err}");
    assert_eq!((source.code(), source.detail()), (None, None), "{err}");
    assert!(std::error::Error::source(&err).is_some(), "{err}");
}

#[test]
fn redis_going_down_makes_lock_fail_instead_of_hang() {
    let mut server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let guard = manager.lock("going-down").unwrap();
    server.kill();
    let started = Instant::now();
    let err = manager.lock("other").unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let err = manager
        .try_lock("other", Duration::from_secs(1))
        .unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert!(guard.unlock().unwrap_err().is_connection_error());
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_stalled_server_times_out_instead_of_hanging() {
    let server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    server.freeze();
    let started = Instant::now();
    let result = manager.try_lock("stalled", Duration::from_millis(200));
    let took = started.elapsed();
    server.thaw();
    let err = result.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // Once the server is back, the manager works again (the timed-out connection was dropped).
    manager.lock("stalled").unwrap().unlock().unwrap();
}

#[test]
fn a_key_that_is_not_a_lock_is_reported_and_left_alone() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let _: () = conn.set("user-data", "precious").unwrap();
    let lock = manager.get_lock("user-data");

    let errors = [
        lock.lock().map(drop).unwrap_err(),
        lock.try_lock(Duration::from_millis(50))
            .map(drop)
            .unwrap_err(),
        lock.lock_with_lease(Duration::from_secs(1))
            .map(drop)
            .unwrap_err(),
        lock.is_locked().map(drop).unwrap_err(),
        lock.hold_count().map(drop).unwrap_err(),
        lock.is_held_by_current_thread().map(drop).unwrap_err(),
        lock.remaining_ttl().map(drop).unwrap_err(),
        lock.force_unlock().map(drop).unwrap_err(),
    ];
    for err in errors {
        assert!(err.is_wrong_type(), "{err}");
        assert!(err.to_string().contains("not a lock"), "{err}");
        // The server's WRONGTYPE, read by the crate: no failure of Redis' to look into.
        assert!(err.redis_failure().is_none(), "{err}");
    }
    let value: String = conn.get("user-data").unwrap();
    assert_eq!(value, "precious");
    let ttl: i64 = conn.pttl("user-data").unwrap();
    assert_eq!(ttl, -1, "no expiry was added");
    Ok(())
}

/// A hash at the lock's name that is somebody's data (its fields are not hold counts, and it
/// has no TTL) is reported as `WrongType` by the acquires, `force_unlock` and the inspection
/// calls, and left as it was: no lock waits for it without end, and nothing deletes or rewrites it.
#[test]
fn a_hash_that_is_somebodys_data_is_reported_and_left_alone() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let fields = [("status", "paid"), ("amount", "10")];
    let _: () = conn.hset_multiple("order:3", &fields).unwrap();
    let lock = manager.get_lock("order:3");
    let fair = manager.get_fair_lock("order:3");
    let rw = manager.get_read_write_lock("order:3");

    let errors = within_a_minute({
        let (lock, fair, rw) = (lock.clone(), fair.clone(), rw.clone());
        move || {
            [
                lock.lock().map(drop).unwrap_err(),
                lock.try_lock(Duration::from_secs(30))
                    .map(drop)
                    .unwrap_err(),
                lock.lock_fenced().map(drop).unwrap_err(),
                fair.lock().map(drop).unwrap_err(),
                rw.read_lock()
                    .try_lock(Duration::ZERO)
                    .map(drop)
                    .unwrap_err(),
                rw.write_lock().lock().map(drop).unwrap_err(),
                lock.force_unlock().map(drop).unwrap_err(),
                // The inspection calls say so too, rather than "locked, 0 holds".
                lock.is_locked().map(drop).unwrap_err(),
                lock.hold_count().map(drop).unwrap_err(),
                lock.is_held_by_current_thread().map(drop).unwrap_err(),
            ]
        }
    });
    for err in errors {
        assert!(err.is_wrong_type(), "{err}");
        assert!(err.to_string().contains("not a"), "{err}");
    }
    let kept: Vec<(String, String)> = conn.hgetall("order:3").unwrap();
    let mut kept: Vec<(&str, &str)> = kept.iter().map(|(f, v)| (f.as_str(), v.as_str())).collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        [("amount", "10"), ("status", "paid")],
        "the hash is as it was"
    );
    let ttl: i64 = conn.pttl("order:3").unwrap();
    assert_eq!(ttl, -1, "no expiry was added");

    // A plain lock's hash is no read-write lock either: neither takes the other over.
    let held = manager.lock("order:4")?;
    let err = manager
        .get_read_write_lock("order:4")
        .write_lock()
        .try_lock(Duration::ZERO)
        .unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    assert_eq!(held.lock().hold_count()?, 1);
    held.unlock()?;
    Ok(())
}

/// The longest lease and watchdog timeout accepted: 100 years (see `limits::MAX_LEASE_MILLIS`).
const MAX_LEASE: Duration = Duration::from_millis(100 * 365 * 24 * 60 * 60 * 1000);

/// Runs `body` on its own thread and fails if it takes longer than a minute: the bug this
/// guards against was an endless acquire-release loop, which must fail the test, not hang it.
fn within_a_minute<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("returned within a minute, not an endless acquire-release loop")
}

#[test]
fn the_longest_lease_is_held_and_one_millisecond_more_is_refused() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let held = within_a_minute({
        let manager = manager.clone();
        move || manager.lock_with_lease("lease:longest", MAX_LEASE)
    })?;
    assert_eq!(held.lease(), Some(MAX_LEASE));
    let left = held.remaining_lease().expect("a confirmed lease");
    assert!(left > MAX_LEASE * 9 / 10, "{left:?}");
    let ttl: i64 = conn.pttl("lease:longest").unwrap();
    assert!(ttl > (MAX_LEASE.as_millis() * 9 / 10) as i64, "PTTL {ttl}");
    held.unlock()?;
    assert!(!manager.get_lock("lease:longest").is_locked()?);

    let too_long = MAX_LEASE + Duration::from_millis(1);
    let errors = within_a_minute({
        let manager = manager.clone();
        move || {
            [
                manager.lock_with_lease("lease:longer", too_long).map(drop),
                manager
                    .try_lock_with_lease("lease:longer", Duration::ZERO, too_long)
                    .map(drop),
                // The old limit, 2^52 ms, which used to loop forever.
                manager
                    .lock_with_lease("lease:longer", Duration::from_millis(1 << 52))
                    .map(drop),
            ]
        }
    });
    for result in errors {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("3153600000000 ms"), "{err}");
    }
    let exists: bool = conn.exists("lease:longer").unwrap();
    assert!(!exists, "nothing was sent for a refused lease");
    Ok(())
}

#[test]
fn the_longest_watchdog_timeout_works_and_one_millisecond_more_is_refused() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let url = server.url();
    within_a_minute(move || -> Result<()> {
        let manager = LockManager::builder(&url)
            .watchdog_timeout(MAX_LEASE)
            .build()?;
        assert_eq!(manager.watchdog_timeout(), MAX_LEASE);
        let guard = manager.lock("watchdog:longest")?;
        assert_eq!(manager.renewing_count(), 1);
        let left = guard.remaining_lease().expect("a confirmed lease");
        assert!(left > MAX_LEASE * 9 / 10, "{left:?}");
        guard.unlock()?;
        for timeout in [
            MAX_LEASE + Duration::from_millis(1),
            Duration::from_millis(1 << 52),
        ] {
            let err = LockManager::builder(&url)
                .watchdog_timeout(timeout)
                .build()
                .unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
            assert!(err.to_string().contains("watchdog timeout"), "{err}");
        }
        Ok(())
    })?;
    let exists: bool = conn.exists("watchdog:longest").unwrap();
    assert!(!exists, "unlocked");
    Ok(())
}

#[test]
fn watchdog_timeouts_below_500_ms_are_refused_and_500_ms_keeps_a_lock() -> Result<()> {
    let url = "redis://127.0.0.1:1/"; // never contacted: validation comes first
    for ms in [3, 100, 499] {
        let err = LockManager::builder(url)
            .watchdog_timeout(Duration::from_millis(ms))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("minimum of 500 ms"), "{err}");
    }
    let server = RedisServer::start();
    let timeout = Duration::from_millis(500);
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(timeout)
        .build()?;
    let guard = manager.lock("watchdog:shortest")?;
    let lost = guard.lost_signal();
    // Renewed every ~167 ms: the lock outlives three timeouts without being reported lost.
    assert!(lost.recv_timeout(timeout * 3).is_err(), "reported lost");
    assert!(!guard.is_lost());
    assert!(manager.get_lock("watchdog:shortest").is_locked()?);
    guard.unlock()?;
    Ok(())
}
