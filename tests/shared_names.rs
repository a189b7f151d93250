//! Kinds that share one name. A lock, a fair lock and a spin lock of one name are one Redis
//! hash with one owner field per thread (Redisson's format): a thread that holds one and takes
//! another re-enters, and the hash counts every hold. A read-write lock of that name is a hash
//! of another format, which a thread holding the other half's kinds may not take (nor the
//! reverse); semaphores and latches are strings, refused by the locks and refusing them.

use redis_rlock_testkit as support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{CountDownLatch, Error, LockGuard, LockManager, Result, Semaphore};
use support::RedisServer;

/// The kinds stored as the reentrant lock's hash.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lock,
    Fair,
    Spin,
}

const KINDS: [Kind; 3] = [Kind::Lock, Kind::Fair, Kind::Spin];

impl Kind {
    fn lock(self, manager: &LockManager, name: &str) -> Result<LockGuard> {
        match self {
            Kind::Lock => manager.get_lock(name).lock(),
            Kind::Fair => manager.get_fair_lock(name).lock(),
            Kind::Spin => manager.get_spin_lock(name).lock(),
        }
    }

    fn try_lock(self, manager: &LockManager, name: &str) -> Result<Option<LockGuard>> {
        match self {
            Kind::Lock => manager.get_lock(name).try_lock(Duration::ZERO),
            Kind::Fair => manager.get_fair_lock(name).try_lock(Duration::ZERO),
            Kind::Spin => manager.get_spin_lock(name).try_lock(Duration::ZERO),
        }
    }

    fn hold_count(self, manager: &LockManager, name: &str) -> u32 {
        match self {
            Kind::Lock => manager.get_lock(name).hold_count(),
            // The fair lock has no inspection calls: the plain lock's read the same field.
            Kind::Fair => manager.get_lock(name).hold_count(),
            Kind::Spin => manager.get_spin_lock(name).hold_count(),
        }
        .unwrap()
    }
}

/// The lock hash's fields and counts.
fn hash(conn: &mut redis::Connection, name: &str) -> HashMap<String, String> {
    conn.hgetall(name).unwrap()
}

/// The hash has exactly one field, of `manager`, counting `count` holds.
fn assert_counts(conn: &mut redis::Connection, name: &str, manager: &LockManager, count: u32) {
    let fields = hash(conn, name);
    assert_eq!(fields.len(), 1, "one owner field: {fields:?}");
    let (field, value) = fields.into_iter().next().unwrap();
    assert!(field.starts_with(manager.client_id()), "{field}");
    assert_eq!(value, count.to_string(), "the server's hold count");
}

/// Another manager's single attempt, with every kind: none may get the lock.
fn assert_excluded(other: &LockManager, name: &str) {
    for kind in KINDS {
        assert!(
            kind.try_lock(other, name).unwrap().is_none(),
            "another manager took {name} as a {kind:?} while it is held"
        );
    }
}

/// The user's scenario, for every pair of kinds: `outer` then `inner` in one thread; the
/// inner guard dropped first (then the outer), or the outer first (then the inner).
#[test]
fn a_lock_fair_lock_and_spin_lock_of_one_name_reenter_one_another() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let other = LockManager::new(&server.url()).unwrap();
    let mut conn = server.conn();
    for outer in KINDS {
        for inner in KINDS {
            for inner_first in [true, false] {
                let name = format!("shared:{outer:?}:{inner:?}:{inner_first}");
                let first = outer.lock(&manager, &name).unwrap();
                let second = inner.lock(&manager, &name).unwrap();
                assert_counts(&mut conn, &name, &manager, 2);
                for kind in KINDS {
                    assert_eq!(kind.hold_count(&manager, &name), 2, "{kind:?}'s hold_count");
                }
                let (gone, kept) = match inner_first {
                    true => (second, first),
                    false => (first, second),
                };
                gone.unlock().unwrap();
                assert_counts(&mut conn, &name, &manager, 1);
                assert!(!kept.is_lost());
                assert_excluded(&other, &name);
                // Still a re-entry: the hash counts it.
                let again = inner.lock(&manager, &name).unwrap();
                assert_counts(&mut conn, &name, &manager, 2);
                drop(again);
                assert_counts(&mut conn, &name, &manager, 1);
                assert_excluded(&other, &name);
                assert!(!kept.is_lost());
                kept.unlock().unwrap();
                assert!(hash(&mut conn, &name).is_empty(), "freed by the last hold");
                let taken = outer.try_lock(&other, &name).unwrap();
                assert!(taken.is_some(), "{name}: free after the last release");
            }
        }
    }
}

