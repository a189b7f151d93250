//! Result codes, the thread's last error message, the panic boundary, and the checks that turn
//! C arguments into Rust values.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_rlock::Error;

/// What a call did. The numbers are stable: C programs may store and compare them.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum redis_rlock_result {
    /// Success.
    REDIS_RLOCK_OK = 0,
    /// A `try_lock` wait passed without acquiring the lock; `*out` is NULL.
    REDIS_RLOCK_NOT_ACQUIRED = 1,
    /// The lock was no longer held by the guard's owner (lease expired, force-unlocked, or
    /// another owner has it), or the permit id given to a permit-expirable semaphore's release
    /// was not acquired (released already, or its lease ended); nothing was changed on Redis.
    REDIS_RLOCK_NOT_HELD = 2,
    /// Refused before anything was sent: a NULL pointer, a string that is not UTF-8, an empty
    /// or oversized name, a zero or out-of-range duration or permit count, a bad URL or
    /// option, a manager (or its guard) used in a child process made by fork() after the
    /// manager was created. Also a semaphore release that would take its count past
    /// `REDIS_RLOCK_SEMAPHORE_MAX_PERMITS` (refused by Redis; nothing was changed).
    REDIS_RLOCK_INVALID_ARGUMENT = 3,
    /// Redis could not be reached, refused the credentials, answered with an error (such as a
    /// key of the lock's name that is not a lock), or did not answer in time.
    REDIS_RLOCK_REDIS_ERROR = 4,
    /// A bug in redis-rlock: a Rust panic was caught at the API boundary.
    REDIS_RLOCK_PANIC = 5,
    /// The operating system refused a resource, such as a background thread.
    REDIS_RLOCK_SYSTEM_ERROR = 6,
    /// The call's cancel token (`redis_rlock_cancel_token_cancel`) was cancelled before it
    /// returned, or before it was made (nothing was sent then); nothing was left held.
    REDIS_RLOCK_CANCELLED = 7,
    /// The manager was shut down (`redis_rlock_manager_shutdown`, or
    /// `redis_rlock_manager_free` from another thread) before the call returned, or before it
    /// was made (nothing was sent then); nothing was left held.
    REDIS_RLOCK_SHUTDOWN = 8,
}

use redis_rlock_result::*;

/// Why a call failed: its result code and the message for `redis_rlock_last_error`.
pub(super) struct Failure {
    code: redis_rlock_result,
    message: String,
}

impl Failure {
    pub(super) fn new(code: redis_rlock_result, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(super) fn invalid(message: impl Into<String>) -> Self {
        Failure::new(REDIS_RLOCK_INVALID_ARGUMENT, message)
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        let code = match &err {
            Error::InvalidName { .. }
            | Error::InvalidArgument { .. }
            | Error::InvalidUrl { .. }
            | Error::Forked { .. } => REDIS_RLOCK_INVALID_ARGUMENT,
            Error::NotHeld { .. } | Error::PermitNotHeld { .. } => REDIS_RLOCK_NOT_HELD,
            Error::Connect { .. }
            | Error::Redis { .. }
            | Error::WrongType { .. }
            | Error::Timeout { .. }
            | Error::NotReplicated { .. } => REDIS_RLOCK_REDIS_ERROR,
            Error::ThreadSpawn { .. } => REDIS_RLOCK_SYSTEM_ERROR,
            Error::Cancelled { .. } => REDIS_RLOCK_CANCELLED,
            Error::Shutdown { .. } => REDIS_RLOCK_SHUTDOWN,
            // Several nodes' errors: the code of the last one asked.
            Error::Nodes { .. } if err.is_invalid_argument() => REDIS_RLOCK_INVALID_ARGUMENT,
            Error::Nodes { .. } => REDIS_RLOCK_REDIS_ERROR,
            // `Error` is non-exhaustive, so this crate cannot list every kind: one added to
            // redis-rlock later is reported as a failed call with its message until it is
            // given a code here.
            _ => REDIS_RLOCK_REDIS_ERROR,
        };
        Failure::new(code, err.to_string())
    }
}

thread_local! {
    /// The message of this thread's last failed call; C reads it through a pointer that stays
    /// valid until the next failure on this thread replaces it.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: String) {
    // A message cannot carry NUL into C; lock names may contain it in principle.
    let message = CString::new(message.replace('\0', "\\0")).expect("NULs were replaced");
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
}

/// Runs the body of an `extern "C"` function: a failure is recorded for
/// `redis_rlock_last_error` and returned as its code, and a panic is caught and returned as
/// `REDIS_RLOCK_PANIC`, since unwinding into C is undefined behaviour.
pub(super) fn guarded(body: impl FnOnce() -> Result<(), Failure>) -> redis_rlock_result {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => REDIS_RLOCK_OK,
        Ok(Err(failure)) => {
            set_last_error(failure.message);
            failure.code
        }
        Err(payload) => {
            set_last_error(format!(
                "panic inside redis-rlock: {}",
                panic_message(&*payload)
            ));
            REDIS_RLOCK_PANIC
        }
    }
}

