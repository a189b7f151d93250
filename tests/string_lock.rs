//! The string lock (redis-py's `Lock` format): one string key holding the owner's token, taken
//! with `SET NX PX`, renewed and deleted only while it holds the token, nothing published,
//! waiters polling. The Python side is redis-py's own commands and scripts, run raw
//! (testkit/src/redis_py.rs).

use redis_rlock_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{AcquireOptions, CancelToken, DistributedLock, Error, LockManager, Result};
use support::cluster::RedisCluster;
use support::proxy::Proxy;
use support::redis_py::PyLock;
use support::RedisServer;

/// A redis-py `Lock` on `name` with a 30 s timeout and the token `token`.
fn py(server: &RedisServer, name: &str, token: u32) -> PyLock {
    PyLock::new(server.conn(), name, Duration::from_secs(30), token)
}

/// What the key holds.
fn value(server: &RedisServer, name: &str) -> Option<String> {
    server.conn().get(name).unwrap()
}

#[test]
fn our_hold_is_a_string_holding_the_owner_token_and_redis_py_sees_it() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:ours");
    let guard = lock.lock()?;
    let token = value(&server, "str:ours").expect("a string");
    let parts: Vec<&str> = token.split(':').collect();
    assert_eq!(parts.len(), 3, "<client id>:<thread>:<n>: {token}");
    assert_eq!(parts[0].len(), 36, "{token}");
    assert!(
        parts[1..].iter().all(|n| n.parse::<u64>().is_ok()),
        "{token}"
    );
    let ttl: i64 = server.conn().pttl("str:ours").unwrap();
    assert!(ttl > 20_000 && ttl <= 30_000, "the watchdog's lease: {ttl}");

    // redis-py sees the lock held, not owned; its attempt, release and extend change nothing.
    let mut python = py(&server, "str:ours", 1);
    assert!(python.locked());
    assert!(!python.owned());
    assert!(!python.attempt(), "SET NX refused");
    assert!(!python.release(), "LockNotOwnedError");
    assert!(!python.extend(Duration::from_secs(60), true));
    assert_eq!(value(&server, "str:ours").as_deref(), Some(token.as_str()));

    guard.unlock()?;
    assert!(!python.locked(), "our release deletes the key");
    assert!(
        python.acquire(Duration::from_secs(5)),
        "redis-py takes it next"
    );
    Ok(())
}

#[test]
fn a_redis_py_hold_is_seen_waited_for_and_taken_after_its_release() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:python");
    let mut python = py(&server, "str:python", 2);
    assert!(python.attempt());
    assert!(lock.is_locked()?);
    assert!(!lock.is_held_by_current_thread()?);
    assert_eq!(lock.hold_count()?, 0);
    let ttl = lock.remaining_ttl()?.expect("redis-py's timeout");
    assert!(ttl > Duration::from_secs(20), "{ttl:?}");
    assert!(lock.try_lock(Duration::ZERO)?.is_none());

    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || -> Result<()> {
            let guard = lock.try_lock(Duration::from_secs(20))?.expect("acquired");
            acquired_tx.send(Instant::now()).unwrap();
            guard.unlock()
        })
    };
    // The waiter attempts (EVALSHA of the acquire) once, and once more when the server's
    // tracking of the key is live, subscribed to no channel: redis-py's release publishes
    // nothing, and tracking tells it.
    let mut conn = server.conn();
    let polls_before = support::command_calls(&mut conn, "evalsha");
    assert!(support::eventually(Duration::from_secs(10), || {
        support::command_calls(&mut conn, "evalsha") >= polls_before + 2
    }));
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut conn)
        .unwrap();
    assert!(
        channels.iter().all(|c| !c.contains("str:python")),
        "{channels:?}"
    );
    assert!(python.release(), "redis-py's own release");
    let released = Instant::now();
    let at = acquired.recv_timeout(Duration::from_secs(20)).unwrap();
    waiter.join().unwrap()?;
    let after = at.saturating_duration_since(released);
    assert!(after < Duration::from_secs(1), "found only after {after:?}");
    Ok(())
}

