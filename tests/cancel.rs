//! Cancel tokens (`CancelToken`, issue 24): a blocked call of every kind returns
//! `Error::Cancelled` within milliseconds of `cancel()`, and leaves nothing behind: no hold,
//! no place in the manager's line or a fair lock's queue, no registration for a grant, no
//! grant or handoff afterwards; no permit taken. A token cancelled before the call sends
//! nothing.

use redis_rlock_testkit as support;

use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{AcquireOptions, CancelToken, Error, LockManager, RedLock, Result, WaitOptions};
use support::{eventually, RedisServer};

/// How long a cancelled wait may take to return: the target is a few ms; this only has to
/// never flake on a loaded 2-core machine.
const PROMPT: Duration = Duration::from_secs(1);
/// How long a waiter may take to be seen waiting.
const SETTLE: Duration = Duration::from_secs(10);

fn manager(server: &RedisServer) -> LockManager {
    LockManager::new(&server.url()).expect("manager")
}

/// Cancels `token`, waits for the blocked call in `waiter` to return, and checks it returned
/// `Cancelled` within [`PROMPT`]; prints the latency.
fn cancel_and_expect<T: std::fmt::Debug>(
    what: &str,
    token: &CancelToken,
    waiter: thread::JoinHandle<Result<T>>,
) {
    let cancelled = Instant::now();
    token.cancel();
    let outcome = waiter.join().expect("waiter thread");
    let latency = cancelled.elapsed();
    println!("{what}: returned {latency:?} after cancel()");
    match outcome {
        Err(err @ Error::Cancelled { .. }) => {
            assert!(err.is_cancelled() && !err.is_shutdown());
            assert!(err.to_string().contains("cancelled"), "{err}");
        }
        other => panic!("{what}: expected Cancelled, got {other:?}"),
    }
    assert!(latency < PROMPT, "{what}: {latency:?} after cancel()");
}

/// Owner fields in the waiters hash of `name` (the registrations for grants).
fn registrations(conn: &mut redis::Connection, name: &str) -> Vec<String> {
    let fields: Vec<String> = conn
        .hkeys(format!("redis_rlock__waiters:{{{name}}}"))
        .unwrap();
    fields.into_iter().filter(|f| f != "#").collect()
}

#[test]
fn a_lock_wait_without_limit_registered_for_a_grant_ends_at_cancel_and_gets_no_grant() {
    let server = RedisServer::start();
    let (holder, waiting) = (manager(&server), manager(&server));
    let mut conn = server.conn();
    let guard = holder.lock("cancel:grant").unwrap();
    let token = CancelToken::new();
    let waiter = {
        let (waiting, token) = (waiting.clone(), token.clone());
        thread::spawn(move || {
            waiting.acquire("cancel:grant", AcquireOptions::new().cancel_token(&token))
        })
    };
    // Registered for a grant: a release now would hand it the lock in Redis.
    assert!(eventually(SETTLE, || registrations(
        &mut conn,
        "cancel:grant"
    )
    .iter()
    .any(|f| f.starts_with(waiting.client_id()))));
    cancel_and_expect("lock()", &token, waiter);
    assert!(
        registrations(&mut conn, "cancel:grant").is_empty(),
        "STOP_WAITING ran"
    );
    assert_eq!(waiting.waiting_channel_count(), 0, "unsubscribed");
    guard.unlock().unwrap();
    // No grant to the cancelled waiter: the lock is free for anyone.
    assert!(!holder.get_lock("cancel:grant").is_locked().unwrap());
    assert_eq!(holder.stats().grants_given, 0);
    let again = waiting.try_lock("cancel:grant", Duration::ZERO).unwrap();
    assert!(
        again.is_some(),
        "the cancelled manager itself is not blocked either"
    );
}

