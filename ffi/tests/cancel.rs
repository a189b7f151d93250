//! Cancelling and shutting down from C (issue 24): `redis_rlock_cancel_token_*`, the option
//! structs, `redis_rlock_manager_shutdown`, and `redis_rlock_manager_free` while another
//! thread is blocked on the manager (it must wake that thread, wait for it, and only then
//! free). Called from Rust through the crate's rlib, against a throwaway redis-server.

use redis_rlock_testkit as support;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::thread;
use std::time::{Duration, Instant};

use support::{eventually, RedisServer};

extern crate redis_rlock_ffi;

const OK: c_int = 0;
const CANCELLED: c_int = 7;
const SHUTDOWN: c_int = 8;
const WAIT_FOREVER: u64 = u64::MAX;

/// How long a woken call may take to return (the target is a few ms).
const PROMPT: Duration = Duration::from_secs(1);
const SETTLE: Duration = Duration::from_secs(10);

#[repr(C)]
struct LockOptions {
    wait_ms: u64,
    lease_ms: u64,
    fenced: bool,
    cancel: *const c_void,
}

#[repr(C)]
struct WaitOptions {
    wait_ms: u64,
    cancel: *const c_void,
}

extern "C" {
    fn redis_rlock_manager_new(url: *const c_char, out: *mut *mut c_void) -> c_int;
    fn redis_rlock_manager_free(m: *mut c_void);
    fn redis_rlock_manager_shutdown(m: *const c_void);
    fn redis_rlock_lock(m: *mut c_void, name: *const c_char, out: *mut *mut c_void) -> c_int;
    fn redis_rlock_try_lock(
        m: *mut c_void,
        name: *const c_char,
        wait_ms: u64,
        out: *mut *mut c_void,
    ) -> c_int;
    fn redis_rlock_acquire(
        m: *mut c_void,
        name: *const c_char,
        opts: *const LockOptions,
        out: *mut *mut c_void,
    ) -> c_int;
    fn redis_rlock_lock_options_default() -> LockOptions;
    fn redis_rlock_wait_options_default() -> WaitOptions;
    fn redis_rlock_semaphore_try_set_permits(
        m: *mut c_void,
        name: *const c_char,
        permits: u32,
        set: *mut bool,
    ) -> c_int;
    fn redis_rlock_semaphore_acquire_with(
        m: *mut c_void,
        name: *const c_char,
        permits: u32,
        opts: *const WaitOptions,
        acquired: *mut bool,
    ) -> c_int;
    fn redis_rlock_count_down_latch_try_set_count(
        m: *mut c_void,
        name: *const c_char,
        count: u64,
        set: *mut bool,
    ) -> c_int;
    fn redis_rlock_count_down_latch_wait_with(
        m: *mut c_void,
        name: *const c_char,
        opts: *const WaitOptions,
        opened: *mut bool,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_try_set_permits(
        m: *mut c_void,
        name: *const c_char,
        permits: u32,
        set: *mut bool,
    ) -> c_int;
    fn redis_rlock_permit_expirable_semaphore_acquire_with(
        m: *mut c_void,
        name: *const c_char,
        lease_ms: u64,
        opts: *const WaitOptions,
        id: *mut c_char,
        acquired: *mut bool,
    ) -> c_int;
    fn redis_rlock_unlock(g: *mut c_void) -> c_int;
    fn redis_rlock_cancel_token_new() -> *mut c_void;
    fn redis_rlock_cancel_token_cancel(t: *const c_void);
    fn redis_rlock_cancel_token_is_cancelled(t: *const c_void) -> bool;
    fn redis_rlock_cancel_token_free(t: *mut c_void);
    fn redis_rlock_result_str(result: c_int) -> *const c_char;
}

/// A C pointer handed to another thread (the API is thread-safe).
#[derive(Clone, Copy)]
struct Shared(*mut c_void);
// SAFETY: the handles are thread-safe by the C API's contract.
unsafe impl Send for Shared {}

impl Shared {
    /// The pointer (a method, so that a closure captures the whole `Send` wrapper).
    fn get(self) -> *mut c_void {
        self.0
    }
}

fn manager(server: &RedisServer) -> Shared {
    let url = CString::new(server.url()).unwrap();
    let mut m = ptr::null_mut();
    // SAFETY: a valid string and out pointer.
    assert_eq!(unsafe { redis_rlock_manager_new(url.as_ptr(), &mut m) }, OK);
    Shared(m)
}

fn lock(m: Shared, name: &str) -> Shared {
    let name = CString::new(name).unwrap();
    let mut guard = ptr::null_mut();
    // SAFETY: a live manager, a valid string and out pointer.
    assert_eq!(
        unsafe { redis_rlock_lock(m.0, name.as_ptr(), &mut guard) },
        OK
    );
    Shared(guard)
}

/// Whether some owner is registered to wait for `name` (its entry in the waiters hash).
fn waiting(conn: &mut redis::Connection, name: &str) -> bool {
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("redis_rlock__waiters:{{{name}}}"))
        .query(conn)
        .unwrap();
    fields.iter().any(|f| f != "#")
}

