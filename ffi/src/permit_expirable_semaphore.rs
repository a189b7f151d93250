//! Permit-expirable semaphores from C: Redisson's `RPermitExpirableSemaphore` by name, one
//! call per operation.
//!
//! No handle type, as for semaphores: a semaphore is its name. What a permit has is its id,
//! which the acquiring calls write into a buffer of the caller's
//! (`REDIS_RLOCK_PERMIT_ID_SIZE` bytes: 32 hex characters and a NUL) and the others take.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{redis_rlock_result, str_arg, Failure};
use super::cancel::{redis_rlock_wait_options, wait_options};
use super::manager::{redis_rlock_manager, with_named};
use redis_rlock::PermitExpirableSemaphore;

/// The size of a permit id buffer: 32 hex characters and the terminating NUL.
pub const REDIS_RLOCK_PERMIT_ID_SIZE: usize = 33;

/// The shared body: checks the arguments and the out pointer (`what`, NULL for none) before
/// anything is sent, then runs `op` on the semaphore `name` and writes its value out.
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
unsafe fn with_permits<T>(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: Option<(&str, *mut T)>,
    op: impl FnOnce(&PermitExpirableSemaphore) -> Result<T, Failure>,
) -> redis_rlock_result {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        with_named(
            m,
            name,
            out,
            |manager, name| manager.get_permit_expirable_semaphore(name),
            op,
        )
    }
}

/// A lease in ms as the Rust API takes it: 0 is no lease.
fn lease(lease_ms: u64) -> Option<Duration> {
    (lease_ms > 0).then(|| Duration::from_millis(lease_ms))
}

/// Refuses a NULL id buffer before a permit is taken that could not be reported.
fn require_buffer(id: *mut c_char) -> Result<(), Failure> {
    if id.is_null() {
        return Err(Failure::invalid("id is NULL"));
    }
    Ok(())
}

/// Writes `value` (a permit id, or "" for none) and a NUL into `id`.
///
/// # Safety
/// `id` is not NULL and valid for a write of `REDIS_RLOCK_PERMIT_ID_SIZE` bytes.
unsafe fn write_id(id: *mut c_char, value: &str) {
    debug_assert!(value.len() < REDIS_RLOCK_PERMIT_ID_SIZE);
    // SAFETY: the caller's contract; the id is 32 ASCII bytes at most, plus the NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(value.as_ptr().cast::<c_char>(), id, value.len());
        id.add(value.len()).write(0);
    }
}

/// Creates the semaphore `name` with `permits` free permits (0 allowed, at most
/// `REDIS_RLOCK_SEMAPHORE_MAX_PERMITS`) if it does not exist; `*set` tells whether it was.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `set` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_try_set_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
    set: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        with_permits(m, name, Some(("set", set)), |s| {
            Ok(s.try_set_permits(permits)?)
        })
    }
}

/// Makes `permits` the number of permits of `name` in all, free and acquired (the free count
/// moves by the difference); creates the semaphore when it does not exist.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_set_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: u32,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_permits::<()>(m, name, None, |s| Ok(s.set_permits(permits)?)) }
}

/// Adds `permits` free permits to `name` (negative: takes them away; 0 is refused) and wakes
/// waiters when some were added.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_add_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: i32,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_permits::<()>(m, name, None, |s| Ok(s.add_permits(permits)?)) }
}

/// Takes one permit of `name`, waiting as long as it takes, and writes its id into `id`. With
/// `lease_ms` > 0 the permit is free again that long after it was taken unless released
/// first; 0: no lease. To end the wait from another thread, use
/// `redis_rlock_permit_expirable_semaphore_acquire_with`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `id` is NULL or
/// valid for a write of `REDIS_RLOCK_PERMIT_ID_SIZE` bytes.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_acquire(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    lease_ms: u64,
    id: *mut c_char,
) -> redis_rlock_result {
    let op = |s: &PermitExpirableSemaphore| {
        require_buffer(id)?;
        let taken = s.acquire(lease(lease_ms))?;
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { write_id(id, &taken) };
        Ok(())
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_permits::<()>(m, name, None, op) }
}

