//! The C API of count-down latches and permit-expirable semaphores, called from Rust through
//! the extern functions as a C program calls them, against a throwaway redis-server.

use redis_rlock_testkit as support;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use support::RedisServer;

// The rlib keeps its modules private; its exported symbols are linked by name, as C does.
extern crate redis_rlock_ffi;

const OK: c_int = 0;
const NOT_HELD: c_int = 2;
const INVALID_ARGUMENT: c_int = 3;
const REDIS_ERROR: c_int = 4;
const ID_SIZE: usize = redis_rlock_ffi::REDIS_RLOCK_PERMIT_ID_SIZE;
/// Long enough for anything here on a loaded machine.
const PATIENCE_MS: u64 = 20_000;

type Manager = *mut c_void;

extern "C" {
    fn redis_rlock_manager_new(url: *const c_char, out: *mut Manager) -> c_int;
    fn redis_rlock_manager_free(m: Manager);
    fn redis_rlock_last_error() -> *const c_char;

    fn redis_rlock_count_down_latch_try_set_count(
        m: Manager,
        name: *const c_char,
        count: u64,
        set: *mut bool,
    ) -> c_int;
    fn redis_rlock_count_down_latch_count_down(m: Manager, name: *const c_char) -> c_int;
    fn redis_rlock_count_down_latch_count(
        m: Manager,
        name: *const c_char,
        count: *mut u64,
    ) -> c_int;
    fn redis_rlock_count_down_latch_wait(m: Manager, name: *const c_char) -> c_int;
    fn redis_rlock_count_down_latch_wait_timeout(
        m: Manager,
        name: *const c_char,
        timeout_ms: u64,
        opened: *mut bool,
    ) -> c_int;

    fn redis_rlock_permit_expirable_semaphore_try_set_permits(
        m: Manager,
        name: *const c_char,
        permits: u32,
        set: *mut bool,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_set_permits(
        m: Manager,
        name: *const c_char,
        permits: u32,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_add_permits(
        m: Manager,
        name: *const c_char,
        permits: i32,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_acquire(
        m: Manager,
        name: *const c_char,
        lease_ms: u64,
        id: *mut c_char,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_try_acquire(
        m: Manager,
        name: *const c_char,
        wait_ms: u64,
        lease_ms: u64,
        id: *mut c_char,
        acquired: *mut bool,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_release(
        m: Manager,
        name: *const c_char,
        id: *const c_char,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_try_release(
        m: Manager,
        name: *const c_char,
        id: *const c_char,
        released: *mut bool,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_update_lease_time(
        m: Manager,
        name: *const c_char,
        id: *const c_char,
        lease_ms: u64,
        updated: *mut bool,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_available_permits(
        m: Manager,
        name: *const c_char,
        permits: *mut u64,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_acquired_permits(
        m: Manager,
        name: *const c_char,
        permits: *mut u64,
    ) -> c_int;
}

/// A manager pointer that may be moved to another thread (the C API allows sharing one).
#[derive(Clone, Copy)]
struct Shared(Manager);
// SAFETY: a manager may be used by any number of threads at once (docs/C.md).
unsafe impl Send for Shared {}

fn manager(server: &RedisServer) -> Manager {
    let url = CString::new(server.url()).unwrap();
    let mut manager = ptr::null_mut();
    // SAFETY: a valid string and out pointer.
    assert_eq!(
        unsafe { redis_rlock_manager_new(url.as_ptr(), &mut manager) },
        OK
    );
    manager
}

fn last_error() -> String {
    // SAFETY: a valid NUL-terminated string that the library owns.
    unsafe { CStr::from_ptr(redis_rlock_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// The id a call wrote into `buffer`.
fn id_of(buffer: &[c_char; ID_SIZE]) -> CString {
    // SAFETY: the library NUL-terminated it.
    unsafe { CStr::from_ptr(buffer.as_ptr()) }.to_owned()
}

#[test]
fn a_latch_opens_for_a_c_waiter_after_its_count_downs() {
    let server = RedisServer::start();
    let m = manager(&server);
    let name = CString::new("ffi:latch").unwrap();
    let (mut set, mut count, mut opened) = (false, 0u64, true);
    // SAFETY (every call): a live manager, a valid name, valid out pointers.
    unsafe {
        assert_eq!(
            redis_rlock_count_down_latch_try_set_count(m, name.as_ptr(), 2, &mut set),
            OK
        );
        assert!(set);
        assert_eq!(
            redis_rlock_count_down_latch_try_set_count(m, name.as_ptr(), 9, &mut set),
            OK
        );
        assert!(!set, "still counting");
        assert_eq!(
            redis_rlock_count_down_latch_count(m, name.as_ptr(), &mut count),
            OK
        );
        assert_eq!(count, 2);
        assert_eq!(
            redis_rlock_count_down_latch_wait_timeout(m, name.as_ptr(), 0, &mut opened),
            OK
        );
        assert!(!opened);
    }

    let (tx, rx) = mpsc::channel();
    let shared = Shared(m);
    let waiter_name = name.clone();
    thread::spawn(move || {
        let shared = shared;
        let mut opened = false;
        let started = Instant::now();
        // SAFETY: the manager outlives this thread's call (the test waits for its report).
        let result = unsafe {
            redis_rlock_count_down_latch_wait_timeout(
                shared.0,
                waiter_name.as_ptr(),
                PATIENCE_MS,
                &mut opened,
            )
        };
        tx.send((result, opened, started.elapsed())).unwrap();
    });
    let mut conn = server.conn();
    let channel = "redisson_countdownlatch__channel__{ffi:latch}";
    assert!(support::await_subscribers(&mut conn, channel, 1));
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            redis_rlock_count_down_latch_count_down(m, name.as_ptr()),
            OK
        );
        assert_eq!(
            redis_rlock_count_down_latch_count_down(m, name.as_ptr()),
            OK
        );
    }
    let (result, opened, took) = rx.recv_timeout(Duration::from_millis(PATIENCE_MS)).unwrap();
    assert_eq!(result, OK);
    assert!(opened, "opened after {took:?}");

    // SAFETY: as above; NULL and zero are refused before anything is sent.
    unsafe {
        assert_eq!(
            redis_rlock_count_down_latch_count(m, name.as_ptr(), &mut count),
            OK
        );
        assert_eq!(count, 0);
        // Open: the wait without limit returns at once.
        assert_eq!(redis_rlock_count_down_latch_wait(m, name.as_ptr()), OK);
        assert_eq!(
            redis_rlock_count_down_latch_try_set_count(m, name.as_ptr(), 0, &mut set),
            INVALID_ARGUMENT
        );
        assert_eq!(
            redis_rlock_count_down_latch_wait_timeout(m, name.as_ptr(), 0, ptr::null_mut()),
            INVALID_ARGUMENT
        );
        assert!(last_error().contains("opened is NULL"), "{}", last_error());
        assert_eq!(
            redis_rlock_count_down_latch_count_down(m, ptr::null()),
            INVALID_ARGUMENT
        );
        let _: () = redis::cmd("HSET")
            .arg("ffi:hash")
            .arg("f")
            .arg("v")
            .query(&mut conn)
            .unwrap();
        let hash = CString::new("ffi:hash").unwrap();
        assert_eq!(
            redis_rlock_count_down_latch_count(m, hash.as_ptr(), &mut count),
            REDIS_ERROR
        );
        redis_rlock_manager_free(m);
    }
}

#[test]
fn permits_are_taken_released_extended_and_expire_through_c() {
    let server = RedisServer::start();
    let m = manager(&server);
    let name = CString::new("ffi:permits").unwrap();
    let (mut flag, mut permits) = (false, 0u64);
    let mut buffer = [0 as c_char; ID_SIZE];
    // SAFETY (every call): a live manager, a valid name, valid buffers and out pointers.
    unsafe {
        let n = name.as_ptr();
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_try_set_permits(m, n, 1, &mut flag),
            OK
        );
        assert!(flag);
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_acquire(m, n, 0, buffer.as_mut_ptr()),
            OK
        );
        let id = id_of(&buffer);
        assert_eq!(id.as_bytes().len(), 32, "{id:?}");
        assert!(id.to_str().unwrap().bytes().all(|b| b.is_ascii_hexdigit()));

        let mut other = [1 as c_char; ID_SIZE];
        let result = redis_rlock_permit_expirable_semaphore_try_acquire(
            m,
            n,
            0,
            0,
            other.as_mut_ptr(),
            &mut flag,
        );
        assert_eq!(result, OK);
        assert!(!flag, "none free");
        assert_eq!(id_of(&other).as_bytes(), b"", "no id");
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_available_permits(m, n, &mut permits),
            OK
        );
        assert_eq!(permits, 0);
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_acquired_permits(m, n, &mut permits),
            OK
        );
        assert_eq!(permits, 1);

        let result = redis_rlock_permit_expirable_semaphore_update_lease_time(
            m,
            n,
            id.as_ptr(),
            60_000,
            &mut flag,
        );
        assert_eq!(result, OK);
        assert!(flag, "extended");
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_release(m, n, id.as_ptr()),
            OK
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_release(m, n, id.as_ptr()),
            NOT_HELD
        );
        let said = format!("permit {id:?} of semaphore \"ffi:permits\" is not acquired");
        assert!(last_error().starts_with(&said), "{}", last_error());
        let result =
            redis_rlock_permit_expirable_semaphore_try_release(m, n, id.as_ptr(), &mut flag);
        assert_eq!(result, OK);
        assert!(!flag, "released already");

        // A 100 ms lease: a waiter gets the permit when it ends, with nobody releasing it.
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_acquire(m, n, 100, buffer.as_mut_ptr()),
            OK
        );
        let result = redis_rlock_permit_expirable_semaphore_try_acquire(
            m,
            n,
            PATIENCE_MS,
            0,
            other.as_mut_ptr(),
            &mut flag,
        );
        assert_eq!(result, OK);
        assert!(flag, "the expired permit came back");
        assert_ne!(id_of(&other), id_of(&buffer));

        assert_eq!(
            redis_rlock_permit_expirable_semaphore_set_permits(m, n, 3),
            OK
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_add_permits(m, n, -1),
            OK
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_available_permits(m, n, &mut permits),
            OK
        );
        assert_eq!(permits, 1, "3 in all, 1 acquired, 1 taken away");

        // Refused before anything is taken or sent.
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_acquire(m, n, 0, ptr::null_mut()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_acquired_permits(m, n, &mut permits),
            OK
        );
        assert_eq!(permits, 1, "nothing taken for a NULL buffer");
        let bad = CString::new("xyz").unwrap();
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_release(m, n, bad.as_ptr()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_release(m, n, ptr::null()),
            INVALID_ARGUMENT
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_add_permits(m, n, 0),
            INVALID_ARGUMENT
        );
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_try_set_permits(m, n, u32::MAX, &mut flag),
            INVALID_ARGUMENT
        );
        redis_rlock_manager_free(m);
    }
}