/// Joins `waiter` and checks it returned `expected` within [`PROMPT`] of `since`.
fn expect_within(what: &str, since: Instant, waiter: thread::JoinHandle<c_int>, expected: c_int) {
    let result = waiter.join().expect("waiter thread");
    let latency = since.elapsed();
    println!("{what}: returned {result} {latency:?} after the call that woke it");
    assert_eq!(result, expected, "{what}");
    assert!(latency < PROMPT, "{what}: {latency:?}");
}

#[test]
fn a_cancel_token_ends_a_blocked_acquire_and_a_semaphore_wait() {
    let server = RedisServer::start();
    let (holder, m) = (manager(&server), manager(&server));
    let mut conn = server.conn();
    let held = lock(holder, "c:cancel");
    // SAFETY (all calls below): live handles, valid strings and pointers.
    let token = Shared(unsafe { redis_rlock_cancel_token_new() });
    let waiter = thread::spawn(move || {
        let mut opts = unsafe { redis_rlock_lock_options_default() };
        assert_eq!(opts.wait_ms, WAIT_FOREVER);
        opts.cancel = token.get();
        let name = CString::new("c:cancel").unwrap();
        let mut guard = ptr::null_mut();
        let result = unsafe { redis_rlock_acquire(m.get(), name.as_ptr(), &opts, &mut guard) };
        assert!(guard.is_null());
        result
    });
    assert!(eventually(SETTLE, || waiting(&mut conn, "c:cancel")));
    let cancelled = Instant::now();
    unsafe { redis_rlock_cancel_token_cancel(token.0) };
    expect_within("redis_rlock_acquire", cancelled, waiter, CANCELLED);
    assert!(!waiting(&mut conn, "c:cancel"), "no registration left");
    assert!(unsafe { redis_rlock_cancel_token_is_cancelled(token.0) });
    let text = unsafe { CStr::from_ptr(redis_rlock_result_str(CANCELLED)) };
    assert_eq!(text.to_str().unwrap(), "cancelled");

    // A semaphore wait given a token cancelled before the call: at once.
    let sem = CString::new("c:sem").unwrap();
    let mut set = false;
    assert_eq!(
        unsafe { redis_rlock_semaphore_try_set_permits(m.0, sem.as_ptr(), 0, &mut set) },
        OK
    );
    let mut opts = unsafe { redis_rlock_wait_options_default() };
    opts.cancel = token.0;
    let mut acquired = true;
    let result =
        unsafe { redis_rlock_semaphore_acquire_with(m.0, sem.as_ptr(), 1, &opts, &mut acquired) };
    assert_eq!(result, CANCELLED);
    unsafe { redis_rlock_cancel_token_free(token.0) };
    assert_eq!(unsafe { redis_rlock_unlock(held.0) }, OK);
    unsafe {
        redis_rlock_manager_free(m.0);
        redis_rlock_manager_free(holder.0);
    }
}

