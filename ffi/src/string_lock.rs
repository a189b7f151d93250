//! redis-py's lock format from C (`LockManager::get_string_lock`): a string key holding the
//! owner's token, shared with Python's `redis.lock.Lock`. The guards are the plain lock's
//! `redis_rlock_guard`, released with `redis_rlock_unlock` or `redis_rlock_guard_free`; the
//! key is not a hash, so the kind has inspection calls and a force unlock of its own.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{guarded, redis_rlock_result, str_arg, write_out};
use super::cancel::{acquire_options, redis_rlock_lock_options};
use super::lock::{acquire_into, inspect_as, redis_rlock_guard};
use super::manager::{manager_arg, redis_rlock_manager};
use redis_rlock::{LockManager, StringLock};

/// Waits as long as it takes to acquire the string lock `name`, polling with a back-off (up
/// to 128 ms): nothing announces a release. The watchdog renews the lease until the guard is
/// unlocked or freed; the same thread locking again re-enters (counted in this process).
/// Result codes and ownership of `*out` as for `redis_rlock_lock`. Its cancellable form is
/// `redis_rlock_string_acquire`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_string_lock(name).lock().map(Some)
        })
    }
}

/// Acquires the string lock `name` as `opts` say, as `redis_rlock_acquire` does;
/// `opts.fenced` is refused (`REDIS_RLOCK_INVALID_ARGUMENT`): the format has no counter.
///
/// # Safety
/// As for `redis_rlock_acquire`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_acquire(
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
            manager.get_string_lock(name).acquire(options)
        })
    }
}

/// Tries to acquire the string lock `name` for up to `wait_ms` milliseconds (0: one
/// attempt), with the watchdog. `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait
/// passed. Ownership as for `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_string_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_try_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.get_string_lock(name).try_lock(wait)
        })
    }
}

/// Deletes the string lock `name` whoever holds it (a Python holder too), announcing nothing.
/// `*released` (may be NULL) tells whether it was held. A key of that name of another type,
/// or a string that is a count rather than a token (a semaphore's permits or a count-down
/// latch's count: a decimal integer of at most 19 digits, optionally negative), is left alone
/// (`REDIS_RLOCK_REDIS_ERROR`, WRONGTYPE).
///
/// # Safety
/// As for `redis_rlock_force_unlock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_force_unlock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    released: *mut bool,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (all): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let name = unsafe { str_arg("name", name)? };
        let was_held = manager.get_string_lock(name).force_unlock()?;
        if !released.is_null() {
            unsafe { write_out("released", released, was_held)? };
        }
        Ok(())
    })
}

/// Sets `*locked` to whether anyone (any thread, process or client) holds the string lock
/// `name`: whether its key exists.
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_is_locked(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    locked: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { inspect_as(m, name, "locked", locked, handle, StringLock::is_locked) }
}

/// Sets `*held` to whether the key of the string lock `name` holds the calling thread's token.
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_is_held_by_current_thread(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    held: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        inspect_as(
            m,
            name,
            "held",
            held,
            handle,
            StringLock::is_held_by_current_thread,
        )
    }
}

/// Sets `*count` to how many holds the calling thread has on the string lock `name`, as this
/// process counts them while the key holds its token (0 when it does not).
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_hold_count(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    count: *mut u32,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { inspect_as(m, name, "count", count, handle, StringLock::hold_count) }
}

/// Sets `*ttl_ms` to the string lock's remaining lease as Redis sees it, or 0 when nobody
/// holds it (or its key has no expiry).
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_string_remaining_ttl(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    ttl_ms: *mut u64,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        inspect_as(m, name, "ttl_ms", ttl_ms, handle, |lock| {
            let ttl = lock.remaining_ttl()?;
            Ok(ttl.map_or(0, |ttl| ttl.as_millis() as u64))
        })
    }
}

/// The handle the inspection calls ask.
fn handle(manager: &LockManager, name: &str) -> StringLock {
    manager.get_string_lock(name)
}
