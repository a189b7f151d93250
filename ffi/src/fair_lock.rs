//! Acquiring fair locks (Redisson's `RFairLock`) from C: the guards are the plain lock's
//! `redis_rlock_guard`, released with `redis_rlock_unlock` or `redis_rlock_guard_free`.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::redis_rlock_result;
use super::cancel::{acquire_options, redis_rlock_lock_options};
use super::lock::{acquire_into, redis_rlock_guard};
use super::manager::redis_rlock_manager;

/// Waits as long as it takes to acquire the fair lock `name`: waiters of every client get it
/// first come, first served. The watchdog renews the lease until the guard is unlocked or
/// freed; the same thread locking again re-enters. Result codes and ownership of `*out` as for
/// `redis_rlock_lock`. Its cancellable form is `redis_rlock_fair_acquire`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_fair_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_fair_lock(name).lock().map(Some)
        })
    }
}

/// Acquires the fair lock `name` as `opts` say, as `redis_rlock_acquire` does (a cancelled or
/// shut-down wait leaves the queue).
///
/// # Safety
/// As for `redis_rlock_acquire`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_fair_acquire(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    opts: *const redis_rlock_lock_options,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    let options = unsafe { acquire_options(opts) };
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_fair_lock(name).acquire(options)
        })
    }
}

/// Tries to acquire the fair lock `name` for up to `wait_ms` milliseconds (0: one attempt,
/// without queueing), with the watchdog; while waiting it keeps its place in the queue.
/// `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed (it has then left the
/// queue). Ownership as for `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_fair_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_fair_try_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_fair_lock(name).try_lock(wait)
        })
    }
}
