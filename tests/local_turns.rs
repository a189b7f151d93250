//! Threads of one manager that want the same lock take turns in-process: only one of them
//! contends in Redis, and the releasing thread acquires for the next one in the same round
//! trip. These tests check the request count, the handoff, and that a turn holder that does
//! not come back never stalls the line.

use redis_rlock_testkit as support;

use std::sync::{mpsc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::{eventually, RedisServer};

/// Waits until `n` threads of `manager` queue in-process.
fn await_queued(manager: &LockManager, n: usize) {
    assert!(
        eventually(Duration::from_secs(10), || manager.queued_thread_count()
            == n),
        "expected {n} queued threads, have {}",
        manager.queued_thread_count()
    );
}

#[test]
fn contending_threads_send_one_acquire_and_one_release_per_critical_section() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let (threads, rounds) = (4, 100);
    let before = manager.stats();
    let barrier = Barrier::new(threads);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut conn = server.conn();
                barrier.wait();
                for _ in 0..rounds {
                    let guard = manager.lock("turns:counter-lock").expect("lock");
                    let n: u64 = conn.get("turns:counter").unwrap_or(0);
                    let _: () = conn.set("turns:counter", n + 1).unwrap();
                    guard.unlock().expect("unlock");
                }
            });
        }
    });
    let mut conn = server.conn();
    let total = (threads * rounds) as u64;
    assert_eq!(conn.get::<_, u64>("turns:counter").unwrap(), total);
    let sent = manager.stats().commands - before.commands;
    // Two per critical section; a few more while the first waiters subscribe before the line
    // forms. Without turns this is over 3 per critical section.
    assert!(
        sent as f64 / total as f64 <= 2.5,
        "{sent} lock commands for {total} critical sections"
    );
    assert_eq!(manager.queued_thread_count(), 0);
    Ok(())
}

/// How the turn holder in [`line_up`] takes the lock.
#[derive(Clone, Copy)]
enum Mode {
    Renewed,
    Lease(Duration),
}

/// A thread of a manager with the turn and the lock (taken in a [`Mode`]), and a second
/// thread queued behind it. Built without sleeps: the main thread holds the lock first, the
/// turn holder then waits for it in Redis (its subscription is live), the second thread
/// queues, and the main thread's release lets the turn holder in.
struct Line {
    /// Tells the turn holder to unlock; it answers with its result and the commands and round
    /// trips its unlock sent.
    unlock: mpsc::Sender<()>,
    unlocked: mpsc::Receiver<(Result<()>, u64, u64)>,
    /// When the queued thread got the lock.
    next_acquired: mpsc::Receiver<Instant>,
    /// Tells the queued thread to look at its hold; it answers with what it saw.
    inspect: mpsc::Sender<()>,
    inspected: mpsc::Receiver<(bool, u32)>,
    threads: Vec<thread::JoinHandle<()>>,
}

fn line_up(server: &RedisServer, manager: &LockManager, name: &str, mode: Mode) -> Line {
    let mut conn = server.conn();
    support::await_listener(&mut conn, manager);
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let first = manager.lock(name).expect("first lock");

    let (acquired_tx, acquired) = mpsc::channel();
    let (unlock, unlock_rx) = mpsc::channel::<()>();
    let (unlocked_tx, unlocked) = mpsc::channel();
    let holder = {
        let (manager, name) = (manager.clone(), name.to_owned());
        thread::spawn(move || {
            let guard = match mode {
                Mode::Renewed => manager.lock(&name),
                Mode::Lease(lease) => manager.lock_with_lease(&name, lease),
            }
            .expect("turn holder lock");
            acquired_tx.send(()).unwrap();
            unlock_rx.recv().unwrap();
            let before = manager.stats();
            let result = guard.unlock();
            let after = manager.stats();
            let sent = (
                after.commands - before.commands,
                after.round_trips - before.round_trips,
            );
            unlocked_tx.send((result, sent.0, sent.1)).unwrap();
        })
    };
    assert!(support::await_subscribers(&mut conn, &channel, 1));

    let (next_tx, next_acquired) = mpsc::channel();
    let (inspect, inspect_rx) = mpsc::channel::<()>();
    let (inspected_tx, inspected) = mpsc::channel();
    let next = {
        let (manager, name) = (manager.clone(), name.to_owned());
        thread::spawn(move || {
            let guard = manager.lock(&name).expect("queued thread's lock");
            next_tx.send(Instant::now()).unwrap();
            // Only when asked, so that the turn holder's unlock is counted alone.
            inspect_rx.recv().unwrap();
            let held = guard.lock().is_held_by_current_thread().expect("inspect");
            let count = guard.lock().hold_count().expect("inspect");
            inspected_tx.send((held, count)).unwrap();
            let _ = guard.unlock();
        })
    };
    await_queued(manager, 1);
    first.unlock().expect("first unlock");
    acquired
        .recv_timeout(Duration::from_secs(10))
        .expect("the turn holder gets the lock");
    // Its subscription ends with its wait; let the listener's UNSUBSCRIBE go out now.
    assert!(support::await_subscribers(&mut conn, &channel, 0));
    Line {
        unlock,
        unlocked,
        next_acquired,
        inspect,
        inspected,
        threads: vec![holder, next],
    }
}