#[test]
fn a_thread_queued_in_the_line_leaves_it_and_the_thread_ahead_is_not_starved() {
    let server = RedisServer::start();
    let (holder, local) = (manager(&server), manager(&server));
    let guard = holder.lock("cancel:line").unwrap();
    // The first local waiter has the turn; the second queues behind it.
    let first = support::Waiter::spawn(&local, "cancel:line");
    assert!(eventually(SETTLE, || local.waiting_channel_count() == 1));
    let token = CancelToken::new();
    let queued = {
        let (local, token) = (local.clone(), token.clone());
        thread::spawn(move || {
            local.acquire("cancel:line", AcquireOptions::new().cancel_token(&token))
        })
    };
    assert!(eventually(SETTLE, || local.queued_thread_count() == 1));
    cancel_and_expect("queued in the line", &token, queued);
    assert_eq!(local.queued_thread_count(), 0, "out of the line");
    let released = Instant::now();
    guard.unlock().unwrap();
    let took = first.acquired_since(released);
    println!("the thread ahead got the lock {took:?} after the release");
    assert!(!holder.get_lock("cancel:line").is_locked().unwrap());
}

#[test]
fn a_thread_queued_behind_the_local_holder_gets_no_handoff_after_its_cancel() {
    let server = RedisServer::start();
    let (other, local) = (manager(&server), manager(&server));
    let guard = other.lock("cancel:handoff").unwrap();
    // A local thread takes the turn, waits, and then holds the lock until told to let go.
    let (acquired_tx, acquired) = std::sync::mpsc::channel();
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let ahead = {
        let local = local.clone();
        thread::spawn(move || -> Result<()> {
            let guard = local.lock("cancel:handoff")?;
            acquired_tx.send(()).unwrap();
            go.recv().unwrap();
            guard.unlock()
        })
    };
    assert!(eventually(SETTLE, || local.waiting_channel_count() == 1));
    let token = CancelToken::new();
    let queued = {
        let (local, token) = (local.clone(), token.clone());
        thread::spawn(move || {
            local.acquire("cancel:handoff", AcquireOptions::new().cancel_token(&token))
        })
    };
    assert!(eventually(SETTLE, || local.queued_thread_count() == 1));
    guard.unlock().unwrap();
    acquired
        .recv_timeout(SETTLE)
        .expect("the thread ahead got the lock");
    cancel_and_expect("queued behind the local holder", &token, queued);
    assert_eq!(local.queued_thread_count(), 0);
    go_tx.send(()).unwrap();
    ahead.join().unwrap().unwrap();
    assert_eq!(
        local.stats().local_handoffs,
        0,
        "nothing handed to the cancelled thread"
    );
    assert!(!local.get_lock("cancel:handoff").is_locked().unwrap());
}

#[test]
fn a_fair_lock_waiter_leaves_the_redis_queue() {
    let server = RedisServer::start();
    let (holder, waiting) = (manager(&server), manager(&server));
    let mut conn = server.conn();
    let guard = holder.get_fair_lock("cancel:fair").lock().unwrap();
    let token = CancelToken::new();
    let waiter = {
        let (fair, token) = (waiting.get_fair_lock("cancel:fair"), token.clone());
        thread::spawn(move || fair.acquire(AcquireOptions::new().cancel_token(&token)))
    };
    let queue = "redisson_lock_queue:{cancel:fair}";
    assert!(eventually(SETTLE, || conn.llen::<_, usize>(queue).unwrap() == 1));
    cancel_and_expect("fair lock", &token, waiter);
    assert_eq!(conn.llen::<_, usize>(queue).unwrap(), 0, "out of the queue");
    let timeouts: usize = conn.zcard("redisson_lock_timeout:{cancel:fair}").unwrap();
    assert_eq!(timeouts, 0);
    guard.unlock().unwrap();
    assert!(!holder.get_fair_lock("cancel:fair").is_locked().unwrap());
}

