//! The API in one sitting: the four ways to acquire, guards, reentrancy and inspection.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! Uses `REDIS_URL` (default `redis://127.0.0.1:6379/`), or starts a throwaway `redis-server`
//! when nothing answers there.

mod local_redis;

use std::time::Duration;

use redis_rlock::LockManager;

fn main() -> redis_rlock::Result<()> {
    let (url, _server) = local_redis::url_from_env_or_start();
    let manager = LockManager::builder(&url)
        .watchdog_timeout(Duration::from_secs(30))
        .pool_size(4)
        .build()?;

    // 1. Block until acquired; the watchdog renews the lease while the guard lives.
    let lock = manager.get_lock("quickstart:report");
    let guard = lock.lock()?;
    println!(
        "locked {:?}: held by me = {}, remaining lease = {:?}",
        lock.name(),
        lock.is_held_by_current_thread()?,
        lock.remaining_ttl()?
    );

    // 2. Re-entry from the same thread counts holds instead of waiting.
    let again = lock.lock()?;
    println!("re-entered: hold count = {}", lock.hold_count()?);
    drop(again);

    // 3. Another thread gives up after a bounded wait.
    let other = manager.clone();
    let got = std::thread::spawn(move || {
        other
            .try_lock("quickstart:report", Duration::from_millis(200))
            .map(|g| g.is_some())
    })
    .join()
    .expect("thread")?;
    println!("another thread got it within 200 ms: {got}");

    // 4. Release, and see the error when a fixed lease ran out before the unlock.
    guard.unlock()?;
    let short = manager.lock_with_lease("quickstart:short", Duration::from_millis(100))?;
    std::thread::sleep(Duration::from_millis(200));
    match short.unlock() {
        Err(err) if err.is_not_held() => println!("late unlock reported: {err}"),
        other => println!("unexpected: {other:?}"),
    }

    // 5. try_lock_with_lease: bounded wait, fixed lease.
    if let Some(guard) = manager.try_lock_with_lease(
        "quickstart:job",
        Duration::from_secs(1),
        Duration::from_secs(10),
    )? {
        println!("job lock taken with a fixed lease of {:?}", guard.lease());
    }
    println!("locked after all guards dropped: {}", lock.is_locked()?);
    Ok(())
}
