//! Count-down latches from C: Redisson's `RCountDownLatch` by name, one call per operation.
//!
//! No handle type, as for semaphores: a latch is its name, and any thread or process may count
//! it down, so there is nothing to keep between calls but the manager.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{redis_rlock_result, Failure};
use super::cancel::{redis_rlock_wait_options, wait_options};
use super::manager::{redis_rlock_manager, with_named};
use redis_rlock::CountDownLatch;

/// The shared body: checks the arguments and the out pointer (`what`, NULL for none), then
/// runs `op` on the latch `name`.
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
unsafe fn with_latch<T>(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: Option<(&str, *mut T)>,
    op: impl FnOnce(&CountDownLatch) -> Result<T, Failure>,
) -> redis_rlock_result {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        with_named(
            m,
            name,
            out,
            |manager, name| manager.get_count_down_latch(name),
            op,
        )
    }
}

/// Sets the count of the latch `name` to `count` (1 to 2^63 - 1) if it is zero (open, or never
/// set); `*set` tells whether it was set. A latch still counting keeps its count.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `set` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_count_down_latch_try_set_count(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    count: u64,
    set: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_latch(m, name, Some(("set", set)), |l| Ok(l.try_set_count(count)?)) }
}

/// Takes one off the count of `name`; at zero every waiter, in any process, is woken. A latch
/// whose count is zero stays so. A lost reply is not sent again (`REDIS_RLOCK_REDIS_ERROR`: the
/// count may or may not have gone down).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_count_down_latch_count_down(
    m: *mut redis_rlock_manager,
    name: *const c_char,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_latch::<()>(m, name, None, |l| Ok(l.count_down()?)) }
}

/// Sets `*count` to the count of `name` right now (0 when open or never set).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `count` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_count_down_latch_count(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    count: *mut u64,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_latch(m, name, Some(("count", count)), |l| Ok(l.count()?)) }
}

/// Waits as long as it takes for the count of `name` to reach zero (as `std::sync::Condvar`'s
/// `wait`). `REDIS_RLOCK_OK` once it is zero; `REDIS_RLOCK_SHUTDOWN` when the manager was shut
/// down. A bounded wait is `redis_rlock_count_down_latch_wait_timeout`; to end the wait from
/// another thread, use `redis_rlock_count_down_latch_wait_with`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_count_down_latch_wait(
    m: *mut redis_rlock_manager,
    name: *const c_char,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { with_latch::<()>(m, name, None, |l| Ok(l.wait()?)) }
}

/// Waits up to `timeout_ms` milliseconds (0: one look) for the count of `name` to reach zero.
/// Returns `REDIS_RLOCK_OK` either way, with `*opened` telling whether it is zero.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `opened` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_count_down_latch_wait_timeout(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    timeout_ms: u64,
    opened: *mut bool,
) -> redis_rlock_result {
    let timeout = Duration::from_millis(timeout_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        with_latch(m, name, Some(("opened", opened)), |l| {
            Ok(l.wait_timeout(timeout)?)
        })
    }
}

/// Waits for the count of `name` to reach zero as `opts` say (NULL: as long as it takes, no
/// cancel token). `REDIS_RLOCK_OK` with `*opened` telling whether the count is zero (false:
/// the wait passed); `REDIS_RLOCK_CANCELLED` when the cancel token was cancelled and
/// `REDIS_RLOCK_SHUTDOWN` when the manager was shut down, with nothing left waiting.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `opts` is NULL
/// or valid, and its `cancel` NULL or a live token; `opened` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_count_down_latch_wait_with(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    opts: *const redis_rlock_wait_options,
    opened: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the caller's contract.
    let options = unsafe { wait_options(opts) };
    // SAFETY: the same contract, passed on.
    unsafe {
        with_latch(m, name, Some(("opened", opened)), |l| {
            Ok(l.wait_with(options)?)
        })
    }
}
