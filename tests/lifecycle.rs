//! No thread or connection outlives its manager, and a manager's background threads do not
//! grow with the number of locks.
//!
//! One test in this binary on purpose: it counts the process's threads, which other tests
//! running in parallel would disturb.

use redis_rlock_testkit as support;

use std::time::Duration;

use redis_rlock::{LockManager, Result};
use support::RedisServer;

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

/// Whether the process is back to `count` threads within a second. A joined thread can still
/// be listed for a moment: the kernel wakes the joiner when the thread's id is cleared, a
/// little before its entry in /proc/self/task goes; a thread that was not joined stays.
fn threads_back_to(count: usize) -> bool {
    support::eventually(Duration::from_secs(1), || thread_count() == count)
}

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn managers_clean_up_threads_and_connections() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let threads_before = thread_count();

    // Two threads per manager, whatever the number of locks held and awaited.
    let manager = LockManager::builder(&server.url()).pool_size(2).build()?;
    let guards: Vec<_> = (0..200)
        .map(|i| manager.lock(&format!("held:{i}")))
        .collect::<Result<_>>()?;
    assert_eq!(manager.renewing_count(), 200);
    let names = thread_names();
    assert_eq!(
        names.iter().filter(|n| *n == "redis-rlock-wat").count(),
        1,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "redis-rlock-pub").count(),
        1,
        "{names:?}"
    );
    assert_eq!(thread_count(), threads_before + 2);
    assert!(
        support::client_count(&mut conn, "normal") <= 2,
        "pool size respected"
    );
    drop(guards);
    drop(manager);
    assert!(
        threads_back_to(threads_before),
        "threads joined on drop: {:?}",
        thread_names()
    );

    // Many managers, each used and dropped (clones and guards included).
    for round in 0..30 {
        let manager = LockManager::new(&server.url())?;
        let clone = manager.clone();
        let guard = clone.lock(&format!("round:{round}"))?;
        assert!(
            manager
                .try_lock(&format!("round:{round}"), Duration::ZERO)?
                .is_some(),
            "re-entry from the same thread"
        );
        drop(manager);
        drop(clone);
        // The guard keeps the manager alive; dropping it releases and shuts everything down.
        drop(guard);
        assert!(
            threads_back_to(threads_before),
            "after round {round}: {:?}",
            thread_names()
        );
    }
    let leftover = support::eventually(Duration::from_secs(10), || {
        support::client_count(&mut conn, "normal") == 0
            && support::client_count(&mut conn, "pubsub") == 0
    });
    assert!(
        leftover,
        "every connection is closed once its manager is gone"
    );
    Ok(())
}
