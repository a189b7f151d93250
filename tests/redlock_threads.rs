//! A RedLock leaves no thread behind: alone in its test binary, so that the process' threads
//! are the harness', this test's, and whatever the crate starts.

use redis_rlock_testkit as support;

use std::time::Duration;

use redis_rlock::{LockManager, RedLock, Result};
use support::RedisServer;

/// How many threads this process has now.
fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

#[test]
fn no_thread_is_left_once_the_guards_and_managers_are_dropped() -> Result<()> {
    let servers: Vec<_> = (0..5).map(|_| RedisServer::start()).collect();
    let before = thread_count();
    {
        let managers = servers
            .iter()
            .map(|s| LockManager::new(&s.url()))
            .collect::<Result<Vec<_>>>()?;
        let red = RedLock::new(managers.iter().map(|m| m.get_lock("red:threads")).collect());
        for _ in 0..5 {
            let guard = red.lock()?;
            let _lost = guard.lost_signal();
            guard.unlock()?;
        }
        // A guard dropped rather than unlocked, and one whose round lost (another holder).
        let guard = red.lock()?;
        let _lost = guard.lost_signal();
        std::thread::scope(|scope| {
            scope
                .spawn(|| assert!(red.try_lock(Duration::ZERO).expect("tried").is_none()))
                .join()
                .expect("the other thread");
        });
        drop(guard);
    }
    // Generous: a manager's threads may take a moment to end after its drop.
    let mut after = thread_count();
    support::eventually(Duration::from_secs(10), || {
        after = thread_count();
        after <= before
    });
    assert!(after <= before, "{before} threads before, {after} after");
    Ok(())
}
