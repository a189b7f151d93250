//! Semaphores (Redisson's `RSemaphore`) against a real redis-server: permits are never
//! over-granted, waits end at a release or time out, permits have no owner, guards give them
//! back, bad input and foreign keys are refused, a Redisson-style client (raw commands, as
//! docs/design/wire-format.md describes its semaphore) and this crate wake each other, and a restart.

use redis_rlock_testkit as support;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result, Semaphore};
use support::RedisServer;

/// Raw redis-rs calls fail with their own error type.
type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Long enough for anything here to happen on a loaded machine, short enough to fail a test
/// rather than hang it.
const PATIENCE: Duration = Duration::from_secs(20);

fn channel(name: &str) -> String {
    format!("redisson_sc:{{{name}}}")
}

/// What a Redisson client's `RSemaphore` does, in raw commands on its own connection.
struct RedissonSemaphore {
    conn: redis::Connection,
    name: String,
}

impl RedissonSemaphore {
    fn new(server: &RedisServer, name: &str) -> Self {
        RedissonSemaphore {
            conn: server.conn(),
            name: name.to_owned(),
        }
    }

    /// `trySetPermits(n)`: only when the key is absent; announces `n`.
    fn try_set_permits(&mut self, n: i64) -> bool {
        let current: Option<i64> = self.conn.get(&self.name).unwrap();
        if current.is_some() {
            return false;
        }
        let _: () = self.conn.set(&self.name, n).unwrap();
        let _: i64 = self.conn.publish(channel(&self.name), n).unwrap();
        true
    }

    /// `tryAcquire(n)` without waiting (one caller at a time in these tests, so GET then
    /// DECRBY is as atomic as Redisson's script).
    fn try_acquire(&mut self, n: i64) -> bool {
        let current: Option<i64> = self.conn.get(&self.name).unwrap();
        if current.is_some_and(|c| c >= n) {
            let _: i64 = self.conn.decr(&self.name, n).unwrap();
            return true;
        }
        false
    }

    /// `release(n)`: INCRBY and announce the new count, as Redisson's script does.
    fn release(&mut self, n: i64) {
        let now: i64 = self.conn.incr(&self.name, n).unwrap();
        let _: i64 = self.conn.publish(channel(&self.name), now).unwrap();
    }
}

/// A thread that takes `permits` of `semaphore` (waiting as long as it takes) and reports
/// when it has them; they are released by [`Holder::release`].
struct Holder {
    acquired: mpsc::Receiver<Result<()>>,
    release: mpsc::Sender<()>,
    handle: thread::JoinHandle<Result<()>>,
}

impl Holder {
    fn spawn(semaphore: &Semaphore, permits: u32) -> Self {
        let (acquired_tx, acquired) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let semaphore = semaphore.clone();
        let handle = thread::spawn(move || {
            let outcome = semaphore.acquire(permits);
            let failed = outcome.is_err();
            let _ = acquired_tx.send(outcome);
            if failed {
                return Ok(());
            }
            let _ = release_rx.recv_timeout(PATIENCE);
            semaphore.release(permits)
        });
        Holder {
            acquired,
            release,
            handle,
        }
    }

    fn is_waiting(&self) -> bool {
        matches!(self.acquired.try_recv(), Err(mpsc::TryRecvError::Empty))
    }

    fn await_acquired(&self) {
        self.acquired
            .recv_timeout(PATIENCE)
            .expect("the waiter got its permits in time")
            .expect("the waiter's acquire succeeded");
    }

    fn release(self) {
        self.release.send(()).unwrap();
        self.handle
            .join()
            .expect("holder thread")
            .expect("the holder's release");
    }
}

