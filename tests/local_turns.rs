//! Threads of one manager that want the same lock take turns in-process: only one of them
//! contends in Redis, and the releasing thread acquires for the next one in the same round
//! trip. These tests check the request count, the handoff, and that a turn holder that does
//! not come back never stalls the line.

mod support;

use std::sync::{mpsc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock::{LockManager, Result};
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

#[test]
fn the_release_acquires_for_the_next_local_thread_in_one_round_trip() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let holder = manager.lock("turns:handoff")?;
    let next = thread::scope(|s| {
        let next = s.spawn(|| {
            let guard = manager.lock("turns:handoff").expect("next lock");
            let held = guard.lock().is_held_by_current_thread().expect("inspect");
            let count = guard.lock().hold_count().expect("inspect");
            guard.unlock().expect("next unlock");
            (held, count)
        });
        await_queued(&manager, 1);
        // The listener subscribes to its private wake-up channel when the manager starts;
        // let that be counted before counting the handoff.
        let control = format!("redis_lock__control:{{{}}}", manager.client_id());
        assert!(support::await_subscribers(&mut server.conn(), &control, 1));
        let before = manager.stats();
        holder.unlock().expect("holder unlock");
        let after = manager.stats();
        // The release and the acquire in the next thread's name: two commands, one trip.
        assert_eq!(after.commands - before.commands, 2);
        assert_eq!(after.round_trips - before.round_trips, 1);
        next.join().expect("next thread")
    });
    assert_eq!(next, (true, 1), "the next thread holds the lock, once");
    assert!(!manager.get_lock("turns:handoff").is_locked()?);
    Ok(())
}

#[test]
fn a_queued_thread_takes_over_when_the_holders_fixed_lease_runs_out() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lease = Duration::from_millis(300);
    // This guard is not released before its lease runs out.
    let stale = manager.lock_with_lease("turns:lease", lease)?;
    let started = Instant::now();
    let (acquired_tx, acquired) = mpsc::channel();
    let (checked_tx, checked) = mpsc::channel::<()>();
    thread::scope(|s| {
        let waiter = manager.clone();
        s.spawn(move || {
            let guard = waiter.lock("turns:lease").expect("lock");
            acquired_tx.send(started.elapsed()).unwrap();
            checked.recv().unwrap(); // keep it while the stale guard is tried
            guard.unlock().expect("unlock");
        });
        let waited = acquired
            .recv_timeout(Duration::from_secs(10))
            .expect("taken over");
        assert!(waited >= lease - Duration::from_millis(20), "{waited:?}");
        // The queued thread has the lock now: the stale unlock says so and changes nothing.
        let err = stale.unlock().unwrap_err();
        assert!(err.is_not_held(), "{err}");
        assert!(manager.get_lock("turns:lease").is_locked().unwrap());
        checked_tx.send(()).unwrap();
    });
    assert!(!manager.get_lock("turns:lease").is_locked()?);
    Ok(())
}

#[test]
fn a_queued_thread_takes_over_a_renewed_hold_that_was_lost() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .build()?;
    let other = LockManager::new(&server.url())?;
    let holder = manager.lock("turns:lost")?;
    thread::scope(|s| {
        let next = s.spawn(|| {
            let started = Instant::now();
            let guard = manager.lock("turns:lost").expect("lock");
            let waited = started.elapsed();
            guard.unlock().expect("unlock");
            waited
        });
        await_queued(&manager, 1);
        // Another client deletes the lock: the holder's thread never learns of it by itself,
        // so the queued thread must find out from Redis (one renewal period of patience).
        assert!(other.get_lock("turns:lost").force_unlock().expect("force"));
        let waited = next.join().expect("next thread");
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    });
    assert!(holder.unlock().unwrap_err().is_not_held());
    Ok(())
}

#[test]
fn a_zero_wait_try_lock_does_not_queue_behind_a_local_holder() -> Result<()> {
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
    assert_eq!(after, before, "answered locally, without an attempt");
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