/// The watchdog renews a lock whose holds are of two kinds, and neither guard is lost while
/// the other's release leaves the hash its count.
#[test]
fn holds_of_two_kinds_are_renewed_as_one() {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_millis(1500));
    let other = LockManager::new(&server.url()).unwrap();
    let mut conn = server.conn();
    let name = "shared:renewed";
    let plain = manager.get_lock(name).lock().unwrap();
    let spin = manager.get_spin_lock(name).lock().unwrap();
    drop(spin);
    // Three sweeps renew the plain hold, unless one finds it gone.
    let swept = manager.stats().renewal_sweeps;
    assert!(support::eventually(Duration::from_secs(30), || {
        let stats = manager.stats();
        stats.renewal_sweeps >= swept + 3 || stats.holds_lost > 0
    }));
    assert_eq!(manager.stats().holds_lost, 0, "a sweep found the hold gone");
    assert!(!plain.is_lost(), "the plain hold is renewed");
    assert_counts(&mut conn, name, &manager, 1);
    assert_excluded(&other, name);
    drop(plain);
    assert!(hash(&mut conn, name).is_empty());
}

/// The holds of two kinds are one hold on the server: when its key goes, both guards are lost,
/// and their releases leave the next holder's lock alone.
#[test]
fn holds_of_two_kinds_are_lost_as_one() {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_millis(600));
    let other = LockManager::new(&server.url()).unwrap();
    let mut conn = server.conn();
    let name = "shared:lost";
    let plain = manager.get_lock(name).lock().unwrap();
    let fair = manager.get_fair_lock(name).lock().unwrap();
    let lost = plain.lost_signal();
    let _: () = conn.del(name).unwrap();
    assert!(
        lost.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the watchdog finds it gone"
    );
    assert!(plain.is_lost() && fair.is_lost());
    let taken = other.get_lock(name).try_lock(Duration::ZERO).unwrap();
    assert!(taken.is_some());
    assert!(matches!(fair.unlock(), Err(Error::NotHeld { .. })));
    assert!(matches!(plain.unlock(), Err(Error::NotHeld { .. })));
    assert_counts(&mut conn, name, &other, 1);
}

/// A thread that took the plain lock through the local line and re-entered it as a spin lock
/// passes the turn on at its last release, whichever kind that is: the thread queued behind
/// it gets the lock then, not before (exclusion) and not a renewal period later (its patience).
#[test]
fn the_last_release_by_another_kind_passes_the_line_on() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let name = "shared:line";
    let first = manager.get_lock(name).lock().unwrap();
    let done = AtomicBool::new(false);
    let (released_tx, released_rx) = mpsc::channel();
    std::thread::scope(|s| {
        // Waits in Redis with the turn, then re-enters as a spin lock.
        let owner = s.spawn(|| {
            let plain = manager.get_lock(name).lock().unwrap();
            let spin_lock = manager.get_spin_lock(name);
            let spin = spin_lock.lock().unwrap();
            drop(plain); // not the last hold: nothing is passed on
            assert_eq!(spin_lock.hold_count().unwrap(), 1, "still this thread's");
            assert_eq!(manager.queued_thread_count(), 1, "the other still queued");
            done.store(true, Ordering::SeqCst);
            released_tx.send(Instant::now()).unwrap();
            drop(spin); // the last: the queued thread goes
        });
        assert!(support::eventually(Duration::from_secs(10), || {
            manager.waiting_channel_count() == 1
        }));
        // Queued behind the turn owner.
        let queued = s.spawn(|| {
            let guard = manager.get_lock(name).lock().unwrap();
            let got = Instant::now();
            assert!(
                done.load(Ordering::SeqCst),
                "taken while the other thread held it"
            );
            drop(guard);
            got
        });
        assert!(support::eventually(Duration::from_secs(10), || {
            manager.queued_thread_count() == 1
        }));
        drop(first);
        owner.join().unwrap();
        let released = released_rx.recv().unwrap();
        let waited = queued.join().unwrap() - released;
        // Its patience is one renewal period (10 s): passed on, it takes far less.
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    });
}

