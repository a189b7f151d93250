//! Waiting: pub/sub wake-ups, bounded waits, mutual exclusion between threads, and one
//! subscriber connection shared by every waiter of a manager.

use redis_rlock_testkit as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::RedisServer;

#[test]
fn a_blocked_waiter_is_woken_by_the_release_not_by_the_ttl() -> Result<()> {
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?; // 30 s watchdog lease
    let waiter = LockManager::new(&server.url())?;
    let mut conn = server.conn();

    let guard = holder.lock("handoff")?;
    let waiting = support::Waiter::spawn(&waiter, "handoff");
    // The waiter is blocked once its subscription is live on the server.
    assert!(support::await_subscribers(
        &mut conn,
        "redisson_lock__channel:{handoff}",
        1
    ));
    assert!(waiting.is_waiting(), "the waiter must still be waiting");

    guard.unlock()?;
    let handoff = waiting.acquired_since(Instant::now());
    // The holder's lease had ~30 s left: only the unlock message can explain a quick handoff.
    assert!(handoff < Duration::from_secs(3), "handoff took {handoff:?}");
    Ok(())
}

#[test]
fn try_lock_gives_up_after_its_wait_and_not_much_later() -> Result<()> {
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&server.url())
        .response_timeout(Duration::from_secs(1))
        .build()?;
    let _guard = holder.lock("busy")?;

    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let got = waiter.try_lock("busy", wait)?;
    let took = started.elapsed();
    assert!(got.is_none());
    assert!(took >= wait, "returned early: {took:?}");
    assert!(took < wait + Duration::from_secs(1), "overran: {took:?}");

    let started = Instant::now();
    assert!(waiter.try_lock("busy", Duration::ZERO)?.is_none());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "zero wait is one attempt"
    );
    Ok(())
}

/// A server that answers everything slowly (but within the response timeout): subscribing
/// must not take a response timeout of its own past the wait, nor be followed by an attempt
/// once the wait is over.
#[test]
fn try_lock_on_a_slow_server_returns_within_its_wait_and_one_response_timeout() -> Result<()> {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let response_timeout = Duration::from_millis(800);
    let waiter = LockManager::builder(&proxy.url())
        .response_timeout(response_timeout)
        .build()?;
    let holder = LockManager::new(&server.url())?;
    let _held = holder.lock("slow")?;
    proxy.delay_replies(Duration::from_millis(300));
    let wait = Duration::from_millis(500);
    let started = Instant::now();
    assert!(waiter.try_lock("slow", wait)?.is_none());
    let took = started.elapsed();
    // Before: an attempt (300 ms), the listener's wake-up with a whole response timeout of
    // its own (300 ms, past the wait), then one more attempt (300 ms): 900 ms and more.
    assert!(
        took < wait + Duration::from_millis(300),
        "took {took:?} for a wait of {wait:?} with replies 300 ms late"
    );
    Ok(())
}

#[test]
fn a_lock_whose_holder_vanished_without_a_message_is_taken_at_its_ttl() -> Result<()> {
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::new(&server.url())?;
    // A fixed lease that simply expires: nobody publishes an unlock message.
    let guard = holder.lock_with_lease("vanished", Duration::from_millis(400))?;
    let started = Instant::now();
    let taken = waiter.lock("vanished")?;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "taken before expiry: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "waited far past the TTL: {took:?}"
    );
    drop(taken);
    assert!(guard.unlock().unwrap_err().is_not_held());
    Ok(())
}

#[test]
fn threads_never_overlap_in_the_critical_section() -> Result<()> {
    const THREADS: usize = 8;
    const ROUNDS: usize = 40;
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let inside = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS));

    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let manager = manager.clone();
            let inside = Arc::clone(&inside);
            let start = Arc::clone(&start);
            let mut conn = server.conn();
            thread::spawn(move || -> Result<()> {
                start.wait();
                for _ in 0..ROUNDS {
                    let guard = manager.lock("counter-lock")?;
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two threads inside"
                    );
                    // Read-modify-write on purpose: only the lock keeps it exact.
                    let value: i64 = conn.get("counter").unwrap_or(0);
                    let _: () = conn.set("counter", value + 1).unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap()?;
    }
    let mut conn = server.conn();
    let total: usize = conn.get("counter").unwrap();
    assert_eq!(total, THREADS * ROUNDS);
    Ok(())
}

#[test]
fn many_waiters_on_many_locks_share_one_subscriber_connection() -> Result<()> {
    const LOCKS: usize = 20;
    const WAITERS_PER_LOCK: usize = 3;
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&server.url()).pool_size(4).build()?;
    let mut conn = server.conn();
    let names: Vec<String> = (0..LOCKS).map(|i| format!("many:{i}")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| holder.lock(n))
        .collect::<Result<_>>()?;

    let (done_tx, done_rx) = mpsc::channel();
    let handles: Vec<_> = names
        .iter()
        .flat_map(|name| std::iter::repeat_n(name.clone(), WAITERS_PER_LOCK))
        .map(|name| {
            let waiter = waiter.clone();
            let done = done_tx.clone();
            thread::spawn(move || -> Result<()> {
                let guard = waiter.lock(&name)?;
                done.send(name).unwrap();
                guard.unlock()
            })
        })
        .collect();
    let all_subscribed = support::eventually(Duration::from_secs(20), || {
        names
            .iter()
            .all(|n| support::numsub(&mut conn, &format!("redisson_lock__channel:{{{n}}}")) == 1)
    });
    assert!(all_subscribed, "every channel has exactly one subscriber");
    assert_eq!(waiter.waiting_channel_count(), LOCKS);
    // One listener per manager (the holder has its own), however many waiters and locks.
    assert_eq!(support::client_count(&mut conn, "pubsub"), 2);

    drop(guards);
    drop(done_tx);
    let finished: Vec<String> = done_rx.iter().collect();
    assert_eq!(
        finished.len(),
        LOCKS * WAITERS_PER_LOCK,
        "every waiter acquired"
    );
    for handle in handles {
        handle.join().unwrap()?;
    }
    assert_eq!(waiter.waiting_channel_count(), 0);
    let all_unsubscribed = support::eventually(Duration::from_secs(10), || {
        names
            .iter()
            .all(|n| support::numsub(&mut conn, &format!("redisson_lock__channel:{{{n}}}")) == 0)
    });
    assert!(
        all_unsubscribed,
        "channels are unsubscribed when the last waiter leaves"
    );
    Ok(())
}

#[test]
fn waiters_of_one_manager_take_turns_on_each_release() -> Result<()> {
    const WAITERS: usize = 6;
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let first = manager.lock("turns")?;
    let order = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..WAITERS)
        .map(|_| {
            let manager = manager.clone();
            let order = Arc::clone(&order);
            thread::spawn(move || -> Result<usize> {
                let guard = manager.try_lock("turns", Duration::from_secs(60))?;
                let guard = guard.expect("every waiter gets its turn well within 60 s");
                let n = order.fetch_add(1, Ordering::SeqCst);
                guard.unlock()?;
                Ok(n)
            })
        })
        .collect();
    first.unlock()?;
    let mut turns: Vec<usize> = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect::<Result<_>>()?;
    turns.sort_unstable();
    assert_eq!(turns, (0..WAITERS).collect::<Vec<_>>());
    Ok(())
}
