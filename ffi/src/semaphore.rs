//! Semaphores from C: Redisson's `RSemaphore` by name, one call per operation.
//!
//! There is no handle type: a semaphore is its name, and permits have no owner (any thread
//! may release them), so there is nothing to keep between calls but the manager.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{guarded, redis_rlock_result, str_arg, write_out, Failure};
use super::cancel::{redis_rlock_wait_options, wait_options};
use super::manager::{manager_arg, redis_rlock_manager};
use redis_rlock::Semaphore;

/// The most permits a semaphore holds, and so the most one call may ask for: Redisson counts
/// permits in a Java int.
pub const REDIS_RLOCK_SEMAPHORE_MAX_PERMITS: u32 = 2_147_483_647;
const _: () = assert!(REDIS_RLOCK_SEMAPHORE_MAX_PERMITS == Semaphore::MAX_PERMITS);

/// The shared body: checks the arguments, then runs `op` on the semaphore `name`.
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
unsafe fn with_semaphore(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    op: impl FnOnce(&Semaphore) -> std::result::Result<(), Failure>,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (both): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let name = unsafe { str_arg("name", name)? };
        op(&manager.get_semaphore(name))
    })
}

/// Refuses a NULL out pointer before anything is sent.
fn require<T>(what: &str, out: *mut T) -> std::result::Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    Ok(())
}

/// Creates the semaphore `name` with `permits` free permits (0 allowed) if it does not exist.
/// `*set` tells whether it was created; an existing semaphore keeps its count. At most
/// `REDIS_RLOCK_SEMAPHORE_MAX_PERMITS`. A key of that name that is not a semaphore is
/// left alone (`REDIS_RLOCK_REDIS_ERROR`).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `set` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_semaphore_try_set_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
    set: *mut bool,
) -> redis_rlock_result {
    let op = |semaphore: &Semaphore| {
        require("set", set)?;
        let created = semaphore.try_set_permits(permits)?;
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { write_out("set", set, created) }
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_semaphore(m, name, op) }
}

/// Takes `permits` permits (at least 1) of the semaphore `name`, waiting as long as it takes
/// until that many are free at once. A semaphore that does not exist has no permits: the call
/// waits until it is created or permits are released into it. Its cancellable form is
/// `redis_rlock_semaphore_acquire_with`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_semaphore_acquire(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_semaphore(m, name, |semaphore| Ok(semaphore.acquire(permits)?)) }
}

/// Takes `permits` permits of `name` if that many become free within `wait_ms` milliseconds
/// (0: one attempt). Returns `REDIS_RLOCK_OK` either way, with `*acquired` telling whether the
/// permits were taken.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `acquired` is
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_semaphore_try_acquire(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
    wait_ms: u64,
    acquired: *mut bool,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    let op = |semaphore: &Semaphore| {
        require("acquired", acquired)?;
        let taken = semaphore.try_acquire(permits, wait)?;
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { write_out("acquired", acquired, taken) }
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_semaphore(m, name, op) }
}

/// Gives `permits` permits (at least 1) back to `name`, whoever took them, and wakes waiters.
/// A semaphore that does not exist is created with `permits`. A release that would take the
/// count past `REDIS_RLOCK_SEMAPHORE_MAX_PERMITS` changes nothing (`REDIS_RLOCK_INVALID_ARGUMENT`).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_semaphore_release(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_semaphore(m, name, |semaphore| Ok(semaphore.release(permits)?)) }
}

/// Sets `*permits` to how many permits of `name` are free right now (0 when the semaphore
/// does not exist).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `permits` is
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_semaphore_available_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: *mut u64,
) -> redis_rlock_result {
    let op = |semaphore: &Semaphore| {
        require("permits", permits)?;
        let free = semaphore.available_permits()?;
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { write_out("permits", permits, free) }
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_semaphore(m, name, op) }
}

/// Takes `permits` permits of the semaphore `name` as `opts` say (NULL: wait as long as it
/// takes, no cancel token). `REDIS_RLOCK_OK` with `*acquired` telling whether it took them
/// (false: the wait passed); `REDIS_RLOCK_CANCELLED` when the cancel token was cancelled and
/// `REDIS_RLOCK_SHUTDOWN` when the manager was shut down, with no permit taken.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `opts` is NULL
/// or valid, and its `cancel` NULL or a live token; `acquired` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_semaphore_acquire_with(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
    opts: *const redis_rlock_wait_options,
    acquired: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the caller's contract.
    let options = unsafe { wait_options(opts) };
    let op = |semaphore: &Semaphore| {
        require("acquired", acquired)?;
        let taken = semaphore.acquire_with(permits, options)?;
        // SAFETY: checked above.
        unsafe { write_out("acquired", acquired, taken) }
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_semaphore(m, name, op) }
}
