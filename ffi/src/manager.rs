//! `redis_rlock_manager`: creating and freeing a manager from C, with its options.

use std::ffi::c_char;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::boundary::Failure;
use super::boundary::{guarded, guarded_void, redis_rlock_result, ref_arg, str_arg, write_out};
use redis_rlock::{LockManager, LockManagerBuilder};

/// A lock manager: a connection pool, one watchdog thread and one pub/sub listener thread.
///
/// Thread-safe: one manager may be shared by any number of threads, each calling any function
/// on it at the same time. Lock ownership (and so reentrancy) is per calling thread.
///
/// Per process: create the manager after any fork(), in the process that uses it. A child made
/// by fork() inherits the parent's connections, client id and thread numbers but not its
/// threads; there every call on an inherited manager or guard fails with
/// `REDIS_RLOCK_INVALID_ARGUMENT` and sends nothing, and `redis_rlock_manager_free` is safe.
pub struct redis_rlock_manager {
    manager: LockManager,
    /// The calls running on this handle, which `redis_rlock_manager_free` waits for. Shared
    /// with each call, so that the last one to end never touches freed memory.
    in_flight: Arc<InFlight>,
    /// The process that made it: in a child made by fork(), `free` neither shuts down nor
    /// waits (the calls counted are the parent's threads, which do not exist here).
    created_in: u32,
}

#[derive(Default)]
struct InFlight {
    calls: Mutex<usize>,
    ended: Condvar,
}

/// A call in flight on a manager handle: the manager to use, counted until dropped.
pub(super) struct Call<'a> {
    manager: &'a LockManager,
    in_flight: Arc<InFlight>,
}

impl Deref for Call<'_> {
    type Target = LockManager;

    fn deref(&self) -> &LockManager {
        self.manager
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let mut calls = self
            .in_flight
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *calls -= 1;
        self.in_flight.ended.notify_all();
    }
}

/// Checks `m` for NULL and counts a call on it until the result is dropped (see
/// `redis_rlock_manager_free`).
///
/// # Safety
/// `m` is NULL or a live manager, not being freed before this returns.
pub(super) unsafe fn manager_arg<'a>(m: *const redis_rlock_manager) -> Result<Call<'a>, Failure> {
    // SAFETY: the caller's contract.
    let handle = unsafe { ref_arg("manager", m)? };
    *handle
        .in_flight
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner()) += 1;
    Ok(Call {
        manager: &handle.manager,
        in_flight: Arc::clone(&handle.in_flight),
    })
}

/// The shared body of the calls on a named object without a handle (a count-down latch, a
/// permit-expirable semaphore): checks the manager, the name and the out pointer (`what`;
/// `None` for none) before anything is sent, then runs `op` on the object `get` makes for the
/// name and writes its value out.
///
/// # Safety
/// As for the exported functions: each pointer is NULL or valid.
pub(super) unsafe fn with_named<H, T>(
    m: *mut redis_rlock_manager,
    name: *const c_char,
    out: Option<(&str, *mut T)>,
    get: impl FnOnce(&LockManager, &str) -> H,
    op: impl FnOnce(&H) -> Result<T, Failure>,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (both): the caller's contract.
        let manager = unsafe { manager_arg(m)? };
        let name = unsafe { str_arg("name", name)? };
        if let Some((what, ptr)) = out {
            if ptr.is_null() {
                return Err(Failure::invalid(format!("{what} is NULL")));
            }
        }
        let value = op(&get(&manager, name))?;
        match out {
            // SAFETY: checked not NULL above, and writable by the caller's contract.
            Some((what, ptr)) => unsafe { write_out(what, ptr, value) },
            None => Ok(()),
        }
    })
}

/// Settings for `redis_rlock_manager_new_with_options`. A field left 0 takes its default; start
/// from `redis_rlock_options_default()` to see the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct redis_rlock_options {
    /// Lease of locks taken without an explicit lease, renewed every third of it while held.
    /// Default 30000; at least 500, at most 3153600000000 (100 years).
    pub watchdog_timeout_ms: u64,
    /// Most command connections the manager opens. Default 8.
    pub pool_size: u32,
    /// How long opening one connection may take. Default 5000.
    pub connect_timeout_ms: u64,
    /// How long Redis may take to answer one command. Default 3000.
    pub response_timeout_ms: u64,
}

/// The default options (every field filled in with its default value).
#[no_mangle]
pub extern "C" fn redis_rlock_options_default() -> redis_rlock_options {
    redis_rlock_options {
        watchdog_timeout_ms: LockManagerBuilder::DEFAULT_WATCHDOG_TIMEOUT.as_millis() as u64,
        pool_size: LockManagerBuilder::DEFAULT_POOL_SIZE as u32,
        connect_timeout_ms: LockManagerBuilder::DEFAULT_CONNECT_TIMEOUT.as_millis() as u64,
        response_timeout_ms: LockManagerBuilder::DEFAULT_RESPONSE_TIMEOUT.as_millis() as u64,
    }
}