/// `asked` was refused at once with the error `wrong_type` says (else `InvalidArgument`).
fn assert_refused(
    asked: Result<Option<LockGuard>>,
    started: Instant,
    wrong_type: bool,
    what: &str,
) {
    match asked {
        Err(err @ Error::WrongType { .. }) if wrong_type => eprintln!("{what}: {err}"),
        Err(err @ Error::InvalidArgument { .. }) if !wrong_type => eprintln!("{what}: {err}"),
        Err(other) => panic!("{what}: refused with another error: {other:?}"),
        Ok(Some(_)) => panic!("{what}: granted"),
        Ok(None) => panic!("{what}: waited for itself"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{what}: not at once"
    );
}

/// A read-write lock's hash has a `mode` field and the writer's field `<owner>:write`: a lock
/// of the same name in one thread would count on a read hold (corrupting it) or wait for its
/// own write hold (`InvalidArgument` here), and a read or write lock would turn a plain lock
/// into a read-write lock (`WrongType`, whoever holds the lock). Redisson does all three.
#[test]
fn a_read_write_lock_and_a_lock_of_one_name_in_one_thread_are_refused() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let mut conn = server.conn();
    let wait = Duration::from_secs(10);
    for kind in KINDS {
        let name = format!("shared:rw:{kind:?}");
        let rw = manager.get_read_write_lock(&name);
        for write in [false, true] {
            let held = match write {
                false => rw.read_lock().lock().unwrap(),
                true => rw.write_lock().lock().unwrap(),
            };
            let before = hash(&mut conn, &name);
            let started = Instant::now();
            let asked = match kind {
                Kind::Lock => manager.get_lock(&name).try_lock(wait),
                Kind::Fair => manager.get_fair_lock(&name).try_lock(wait),
                Kind::Spin => manager.get_spin_lock(&name).try_lock(wait),
            };
            let what = format!(
                "{kind:?} while holding the {} lock",
                ["read", "write"][write as usize]
            );
            assert_refused(asked, started, false, &what);
            assert_eq!(hash(&mut conn, &name), before, "{what}: the hash untouched");
            held.unlock().unwrap();
        }
        let held = kind.lock(&manager, &name).unwrap();
        let before = hash(&mut conn, &name);
        for write in [false, true] {
            let started = Instant::now();
            let asked = match write {
                false => rw.read_lock().try_lock(wait),
                true => rw.write_lock().try_lock(wait),
            };
            let what = format!(
                "the {} lock while holding a {kind:?}",
                ["read", "write"][write as usize]
            );
            assert_refused(asked, started, true, &what);
            assert_eq!(hash(&mut conn, &name), before, "{what}: the hash untouched");
        }
        held.unlock().unwrap();
        assert!(hash(&mut conn, &name).is_empty());
    }
}

/// A semaphore and a count-down latch are strings at the name itself (Redisson's format):
/// a lock of that name is refused, and so are they on a lock's hash.
#[test]
fn semaphores_and_latches_of_a_locks_name_are_refused_both_ways() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let semaphore: Semaphore = manager.get_semaphore("shared:sem");
    assert!(semaphore.try_set_permits(2).unwrap());
    let latch: CountDownLatch = manager.get_count_down_latch("shared:latch");
    assert!(latch.try_set_count(2).unwrap());
    for name in ["shared:sem", "shared:latch"] {
        for kind in KINDS {
            let err = kind
                .try_lock(&manager, name)
                .expect_err("a string is no lock");
            assert!(
                matches!(err, Error::WrongType { .. }),
                "{kind:?} on {name}: {err:?}"
            );
        }
        let rw = manager.get_read_write_lock(name);
        let err = rw
            .read_lock()
            .try_lock(Duration::ZERO)
            .expect_err("no lock");
        assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    }
    let held = manager.get_lock("shared:lock").lock().unwrap();
    let err = manager
        .get_semaphore("shared:lock")
        .try_acquire(1, Duration::ZERO)
        .expect_err("a hash is no semaphore");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = manager
        .get_count_down_latch("shared:lock")
        .count()
        .expect_err("a hash is no latch");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    drop(held);
}