#[test]
fn a_write_lock_waiter_behind_a_reader_ends_at_cancel() {
    let server = RedisServer::start();
    let (holder, waiting) = (manager(&server), manager(&server));
    let read = holder
        .get_read_write_lock("cancel:rw")
        .read_lock()
        .lock()
        .unwrap();
    let token = CancelToken::new();
    let waiter = {
        let (write, token) = (
            waiting.get_read_write_lock("cancel:rw").write_lock(),
            token.clone(),
        );
        thread::spawn(move || write.acquire(AcquireOptions::new().cancel_token(&token)))
    };
    assert!(eventually(SETTLE, || waiting.waiting_channel_count() == 1));
    cancel_and_expect("write lock", &token, waiter);
    read.unlock().unwrap();
    assert!(
        !holder.get_lock("cancel:rw").is_locked().unwrap(),
        "no write hold left"
    );
}

#[test]
fn a_semaphore_acquire_ends_at_cancel_and_takes_nothing() {
    let server = RedisServer::start();
    let manager = manager(&server);
    let semaphore = manager.get_semaphore("cancel:sem");
    assert!(semaphore.try_set_permits(0).unwrap());
    let token = CancelToken::new();
    let waiter = {
        let (semaphore, token) = (semaphore.clone(), token.clone());
        thread::spawn(move || semaphore.acquire_with(1, WaitOptions::new().cancel_token(&token)))
    };
    assert!(eventually(SETTLE, || manager.waiting_channel_count() == 1));
    cancel_and_expect("semaphore", &token, waiter);
    assert_eq!(manager.waiting_channel_count(), 0);
    semaphore.release(1).unwrap();
    assert_eq!(
        semaphore.available_permits().unwrap(),
        1,
        "the permit is left free"
    );
}

/// The ids in a permit-expirable semaphore's set of acquired permits (`{name}:timeout`).
fn acquired_ids(conn: &mut redis::Connection, name: &str) -> usize {
    conn.zcard(format!("{{{name}}}:timeout")).unwrap()
}

#[test]
fn a_permit_expirable_semaphore_acquire_ends_at_cancel_and_takes_nothing() {
    let server = RedisServer::start();
    let manager = manager(&server);
    let mut conn = server.conn();
    let semaphore = manager.get_permit_expirable_semaphore("cancel:pes");
    assert!(semaphore.try_set_permits(1).unwrap());
    let held = semaphore.acquire(None).unwrap();
    let token = CancelToken::new();
    let waiter = {
        let (semaphore, token) = (semaphore.clone(), token.clone());
        thread::spawn(move || {
            let options = WaitOptions::new().cancel_token(&token);
            semaphore.acquire_with(Some(Duration::from_secs(60)), options)
        })
    };
    assert!(eventually(SETTLE, || manager.waiting_channel_count() == 1));
    cancel_and_expect("permit-expirable semaphore", &token, waiter);
    assert_eq!(manager.waiting_channel_count(), 0);
    assert_eq!(
        acquired_ids(&mut conn, "cancel:pes"),
        1,
        "only the held permit"
    );
    semaphore.release(&held).unwrap();
    assert_eq!(
        semaphore.available_permits().unwrap(),
        1,
        "the permit released is left free"
    );
    assert_eq!(acquired_ids(&mut conn, "cancel:pes"), 0);
}

