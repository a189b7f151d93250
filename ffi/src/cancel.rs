//! Cancelling blocking calls from C: `redis_rlock_cancel_token`, and the option structs that
//! carry a token (and a wait limit, a lease, fencing) to the acquire and wait functions.

use std::time::Duration;

use super::boundary::guarded_void;
use redis_rlock::{AcquireOptions, CancelToken, Lease, WaitOptions};

/// `wait_ms` of the option structs: wait as long as it takes.
pub const REDIS_RLOCK_WAIT_FOREVER: u64 = u64::MAX;

/// A cancellation flag: `redis_rlock_cancel_token_cancel` makes every call it was given to
/// (through `redis_rlock_lock_options.cancel` or `redis_rlock_wait_options.cancel`) return
/// `REDIS_RLOCK_CANCELLED` within milliseconds, holding nothing. A call given a token already
/// cancelled fails at once and sends nothing. Once cancelled it stays so.
///
/// Thread-safe: any thread may cancel it while others wait. A call copies what it needs of
/// the token when it starts, so the token may be freed once the calls given it have started;
/// the simplest rule is to free it after they returned.
pub struct redis_rlock_cancel_token {
    token: CancelToken,
}

/// A new token, not cancelled; free it with `redis_rlock_cancel_token_free`. Never NULL.
#[no_mangle]
pub extern "C" fn redis_rlock_cancel_token_new() -> *mut redis_rlock_cancel_token {
    Box::into_raw(Box::new(redis_rlock_cancel_token {
        token: CancelToken::new(),
    }))
}

/// Cancels `t`: every call waiting with it returns `REDIS_RLOCK_CANCELLED`, and later calls
/// given it fail so at once. Idempotent; does not block. NULL is ignored.
///
/// # Safety
/// `t` is NULL or a token from `redis_rlock_cancel_token_new` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_cancel_token_cancel(t: *const redis_rlock_cancel_token) {
    // SAFETY: the caller's contract.
    if let Some(t) = unsafe { t.as_ref() } {
        guarded_void(|| t.token.cancel());
    }
}

/// Whether `t` was cancelled (false for NULL).
///
/// # Safety
/// As for `redis_rlock_cancel_token_cancel`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_cancel_token_is_cancelled(
    t: *const redis_rlock_cancel_token,
) -> bool {
    // SAFETY: the caller's contract.
    unsafe { t.as_ref() }.is_some_and(|t| t.token.is_cancelled())
}

/// Frees a token (NULL is ignored). Calls that started with it are not affected: free it
/// after cancelling, not instead.
///
/// # Safety
/// `t` is NULL or a token from `redis_rlock_cancel_token_new` not yet freed, and no call
/// given it is starting on another thread.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_cancel_token_free(t: *mut redis_rlock_cancel_token) {
    if t.is_null() {
        return;
    }
    // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
    let token = unsafe { Box::from_raw(t) };
    guarded_void(move || drop(token));
}

/// How a lock is acquired by `redis_rlock_acquire` (and the fair, read and write variants).
/// Start from `redis_rlock_lock_options_default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct redis_rlock_lock_options {
    /// How long to wait at most, in ms: 0 makes one attempt; `REDIS_RLOCK_WAIT_FOREVER` (the
    /// default) waits as long as it takes.
    pub wait_ms: u64,
    /// A fixed lease in ms, never renewed; 0 (the default): the watchdog's lease, renewed
    /// while the guard lives.
    pub lease_ms: u64,
    /// Take a fencing token (`redis_rlock_guard_fencing_token`); not for read locks.
    pub fenced: bool,
    /// NULL (the default) or a token whose cancel ends the wait (`REDIS_RLOCK_CANCELLED`).
    pub cancel: *const redis_rlock_cancel_token,
}

/// What a wait for permits or a count asks for (`redis_rlock_semaphore_acquire_with`,
/// `redis_rlock_permit_expirable_semaphore_acquire_with`,
/// `redis_rlock_count_down_latch_wait_with`). Start from `redis_rlock_wait_options_default()`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct redis_rlock_wait_options {
    /// How long to wait at most, in ms: 0 makes one attempt; `REDIS_RLOCK_WAIT_FOREVER` (the
    /// default) waits as long as it takes.
    pub wait_ms: u64,
    /// NULL (the default) or a token whose cancel ends the wait (`REDIS_RLOCK_CANCELLED`).
    pub cancel: *const redis_rlock_cancel_token,
}

/// Wait as long as it takes, the watchdog's lease, no fencing token, no cancel token.
#[no_mangle]
pub extern "C" fn redis_rlock_lock_options_default() -> redis_rlock_lock_options {
    redis_rlock_lock_options {
        wait_ms: REDIS_RLOCK_WAIT_FOREVER,
        lease_ms: 0,
        fenced: false,
        cancel: std::ptr::null(),
    }
}

/// Wait as long as it takes, no cancel token.
#[no_mangle]
pub extern "C" fn redis_rlock_wait_options_default() -> redis_rlock_wait_options {
    redis_rlock_wait_options {
        wait_ms: REDIS_RLOCK_WAIT_FOREVER,
        cancel: std::ptr::null(),
    }
}

/// The token behind `t`, cloned (so the call keeps it whatever C does with `t` later).
///
/// # Safety
/// `t` is NULL or a live token.
unsafe fn token_of(t: *const redis_rlock_cancel_token) -> Option<CancelToken> {
    // SAFETY: the caller's contract.
    unsafe { t.as_ref() }.map(|t| t.token.clone())
}

/// The Rust options for `opts` (NULL: the defaults).
///
/// # Safety
/// `opts` is NULL or valid, and its `cancel` NULL or a live token.
pub(super) unsafe fn acquire_options(opts: *const redis_rlock_lock_options) -> AcquireOptions {
    // SAFETY: the caller's contract.
    let opts = unsafe { opts.as_ref() }
        .copied()
        .unwrap_or_else(|| redis_rlock_lock_options_default());
    let mut options = AcquireOptions::new().fenced(opts.fenced);
    if opts.wait_ms != REDIS_RLOCK_WAIT_FOREVER {
        options = options.wait(Duration::from_millis(opts.wait_ms));
    }
    if opts.lease_ms != 0 {
        options = options.lease(Lease::Fixed(Duration::from_millis(opts.lease_ms)));
    }
    // SAFETY: the caller's contract.
    if let Some(token) = unsafe { token_of(opts.cancel) } {
        options = options.cancel_token(&token);
    }
    options
}

/// The Rust options for `opts` (NULL: the defaults).
///
/// # Safety
/// As for [`acquire_options`].
pub(super) unsafe fn wait_options(opts: *const redis_rlock_wait_options) -> WaitOptions {
    // SAFETY: the caller's contract.
    let opts = unsafe { opts.as_ref() }
        .copied()
        .unwrap_or_else(|| redis_rlock_wait_options_default());
    let mut options = WaitOptions::new();
    if opts.wait_ms != REDIS_RLOCK_WAIT_FOREVER {
        options = options.wait(Duration::from_millis(opts.wait_ms));
    }
    // SAFETY: the caller's contract.
    if let Some(token) = unsafe { token_of(opts.cancel) } {
        options = options.cancel_token(&token);
    }
    options
}
