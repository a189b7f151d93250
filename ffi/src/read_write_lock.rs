//! Acquiring the read and write locks of a read-write lock (Redisson's `RReadWriteLock`)
//! from C: the guards are the plain lock's `redis_rlock_guard`, released with
//! `redis_rlock_unlock` or `redis_rlock_guard_free`.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::redis_rlock_result;
use super::cancel::{acquire_options, redis_rlock_lock_options};
use super::lock::{acquire_into, redis_rlock_guard};
use super::manager::redis_rlock_manager;

/// Waits as long as it takes to take a read hold on the read-write lock `name`: shared with
/// other readers, excluded by a writer (except the calling thread's own write hold). The
/// watchdog renews it until the guard is unlocked or freed. Result codes and ownership of
/// `*out` as for `redis_rlock_lock`. Its cancellable form is `redis_rlock_read_acquire`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_read_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager
                .get_read_write_lock(name)
                .read_lock()
                .lock()
                .map(Some)
        })
    }
}

/// Tries to take a read hold on `name` for up to `wait_ms` milliseconds (0: one attempt).
/// `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed. Ownership as for
/// `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_read_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_read_try_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_read_write_lock(name).read_lock().try_lock(wait)
        })
    }
}

/// Waits as long as it takes to take the write lock of the read-write lock `name`, which
/// excludes readers and other writers. A thread that holds a read hold on `name` (and not the
/// write lock) gets `REDIS_RLOCK_INVALID_ARGUMENT`: it would wait for itself. Ownership as for
/// `redis_rlock_lock`. Its cancellable form is `redis_rlock_write_acquire`.
///
/// # Safety
/// As for `redis_rlock_read_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_write_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager
                .get_read_write_lock(name)
                .write_lock()
                .lock()
                .map(Some)
        })
    }
}

/// Tries to take the write lock of `name` for up to `wait_ms` milliseconds (0: one
/// attempt). `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed. Ownership as for
/// `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_read_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_write_try_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager
                .get_read_write_lock(name)
                .write_lock()
                .try_lock(wait)
        })
    }
}

/// Takes a read hold on `name` as `opts` say, as `redis_rlock_acquire` does (`fenced` is
/// refused: read holds take no fencing token).
///
/// # Safety
/// As for `redis_rlock_acquire`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_read_acquire(
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
            manager
                .get_read_write_lock(name)
                .read_lock()
                .acquire(options)
        })
    }
}

/// Takes the write lock of `name` as `opts` say, as `redis_rlock_acquire` does.
///
/// # Safety
/// As for `redis_rlock_acquire`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_write_acquire(
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
            manager
                .get_read_write_lock(name)
                .write_lock()
                .acquire(options)
        })
    }
}