#[test]
fn reentrancy_is_counted_here_and_the_key_holds_one_token() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:reentrant");
    let first = lock.lock_with_lease(Duration::from_secs(5))?;
    let token = value(&server, "str:reentrant").expect("held");
    let second = lock.try_lock(Duration::ZERO)?.expect("re-entered");
    assert_eq!(lock.hold_count()?, 2);
    assert!(lock.is_held_by_current_thread()?);
    assert_eq!(
        value(&server, "str:reentrant"),
        Some(token.clone()),
        "one token"
    );
    // The re-entry's watchdog lease replaced the fixed one.
    let ttl = lock.remaining_ttl()?.expect("a lease");
    assert!(ttl > Duration::from_secs(20), "{ttl:?}");

    std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            assert!(lock.is_locked()?);
            assert!(!lock.is_held_by_current_thread()?);
            assert_eq!(lock.hold_count()?, 0);
            assert!(lock.try_lock(Duration::ZERO)?.is_none(), "another thread");
            Ok(())
        })
        .join()
        .unwrap()
    })?;

    second.unlock()?;
    assert_eq!(lock.hold_count()?, 1);
    assert_eq!(
        value(&server, "str:reentrant"),
        Some(token.clone()),
        "still ours"
    );
    first.unlock()?;
    assert!(!lock.is_locked()?);
    assert_eq!(lock.hold_count()?, 0);
    assert_eq!(lock.remaining_ttl()?, None);
    // The thread's next acquisition has a token of its own.
    let again = lock.lock()?;
    let next = value(&server, "str:reentrant").expect("held");
    assert_ne!(next, token, "a token per acquisition");
    again.unlock()?;
    Ok(())
}

#[test]
fn an_expired_hold_is_not_released_over_the_next_holder() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:expiry");
    let guard = lock.lock_with_lease(Duration::from_millis(200))?;
    let mut python = py(&server, "str:expiry", 3);
    assert!(
        python.acquire(Duration::from_secs(10)),
        "free when the lease ran out"
    );
    assert!(!lock.is_held_by_current_thread()?);
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    assert!(python.owned(), "redis-py's hold is left alone");
    Ok(())
}

#[test]
fn the_watchdog_renews_a_string_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_secs(1));
    let lock = manager.get_string_lock("str:renewed");
    let guard = lock.lock()?;
    // Three leases long: only renewals keep it.
    std::thread::sleep(Duration::from_secs(3));
    assert!(lock.is_held_by_current_thread()?, "renewed");
    assert!(!guard.is_lost());
    guard.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

#[test]
fn a_hold_taken_over_is_lost_and_not_renewed_over_the_new_holder() -> Result<()> {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_secs(1));
    let lock = manager.get_string_lock("str:taken");
    let guard = lock.lock()?;
    // Somebody deletes it and redis-py takes it: the next renewal finds another token.
    let _: () = server.conn().del("str:taken").unwrap();
    let mut python = PyLock::new(server.conn(), "str:taken", Duration::from_secs(2), 4);
    assert!(python.attempt());
    assert!(support::eventually(Duration::from_secs(10), || guard.is_lost()));
    let ttl: i64 = server.conn().pttl("str:taken").unwrap();
    assert!(ttl <= 2_000, "not renewed with our lease: {ttl}");
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    assert!(python.owned());
    Ok(())
}

#[test]
fn force_unlock_deletes_any_holder_and_reports_whether_there_was_one() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:force");
    let mut python = py(&server, "str:force", 5);
    assert!(python.attempt());
    assert!(lock.force_unlock()?);
    assert!(!python.locked());
    assert!(!lock.force_unlock()?, "nothing left");

    let guard = lock.lock()?;
    std::thread::scope(|s| s.spawn(|| lock.force_unlock()).join().unwrap())?;
    assert!(!lock.is_locked()?);
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    lock.try_lock(Duration::ZERO)?.expect("free").unlock()?;
    Ok(())
}

#[test]
fn a_key_of_another_type_is_wrongtype_and_left_alone() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:hash");
    let mut conn = server.conn();
    let _: () = conn.hset("str:hash", "field", "somebody's data").unwrap();
    let wrong = |outcome: Result<()>| matches!(outcome, Err(Error::WrongType { .. }));
    assert!(wrong(lock.try_lock(Duration::ZERO).map(drop)));
    assert!(wrong(lock.lock().map(drop)));
    assert!(wrong(lock.is_locked().map(drop)));
    assert!(wrong(lock.is_held_by_current_thread().map(drop)));
    assert!(wrong(lock.hold_count().map(drop)));
    assert!(wrong(lock.remaining_ttl().map(drop)));
    assert!(wrong(lock.force_unlock().map(drop)));
    let kept: String = conn.hget("str:hash", "field").unwrap();
    assert_eq!(kept, "somebody's data", "left alone");
    Ok(())
}