/// A cancel that races the release it waits for: either the waiter returns the permit, or it
/// returns `Cancelled` and the permit is free. Never both, never neither.
#[test]
fn a_cancel_racing_a_release_leaves_a_permit_held_or_free_never_lost() {
    let server = RedisServer::start();
    let manager = manager(&server);
    let mut conn = server.conn();
    let semaphore = manager.get_permit_expirable_semaphore("cancel:pes-race");
    assert!(semaphore.try_set_permits(1).unwrap());
    let (mut got, mut cancelled) = (0, 0);
    for _ in 0..100 {
        let held = semaphore.acquire(None).unwrap();
        let token = CancelToken::new();
        let waiter = {
            let (semaphore, token) = (semaphore.clone(), token.clone());
            thread::spawn(move || {
                semaphore.acquire_with(None, WaitOptions::new().cancel_token(&token))
            })
        };
        assert!(eventually(SETTLE, || manager.waiting_channel_count() == 1));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let canceller = {
            let (barrier, token) = (barrier.clone(), token.clone());
            thread::spawn(move || {
                barrier.wait();
                token.cancel();
            })
        };
        barrier.wait();
        semaphore.release(&held).unwrap();
        canceller.join().unwrap();
        match waiter.join().unwrap() {
            Ok(Some(id)) => {
                got += 1;
                assert_eq!(acquired_ids(&mut conn, "cancel:pes-race"), 1);
                semaphore.release(&id).unwrap();
            }
            Err(err) if err.is_cancelled() => cancelled += 1,
            other => panic!("expected a permit or Cancelled, got {other:?}"),
        }
        assert_eq!(
            acquired_ids(&mut conn, "cancel:pes-race"),
            0,
            "none left taken"
        );
        assert_eq!(semaphore.available_permits().unwrap(), 1, "none lost");
    }
    println!("100 races: {got} got the permit, {cancelled} were cancelled");
}

/// A permit-expirable semaphore's wait behind a proxy whose acquire attempt is held back at
/// the proxy when `stop` is called, then let through: the attempt takes the permit after the
/// stop, and the call gives it back before it returns the stop's error.
fn stopped_while_an_attempt_is_in_flight(
    name: &str,
    stop: impl FnOnce(&LockManager, &CancelToken),
) -> Error {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let (waiting, other) = (LockManager::new(&proxy.url()).unwrap(), manager(&server));
    let mut conn = server.conn();
    let semaphore = other.get_permit_expirable_semaphore(name);
    assert!(semaphore.try_set_permits(1).unwrap());
    let held = semaphore.acquire(None).unwrap();
    let token = CancelToken::new();
    let waiter = {
        let (semaphore, token) = (waiting.get_permit_expirable_semaphore(name), token.clone());
        thread::spawn(move || semaphore.acquire_with(None, WaitOptions::new().cancel_token(&token)))
    };
    assert!(eventually(SETTLE, || waiting.waiting_channel_count() == 1));
    let acquire = redis::Script::new(redis_rlock::lua::PERMIT_SEMAPHORE_ACQUIRE);
    proxy.hold_requests_containing(acquire.get_hash().as_bytes());
    // The release wakes the waiter, whose attempt (or its next poll) waits at the proxy.
    semaphore.release(&held).unwrap();
    assert!(eventually(SETTLE, || proxy.held() >= 1));
    stop(&waiting, &token);
    proxy.release_requests();
    let err = waiter.join().unwrap().expect_err("stopped");
    assert_eq!(
        acquired_ids(&mut conn, name),
        0,
        "the permit taken was given back"
    );
    assert_eq!(semaphore.available_permits().unwrap(), 1);
    err
}

#[test]
fn a_permit_taken_as_the_wait_was_stopped_is_given_back() {
    let cancelled = stopped_while_an_attempt_is_in_flight("cancel:pes-late", |_, token| {
        token.cancel();
    });
    assert!(cancelled.is_cancelled(), "{cancelled}");
    let shut = stopped_while_an_attempt_is_in_flight("cancel:pes-shut", |manager, _| {
        manager.shutdown();
    });
    assert!(shut.is_shutdown(), "{shut}");
}

