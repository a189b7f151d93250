//! The acquire engine's contracts that no other file covers: the renewal schedule, the latch
//! keys an unlock leaves behind, a release whose announcement is refused, the general
//! `acquire(options)`, and a Redisson-style waiter against a busy local line.

use redis_rlock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{AcquireOptions, Lease, LockManager, Result};
use support::proxy::Proxy;
use support::RedisServer;

fn latch_keys(conn: &mut redis::Connection) -> usize {
    let keys: Vec<String> = conn.keys("redisson_unlock_latch:*").expect("KEYS");
    keys.len()
}

#[test]
fn renewals_come_every_third_of_the_watchdog_timeout() -> Result<()> {
    let server = RedisServer::start();
    // Period 500 ms: holding 2.25 s needs renewals at 0.5, 1.0, 1.5 and 2.0 s, as Redisson.
    let manager = support::manager_with_watchdog(&server, Duration::from_millis(1_500));
    let guard = manager.lock("engine:renewals")?;
    let before = manager.stats().renewal_sweeps;
    thread::sleep(Duration::from_millis(2_250));
    let sweeps = manager.stats().renewal_sweeps - before;
    assert!(!guard.is_lost());
    guard.unlock()?;
    // Renewing every tick (half a period) would give 8 or 9.
    assert!((3..=5).contains(&sweeps), "{sweeps} renewals in 2.25 s");
    Ok(())
}

#[test]
fn a_contended_loop_leaves_one_latch_per_lock_not_one_per_unlock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (manager, start) = (manager.clone(), Arc::clone(&start));
            thread::spawn(move || -> Result<()> {
                start.wait();
                for _ in 0..100 {
                    manager.lock("engine:latches")?.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("locking thread")?;
    }
    let mut conn = server.conn();
    // Each release deletes the latches of the releases before it whose replies were in: 400
    // unlocks leave the last one, or the last few when releases overlapped (one thread's
    // reply still on its way while the next thread released), not 400.
    let left = latch_keys(&mut conn);
    assert!((1..=4).contains(&left), "{left} latch keys left");
    Ok(())
}

#[test]
fn an_unlock_whose_announcement_is_refused_still_reports_the_release() -> Result<()> {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">secret", "~*", "&*", "+@all"])
        .query(&mut admin)
        .expect("ACL SETUSER");
    let url = format!("redis://app:secret@127.0.0.1:{}/", server.port());
    let manager = LockManager::new(&url)?;
    let holder = manager.lock("engine:acl")?;
    // Two local waiters: the first waits in Redis for the unlock (woken in-process, since
    // its message cannot be sent), the second queues behind it and is handed the lock by the
    // first one's release (the handoff script's publish is refused too).
    let (done_tx, done) = std::sync::mpsc::channel();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (manager, done_tx) = (manager.clone(), done_tx.clone());
            thread::spawn(move || -> Result<u32> {
                let guard = manager.lock("engine:acl")?;
                let count = guard.lock().hold_count()?;
                guard.unlock()?;
                done_tx.send(()).expect("main thread");
                Ok(count)
            })
        })
        .collect();
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.waiting_channel_count() == 1 && manager.queued_thread_count() == 1
    }));
    // The rights go after the manager started: its releases can no longer PUBLISH.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "resetchannels"])
        .query(&mut admin)
        .expect("ACL SETUSER");
    holder.unlock()?;
    for _ in 0..2 {
        done.recv_timeout(Duration::from_secs(10))
            .expect("each waiter got the lock and released it");
    }
    for waiter in waiters {
        assert_eq!(waiter.join().expect("waiter")?, 1, "one hold, not two");
    }
    assert!(!manager.get_lock("engine:acl").is_locked()?);
    Ok(())
}

#[test]
fn acquire_takes_a_fenced_lock_with_a_fixed_lease() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lease = Duration::from_secs(5);
    let options = AcquireOptions::new()
        .wait(Duration::from_secs(1))
        .lease(Lease::Fixed(lease))
        .fenced(true);
    let first = manager
        .acquire("engine:options", options.clone())?
        .expect("free");
    assert_eq!(first.lease(), Some(lease));
    let token = first.fencing_token().expect("fenced");
    let ttl = first.lock().remaining_ttl()?.expect("a TTL");
    assert!(ttl <= lease && ttl > lease / 2, "{ttl:?}");
    assert_eq!(manager.renewing_count(), 0, "a fixed lease is not renewed");
    first.unlock()?;
    let second = manager
        .acquire("engine:options", options.clone())?
        .expect("free");
    assert!(second.fencing_token().expect("fenced") > token);
    // Bad values are refused before anything is sent, whatever the shorthand.
    let err = manager
        .acquire(
            "engine:options",
            options.lease(Lease::Fixed(Duration::ZERO)),
        )
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    Ok(())
}