/// Invariant: a force unlock leaves a semaphore's or a latch's count alone (a decimal
/// integer of at most 19 digits): WRONGTYPE, nothing deleted. Any other string is a token.
#[test]
fn force_unlock_refuses_a_semaphore_or_latch_count_and_leaves_it() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    assert!(manager.get_semaphore("str:permits").try_set_permits(3)?);
    assert!(manager.get_count_down_latch("str:count").try_set_count(2)?);
    let mut conn = server.conn();
    let _: () = conn.set("str:negative", "-4").unwrap();
    let _: () = conn.set("str:largest", i64::MAX).unwrap();
    for name in ["str:permits", "str:count", "str:negative", "str:largest"] {
        let before = value(&server, name);
        let outcome = manager.get_string_lock(name).force_unlock();
        assert!(
            matches!(outcome, Err(Error::WrongType { .. })),
            "{name}: {outcome:?}"
        );
        assert_eq!(value(&server, name), before, "{name} left alone");
    }
    assert_eq!(manager.get_semaphore("str:permits").available_permits()?, 3);
    assert_eq!(manager.get_count_down_latch("str:count").count()?, 2);
    // redis-py's token is 32 hex digits, which may all be decimal: a token, not a count.
    let _: () = conn.set("str:digits", "1".repeat(32)).unwrap();
    assert!(manager.get_string_lock("str:digits").force_unlock()?);
    assert_eq!(value(&server, "str:digits"), None);
    Ok(())
}

/// Invariant: the `Lock` a string lock's guard hands out answers for the string lock: its
/// inspection reads the string, and its acquires take string-lock holds.
#[test]
fn a_string_guards_lock_handle_answers_for_the_string_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "str:guard-handle";
    let guard = manager.get_string_lock(name).lock()?;
    let handle = guard.lock().clone();
    assert!(handle.is_locked()?);
    assert!(handle.is_held_by_current_thread()?);
    assert_eq!(handle.hold_count()?, 1);
    assert!(handle.remaining_ttl()?.expect("a lease") > Duration::from_secs(20));
    let again = handle.try_lock(Duration::ZERO)?.expect("a re-entry");
    assert_eq!(handle.hold_count()?, 2, "counted as the string lock's");
    assert!(matches!(
        handle.lock_fenced(),
        Err(Error::InvalidArgument { .. })
    ));
    again.unlock()?;
    guard.unlock()?;
    assert!(!handle.is_locked()?);
    let _: () = server.conn().set(name, "held by redis-py").unwrap();
    assert!(handle.force_unlock()?, "the string deleted");
    Ok(())
}

#[test]
fn a_lock_and_a_string_lock_of_one_name_are_never_both_held() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let hash = manager.get_lock("str:mixed");
    let string = manager.get_string_lock("str:mixed");

    let guard = hash.lock()?;
    // The same thread is told before anything is sent; another gets WRONGTYPE from Redis.
    let same = string.try_lock(Duration::ZERO);
    assert!(
        matches!(same, Err(Error::InvalidArgument { .. })),
        "{same:?}"
    );
    let other = std::thread::scope(|s| {
        s.spawn(|| string.try_lock(Duration::from_secs(1)).map(|g| g.is_some()))
            .join()
            .unwrap()
    });
    assert!(matches!(other, Err(Error::WrongType { .. })), "{other:?}");
    guard.unlock()?;

    let guard = string.lock()?;
    let same = hash.try_lock(Duration::ZERO);
    assert!(
        matches!(same, Err(Error::InvalidArgument { .. })),
        "{same:?}"
    );
    let other = std::thread::scope(|s| {
        s.spawn(|| hash.try_lock(Duration::from_secs(1)).map(|g| g.is_some()))
            .join()
            .unwrap()
    });
    assert!(matches!(other, Err(Error::WrongType { .. })), "{other:?}");
    assert!(string.is_held_by_current_thread()?, "nothing held was lost");
    guard.unlock()?;
    Ok(())
}