/// Starts a latch wait and a permit wait on `m` (the latch `latch` and the semaphore `permits`
/// were set up to block them), each with `opts` (`token`: its cancel token, or NULL).
fn spawn_latch_and_permit_waits(
    m: Shared,
    latch: &str,
    permits: &str,
    token: Shared,
) -> [thread::JoinHandle<c_int>; 2] {
    let (latch, permits) = (CString::new(latch).unwrap(), CString::new(permits).unwrap());
    // SAFETY (both threads): a live manager, valid strings, options and out pointers.
    let latch_wait = thread::spawn(move || {
        let mut opts = unsafe { redis_rlock_wait_options_default() };
        opts.cancel = token.get();
        let mut opened = true;
        let result = unsafe {
            redis_rlock_count_down_latch_wait_with(m.get(), latch.as_ptr(), &opts, &mut opened)
        };
        assert!(opened, "left as it was on an error");
        result
    });
    let permit_wait = thread::spawn(move || {
        let mut opts = unsafe { redis_rlock_wait_options_default() };
        opts.cancel = token.get();
        let (mut id, mut acquired) = ([0 as c_char; 33], false);
        unsafe {
            redis_rlock_permit_expirable_semaphore_acquire_with(
                m.get(),
                permits.as_ptr(),
                60_000,
                &opts,
                id.as_mut_ptr(),
                &mut acquired,
            )
        }
    });
    [latch_wait, permit_wait]
}

/// Sets the latch `latch` to 1 and the semaphore `permits` to 0 permits: waits on them block.
fn closed_latch_and_empty_semaphore(m: Shared, latch: &str, permits: &str) {
    let (latch, permits) = (CString::new(latch).unwrap(), CString::new(permits).unwrap());
    let mut set = false;
    // SAFETY: a live manager, valid strings and out pointers.
    unsafe {
        assert_eq!(
            redis_rlock_count_down_latch_try_set_count(m.0, latch.as_ptr(), 1, &mut set),
            OK
        );
        assert!(set);
        assert_eq!(
            redis_rlock_permit_expirable_semaphore_try_set_permits(
                m.0,
                permits.as_ptr(),
                0,
                &mut set
            ),
            OK
        );
        assert!(set);
    }
}

/// Whether some client is subscribed to `channel`.
fn subscribed(conn: &mut redis::Connection, channel: &str) -> bool {
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(conn)
        .unwrap();
    counts.iter().any(|(_, n)| *n > 0)
}

/// The permits acquired of the permit-expirable semaphore `name`, and its free count.
fn permits_of(conn: &mut redis::Connection, name: &str) -> (usize, Option<String>) {
    let acquired: usize = redis::cmd("ZCARD")
        .arg(format!("{{{name}}}:timeout"))
        .query(conn)
        .unwrap();
    let free: Option<String> = redis::cmd("GET").arg(name).query(conn).unwrap();
    (acquired, free)
}

#[test]
fn a_cancel_token_ends_a_latch_wait_and_a_permit_wait() {
    let server = RedisServer::start();
    let m = manager(&server);
    let mut conn = server.conn();
    closed_latch_and_empty_semaphore(m, "c:latch", "c:pes");
    // SAFETY (all calls below): live handles.
    let token = Shared(unsafe { redis_rlock_cancel_token_new() });
    let waits = spawn_latch_and_permit_waits(m, "c:latch", "c:pes", token);
    assert!(eventually(SETTLE, || {
        subscribed(&mut conn, "redisson_countdownlatch__channel__{c:latch}")
            && subscribed(&mut conn, "redisson_sc:{c:pes}")
    }));
    let cancelled = Instant::now();
    unsafe { redis_rlock_cancel_token_cancel(token.0) };
    let [latch_wait, permit_wait] = waits;
    expect_within(
        "redis_rlock_count_down_latch_wait_with",
        cancelled,
        latch_wait,
        CANCELLED,
    );
    expect_within(
        "redis_rlock_permit_expirable_semaphore_acquire_with",
        cancelled,
        permit_wait,
        CANCELLED,
    );
    assert_eq!(
        permits_of(&mut conn, "c:pes"),
        (0, Some("0".into())),
        "nothing taken"
    );
    let count: String = redis::cmd("GET").arg("c:latch").query(&mut conn).unwrap();
    assert_eq!(count, "1", "the latch is left as it was");
    unsafe {
        redis_rlock_cancel_token_free(token.0);
        redis_rlock_manager_free(m.0);
    }
}

