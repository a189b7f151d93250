//! Managers and `fork()`: in a child that inherited a manager (here from Rust; through the C
//! API in ffi/tests/c/fork_child.c) calls are refused with a clear error, and dropping or
//! freeing it returns normally, sends nothing and leaves the parent's connections alone; the
//! parent's managers keep working.
//!
//! One test in this binary on purpose: it forks, and the child has only the forking thread.

use redis_rlock_testkit as support;

use std::time::{Duration, Instant};

use redis_rlock::{LockManager, RedLock, Result};
use support::RedisServer;

/// The ids of the server's clients.
fn client_ids(conn: &mut redis::Connection) -> std::collections::BTreeSet<u64> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
    list.lines()
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect()
}

/// Waits (up to 20 s) for the child `pid` to end and returns its wait status; kills it and
/// panics if it does not.
#[allow(unsafe_code)]
fn wait_for_child(pid: libc::pid_t) -> libc::c_int {
    let started = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our own child; `status` is a valid out pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(waited >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if waited == pid {
            return status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            // SAFETY: our own child, which hangs.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the child did not end within 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[allow(unsafe_code)]
fn a_forked_child_drops_inherited_managers_without_touching_the_parents() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // The parent holds a lock through one manager (renewed by its watchdog) ...
    let holder = LockManager::new(&server.url())?;
    let guard = holder.lock("fork:held")?;
    // ... and has another, with a pooled connection, that the child will drop.
    let inherited = LockManager::new(&server.url())?;
    assert!(!inherited.get_lock("fork:other").is_locked()?);
    support::await_listener(&mut conn, &inherited);
    // Permits taken by the parent, whose guard the child inherits too.
    let semaphore = inherited.get_semaphore("fork:semaphore");
    assert!(semaphore.try_set_permits(2)?);
    let permits = semaphore.acquire_guard(1)?;
    // A RedLock over `inherited` and a manager of another server (one name on two masters),
    // used once: `inherited` has helper threads now, which the child will not have.
    let other_server = RedisServer::start();
    let other = LockManager::new(&other_server.url())?;
    let red = RedLock::new(vec![
        inherited.get_lock("fork:red"),
        other.get_lock("fork:red"),
    ]);
    red.lock()?.unlock()?;
    let clients_before = client_ids(&mut conn);
    let publishes_before = support::command_calls(&mut conn, "publish");

    // SAFETY: the child only drops what it inherited and leaves with _exit, never returning
    // into the test harness (whose other threads it does not have).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // Every call is refused with a clear error, and nothing is sent.
        let forked =
            |err: redis_rlock::Error| err.to_string().contains("create the manager in the child");
        let refused = inherited
            .get_lock("fork:other")
            .is_locked()
            .is_err_and(forked)
            && semaphore.release(1).is_err_and(forked)
            && semaphore.try_acquire(1, Duration::ZERO).is_err_and(forked)
            && inherited
                .get_count_down_latch("fork:latch")
                .count_down()
                .is_err_and(forked)
            && red.try_lock(Duration::ZERO).is_err_and(forked);
        let started = Instant::now();
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // The parent's permits: dropped here, they must not be given back.
            drop(permits);
            drop(semaphore);
            drop(red);
            // The last reference in the child: Subscriber's and Watchdog's drops run here,
            // where their threads do not exist.
            drop(inherited);
        }));
        // The guard and its manager are the parent's: releasing them here would release the
        // parent's lock (same owner id). Leave them.
        std::mem::forget(guard);
        std::mem::forget(holder);
        std::mem::forget(other);
        // Nothing to stop or wait for: no thread of the manager runs here.
        let prompt = started.elapsed() < Duration::from_millis(500);
        let code = match (refused, dropped.is_ok(), prompt) {
            (true, true, true) => 0,
            (_, false, _) => 1,
            (false, _, _) => 2,
            (true, true, false) => 3,
        };
        // SAFETY: ends the child at once, with no destructor or atexit handler.
        unsafe { libc::_exit(code) };
    }

    let status = wait_for_child(pid);
    assert!(
        libc::WIFEXITED(status),
        "the child ended normally, not by a signal (an abort is a double panic): {status}"
    );
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: dropping in the child panicked; 2: a call in the child was not refused; \
         3: dropping in the child waited for threads it does not have"
    );

    // Nothing of the parent's was closed, and nothing was sent on its connections: a stray
    // reply would be read as the answer to the parent's next command.
    assert_eq!(
        support::command_calls(&mut conn, "publish"),
        publishes_before,
        "the child sent a wake-up to the listener it does not have"
    );
    let clients_after = client_ids(&mut conn);
    assert!(
        clients_before.is_subset(&clients_after),
        "connections closed: before {clients_before:?}, after {clients_after:?}"
    );
    assert!(!inherited.get_lock("fork:other").is_locked()?);
    inherited.lock("fork:other")?.unlock()?;
    assert_eq!(
        semaphore.available_permits()?,
        1,
        "the child gave back nothing"
    );
    drop(permits);
    assert_eq!(semaphore.available_permits()?, 2);
    drop(semaphore);
    assert_eq!(holder.get_lock("fork:held").hold_count()?, 1, "still held");
    guard.unlock()?;
    drop(inherited);
    Ok(())
}