impl Line {
    fn unlock_turn_holder(&self) -> (Result<()>, u64, u64) {
        self.unlock.send(()).unwrap();
        self.unlocked
            .recv_timeout(Duration::from_secs(10))
            .expect("the turn holder unlocks")
    }

    fn next_acquired(&self) -> Instant {
        self.next_acquired
            .recv_timeout(Duration::from_secs(10))
            .expect("the queued thread gets the lock")
    }

    /// Whether the queued thread (which has the lock) holds it in Redis, and how many times.
    fn inspect_next(&self) -> (bool, u32) {
        self.inspect.send(()).unwrap();
        self.inspected
            .recv_timeout(Duration::from_secs(10))
            .expect("the queued thread inspects")
    }

    /// The queued thread got the lock (soon after `since`) although the turn holder never
    /// released it: the holder's unlock then finds it gone, and leaves the new hold alone.
    fn assert_taken_over(self, since: Instant) {
        let at = self.next_acquired();
        assert!(at.duration_since(since) < Duration::from_secs(5));
        let (result, _, _) = self.unlock_turn_holder();
        assert!(result.unwrap_err().is_not_held());
        assert_eq!(
            self.inspect_next(),
            (true, 1),
            "the queued thread's hold is untouched"
        );
        self.join();
    }

    fn join(self) {
        for thread in self.threads {
            thread.join().expect("line thread");
        }
    }
}

#[test]
fn the_release_acquires_for_the_next_local_thread_in_one_round_trip() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let line = line_up(&server, &manager, "turns:handoff", Mode::Renewed);
    assert_eq!(manager.queued_thread_count(), 1);
    let (result, commands, round_trips) = line.unlock_turn_holder();
    result?;
    // The release and the acquire in the next thread's name: one script call.
    assert_eq!((commands, round_trips), (1, 1));
    line.next_acquired();
    let (held, count) = line.inspect_next();
    assert!(held, "the queued thread holds the lock");
    assert_eq!(count, 1, "once");
    line.join();
    assert!(!manager.get_lock("turns:handoff").is_locked()?);
    assert_eq!(manager.queued_thread_count(), 0);
    Ok(())
}

#[test]
fn a_queued_thread_takes_over_when_the_turn_holders_fixed_lease_runs_out() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lease = Duration::from_millis(300);
    let line = line_up(&server, &manager, "turns:lease", Mode::Lease(lease));
    // The turn holder keeps its guard past the lease; the queued thread asks Redis itself.
    line.assert_taken_over(Instant::now());
    Ok(())
}

#[test]
fn a_queued_thread_takes_over_a_renewed_hold_that_was_lost() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .build()?;
    let line = line_up(&server, &manager, "turns:lost", Mode::Renewed);
    // Deleted behind everyone's back, with no unlock message: the turn holder does not learn
    // of it by itself, so the queued thread must find out from Redis.
    let _: () = server.conn().del("turns:lost").unwrap();
    line.assert_taken_over(Instant::now());
    Ok(())
}

