//! Acquiring spin locks (Redisson's `RSpinLock`) from C: the guards are the plain lock's
//! `redis_rlock_guard`, released with `redis_rlock_unlock` or `redis_rlock_guard_free`. The
//! inspection calls and `redis_rlock_force_unlock` of the plain lock read and delete the same
//! hash (a spin lock is stored as one).

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::redis_rlock_result;
use super::cancel::{acquire_options, redis_rlock_lock_options};
use super::lock::{acquire_into, redis_rlock_guard};
use super::manager::redis_rlock_manager;

/// Waits as long as it takes to acquire the spin lock `name`, polling with a back-off (up to
/// 128 ms) instead of listening for the release. The watchdog renews the lease until the
/// guard is unlocked or freed; the same thread locking again re-enters. Result codes and
/// ownership of `*out` as for `redis_rlock_lock`. Its cancellable form is
/// `redis_rlock_spin_acquire`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_spin_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_spin_lock(name).lock().map(Some)
        })
    }
}

/// Acquires the spin lock `name` as `opts` say, as `redis_rlock_acquire` does.
///
/// # Safety
/// As for `redis_rlock_acquire`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_spin_acquire(
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
            manager.get_spin_lock(name).acquire(options)
        })
    }
}

/// Tries to acquire the spin lock `name` for up to `wait_ms` milliseconds (0: one attempt),
/// with the watchdog. `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed.
/// Ownership as for `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_spin_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_spin_try_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_spin_lock(name).try_lock(wait)
        })
    }
}