#[test]
fn permits_are_never_over_granted_across_threads_and_managers() -> TestResult {
    const PERMITS: u32 = 4;
    const THREADS_PER_MANAGER: usize = 8;
    const CYCLES: u64 = 8;
    let server = RedisServer::start();
    let managers: Vec<LockManager> = (0..3)
        .map(|_| LockManager::new(&server.url()))
        .collect::<Result<_>>()?;
    let name = "sem:pool";
    assert!(managers[0].get_semaphore(name).try_set_permits(PERMITS)?);
    assert!(!managers[1].get_semaphore(name).try_set_permits(99)?);

    let in_use = Arc::new(AtomicU32::new(0));
    let most_in_use = Arc::new(AtomicU32::new(0));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(3 * THREADS_PER_MANAGER));
    let mut threads = Vec::new();
    for (m, manager) in managers.iter().enumerate() {
        for t in 0..THREADS_PER_MANAGER {
            let semaphore = manager.get_semaphore(name);
            let (in_use, most_in_use, acquisitions, start) = (
                Arc::clone(&in_use),
                Arc::clone(&most_in_use),
                Arc::clone(&acquisitions),
                Arc::clone(&start),
            );
            // Half the threads take two permits at a time: a woken waiter may find too few.
            let permits = 1 + ((m + t) % 2) as u32;
            threads.push(thread::spawn(move || -> Result<()> {
                start.wait();
                for _ in 0..CYCLES {
                    let guard = semaphore
                        .try_acquire_guard(permits, PATIENCE)?
                        .expect("permits within the patience");
                    let now = in_use.fetch_add(permits, Ordering::SeqCst) + permits;
                    most_in_use.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(2)); // hold them a little
                    in_use.fetch_sub(permits, Ordering::SeqCst);
                    acquisitions.fetch_add(1, Ordering::SeqCst);
                    guard.release()?;
                }
                Ok(())
            }));
        }
    }
    for thread in threads {
        thread.join().expect("worker thread")?;
    }
    let most = most_in_use.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} permits were in use at once");
    assert!(
        most >= 2,
        "the threads did overlap ({most} permits at most)"
    );
    assert_eq!(
        acquisitions.load(Ordering::SeqCst),
        3 * THREADS_PER_MANAGER as u64 * CYCLES
    );
    assert_eq!(managers[2].get_semaphore(name).available_permits()?, 4);
    let wakeups: u64 = managers.iter().map(|m| m.stats().wakeups).sum();
    assert!(wakeups > 0, "waiters were woken by release messages");
    Ok(())
}

#[test]
fn try_acquire_times_out_when_too_few_permits_are_free() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let semaphore = manager.get_semaphore("sem:scarce");
    // A semaphore that does not exist has no permits.
    assert!(!semaphore.try_acquire(1, Duration::ZERO)?);
    assert_eq!(semaphore.available_permits()?, 0);
    assert_eq!(
        manager.waiting_channel_count(),
        0,
        "one attempt, no subscription"
    );

    assert!(semaphore.try_set_permits(1)?);
    assert!(!semaphore.try_acquire(2, Duration::ZERO)?);
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    assert!(!semaphore.try_acquire(2, wait)?);
    let took = started.elapsed();
    assert!(took >= wait, "gave up early, after {took:?}");
    assert!(took < wait + Duration::from_secs(5), "took {took:?}");
    assert_eq!(semaphore.available_permits()?, 1, "nothing taken");
    assert_eq!(manager.waiting_channel_count(), 0, "the waiter left");
    assert!(semaphore.try_acquire(1, Duration::ZERO)?);
    assert_eq!(semaphore.available_permits()?, 0);
    Ok(())
}

#[test]
fn any_thread_of_any_manager_may_release_and_wake_a_waiter() -> TestResult {
    let server = RedisServer::start();
    let (a, b, c) = (
        LockManager::new(&server.url())?,
        LockManager::new(&server.url())?,
        LockManager::new(&server.url())?,
    );
    let name = "sem:shared";
    assert!(a.get_semaphore(name).try_set_permits(1)?);
    a.get_semaphore(name).acquire(1)?; // taken, and never given back by `a`

    let waiter = Holder::spawn(&b.get_semaphore(name), 1);
    let mut conn = server.conn();
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    assert!(waiter.is_waiting());

    // A thread that never acquired anything, of a third manager, gives a permit back.
    let releaser = c.get_semaphore(name);
    thread::spawn(move || releaser.release(1))
        .join()
        .expect("releasing thread")?;
    waiter.await_acquired();
    assert_eq!(c.get_semaphore(name).available_permits()?, 0);
    waiter.release();
    assert_eq!(c.get_semaphore(name).available_permits()?, 1);

    // Releasing more than was ever set raises the count, as java.util.concurrent's does.
    c.get_semaphore(name).release(2)?;
    assert_eq!(a.get_semaphore(name).available_permits()?, 3);
    Ok(())
}