/// Connects to Redis with the default options; see `redis_rlock_manager_new_with_options`.
///
/// # Safety
/// `url` is NULL or a NUL-terminated string; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_new(
    url: *const c_char,
    out: *mut *mut redis_rlock_manager,
) -> redis_rlock_result {
    // SAFETY: the same contract, passed on.
    unsafe { redis_rlock_manager_new_with_options(url, std::ptr::null(), out) }
}

/// Connects to Redis at `url` (`redis://[user:password@]host[:port][/db]`), loads the lock
/// scripts and starts the manager's two threads. `opts` may be NULL (all defaults).
///
/// On `REDIS_RLOCK_OK`, `*out` is a new manager that the caller owns and frees with
/// `redis_rlock_manager_free`; on failure `*out` is NULL. Errors: `REDIS_RLOCK_INVALID_ARGUMENT`
/// (NULL or non-UTF-8 `url`, unparseable URL, out-of-range option), `REDIS_RLOCK_REDIS_ERROR`
/// (Redis unreachable or refusing the credentials).
///
/// # Safety
/// `url` is NULL or a NUL-terminated string; `opts` is NULL or points to options; `out` is
/// NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_new_with_options(
    url: *const c_char,
    opts: *const redis_rlock_options,
    out: *mut *mut redis_rlock_manager,
) -> redis_rlock_result {
    guarded(|| {
        // SAFETY (all three): the caller's contract.
        unsafe { write_out("out", out, std::ptr::null_mut())? };
        let url = unsafe { str_arg("url", url)? };
        let opts = unsafe { opts.as_ref() }
            .copied()
            .unwrap_or(redis_rlock_options {
                watchdog_timeout_ms: 0,
                pool_size: 0,
                connect_timeout_ms: 0,
                response_timeout_ms: 0,
            });
        let manager = LockManager::builder(url)
            .watchdog_timeout(millis_or(
                opts.watchdog_timeout_ms,
                LockManagerBuilder::DEFAULT_WATCHDOG_TIMEOUT,
            ))
            .pool_size(match opts.pool_size {
                0 => LockManagerBuilder::DEFAULT_POOL_SIZE,
                n => n as usize,
            })
            .connect_timeout(millis_or(
                opts.connect_timeout_ms,
                LockManagerBuilder::DEFAULT_CONNECT_TIMEOUT,
            ))
            .response_timeout(millis_or(
                opts.response_timeout_ms,
                LockManagerBuilder::DEFAULT_RESPONSE_TIMEOUT,
            ))
            .build()?;
        let handle = Box::into_raw(Box::new(redis_rlock_manager {
            manager,
            in_flight: Arc::default(),
            created_in: std::process::id(),
        }));
        // SAFETY: checked above.
        unsafe { out.write(handle) };
        Ok(())
    })
}

fn millis_or(ms: u64, default: Duration) -> Duration {
    match ms {
        0 => default,
        ms => Duration::from_millis(ms),
    }
}

/// Shuts `m` down: every call waiting on it, in any thread (locks of every kind, semaphore
/// permits), returns `REDIS_RLOCK_SHUTDOWN` within milliseconds, holding nothing, and every
/// later acquire on it fails so without sending anything. Guards taken before keep working:
/// they unlock, and the watchdog renews them until then. Releases and inspection calls still
/// run. Idempotent; does not block. NULL is ignored.
///
/// # Safety
/// `m` is NULL or a live manager.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_shutdown(m: *const redis_rlock_manager) {
    // SAFETY: the caller's contract.
    if let Some(handle) = unsafe { m.as_ref() } {
        guarded_void(|| handle.manager.shutdown());
    }
}

/// Frees a manager. NULL is ignored.
///
/// Other threads may be blocked in calls on `m` meanwhile: it shuts `m` down first (as
/// `redis_rlock_manager_shutdown`), so they return `REDIS_RLOCK_SHUTDOWN`, waits for every
/// call in flight on `m` to return (within a response timeout: a call may be in the middle
/// of a round trip), and only then frees it. No call on `m` may *start* once this was called.
///
/// Guards still alive keep what they need, so they stay valid and may be unlocked or freed
/// later; the manager's threads stop and its connections close when the last of them is gone.
/// Do not use `m` afterwards.
///
/// In a child made by fork() after `m` was created, this returns normally without stopping
/// anything, waiting or sending anything: the threads and connections are the parent's, and
/// its copy is left untouched (the child's memory of it is not reclaimed).
///
/// # Safety
/// `m` is NULL or a manager from `redis_rlock_manager_new*` that was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn redis_rlock_manager_free(m: *mut redis_rlock_manager) {
    if m.is_null() {
        return;
    }
    // SAFETY: the caller's contract; calls in flight only read through shared references.
    let handle = unsafe { &*m };
    if handle.created_in == std::process::id() {
        guarded_void(|| {
            handle.manager.shutdown();
            let in_flight = &handle.in_flight;
            let mut calls = in_flight.calls.lock().unwrap_or_else(|e| e.into_inner());
            while *calls > 0 {
                calls = in_flight
                    .ended
                    .wait(calls)
                    .unwrap_or_else(|e| e.into_inner());
            }
        });
    }
    // SAFETY: the caller hands back ownership of a pointer made by Box::into_raw, and no
    // call uses it any more.
    let manager = unsafe { Box::from_raw(m) };
    guarded_void(move || drop(manager));
}