/// The panic boundary for functions that return nothing (the `*_free` functions).
pub(super) fn guarded_void(body: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
        set_last_error(format!(
            "panic inside redis-rlock: {}",
            panic_message(&*payload)
        ));
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// A C string argument as `&str`: NULL and invalid UTF-8 are invalid arguments.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives the returned reference.
pub(super) unsafe fn str_arg<'a>(what: &str, ptr: *const c_char) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: not NULL, and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes.to_str().map_err(|err| {
        Failure::invalid(format!(
            "{what} is not valid UTF-8 (at byte {})",
            err.valid_up_to()
        ))
    })
}

/// A handle argument as a reference: NULL is an invalid argument.
///
/// # Safety
/// `ptr` is NULL or points to a live `T` that outlives the returned reference.
pub(super) unsafe fn ref_arg<'a, T>(what: &str, ptr: *const T) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract; as_ref checks NULL.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// Writes a result through an out pointer: NULL is an invalid argument.
///
/// # Safety
/// `ptr` is NULL or valid for a write of `T`.
pub(super) unsafe fn write_out<T>(what: &str, ptr: *mut T, value: T) -> Result<(), Failure> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: not NULL, and writable by the caller's contract.
    unsafe { ptr.write(value) };
    Ok(())
}

/// The message of the calling thread's last failed call, or `""` when none failed yet.
///
/// The string belongs to redis-rlock: do not free it. It stays valid until the next call that
/// fails on the same thread (successful calls leave it as it is, like `errno`), so copy it if
/// you need it longer.
#[no_mangle]
pub extern "C" fn redis_rlock_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

/// A short constant description of a result code (`"not held"`, ...), for messages. Never NULL;
/// an unknown code gives `"unknown result code"`. Do not free it. It names the code only, and
/// `redis_rlock_last_error()` says what happened, so `"%s: %s"` of the two says each thing once.
#[no_mangle]
pub extern "C" fn redis_rlock_result_str(result: c_int) -> *const c_char {
    // Only the code's name: the last error's message already says why (the wait passed, the
    // lease expired, ...), and is printed beside this.
    let text: &'static CStr = match result {
        0 => c"ok",
        1 => c"not acquired",
        2 => c"not held",
        3 => c"invalid argument",
        4 => c"Redis error",
        5 => c"panic inside redis-rlock",
        6 => c"system error",
        7 => c"cancelled",
        8 => c"shut down",
        _ => c"unknown result code",
    };
    text.as_ptr()
}