#[test]
fn guards_give_their_permits_back() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let semaphore = manager.get_semaphore("sem:guarded");
    assert!(semaphore.try_set_permits(3)?);

    let two = semaphore.acquire_guard(2)?;
    assert_eq!(two.permits(), 2);
    assert_eq!(two.semaphore().name(), "sem:guarded");
    assert_eq!(semaphore.available_permits()?, 1);
    drop(two);
    assert_eq!(semaphore.available_permits()?, 3, "dropping released them");

    let all = semaphore
        .try_acquire_guard(3, Duration::ZERO)?
        .expect("three are free");
    assert!(semaphore
        .try_acquire_guard(1, Duration::from_millis(50))?
        .is_none());
    all.release()?;
    assert_eq!(semaphore.available_permits()?, 3);

    // Permits have no owner: a guard may be dropped on another thread.
    let one = semaphore.acquire_guard(1)?;
    assert_eq!(semaphore.available_permits()?, 2);
    thread::spawn(move || drop(one)).join().expect("thread");
    assert_eq!(semaphore.available_permits()?, 3);
    Ok(())
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let semaphore = manager.get_semaphore("sem:bad");
    let before = manager.stats().commands;
    let refused = [
        semaphore.acquire(0).map(|_| ()),
        semaphore.try_acquire(0, Duration::ZERO).map(|_| ()),
        semaphore.release(0),
        semaphore.acquire_guard(0).map(|_| ()),
        semaphore.try_acquire_guard(0, Duration::ZERO).map(|_| ()),
        semaphore.try_set_permits(u32::MAX).map(|_| ()),
        semaphore.acquire(Semaphore::MAX_PERMITS + 1),
        semaphore.release(u32::MAX),
        semaphore.try_acquire(1, Duration::MAX).map(|_| ()),
        manager.get_semaphore("").available_permits().map(|_| ()),
        manager.get_semaphore("").release(1),
    ];
    for (i, outcome) in refused.into_iter().enumerate() {
        let err = outcome.expect_err("refused");
        assert!(err.is_invalid_argument(), "case {i}: {err}");
    }
    assert_eq!(manager.stats().commands, before, "nothing was sent");

    // Zero permits is a valid starting count: filled by releases.
    assert!(semaphore.try_set_permits(0)?);
    assert_eq!(semaphore.available_permits()?, 0);

    // A release past Redisson's int range changes nothing.
    let mut conn = server.conn();
    let _: () = conn.set("sem:bad", Semaphore::MAX_PERMITS - 1)?;
    let err = semaphore.release(2).expect_err("overflow");
    assert!(err.is_invalid_argument(), "{err}");
    let stored: i64 = conn.get("sem:bad")?;
    assert_eq!(stored, i64::from(Semaphore::MAX_PERMITS) - 1, "unchanged");
    semaphore.release(1)?;
    assert_eq!(
        semaphore.available_permits()?,
        u64::from(Semaphore::MAX_PERMITS)
    );
    Ok(())
}

#[test]
fn a_key_of_another_type_is_reported_and_left_alone() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();

    let _: () = conn.hset("sem:hash", "field", "value")?;
    let hash = manager.get_semaphore("sem:hash");
    let outcomes = [
        hash.try_set_permits(1).map(|_| ()),
        hash.try_acquire(1, Duration::ZERO).map(|_| ()),
        hash.release(1),
        hash.available_permits().map(|_| ()),
    ];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let err = outcome.expect_err("wrong type");
        assert!(err.is_wrong_type(), "case {i}: {err}");
        assert_eq!(
            err.to_string(),
            "key \"sem:hash\" exists but is not a lock, semaphore or latch of the kind asked \
             for (a lock is a hash of hold counts; a semaphore, a permit-expirable semaphore or \
             a count-down latch, a string holding an integer); it was left untouched",
            "case {i}: not worded for a lock"
        );
    }
    let fields: Vec<(String, String)> = conn.hgetall("sem:hash")?;
    assert_eq!(fields, vec![("field".to_owned(), "value".to_owned())]);

    let _: () = conn.set("sem:text", "not a number")?;
    let text = manager.get_semaphore("sem:text");
    let outcomes = [
        text.try_acquire(1, Duration::ZERO).map(|_| ()),
        text.release(1),
        text.available_permits().map(|_| ()),
    ];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let err = outcome.expect_err("not a count");
        assert!(err.is_wrong_type(), "case {i}: {err}");
    }
    // It exists, so it is not set (Redisson's trySetPermits says the same).
    assert!(!text.try_set_permits(1)?);
    let stored: String = conn.get("sem:text")?;
    assert_eq!(stored, "not a number");
    Ok(())
}

