//! `redis_rlock_guard`: acquiring, releasing and inspecting locks from C.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::redis_rlock_result::{self, REDIS_RLOCK_NOT_ACQUIRED};
use super::boundary::{guarded, guarded_void, str_arg, write_out, Failure};
use super::cancel::{acquire_options, redis_rlock_lock_options};
use super::manager::{manager_arg, redis_rlock_manager};
use redis_rlock::LockGuard;
use redis_rlock::LockManager;
use redis_rlock::Result;

/// One hold on a lock, owned by the caller until `redis_rlock_unlock` or
/// `redis_rlock_guard_free`. The hold belongs to the thread that acquired it, but the guard may
/// be passed to another thread and released there.
pub struct redis_rlock_guard {
    guard: LockGuard,
}

/// The shared body of every acquire function (of every lock kind): checks the arguments, runs `acquire`, and
/// hands a new guard to C (or NULL with `REDIS_RLOCK_NOT_ACQUIRED`).
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
pub(super) unsafe fn acquire_into(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
    acquire: impl FnOnce(&LockManager, &str) -> Result<Option<LockGuard>>,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (all three): the caller's contract.
        unsafe { write_out("out", out, std::ptr::null_mut())? };
        let manager = unsafe { manager_arg(m)? };
        let name = unsafe { str_arg("name", name)? };
        match acquire(&manager, name)? {
            Some(guard) => {
                let handle = Box::into_raw(Box::new(redis_rlock_guard { guard }));
                // SAFETY: checked by write_out above.
                unsafe { out.write(handle) };
                Ok(())
            }
            None => Err(Failure::new(
                REDIS_RLOCK_NOT_ACQUIRED,
                format!("the wait passed without acquiring lock {name:?}"),
            )),
        }
    })
}

/// Acquires `name` as `opts` say (NULL: the defaults of `redis_rlock_lock_options_default`):
/// a wait limit, a fixed lease, a fencing token, and a cancel token that ends the wait with
/// `REDIS_RLOCK_CANCELLED`. `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed;
/// `REDIS_RLOCK_SHUTDOWN` when the manager was shut down. Ownership as for `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_lock`; `opts` is NULL or valid, and its `cancel` NULL or a live token.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_acquire(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    opts: *const redis_rlock_lock_options,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    let options = unsafe { acquire_options(opts) };
    // SAFETY: the same contract, passed on.
    unsafe { acquire_into(m, name, out, |manager, name| manager.acquire(name, options)) }
}

/// Waits as long as it takes to acquire `name`; the watchdog renews the lease until the guard
/// is unlocked or freed. The same thread locking again re-enters (the hold count goes up).
///
/// On `REDIS_RLOCK_OK`, `*out` is a new guard owned by the caller (free it with
/// `redis_rlock_unlock` or `redis_rlock_guard_free`); otherwise `*out` is NULL.
///
/// To end the wait from another thread, use `redis_rlock_acquire` with a cancel token in its
/// options (it returns `REDIS_RLOCK_CANCELLED`); their `wait_ms`, `lease_ms` and `fenced`
/// give the other forms (`redis_rlock_try_lock`, `_lock_with_lease`, `_lock_fenced`).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { acquire_into(m, name, out, |manager, name| manager.lock(name).map(Some)) }
}

/// Tries to acquire `name` for up to `wait_ms` milliseconds (0: one attempt), with the
/// watchdog. `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed. Ownership as for
/// `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_try_lock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe { acquire_into(m, name, out, |manager, name| manager.try_lock(name, wait)) }
}

/// Waits as long as it takes to acquire `name` with a fixed lease of `lease_ms` (at least 1,
/// at most 3153600000000, that is 100 years; never renewed). Ownership as for `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_lock_with_lease(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    lease_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let lease = Duration::from_millis(lease_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.lock_with_lease(name, lease).map(Some)
        })
    }
}

/// Tries to acquire `name` for up to `wait_ms` with a fixed lease of `lease_ms` (no
/// watchdog). `REDIS_RLOCK_NOT_ACQUIRED` with `*out` NULL when the wait passed. Ownership as
/// for `redis_rlock_lock`.
///
/// # Safety
/// As for `redis_rlock_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_try_lock_with_lease(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    lease_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let (wait, lease) = (
        Duration::from_millis(wait_ms),
        Duration::from_millis(lease_ms),
    );
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.try_lock_with_lease(name, wait, lease)
        })
    }
}

/// Releases the guard's hold and frees the guard, whatever the result: do not use `g`
/// afterwards. `REDIS_RLOCK_NOT_HELD` when the lock was no longer this owner's (nothing was
/// changed on Redis); `REDIS_RLOCK_INVALID_ARGUMENT` for NULL.
///
/// # Safety
/// `g` is NULL or a guard from one of the acquire functions that was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_unlock(g: *mut redis_rlock_guard) -> redis_rlock_result {
    if g.is_null() {
        return guarded(|| Err(Failure::invalid("guard is NULL")));
    }
    // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
    let handle = unsafe { Box::from_raw(g) };
    guarded(move || Ok(handle.guard.unlock()?))
}

