//! The C API's duration limits, called from Rust through the exported C functions (the same
//! symbols a C program links against): leases and watchdog timeouts beyond the longest the
//! crate accepts are refused with `REDIS_LOCK_INVALID_ARGUMENT`, promptly, and the longest
//! accepted ones work. The C programs in `examples/c/` (tests/c_api.rs) cover the rest of the
//! API; these limits need exact 64-bit values, simpler to drive from here.
#![cfg(feature = "capi")]
#![allow(unsafe_code)] // calling the C API is the point

// Linked for its exported C symbols; no Rust item of it is used.
extern crate redis_lock;

mod support;

use std::ffi::{c_char, CStr, CString};
use std::time::Duration;

use support::RedisServer;

/// `redis_lock_result` values from include/redis_lock.h.
const REDIS_LOCK_OK: i32 = 0;
const REDIS_LOCK_INVALID_ARGUMENT: i32 = 3;

/// The longest lease and watchdog timeout accepted, in ms: 100 years.
const MAX_LEASE_MS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

#[repr(C)]
#[derive(Clone, Copy)]
struct Options {
    watchdog_timeout_ms: u64,
    pool_size: u32,
    connect_timeout_ms: u64,
    response_timeout_ms: u64,
}

enum Manager {}
enum Guard {}

extern "C" {
    fn redis_lock_last_error() -> *const c_char;
    fn redis_lock_options_default() -> Options;
    fn redis_lock_manager_new_with_options(
        url: *const c_char,
        opts: *const Options,
        out: *mut *mut Manager,
    ) -> i32;
    fn redis_lock_manager_free(m: *mut Manager);
    fn redis_lock_lock_with_lease(
        m: *mut Manager,
        name: *const c_char,
        lease_ms: u64,
        out: *mut *mut Guard,
    ) -> i32;
    fn redis_lock_try_lock_with_lease(
        m: *mut Manager,
        name: *const c_char,
        wait_ms: u64,
        lease_ms: u64,
        out: *mut *mut Guard,
    ) -> i32;
    fn redis_lock_lock(m: *mut Manager, name: *const c_char, out: *mut *mut Guard) -> i32;
    fn redis_lock_unlock(g: *mut Guard) -> i32;
}

fn last_error() -> String {
    // SAFETY: the library returns a valid NUL-terminated string owned by this thread.
    unsafe { CStr::from_ptr(redis_lock_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A manager with watchdog timeout `watchdog_ms`, or the failed call's code and message.
fn manager(url: &str, watchdog_ms: u64) -> Result<*mut Manager, (i32, String)> {
    let url = CString::new(url).unwrap();
    // SAFETY: valid pointers for the duration of the calls.
    unsafe {
        let mut opts = redis_lock_options_default();
        opts.watchdog_timeout_ms = watchdog_ms;
        let mut m = std::ptr::null_mut();
        match redis_lock_manager_new_with_options(url.as_ptr(), &opts, &mut m) {
            REDIS_LOCK_OK => Ok(m),
            code => Err((code, last_error())),
        }
    }
}

/// Runs `body` on its own thread and fails if it takes longer than a minute (the bug guarded
/// against was an endless loop).
fn within_a_minute<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(body());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("returned within a minute")
}

#[test]
fn c_leases_and_watchdog_timeouts_beyond_the_maximum_are_invalid_arguments() {
    let server = RedisServer::start();
    let url = server.url();
    within_a_minute(move || {
        let err = manager(&url, MAX_LEASE_MS + 1).expect_err("refused");
        assert_eq!(err.0, REDIS_LOCK_INVALID_ARGUMENT, "{}", err.1);
        assert!(err.1.contains("watchdog timeout"), "{}", err.1);

        let m = manager(&url, MAX_LEASE_MS).expect("the longest watchdog timeout");
        let name = CString::new("c:longest").unwrap();
        // SAFETY: `m` is a live manager, `name` a C string, `g` valid for writes.
        unsafe {
            let mut g = std::ptr::null_mut();
            assert_eq!(redis_lock_lock(m, name.as_ptr(), &mut g), REDIS_LOCK_OK);
            assert_eq!(redis_lock_unlock(g), REDIS_LOCK_OK, "{}", last_error());

            let code = redis_lock_lock_with_lease(m, name.as_ptr(), MAX_LEASE_MS, &mut g);
            assert_eq!(code, REDIS_LOCK_OK, "{}", last_error());
            assert_eq!(redis_lock_unlock(g), REDIS_LOCK_OK, "{}", last_error());

            for lease_ms in [MAX_LEASE_MS + 1, 1 << 52, u64::MAX] {
                let code = redis_lock_lock_with_lease(m, name.as_ptr(), lease_ms, &mut g);
                assert_eq!(
                    code,
                    REDIS_LOCK_INVALID_ARGUMENT,
                    "{lease_ms}: {}",
                    last_error()
                );
                assert!(g.is_null());
                assert!(last_error().contains("lease"), "{}", last_error());
                let code = redis_lock_try_lock_with_lease(m, name.as_ptr(), 0, lease_ms, &mut g);
                assert_eq!(
                    code,
                    REDIS_LOCK_INVALID_ARGUMENT,
                    "{lease_ms}: {}",
                    last_error()
                );
            }
            redis_lock_manager_free(m);
        }
    });
}