#[test]
fn a_zero_wait_try_lock_makes_one_attempt_and_never_queues() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let _holder = manager.lock("turns:zero")?;
    let mut conn = server.conn();
    let before = support::command_calls(&mut conn, "evalsha");
    let got = thread::scope(|s| {
        s.spawn(|| {
            manager
                .try_lock("turns:zero", Duration::ZERO)
                .map(|g| g.is_some())
        })
        .join()
        .expect("thread")
    })?;
    assert!(!got);
    let after = support::command_calls(&mut conn, "evalsha");
    assert_eq!(after - before, 1, "exactly one attempt");
    assert_eq!(manager.queued_thread_count(), 0);
    Ok(())
}

#[test]
fn a_queued_thread_leaves_the_line_at_its_deadline() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let holder = manager.lock("turns:deadline")?;
    let (got, waited) = thread::scope(|s| {
        s.spawn(|| {
            let started = Instant::now();
            let got = manager
                .try_lock("turns:deadline", Duration::from_millis(200))
                .expect("try_lock");
            (got.is_some(), started.elapsed())
        })
        .join()
        .expect("thread")
    });
    assert!(!got);
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert_eq!(manager.queued_thread_count(), 0);
    holder.unlock()?;
    // Nothing is left in line: the next lock is immediate.
    let guard = manager.try_lock("turns:deadline", Duration::ZERO)?;
    assert!(guard.is_some());
    Ok(())
}

/// One thread holds the lock and one other thread of the same manager waits for it in Redis
/// (the most common shape): the release acquires in the waiter's name in the same script call
/// and wakes it, so the waiter sends nothing after the unlock. Rounds where the waiter is
/// between its own looks when the release comes are the rule (its looks are 100 ms apart and
/// more), so most rounds are handoffs; the bound leaves room for a loaded machine.
#[test]
fn a_release_hands_the_lock_to_the_one_thread_waiting_in_redis() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    support::await_listener(&mut conn, &manager);
    let name = "turns:one-waiter";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let rounds = 20;
    let before = manager.stats();
    // Rounds where the waiter's lock() returned without a command of its own after the unlock.
    let mut silent = 0;
    for round in 0..rounds {
        let guard = manager.lock(name)?;
        let (acquired_tx, acquired) = mpsc::channel();
        let (unlock, unlock_rx) = mpsc::channel::<()>();
        let waiter = {
            let manager = manager.clone();
            thread::spawn(move || {
                let guard = manager.lock(name).expect("the waiter's lock");
                let commands_at_acquire = manager.stats().commands;
                let held = guard.lock().is_held_by_current_thread().expect("inspect");
                let count = guard.lock().hold_count().expect("inspect");
                acquired_tx
                    .send((commands_at_acquire, held, count))
                    .unwrap();
                unlock_rx.recv().unwrap();
                guard.unlock().expect("the waiter's unlock");
            })
        };
        assert!(support::await_subscribers(&mut conn, &channel, 1));
        guard.unlock()?;
        let commands_at_unlock = manager.stats().commands;
        let (commands_at_acquire, held, count) = acquired
            .recv_timeout(Duration::from_secs(10))
            .expect("the waiter gets the lock");
        assert!(held, "round {round}: the waiter holds the lock");
        assert_eq!(count, 1, "round {round}: once");
        // While it holds the lock, it is registered as a waiter no more.
        let waiters: Vec<String> = conn.keys("redis_rlock__waiters*").expect("KEYS");
        assert!(waiters.is_empty(), "round {round}: {waiters:?}");
        unlock.send(()).unwrap();
        waiter.join().expect("waiter");
        assert!(support::await_subscribers(&mut conn, &channel, 0));
        if commands_at_acquire == commands_at_unlock {
            silent += 1;
        }
    }
    let handoffs = manager.stats().local_handoffs - before.local_handoffs;
    assert!(
        handoffs >= rounds / 2,
        "{handoffs} of {rounds} rounds were local handoffs"
    );
    assert!(
        silent >= rounds / 2,
        "in {silent} of {rounds} rounds the waiter sent nothing after the unlock"
    );
    assert!(!manager.get_lock(name).is_locked()?);
    Ok(())
}
