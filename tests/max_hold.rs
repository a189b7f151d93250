//! `AcquireOptions::max_hold`: the watchdog renews a hold for at most that long, so a holder
//! stuck with the lock keeps it no longer; the guard reports the hold lost when it ends.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{AcquireOptions, Lease};
use support::{manager_with_watchdog, RedisServer};

/// The watchdog renews every third of this.
const WATCHDOG: Duration = Duration::from_secs(1);

#[test]
fn renewals_stop_once_the_hold_is_max_hold_old_and_the_guard_is_told() {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, WATCHDOG);
    let mut conn = server.conn();
    let max_hold = Duration::from_millis(1500);

    let started = Instant::now();
    let capped = manager
        .acquire("capped", AcquireOptions::new().max_hold(max_hold))
        .expect("acquire")
        .expect("free");
    // Renewed past one watchdog timeout: the cap, not the lease, ends it.
    let uncapped = manager.lock("uncapped").expect("lock");
    let lost = capped.lost_signal();
    lost.recv_timeout(Duration::from_secs(30))
        .expect("the capped hold was never reported lost");
    let held_for = started.elapsed();
    assert!(
        held_for >= max_hold,
        "lost after {held_for:?}, before its max hold of {max_hold:?}"
    );
    println!("capped at {max_hold:?}: reported lost after {held_for:?}");
    assert!(capped.is_lost());
    // Gone on Redis too, once the lease the guard counts a little short of has run out there.
    let gone = support::eventually(Duration::from_secs(5), || {
        !conn.exists::<_, bool>("capped").unwrap()
    });
    assert!(gone, "the capped hold outlived its lease on Redis");
    let other = manager_with_watchdog(&server, WATCHDOG);
    let next = other
        .try_lock("capped", Duration::ZERO)
        .expect("try_lock")
        .expect("the lock is free once the capped hold ended");
    next.unlock().expect("unlock");
    assert!(
        capped.unlock().is_err(),
        "unlocking an ended hold succeeded"
    );

    // The hold without a cap was renewed all along.
    assert!(!uncapped.is_lost(), "the uncapped hold was lost");
    let ttl: i64 = conn.pttl("uncapped").unwrap();
    assert!(ttl > 0, "the uncapped hold is not on Redis: {ttl}");
    uncapped.unlock().expect("unlock");
}

#[test]
fn a_re_entry_keeps_the_earliest_cap() {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, WATCHDOG);
    let outer = manager
        .acquire(
            "re-entered",
            AcquireOptions::new().max_hold(Duration::from_millis(1200)),
        )
        .expect("acquire")
        .expect("free");
    let inner = manager.lock("re-entered").expect("re-entry without a cap");
    let started = Instant::now();
    inner
        .lost_signal()
        .recv_timeout(Duration::from_secs(30))
        .expect("the re-entered hold was renewed past the outer cap");
    println!("re-entered hold lost after {:?}", started.elapsed());
    assert!(outer.is_lost() && inner.is_lost());
}

#[test]
fn a_zero_cap_or_one_on_a_fixed_lease_is_refused_and_nothing_is_taken() {
    let server = RedisServer::start();
    let manager = manager_with_watchdog(&server, WATCHDOG);
    let mut conn = server.conn();
    let zero = manager
        .acquire("refused", AcquireOptions::new().max_hold(Duration::ZERO))
        .unwrap_err();
    assert!(zero.is_invalid_argument(), "{zero}");
    let fixed = manager
        .acquire(
            "refused",
            AcquireOptions::new()
                .lease(Lease::Fixed(Duration::from_secs(5)))
                .max_hold(Duration::from_secs(1)),
        )
        .unwrap_err();
    assert!(fixed.is_invalid_argument(), "{fixed}");
    assert!(fixed.to_string().contains("fixed lease"), "{fixed}");
    let exists: bool = conn.exists("refused").unwrap();
    assert!(!exists, "a refused acquire took the lock");
}