#[test]
fn fencing_is_refused_with_a_clear_error() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:fenced");
    let dyn_lock: &dyn DistributedLock = &lock;
    for outcome in [
        dyn_lock.lock_fenced().map(drop),
        dyn_lock.try_lock_fenced(Duration::ZERO).map(drop),
        lock.acquire(AcquireOptions::new().fenced(true)).map(drop),
    ] {
        let Err(Error::InvalidArgument { reason, .. }) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(reason.contains("fencing"), "{reason}");
    }
    assert!(!lock.is_locked()?, "nothing taken");
    assert!(matches!(
        manager.get_string_lock("").lock(),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        lock.try_lock_with_lease(Duration::ZERO, Duration::ZERO),
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

#[test]
fn a_string_lock_waiter_is_cancelled_at_once() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut python = py(&server, "str:cancel", 6);
    assert!(python.attempt());
    let token = CancelToken::new();
    let started = Instant::now();
    let outcome = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let options = AcquireOptions::new().cancel_token(&token);
            manager.get_string_lock("str:cancel").acquire(options)
        });
        let mut conn = server.conn();
        assert!(support::eventually(Duration::from_secs(10), || {
            support::command_calls(&mut conn, "evalsha") >= 4
        }));
        token.cancel();
        waiter.join().unwrap()
    });
    assert!(
        matches!(outcome, Err(Error::Cancelled { .. })),
        "{outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(python.owned(), "untouched");
    Ok(())
}

fn manager_through(proxy: &Proxy) -> LockManager {
    LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("manager through the proxy")
}

/// Invariant: a release that took effect but whose reply was lost is sent again and reports
/// success; the key is gone, and nobody's hold was touched.
#[test]
fn a_release_whose_reply_was_lost_reports_success() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy);
    let lock = manager.get_string_lock("str:lost-release");
    // Once, so that the server was probed for the newer commands and has the scripts: the
    // reply dropped must be the one of the delete that ran.
    lock.lock()?.unlock()?;
    // The swallowed reply may be the listener's, not the release's; then the release went
    // through in one send and the scenario is run again.
    for attempt in 1.. {
        assert!(
            attempt <= 5,
            "the release's reply was never the one dropped"
        );
        support::await_listener(&mut server.conn(), &manager);
        let guard = lock.lock()?;
        let sent_before = manager.stats().commands;
        let dropped_before = proxy.dropped();
        proxy.drop_next_reply();
        guard.unlock()?;
        let sends = manager.stats().commands - sent_before;
        assert!(!lock.is_locked()?, "released");
        if sends >= 2 {
            break; // sent twice: the first reply was lost, and the release still succeeded
        }
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped_before
        }));
    }
    Ok(())
}

/// Invariant: a last release whose first send never ran (the pooled connection died with a
/// restart) and whose resend finds the key gone reports the hold lost: the server forgot it
/// (no persistence), and the critical section may have been unprotected.
#[test]
fn a_release_resent_after_a_dead_connection_reports_a_hold_forgotten_by_a_restart() -> Result<()> {
    let mut server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:restarted");
    let guard = lock.lock()?;
    server.restart(); // empty: the hold is gone, and the pooled connection is dead
                      // Asked on a connection of its own: the manager's pooled one must stay as it is.
    assert_eq!(
        value(&server, "str:restarted"),
        None,
        "the restarted server has no key"
    );
    let sent_before = manager.stats().commands;
    let released = guard.unlock();
    let sends = manager.stats().commands - sent_before;
    assert!(
        matches!(released, Err(Error::NotHeld { .. })),
        "the hold was lost before the release: {released:?} after {sends} sends"
    );
    Ok(())
}

/// Invariant: a RedLock refuses a string lock's `Lock` (a guard's `lock()`), which it would
/// take as a hash lock, with a clear error and nothing written.
#[test]
fn a_redlock_refuses_a_string_locks_lock_handle() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "str:redlock";
    let handle = manager.get_string_lock(name).lock()?.lock().clone();
    // The guard dropped: the key is free, and a hash lock's acquire would take it.
    assert!(!handle.is_locked()?);
    let redlock = redis_rlock::RedLock::new(vec![handle]);
    let taken = redlock.try_lock(Duration::ZERO);
    assert!(
        matches!(taken, Err(Error::InvalidArgument { .. })),
        "{:?}",
        taken.map(|guard| guard.is_some())
    );
    assert_eq!(value(&server, name), None, "nothing written");
    let exists: bool = server.conn().exists(name).unwrap();
    assert!(!exists);
    Ok(())
}