#[test]
fn a_shutdown_ends_a_latch_wait_and_a_permit_wait() {
    let server = RedisServer::start();
    let m = manager(&server);
    let mut conn = server.conn();
    closed_latch_and_empty_semaphore(m, "c:shut-latch", "c:shut-pes");
    let no_token = Shared(ptr::null_mut());
    let waits = spawn_latch_and_permit_waits(m, "c:shut-latch", "c:shut-pes", no_token);
    assert!(eventually(SETTLE, || {
        subscribed(
            &mut conn,
            "redisson_countdownlatch__channel__{c:shut-latch}",
        ) && subscribed(&mut conn, "redisson_sc:{c:shut-pes}")
    }));
    let shut = Instant::now();
    // SAFETY: a live manager.
    unsafe { redis_rlock_manager_shutdown(m.0) };
    let [latch_wait, permit_wait] = waits;
    expect_within("latch wait (NULL token)", shut, latch_wait, SHUTDOWN);
    expect_within("permit wait (NULL token)", shut, permit_wait, SHUTDOWN);
    assert_eq!(
        permits_of(&mut conn, "c:shut-pes"),
        (0, Some("0".into())),
        "nothing taken"
    );
    // SAFETY: a live manager, freed once.
    unsafe { redis_rlock_manager_free(m.0) };
}

#[test]
fn freeing_a_manager_wakes_its_blocked_calls_and_waits_for_them() {
    let server = RedisServer::start();
    let (holder, m) = (manager(&server), manager(&server));
    let mut conn = server.conn();
    let held = lock(holder, "c:free");
    let mine = lock(m, "c:mine");
    // SAFETY (all calls below): live handles, valid strings and pointers.
    let waiter = thread::spawn(move || {
        let name = CString::new("c:free").unwrap();
        let mut guard = ptr::null_mut();
        unsafe { redis_rlock_acquire(m.get(), name.as_ptr(), ptr::null(), &mut guard) }
    });
    assert!(eventually(SETTLE, || waiting(&mut conn, "c:free")));
    let freeing = Instant::now();
    unsafe { redis_rlock_manager_free(m.0) };
    let freed = freeing.elapsed();
    println!("redis_rlock_manager_free returned {freed:?} after it was called");
    // Neither left waiting: free woke the call (it returns SHUTDOWN) and did not hang.
    assert!(freed < PROMPT, "{freed:?}");
    expect_within(
        "redis_rlock_acquire (NULL options)",
        freeing,
        waiter,
        SHUTDOWN,
    );
    assert!(!waiting(&mut conn, "c:free"), "no registration left");
    // A guard of the freed manager still unlocks.
    assert_eq!(unsafe { redis_rlock_unlock(mine.0) }, OK);
    assert_eq!(unsafe { redis_rlock_unlock(held.0) }, OK);
    unsafe { redis_rlock_manager_free(holder.0) };
}

#[test]
fn after_a_shutdown_acquires_fail_at_once() {
    let server = RedisServer::start();
    let m = manager(&server);
    let mine = lock(m, "c:shut-held");
    // SAFETY (all calls below): live handles, valid strings and pointers.
    unsafe { redis_rlock_manager_shutdown(m.0) };
    let name = CString::new("c:shut").unwrap();
    let mut guard = ptr::null_mut();
    let result = unsafe { redis_rlock_try_lock(m.0, name.as_ptr(), 0, &mut guard) };
    assert_eq!(result, SHUTDOWN);
    let text = unsafe { CStr::from_ptr(redis_rlock_result_str(SHUTDOWN)) };
    assert_eq!(text.to_str().unwrap(), "shut down");
    assert_eq!(
        unsafe { redis_rlock_unlock(mine.0) },
        OK,
        "guards keep working"
    );
    unsafe { redis_rlock_manager_free(m.0) };
}