#[test]
fn a_redisson_release_wakes_a_rust_waiter() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "sem:interop-in";
    let mut java = RedissonSemaphore::new(&server, name);
    assert!(java.try_set_permits(0));
    let semaphore = manager.get_semaphore(name);
    assert!(!semaphore.try_set_permits(5)?, "Redisson created it");

    let waiter = Holder::spawn(&semaphore, 3);
    let mut conn = server.conn();
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    // Two permits are not enough for the waiter, but the message ("2", the new count) wakes
    // it: it looks and waits again.
    java.release(2);
    assert!(
        support::eventually(PATIENCE, || manager.stats().wakeups == 1),
        "Redisson's message woke the waiter"
    );
    assert!(waiter.is_waiting());
    // One more makes three: the waiter takes them.
    java.release(1);
    waiter.await_acquired();
    let stored: i64 = conn.get(name)?;
    assert_eq!(stored, 0);
    assert!(!java.try_acquire(1));
    waiter.release();
    assert!(java.try_acquire(3), "Redisson takes what Rust gave back");
    Ok(())
}

#[test]
fn a_rust_release_wakes_a_redisson_subscriber() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "sem:interop-out";
    let semaphore = manager.get_semaphore(name);
    let mut java = RedissonSemaphore::new(&server, name);
    let mut watcher_conn = server.conn();
    let mut watcher = support::watch_channel(&mut watcher_conn, &channel(name));

    assert!(semaphore.try_set_permits(2)?);
    let announced: i64 = watcher.get_message()?.get_payload()?;
    assert_eq!(announced, 2, "trySetPermits announces the count");
    assert!(!java.try_set_permits(7), "Redisson sees it exists");

    assert!(java.try_acquire(1));
    semaphore.acquire(1)?;
    assert_eq!(semaphore.available_permits()?, 0);
    assert!(!java.try_acquire(1));
    semaphore.release(1)?;
    // Redisson's waiters read the message as the number of free permits.
    let announced: i64 = watcher.get_message()?.get_payload()?;
    assert_eq!(announced, 1);
    assert!(
        java.try_acquire(1),
        "the woken Redisson waiter gets the permit"
    );

    let mut conn = server.conn();
    let kind: String = redis::cmd("TYPE").arg(name).query(&mut conn)?;
    assert_eq!(kind, "string");
    let ttl: i64 = conn.pttl(name)?;
    assert_eq!(ttl, -1, "a semaphore has no TTL");
    Ok(())
}

/// Without persistence a restart forgets the semaphore. Redisson then behaves as here: its
/// acquirers wait (a missing semaphore has no permits) until someone sets the permits again
/// or releases some; a release creates the key with the released count, so permits held
/// across the restart come back on top of a new count.
#[test]
fn after_a_restart_the_semaphore_is_gone_until_set_or_released() -> TestResult {
    let mut server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "sem:restart";
    let semaphore = manager.get_semaphore(name);
    assert!(semaphore.try_set_permits(2)?);
    let held = semaphore.acquire_guard(2)?;
    let waiter = Holder::spawn(&semaphore, 1);
    let mut conn = server.conn();
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));

    server.restart();
    let mut conn = server.conn();
    assert_eq!(semaphore.available_permits()?, 0, "the count is gone");
    assert!(!semaphore.try_acquire(1, Duration::ZERO)?);
    assert!(waiter.is_waiting(), "nothing to take");

    // Set again (it is absent, so this succeeds): the waiter, resubscribed, takes one.
    assert!(semaphore.try_set_permits(1)?);
    waiter.await_acquired();
    assert_eq!(semaphore.available_permits()?, 0);
    // The permits held across the restart come back on top.
    drop(held);
    assert_eq!(semaphore.available_permits()?, 2);
    waiter.release();
    let stored: i64 = conn.get(name)?;
    assert_eq!(stored, 3);
    Ok(())
}