/// Invariant: a release of an earlier hold (which renews the key) whose reply was lost is
/// sent again and reports success; the thread still holds the lock, once.
#[test]
fn a_re_entry_release_whose_reply_was_lost_keeps_the_lock() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy);
    let lock = manager.get_string_lock("str:lost-renewal");
    let outer = lock.lock()?;
    // Once, so that the server was probed for `SET … IFEQ` and has the script.
    lock.try_lock(Duration::ZERO)?
        .expect("re-entered")
        .unlock()?;
    for attempt in 1.. {
        assert!(
            attempt <= 5,
            "the release's reply was never the one dropped"
        );
        support::await_listener(&mut server.conn(), &manager);
        let inner = lock.try_lock(Duration::ZERO)?.expect("re-entered");
        let sent_before = manager.stats().commands;
        let dropped_before = proxy.dropped();
        proxy.drop_next_reply();
        inner.unlock()?;
        let sends = manager.stats().commands - sent_before;
        assert_eq!(lock.hold_count()?, 1, "the outer hold");
        if sends >= 2 {
            break;
        }
        assert!(support::eventually(Duration::from_secs(10), || {
            proxy.dropped() > dropped_before
        }));
    }
    outer.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

/// How many token-checked deletes the server ran, by whichever command it has.
fn deletes_run(conn: &mut redis::Connection) -> u64 {
    ["evalsha", "delifeq", "delex"]
        .iter()
        .map(|command| support::command_calls(conn, command))
        .sum()
}

/// Invariant: a release whose first send was held back on its way (its connection dropped
/// at the timeout) and that arrives after its resend freed the lock and the same thread took
/// it again does not delete that newer hold: each acquisition has its own token.
#[test]
fn a_release_delayed_past_the_threads_next_acquire_leaves_that_hold_alone() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy);
    let name = "str:late-release";
    let lock = manager.get_string_lock(name);
    // Once, so that the server was probed for the newer commands and has the scripts.
    lock.lock()?.unlock()?;
    let older = lock.lock()?;
    // The release's first send is held back; its resend, on a new connection, passes.
    proxy.hold_first_requests_containing(name.as_bytes(), 1);
    older.unlock()?;
    assert_eq!(proxy.held(), 1, "the first send was held back");
    assert!(!lock.is_locked()?, "the resend released it");
    let newer = lock.lock()?;
    let mut conn = server.conn();
    let before = deletes_run(&mut conn);
    proxy.release_requests();
    assert!(
        support::eventually(Duration::from_secs(10), || deletes_run(&mut conn) > before),
        "the held-back release reached the server"
    );
    assert!(
        value(&server, name).is_some(),
        "the newer hold's key is kept"
    );
    assert!(lock.is_held_by_current_thread()?);
    newer.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

/// Invariant: an acquire whose reply was lost leaves no hold renewed forever: it takes back
/// the token it set (which no later acquire sends), and the owner's next acquire takes the
/// lock at once, once.
#[test]
fn an_acquire_whose_reply_was_lost_leaves_one_hold_at_most() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = manager_through(&proxy);
    let lock = manager.get_string_lock("str:lost-acquire");
    // Once, so that the server has the script: the reply dropped must be the one of the
    // script's run, not of its NOSCRIPT refusal.
    lock.lock()?.unlock()?;
    let mut conn = server.conn();
    let err = loop {
        support::await_listener(&mut conn, &manager);
        let dropped_before = proxy.dropped();
        proxy.drop_next_reply();
        match lock.lock() {
            Err(err) => break err,
            Ok(guard) => {
                guard.unlock()?;
                assert!(support::eventually(Duration::from_secs(10), || {
                    proxy.dropped() > dropped_before
                }));
            }
        }
    };
    assert!(err.is_timeout(), "{err}");
    // The acquire ran (its reply, not another, was dropped: it timed out) and was taken back.
    let token: Option<String> = conn.get("str:lost-acquire").unwrap();
    assert_eq!(token, None, "the token it set was taken back");
    assert_eq!(manager.renewing_count(), 0, "nobody renews it");
    // The owner's next acquire takes it at once: one hold, and one release frees it.
    let guard = lock.try_lock(Duration::ZERO)?.expect("free");
    assert_eq!(lock.hold_count()?, 1);
    guard.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