/// A Redisson client's `lock()`, in raw commands: attempt; on failure subscribe to the lock's
/// channel, and wait for an unlock message (or the holder's TTL) between attempts; once
/// acquired, unsubscribe (Redisson listens only while a thread waits).
fn redisson_style_lock(conn: &mut redis::Connection, sub: &mut redis::PubSub<'_>, name: &str) {
    let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let owner = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:1";
    let mut subscribed = false;
    for attempt in 0u64.. {
        let pttl: Option<i64> = acquire
            .key(name)
            .key(format!("redis_rlock__attempt:{{{name}}}:{owner}"))
            .arg(30_000)
            .arg(owner)
            .arg(attempt)
            .arg(11_000)
            .invoke(conn)
            .expect("acquire");
        let Some(pttl) = pttl else {
            if subscribed {
                sub.unsubscribe(&channel).expect("UNSUBSCRIBE");
            }
            return;
        };
        if !subscribed {
            sub.subscribe(&channel).expect("SUBSCRIBE");
            subscribed = true;
            continue; // a release may have come before the subscription
        }
        let wait = Duration::from_millis(pttl.clamp(1, 1_000) as u64);
        sub.set_read_timeout(Some(wait)).expect("timeout");
        let _ = sub.get_message(); // a message or a timeout: attempt again either way
    }
}

#[test]
fn a_redisson_style_waiter_gets_the_lock_from_a_busy_local_line() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "engine:java";
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..4)
        .map(|_| {
            let (manager, stop) = (manager.clone(), Arc::clone(&stop));
            thread::spawn(move || -> Result<u64> {
                let mut sections = 0;
                while !stop.load(Ordering::Relaxed) {
                    let guard = manager.lock(name)?;
                    thread::sleep(Duration::from_micros(200));
                    guard.unlock()?;
                    sections += 1;
                }
                Ok(sections)
            })
        })
        .collect();
    let mut conn = server.conn();
    let mut sub_conn = server.conn();
    let mut sub = sub_conn.as_pubsub();
    let release = redis::Script::new(
        "if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then \
         redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], '0') end",
    );
    let mut waits = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        redisson_style_lock(&mut conn, &mut sub, name);
        waits.push(started.elapsed());
        let _: () = release
            .key(name)
            .key("redisson_lock__channel:{engine:java}")
            .arg("0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:1")
            .invoke(&mut conn)
            .expect("release");
        thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let sections: u64 = busy
        .into_iter()
        .map(|t| t.join().expect("busy thread"))
        .sum::<Result<u64>>()?;
    let worst = waits.iter().max().expect("ten waits");
    println!("Redisson-style waiter: waits {waits:?}; local sections {sections}");
    assert!(*worst < Duration::from_secs(1), "worst wait {worst:?}");
    assert!(sections > 10, "the local threads ran too");
    Ok(())
}

#[test]
fn stats_count_acquisitions_waits_handoffs_wakeups_and_renewals() -> Result<()> {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_millis(600));
    let other = LockManager::new(&server.url())?;
    let name = "engine:stats";

    // A remote holder, and a local waiter woken by its unlock message.
    let remote = other.lock(name)?;
    let waiter = {
        let manager = manager.clone();
        thread::spawn(move || -> Result<()> { manager.lock(name)?.unlock() })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.waiting_channel_count() == 1
    }));
    let mut conn = server.conn();
    let channel = "redisson_lock__channel:{engine:stats}";
    assert!(support::await_subscribers(&mut conn, channel, 1));
    remote.unlock()?;
    waiter.join().expect("waiter")?;
    let stats = manager.stats();
    assert_eq!(stats.acquisitions, 1);
    assert_eq!(stats.waits, 1);
    assert!(stats.wait_time > Duration::ZERO);
    assert!(stats.wakeups >= 1, "{stats:?}");

    // Three local threads on one lock: the line hands it over in the release.
    let start = Arc::new(Barrier::new(3));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (manager, start) = (manager.clone(), Arc::clone(&start));
            thread::spawn(move || -> Result<()> {
                start.wait();
                for _ in 0..20 {
                    let guard = manager.lock(name)?;
                    thread::sleep(Duration::from_millis(1));
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("locking thread")?;
    }
    let stats = manager.stats();
    assert_eq!(stats.acquisitions, 61);
    assert!(stats.local_handoffs >= 1, "{stats:?}");
    assert_eq!(stats.yields, 0, "nobody else waited");

    // Held across two renewal periods (200 ms each): renewed, never failed.
    let guard = manager.lock(name)?;
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.stats().renewals >= 2
    }));
    guard.unlock()?;
    assert_eq!(manager.stats().renewal_failures, 0);
    Ok(())
}