/// Frees a guard, releasing its hold if it was not unlocked (a failure to release is only
/// logged; use `redis_rlock_unlock` to see it). NULL is ignored. Do not use `g` afterwards.
///
/// # Safety
/// `g` is NULL or a guard from one of the acquire functions that was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_guard_free(g: *mut redis_rlock_guard) {
    if g.is_null() {
        return;
    }
    // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw.
    let handle = unsafe { Box::from_raw(g) };
    guarded_void(move || drop(handle));
}

/// Deletes the lock `name` whoever holds it and wakes its waiters. `*released` (may be NULL)
/// tells whether it was held. A key of that name that is not a lock is left alone
/// (`REDIS_RLOCK_REDIS_ERROR`).
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `released` is
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_force_unlock(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    released: *mut bool,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (all): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let name = unsafe { str_arg("name", name)? };
        let was_held = manager.get_lock(name).force_unlock()?;
        if !released.is_null() {
            unsafe { released.write(was_held) };
        }
        Ok(())
    })
}

/// Sets `*locked` to whether anyone (any thread, process or client) holds `name`.
///
/// # Safety
/// `m` is NULL or a live manager; `name` is NULL or a NUL-terminated string; `locked` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_is_locked(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    locked: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { inspect(m, name, "locked", locked, |lock| lock.is_locked()) }
}

/// Sets `*held` to whether the calling thread holds `name` through this manager.
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_is_held_by_current_thread(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    held: *mut bool,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        inspect(m, name, "held", held, |lock| {
            lock.is_held_by_current_thread()
        })
    }
}

/// Sets `*count` to how many holds the calling thread has on `name` (0 when none).
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_hold_count(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    count: *mut u32,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { inspect(m, name, "count", count, |lock| lock.hold_count()) }
}

/// Sets `*ttl_ms` to the lock's remaining lease as Redis sees it, or 0 when nobody holds it.
///
/// # Safety
/// As for `redis_rlock_is_locked`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_remaining_ttl(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    ttl_ms: *mut u64,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        inspect(m, name, "ttl_ms", ttl_ms, |lock| {
            let ttl = lock.remaining_ttl()?;
            Ok(ttl.map_or(0, |ttl| ttl.as_millis() as u64))
        })
    }
}

/// Whether the guard's lock is lost as far as this client can tell, without I/O: the watchdog
/// found it gone, or the lease last confirmed by Redis ran out without a renewal. False for
/// NULL.
///
/// # Safety
/// `g` is NULL or a live guard.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_guard_is_lost(g: *const redis_rlock_guard) -> bool {
    // SAFETY: the caller's contract.
    let Some(handle) = (unsafe { g.as_ref() }) else {
        return false;
    };
    let mut lost = false;
    guarded_void(|| lost = handle.guard.is_lost());
    lost
}

/// Sets `*token` to the guard's fencing token and returns true, for guards from
/// `redis_rlock_lock_fenced` and `redis_rlock_try_lock_fenced`; returns false (and leaves
/// `*token`) for other guards and for NULL arguments.
///
/// # Safety
/// `g` is NULL or a live guard; `token` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_guard_fencing_token(
    g: *const redis_rlock_guard,
    token: *mut u64,
) -> bool {
    // SAFETY: the caller's contract.
    let (Some(handle), false) = ((unsafe { g.as_ref() }), token.is_null()) else {
        return false;
    };
    match handle.guard.fencing_token() {
        Some(value) => {
            // SAFETY: checked non-NULL above.
            unsafe { token.write(value) };
            true
        }
        None => false,
    }
}

/// Like `redis_rlock_lock`, and the guard carries a fencing token
/// (`redis_rlock_guard_fencing_token`) that strictly increases with every fenced acquisition
/// of `name`, by any client.
///
/// # Safety
/// As for `redis_rlock_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_lock_fenced(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.lock_fenced(name).map(Some)
        })
    }
}

/// Like `redis_rlock_try_lock`, with a fencing token as `redis_rlock_lock_fenced`.
///
/// # Safety
/// As for `redis_rlock_lock`.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_try_lock_fenced(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    wait_ms: u64,
    out: *mut *mut redis_rlock_guard,
) -> redis_rlock_result {
    let wait = Duration::from_millis(wait_ms);
    // SAFETY: the same contract, passed on.
    unsafe {
        acquire_into(m, name, out, |manager, name| {
            manager.try_lock_fenced(name, wait)
        })
    }
}

/// The shared body of the plain lock's inspection functions.
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
unsafe fn inspect<T>(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    what: &str,
    out: *mut T,
    query: impl FnOnce(&redis_rlock::Lock) -> Result<T>,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { inspect_as(m, name, what, out, LockManager::get_lock, query) }
}

/// The shared body of every kind's inspection functions: `query` asks the kind's handle on
/// `name`, made by `handle`.
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
pub(super) unsafe fn inspect_as<H, T>(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    what: &str,
    out: *mut T,
    handle: impl FnOnce(&LockManager, &str) -> H,
    query: impl FnOnce(&H) -> Result<T>,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (all): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let name = unsafe { str_arg("name", name)? };
        if out.is_null() {
            return Err(Failure::invalid(format!("{what} is NULL")));
        }
        let value = query(&handle(&manager, name))?;
        unsafe { write_out(what, out, value) }
    })
}