/// One side of the interop run: loops `acquire → check → release` until `rounds` are done,
/// failing the run when it finds the "inside" flag set or the counter moved under it.
fn critical_section(inside: &AtomicBool, counter: &AtomicU64, overlaps: &AtomicU64) {
    if inside.swap(true, SeqCst) {
        overlaps.fetch_add(1, SeqCst);
    }
    let before = counter.load(SeqCst);
    std::thread::sleep(Duration::from_millis(2));
    if counter.load(SeqCst) != before {
        overlaps.fetch_add(1, SeqCst);
    }
    counter.store(before + 1, SeqCst);
    inside.store(false, SeqCst);
}

#[test]
fn redis_py_and_our_threads_contend_on_one_name_without_overlap() -> Result<()> {
    const OURS: u64 = 4;
    const OUR_ROUNDS: u64 = 30;
    const PYTHONS: u64 = 2;
    const PY_ROUNDS: u64 = 10;
    let server = RedisServer::start();
    let managers = [
        LockManager::new(&server.url())?,
        LockManager::new(&server.url())?,
    ];
    let (inside, counter, overlaps) =
        (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        let mut threads = Vec::new();
        for i in 0..OURS {
            let lock = managers[(i % 2) as usize].get_string_lock("str:contended");
            let (inside, counter, overlaps) = (&inside, &counter, &overlaps);
            threads.push(s.spawn(move || -> Result<()> {
                for _ in 0..OUR_ROUNDS {
                    let guard = lock
                        .try_lock(Duration::from_secs(60))?
                        .expect("a turn within a minute");
                    critical_section(inside, counter, overlaps);
                    guard.unlock()?;
                }
                Ok(())
            }));
        }
        for i in 0..PYTHONS {
            let mut python = py(&server, "str:contended", 100 + i as u32);
            let (inside, counter, overlaps) = (&inside, &counter, &overlaps);
            threads.push(s.spawn(move || -> Result<()> {
                for _ in 0..PY_ROUNDS {
                    assert!(
                        python.acquire(Duration::from_secs(60)),
                        "a turn within a minute"
                    );
                    critical_section(inside, counter, overlaps);
                    assert!(python.release(), "still redis-py's at its release");
                }
                Ok(())
            }));
        }
        for thread in threads {
            thread.join().unwrap()?;
        }
        Ok::<(), Error>(())
    })?;
    assert_eq!(overlaps.load(SeqCst), 0, "two holders at once");
    assert_eq!(
        counter.load(SeqCst),
        OURS * OUR_ROUNDS + PYTHONS * PY_ROUNDS
    );
    assert!(!managers[0].get_string_lock("str:contended").is_locked()?);
    Ok(())
}

/// Where the server knows `DELIFEQ` (Valkey 9.0+) a release sends it; elsewhere the script
/// does, after the newer commands were refused once each, never again.
#[test]
fn releases_use_the_newer_commands_where_the_server_has_them() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_string_lock("str:probe");
    let mut conn = server.conn();
    let counts = |conn: &mut redis::Connection| {
        (
            support::command_calls(conn, "delifeq"),
            support::command_calls(conn, "set"),
            err_replies(conn),
        )
    };
    let before = counts(&mut conn);
    let cycles = 3;
    for _ in 0..cycles {
        let first = lock.lock()?;
        let second = lock.lock()?; // its release renews (`SET … IFEQ` or the script)
        second.unlock()?;
        first.unlock()?;
        assert!(!lock.is_locked()?);
    }
    let version = support::server_version();
    let after = counts(&mut conn);
    // The acquire script's own SET counts too: one per cycle.
    let (delifeq, set, refused) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    let newer = (version.major, version.minor);
    if version.valkey && newer >= (9, 0) {
        assert_eq!(delifeq, cycles, "one DELIFEQ per last release");
        assert_eq!(set, 2 * cycles, "one SET IFEQ per other release");
        assert_eq!(refused, 0);
    } else if version.valkey && newer >= (8, 1) {
        assert_eq!(set, 2 * cycles, "one SET IFEQ per other release");
        assert_eq!(refused, 2, "DELIFEQ and DELEX refused once each");
    } else if !version.valkey && newer < (8, 4) {
        // SET counts the one refused for its IFEQ too (a syntax error SET itself replies).
        assert_eq!((delifeq, set), (0, cycles + 1), "the acquire script's SET");
        assert_eq!(refused, 3, "DELIFEQ, DELEX and SET IFEQ refused once each");
    }
    Ok(())
}