/// A release right after a local waiter got the lock races the listener's UNSUBSCRIBE, which
/// the server may run after the release's PUBLISH: this manager's own listener then still
/// hears the unlock, and must not be taken for a remote waiter (a yield that nobody takes).
/// The proxy holds the UNSUBSCRIBE back so that the release surely comes first.
#[test]
fn a_subscription_being_dropped_is_not_taken_for_a_remote_waiter() -> Result<()> {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let manager = LockManager::new(&proxy.url())?;
    let other = LockManager::new(&server.url())?;
    let name = "engine:unsubscribing";
    let channel = "redisson_lock__channel:{engine:unsubscribing}";
    let mut conn = server.conn();

    // A remote holder; a local waiter subscribed for it, and a second local thread queued
    // behind the waiter in the line.
    let remote = other.lock(name)?;
    let first = {
        let manager = manager.clone();
        thread::spawn(move || -> Result<()> { manager.lock(name)?.unlock() })
    };
    assert!(support::await_subscribers(&mut conn, channel, 1));
    let (holding_tx, holding_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let second = {
        let manager = manager.clone();
        thread::spawn(move || -> Result<()> {
            let guard = manager.lock(name)?;
            holding_tx.send(()).expect("test alive");
            go_rx.recv().expect("test alive");
            guard.unlock()
        })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.queued_thread_count() == 1
    }));
    proxy.hold_requests_containing(b"UNSUBSCRIBE");
    // The waiter gets the lock and hands it to the second thread; its listener, woken by
    // the unlock message, drops the subscription nobody needs now: held back.
    remote.unlock()?;
    first.join().expect("first thread")?;
    holding_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the second thread got the lock");
    assert!(support::eventually(Duration::from_secs(10), || {
        proxy.held() == 1
    }));
    assert_eq!(support::numsub(&mut conn, channel), 1, "still subscribed");
    go_tx.send(()).expect("second thread alive");
    second.join().expect("second thread")?;
    proxy.release_requests();
    assert!(support::await_subscribers(&mut conn, channel, 0));
    assert_eq!(manager.stats().yields, 0, "nobody else waited");
    assert_eq!(manager.stats().grants_given, 0, "nobody else waited");

    // Once the unsubscribe is confirmed the listener no longer counts itself: a release that
    // a remote waiter alone hears is left to it. The same set-up, with a remote waiter.
    let remote = other.lock(name)?;
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let first = {
        let manager = manager.clone();
        thread::spawn(move || -> Result<()> {
            let guard = manager.lock(name)?;
            release_rx.recv().expect("test alive");
            guard.unlock()
        })
    };
    assert!(support::await_subscribers(&mut conn, channel, 1));
    let second = {
        let manager = manager.clone();
        thread::spawn(move || -> Result<()> { manager.lock(name)?.unlock() })
    };
    assert!(support::eventually(Duration::from_secs(10), || {
        manager.queued_thread_count() == 1
    }));
    remote.unlock()?;
    // The waiter holds the lock; its listener's subscription ends.
    assert!(support::await_subscribers(&mut conn, channel, 0));
    let remote_waiter = {
        let other = other.clone();
        thread::spawn(move || -> Result<()> { other.lock(name)?.unlock() })
    };
    assert!(support::await_subscribers(&mut conn, channel, 1));
    release_tx.send(()).expect("first thread alive");
    first.join().expect("first thread")?;
    remote_waiter.join().expect("remote waiter")?;
    second.join().expect("second thread")?;
    // (The second thread's own release may yield too, if the remote waiter's listener has
    // not dropped its subscription yet.)
    // Left free for it, or (once it registered: docs/design/engine.md, "Grants") granted to it.
    let stats = manager.stats();
    assert!(
        stats.yields + stats.grants_given >= 1,
        "the release was left to the remote waiter: {stats:?}"
    );
    Ok(())
}

#[test]
fn a_subscriber_that_never_takes_the_lock_does_not_idle_it() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    // A monitor on every lock channel: it hears each unlock but never wants a lock.
    let mut monitor_conn = server.conn();
    let mut monitor = monitor_conn.as_pubsub();
    monitor
        .psubscribe("redisson_lock__channel:*")
        .expect("PSUBSCRIBE");
    let start = Arc::new(Barrier::new(3));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (manager, start) = (manager.clone(), Arc::clone(&start));
            thread::spawn(move || -> Result<()> {
                start.wait();
                for _ in 0..300 {
                    let guard = manager.lock("engine:phantom")?;
                    thread::sleep(Duration::from_micros(200));
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("locking thread")?;
    }
    let stats = manager.stats();
    println!("900 critical sections with a monitor subscribed: {stats:?}");
    // Each yield to the monitor idles the lock for up to 50 ms; after a streak of them the
    // line stops yielding for a while, so most releases still hand over locally.
    assert!(
        stats.yields * 10 < stats.acquisitions,
        "{} yields in {} acquisitions",
        stats.yields,
        stats.acquisitions
    );
    Ok(())
}

#[test]
fn releasing_a_short_reentry_gives_the_outer_hold_its_lease_back() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let outer = manager.lock("engine:reentry")?;
    let inner = manager
        .get_lock("engine:reentry")
        .lock_with_lease(Duration::from_millis(300))?;
    inner.unlock()?;
    // The server's TTL is the watchdog's again; so must be the guard's deadline.
    let remaining = outer.remaining_lease().expect("not lost");
    assert!(remaining > Duration::from_secs(10), "{remaining:?}");
    assert_eq!(manager.renewing_count(), 1);
    outer.unlock()?;
    Ok(())
}