/// Takes one permit of `name` if one becomes free within `wait_ms` milliseconds (0: one
/// attempt); `lease_ms` as for `redis_rlock_permit_expirable_semaphore_acquire`. Returns
/// `REDIS_RLOCK_OK` either way, with `*acquired` telling whether a permit was taken and `id`
/// holding its id (or `""`).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `id` is NULL or
/// valid for a write of `REDIS_RLOCK_PERMIT_ID_SIZE` bytes; `acquired` is NULL or valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_try_acquire(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    lease_ms: u64,
    id: *mut c_char,
    acquired: *mut bool,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    let op = |s: &PermitExpirableSemaphore| {
        require_buffer(id)?;
        let taken = s.try_acquire(wait, lease(lease_ms))?;
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { write_id(id, taken.as_deref().unwrap_or("")) };
        Ok(taken.is_some())
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_permits(m, name, Some(("acquired", acquired)), op) }
}

/// Takes one permit of `name` as `opts` say (NULL: wait as long as it takes, no cancel token);
/// `lease_ms` as for `redis_rlock_permit_expirable_semaphore_acquire`. `REDIS_RLOCK_OK` with
/// `*acquired` telling whether a permit was taken and `id` holding its id (or `""`: the wait
/// passed); `REDIS_RLOCK_CANCELLED` when the cancel token was cancelled and
/// `REDIS_RLOCK_SHUTDOWN` when the manager was shut down, with no permit taken.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `opts` is NULL
/// or valid, and its `cancel` NULL or a live token; `id` is NULL or valid for a write of
/// `REDIS_RLOCK_PERMIT_ID_SIZE` bytes; `acquired` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_acquire_with(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    lease_ms: u64,
    opts: *const redis_rlock_wait_options,
    id: *mut c_char,
    acquired: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the caller's contract.
    let options = unsafe { wait_options(opts) };
    let op = |s: &PermitExpirableSemaphore| {
        require_buffer(id)?;
        let taken = s.acquire_with(lease(lease_ms), options)?;
        // SAFETY: not NULL, and writable by the caller's contract.
        unsafe { write_id(id, taken.as_deref().unwrap_or("")) };
        Ok(taken.is_some())
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_permits(m, name, Some(("acquired", acquired)), op) }
}

/// Gives back the permit `id` of `name`. An id that is not acquired (never was, released
/// already, or its lease ended) is `REDIS_RLOCK_NOT_HELD`; one that is not 32 hex characters,
/// `REDIS_RLOCK_INVALID_ARGUMENT`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` and `id` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_release(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    id: *const c_char,
) -> redis_rlock_result {
    let op = |s: &PermitExpirableSemaphore| {
        // SAFETY: the caller's contract.
        let id = unsafe { str_arg("id", id)? };
        Ok(s.release(id)?)
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_permits::<()>(m, name, None, op) }
}

/// Gives back the permit `id` of `name`; `*released` is false when it was not acquired.
///
/// # Safety
/// `m` is NULL or a live manager; `name` and `id` are NULL or NUL-terminated strings;
/// `released` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_try_release(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    id: *const c_char,
    released: *mut bool,
) -> redis_rlock_result {
    let op = |s: &PermitExpirableSemaphore| {
        // SAFETY: the caller's contract.
        let id = unsafe { str_arg("id", id)? };
        Ok(s.try_release(id)?)
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_permits(m, name, Some(("released", released)), op) }
}

/// Sets the lease of the acquired permit `id` of `name` to `lease_ms` (at least 1) from now;
/// `*updated` is false when the permit is not acquired.
///
/// # Safety
/// `m` is NULL or a live manager; `name` and `id` are NULL or NUL-terminated strings;
/// `updated` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_update_lease_time(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    id: *const c_char,
    lease_ms: u64,
    updated: *mut bool,
) -> redis_rlock_result {
    let op = |s: &PermitExpirableSemaphore| {
        // SAFETY: the caller's contract.
        let id = unsafe { str_arg("id", id)? };
        Ok(s.update_lease_time(id, Duration::from_millis(lease_ms))?)
    };
    // SAFETY: the same contract, passed on.
    unsafe { with_permits(m, name, Some(("updated", updated)), op) }
}

/// Sets `*permits` to how many permits of `name` are free (expired ones taken back first).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `permits` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_available_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: *mut u64,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        with_permits(m, name, Some(("permits", permits)), |s| {
            Ok(s.available_permits()?)
        })
    }
}

/// Sets `*permits` to how many permits of `name` are acquired and not expired.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `permits` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_permit_expirable_semaphore_acquired_permits(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    permits: *mut u64,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        with_permits(m, name, Some(("permits", permits)), |s| {
            Ok(s.acquired_permits()?)
        })
    }
}