#[test]
fn a_latch_wait_ends_at_cancel_and_wait_waits_without_limit() {
    let server = RedisServer::start();
    let manager = manager(&server);
    let latch = manager.get_count_down_latch("cancel:latch");
    assert!(latch.try_set_count(1).unwrap());
    let token = CancelToken::new();
    let waiter = {
        let (latch, token) = (latch.clone(), token.clone());
        thread::spawn(move || latch.wait_with(WaitOptions::new().cancel_token(&token)))
    };
    assert!(eventually(SETTLE, || manager.waiting_channel_count() == 1));
    cancel_and_expect("latch", &token, waiter);
    // Without a limit and without a token: returns when the count reaches zero.
    let forever = {
        let latch = latch.clone();
        thread::spawn(move || latch.wait())
    };
    assert!(eventually(SETTLE, || manager.waiting_channel_count() == 1));
    let opened = Instant::now();
    latch.count_down().unwrap();
    forever.join().unwrap().unwrap();
    println!("wait returned {:?} after the count-down", opened.elapsed());
}

#[test]
fn a_redlock_wait_ends_at_cancel_and_holds_nothing() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let managers: Vec<LockManager> = servers.iter().map(manager).collect();
    let others: Vec<LockManager> = servers[..2].iter().map(manager).collect();
    // Held on two of three masters by someone else: no round can win.
    let _held: Vec<_> = others
        .iter()
        .map(|m| m.lock("cancel:red").unwrap())
        .collect();
    let redlock = RedLock::new(managers.iter().map(|m| m.get_lock("cancel:red")).collect());
    let token = CancelToken::new();
    let started = managers[2].stats().acquisitions;
    let waiter = {
        let (redlock, token) = (redlock.clone(), token.clone());
        thread::spawn(move || {
            redlock
                .acquire(AcquireOptions::new().cancel_token(&token))
                .map(|guard| guard.is_some())
        })
    };
    // A few rounds have run (each takes the free master, then gives it back).
    assert!(eventually(SETTLE, || managers[2].stats().acquisitions >= started + 2));
    cancel_and_expect("RedLock", &token, waiter);
    assert!(
        !redlock.locks()[2].is_locked().unwrap(),
        "the free master is left free"
    );
}

#[test]
fn a_token_cancelled_before_the_call_sends_nothing() {
    let server = RedisServer::start();
    let manager = manager(&server);
    let token = CancelToken::new();
    token.cancel();
    let mut conn = server.conn();
    // The listener subscribes on its own thread after build: counted once it has, so that
    // only what the calls below send is compared.
    support::await_listener(&mut conn, &manager);
    let before = manager.stats();
    let evals_before = support::command_calls(&mut conn, "evalsha");
    let options = AcquireOptions::new().cancel_token(&token);
    let errors = [
        manager.acquire("cancel:early", options.clone()).map(drop),
        manager
            .get_fair_lock("cancel:early")
            .acquire(options.clone())
            .map(drop),
        manager
            .get_read_write_lock("cancel:early")
            .write_lock()
            .acquire(options.clone())
            .map(drop),
        manager
            .get_semaphore("cancel:early-sem")
            .acquire_with(1, WaitOptions::new().cancel_token(&token))
            .map(drop),
        manager
            .get_count_down_latch("cancel:early-latch")
            .wait_with(WaitOptions::new().cancel_token(&token))
            .map(drop),
        manager
            .get_permit_expirable_semaphore("cancel:early-pes")
            .acquire_with(None, WaitOptions::new().cancel_token(&token))
            .map(drop),
        RedLock::new(vec![manager.get_lock("cancel:early")])
            .acquire(options.clone())
            .map(drop),
    ];
    for outcome in errors {
        assert!(outcome.unwrap_err().is_cancelled());
    }
    assert_eq!(manager.stats().commands, before.commands, "no command sent");
    assert_eq!(support::command_calls(&mut conn, "evalsha"), evals_before);
    // Cancelling after the acquire changes nothing.
    let fresh = CancelToken::new();
    let guard = manager
        .acquire("cancel:after", AcquireOptions::new().cancel_token(&fresh))
        .unwrap()
        .expect("free");
    fresh.cancel();
    assert!(guard.lock().is_held_by_current_thread().unwrap());
    guard.unlock().unwrap();
}