/// Redisson's `addPermits` script, verbatim from
/// redisson/src/main/java/org/redisson/RedissonSemaphore.java (addPermitsAsync): the Java side.
/// KEYS: name, channel. ARGV: permits, publish command.
const REDISSON_ADD_PERMITS: &str = "local value = redis.call('get', KEYS[1]); if (value == false) then value = 0;end;redis.call('set', KEYS[1], value + ARGV[1]); redis.call(ARGV[2], KEYS[2], value + ARGV[1]); ";

#[test]
fn add_permits_of_either_sign_and_a_waiter_woken_by_it() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "sem:add";
    let semaphore = manager.get_semaphore(name);
    let mut conn = server.conn();
    // A missing semaphore counts as 0: adding creates it.
    semaphore.add_permits(2)?;
    assert_eq!(semaphore.available_permits()?, 2);
    semaphore.add_permits(-3)?;
    let stored: i64 = conn.get(name)?;
    assert_eq!(
        stored, -1,
        "below zero, as Redisson's reducePermits leaves it"
    );
    assert_eq!(semaphore.available_permits()?, 0);

    let waiter = Holder::spawn(&semaphore, 1);
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    let mut watcher_conn = server.conn();
    let mut watcher = support::watch_channel(&mut watcher_conn, &channel(name));
    semaphore.add_permits(2)?;
    let announced: i64 = watcher.get_message()?.get_payload()?;
    assert_eq!(announced, 1, "the new count");
    waiter.await_acquired();
    assert_eq!(semaphore.available_permits()?, 0);
    waiter.release();

    // Redisson's addPermits wakes a waiter of ours too.
    let waiter = Holder::spawn(&semaphore, 2);
    assert!(support::await_subscribers(&mut conn, &channel(name), 2));
    let _: () = redis::Script::new(REDISSON_ADD_PERMITS)
        .key(name)
        .key(channel(name))
        .arg(1)
        .arg("publish")
        .invoke(&mut conn)?;
    waiter.await_acquired();
    waiter.release();
    assert_eq!(semaphore.available_permits()?, 2);

    // Zero and counts past Redisson's int range are refused, changing nothing.
    assert!(semaphore.add_permits(0).unwrap_err().is_invalid_argument());
    let err = semaphore.add_permits(i32::MAX).expect_err("overflow");
    assert!(err.is_invalid_argument(), "{err}");
    semaphore.add_permits(-(i32::MAX - 2))?;
    let err = semaphore.add_permits(-5).expect_err("underflow");
    assert!(err.is_invalid_argument(), "{err}");
    let stored: i64 = conn.get(name)?;
    assert_eq!(stored, -(i64::from(i32::MAX) - 4));
    Ok(())
}

#[test]
fn drain_permits_takes_every_free_permit() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "sem:drain";
    let semaphore = manager.get_semaphore(name);
    assert_eq!(
        semaphore.drain_permits()?,
        0,
        "a missing semaphore has none"
    );
    assert!(semaphore.try_set_permits(5)?);
    let held = semaphore.acquire_guard(2)?;
    assert_eq!(semaphore.drain_permits()?, 3);
    assert_eq!(semaphore.available_permits()?, 0);
    assert!(!semaphore.try_acquire(1, Duration::ZERO)?);
    assert_eq!(semaphore.drain_permits()?, 0);
    drop(held);
    assert_eq!(semaphore.drain_permits()?, 2, "what came back");

    // A count below zero is left alone (draining it would create permits).
    let mut conn = server.conn();
    let _: () = conn.set(name, -4)?;
    assert_eq!(semaphore.drain_permits()?, 0);
    let stored: i64 = conn.get(name)?;
    assert_eq!(stored, -4);
    let _: () = conn.set(name, "text")?;
    assert!(semaphore.drain_permits().unwrap_err().is_wrong_type());
    Ok(())
}