/// The library's version, such as `"0.1.0"`. Never NULL; do not free it.
#[no_mangle]
pub extern "C" fn redis_rlock_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(version) => version,
            Err(_) => panic!("the package version contains a NUL"),
        };
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: redis_rlock_last_error always returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(redis_rlock_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    /// What Redis' client says when nothing listens on port 1: a real failure, for the kinds
    /// of error that carry one (nobody outside redis-rlock can make one up).
    fn refused() -> redis_rlock::RedisFailure {
        let err = redis_rlock::LockManager::new("redis://127.0.0.1:1/")
            .expect_err("nothing listens on port 1");
        err.redis_failure().expect("a refused connection").clone()
    }

    #[test]
    fn a_panic_becomes_a_result_code_and_a_message() {
        let result = guarded(|| panic!("boom at the boundary"));
        assert_eq!(result, REDIS_RLOCK_PANIC);
        assert!(
            last_error().contains("boom at the boundary"),
            "{}",
            last_error()
        );
    }

    #[test]
    fn a_failure_sets_the_message_and_success_leaves_it() {
        let result = guarded(|| Err(Failure::invalid("name is NULL")));
        assert_eq!(result, REDIS_RLOCK_INVALID_ARGUMENT);
        assert_eq!(guarded(|| Ok(())), REDIS_RLOCK_OK);
        assert_eq!(last_error(), "name is NULL");
    }

    /// Every kind of error `redis_rlock::Error` has today, with its code. (The match in
    /// `From<Error>` needs a catch-all arm, `Error` being non-exhaustive: this test is what
    /// notices a kind mapped wrongly or left to it.)
    #[test]
    fn errors_map_to_stable_codes() {
        let cases = [
            (
                Error::InvalidName { reason: "r".into() },
                REDIS_RLOCK_INVALID_ARGUMENT,
            ),
            (
                Error::InvalidArgument {
                    what: "lease",
                    reason: "r".into(),
                },
                REDIS_RLOCK_INVALID_ARGUMENT,
            ),
            (
                Error::InvalidUrl { source: refused() },
                REDIS_RLOCK_INVALID_ARGUMENT,
            ),
            (
                Error::Forked {
                    created_in: 1,
                    used_in: 2,
                },
                REDIS_RLOCK_INVALID_ARGUMENT,
            ),
            (Error::NotHeld { name: "n".into() }, REDIS_RLOCK_NOT_HELD),
            (
                Error::PermitNotHeld {
                    name: "n".into(),
                    id: "i".into(),
                },
                REDIS_RLOCK_NOT_HELD,
            ),
            (
                Error::Connect { source: refused() },
                REDIS_RLOCK_REDIS_ERROR,
            ),
            (
                Error::Redis {
                    operation: "acquire",
                    source: refused(),
                },
                REDIS_RLOCK_REDIS_ERROR,
            ),
            (
                Error::WrongType { name: "n".into() },
                REDIS_RLOCK_REDIS_ERROR,
            ),
            (
                Error::Timeout {
                    operation: "acquire",
                    after: std::time::Duration::ZERO,
                },
                REDIS_RLOCK_REDIS_ERROR,
            ),
            (
                Error::NotReplicated {
                    operation: "acquire",
                    replicas: 1,
                    timeout: std::time::Duration::ZERO,
                },
                REDIS_RLOCK_REDIS_ERROR,
            ),
            (
                Error::ThreadSpawn {
                    source: std::io::Error::other("no threads left"),
                },
                REDIS_RLOCK_SYSTEM_ERROR,
            ),
        ];
        for (err, code) in cases {
            let shown = err.to_string();
            let failure = Failure::from(err);
            assert_eq!(failure.code, code, "{shown}");
            assert_eq!(failure.message, shown);
        }
        assert_eq!(REDIS_RLOCK_OK as c_int, 0);
        assert_eq!(REDIS_RLOCK_SYSTEM_ERROR as c_int, 6);
    }

    #[test]
    fn nul_in_a_message_does_not_truncate_or_panic() {
        set_last_error("lock \"a\0b\" failed".into());
        assert_eq!(last_error(), "lock \"a\\0b\" failed");
    }
}
