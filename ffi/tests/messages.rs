//! The C API's messages as a C program prints them, `"%s: %s"` of `redis_rlock_result_str`
//! and `redis_rlock_last_error` (examples/c/any_deployment.c does so): nothing is said twice.
//! Called from Rust through the crate's rlib, against a throwaway redis-server.

use redis_rlock_testkit as support;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;

use support::RedisServer;

// The rlib keeps its modules private; its exported symbols are linked by name, as C does.
extern crate redis_rlock_ffi;

const OK: c_int = 0;
const NOT_ACQUIRED: c_int = 1;
const NOT_HELD: c_int = 2;

extern "C" {
    fn redis_rlock_manager_new(url: *const c_char, out: *mut *mut c_void) -> c_int;
    fn redis_rlock_manager_free(m: *mut c_void);
    fn redis_rlock_try_lock(
        m: *mut c_void,
        name: *const c_char,
        wait_ms: u64,
        out: *mut *mut c_void,
    ) -> c_int;
    fn redis_rlock_unlock(g: *mut c_void) -> c_int;
    fn redis_rlock_result_str(result: c_int) -> *const c_char;
    fn redis_rlock_last_error() -> *const c_char;
}

/// What a C program prints for a failed call: the code's description, then the message.
fn printed(result: c_int) -> String {
    // SAFETY: both return valid NUL-terminated strings that the library owns.
    let (code, message) = unsafe {
        (
            CStr::from_ptr(redis_rlock_result_str(result)),
            CStr::from_ptr(redis_rlock_last_error()),
        )
    };
    format!("{}: {}", code.to_string_lossy(), message.to_string_lossy())
}

fn manager(server: &RedisServer) -> *mut c_void {
    let url = CString::new(server.url()).unwrap();
    let mut manager = ptr::null_mut();
    // SAFETY: a valid string and out pointer.
    let result = unsafe { redis_rlock_manager_new(url.as_ptr(), &mut manager) };
    assert_eq!(result, OK);
    manager
}

#[test]
fn a_wait_that_passed_is_said_once_and_a_lost_hold_explained_once() {
    let server = RedisServer::start();
    let (holder, other) = (manager(&server), manager(&server));
    let name = CString::new("ffi-messages").unwrap();
    let mut guard = ptr::null_mut();
    // SAFETY (every call below): live managers, a valid name, valid out pointers; each guard
    // is used once and ends with redis_rlock_unlock, which frees it.
    unsafe {
        let result = redis_rlock_try_lock(holder, name.as_ptr(), 0, &mut guard);
        assert_eq!(result, OK);

        // Another manager (another owner) finds it taken.
        let mut none = ptr::null_mut();
        let result = redis_rlock_try_lock(other, name.as_ptr(), 10, &mut none);
        assert_eq!(result, NOT_ACQUIRED);
        let text = printed(result);
        assert_eq!(text.matches("the wait passed").count(), 1, "{text}");
        assert!(text.contains("\"ffi-messages\""), "names the lock: {text}");

        // Taken away under its guard: the code's name, then the library's own explanation
        // (which says why, so the code's name adds no second one).
        let _: () = redis::cmd("DEL")
            .arg("ffi-messages")
            .query(&mut server.conn())
            .unwrap();
        let result = redis_rlock_unlock(guard);
        assert_eq!(result, NOT_HELD);
        let text = printed(result);
        assert!(
            text.starts_with("not held: lock \"ffi-messages\""),
            "{text}"
        );
        assert_eq!(text.matches("lease expired").count(), 1, "{text}");

        redis_rlock_manager_free(holder);
        redis_rlock_manager_free(other);
    }
}