/// How many `ERR` replies the server sent (INFO errorstats): unknown commands and syntax
/// errors, not NOSCRIPT.
fn err_replies(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_ERR:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// With replica sync, an acquire that no replica acknowledged is rolled back: a fresh one
/// deletes its key, a re-entry's leaves the hold the thread had.
#[test]
fn an_unacknowledged_acquire_is_rolled_back_and_a_re_entry_keeps_the_earlier_hold() -> Result<()> {
    let (master, replica) = support::master_with_replica();
    let manager = LockManager::builder(&master.url())
        .replica_sync_timeout(Duration::from_secs(1))
        .build()?;
    let lock = manager.get_string_lock("str:replicated");
    let guard = lock.lock()?;
    replica.freeze();
    let err = lock.try_lock(Duration::ZERO).map(drop).unwrap_err();
    assert!(err.is_not_replicated(), "{err}");
    assert!(
        lock.is_held_by_current_thread()?,
        "the earlier hold is kept"
    );
    assert_eq!(lock.hold_count()?, 1);

    let other = manager.get_string_lock("str:unreplicated");
    let err = other.lock().map(drop).unwrap_err();
    assert!(err.is_not_replicated(), "{err}");
    let left: bool = master.conn().exists("str:unreplicated").unwrap();
    assert!(!left, "the unacknowledged acquire was left in place");
    replica.thaw();
    guard.unlock()?;
    assert!(!lock.is_locked()?);
    Ok(())
}

/// On a cluster each name's one key lives on its slot's master: the watchdog renews holds on
/// every master, and a redis-py client on the slot's master shares the lock.
#[test]
fn string_locks_on_a_cluster_are_renewed_on_every_master_and_shared_with_redis_py() -> Result<()> {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds)
        .watchdog_timeout(Duration::from_secs(1))
        .build()?;
    let names: Vec<String> = (0..6).map(|i| format!("str:cluster:{i}")).collect();
    let masters: std::collections::HashSet<u16> = names
        .iter()
        .map(|name| cluster.master_for_slot(RedisCluster::slot_of(name)))
        .collect();
    assert!(masters.len() > 1, "the names span masters");
    let guards = names
        .iter()
        .map(|name| manager.get_string_lock(name).lock())
        .collect::<Result<Vec<_>>>()?;
    // Three leases long: only renewals keep them.
    std::thread::sleep(Duration::from_secs(3));
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name}");
        assert!(manager.get_string_lock(name).is_locked()?, "{name}");
    }

    let name = names[0].as_str();
    let master = cluster.master_for_slot(RedisCluster::slot_of(name));
    let url = format!("redis://{}:{master}/", support::host_of(master));
    let conn = support::connect(&url).expect("the slot's master");
    let mut python = PyLock::new(conn, name, Duration::from_secs(30), 8);
    assert!(!python.attempt(), "ours holds it");
    // Each master is probed for the newer commands on its own: the first release there sends
    // those it does not know once (ERR replies), then their scripts.
    // One connection per master, opened before: opening one may draw ERR replies of its own.
    let mut before: Vec<(u16, redis::Connection, u64)> = masters
        .iter()
        .map(|&port| {
            let url = format!("redis://{}:{port}/", support::host_of(port));
            let mut conn = support::connect(&url).expect("a master");
            let refused = err_replies(&mut conn);
            (port, conn, refused)
        })
        .collect();
    for guard in guards {
        guard.unlock()?;
    }
    let version = support::server_version();
    let unknown = match (version.valkey, (version.major, version.minor)) {
        (true, newer) if newer >= (9, 0) => 0,
        (false, newer) if newer >= (8, 4) => 1, // DELIFEQ; DELEX is known
        _ => 2,                                 // DELIFEQ and DELEX
    };
    for (master, conn, refused) in &mut before {
        assert_eq!(err_replies(conn) - *refused, unknown, "master {master}");
    }
    assert!(python.attempt(), "free after our release");
    let lock = manager.get_string_lock(name);
    assert!(lock.try_lock(Duration::ZERO)?.is_none());
    assert!(python.release());
    lock.try_lock(Duration::from_secs(5))?
        .expect("free after redis-py's release")
        .unlock()?;
    Ok(())
}
