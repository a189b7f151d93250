//! A process stopped and continued (Ctrl-Z and `fg`, a debugger, a frozen container) while
//! it waits for Redis: Linux fails the pending read of a socket with a timeout with EINTR
//! then, with no signal handler installed (signal(7)). Nothing is wrong with Redis, so a
//! connect is made again, and a command that may be repeated is sent again, instead of
//! failing the caller.
//!
//! These tests stop their own process: they take turns, and nothing else runs in this binary.

use redis_rlock_testkit as support;

use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use redis_rlock::{LockManager, Result};
use support::RedisServer;

struct Recorder(Mutex<Vec<String>>);

impl log::Log for Recorder {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.target().starts_with("redis_rlock")
    }
    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap().push(format!("{}", record.args()));
        }
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));
static LOGGER: Once = Once::new();
/// Stopping the process stops every test's threads: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    LOGGER.call_once(|| {
        log::set_logger(&RECORDER).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Debug);
    });
    let turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    RECORDER.0.lock().unwrap().clear();
    turn
}

fn logged() -> Vec<String> {
    RECORDER.0.lock().unwrap().clone()
}

/// The id of the calling thread, as `/proc/self/task` lists it.
fn thread_id() -> String {
    let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    me.file_name().expect("tid").to_string_lossy().into_owned()
}

/// The scheduler state of thread `tid` of this process (`R`, `S`, `T`, ...).
fn thread_state(tid: &str) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("stat");
    // The name in parentheses may hold spaces: the state follows the last ')'.
    let after = &stat[stat.rfind(')').expect("comm") + 1..];
    after.trim_start().chars().next().expect("state")
}

/// Waits until thread `tid` has been asleep for a while: with the server frozen, it is then
/// blocked in its read (a lock or an allocation never sleeps 100 ms here).
fn await_blocked(tid: &str) {
    let started = Instant::now();
    let mut asleep_since: Option<Instant> = None;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "thread {tid} never blocked in its read"
        );
        match (thread_state(tid), asleep_since) {
            ('S', None) => asleep_since = Some(Instant::now()),
            ('S', Some(since)) if since.elapsed() > Duration::from_millis(100) => return,
            ('S', Some(_)) => {}
            _ => asleep_since = None,
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stops this whole process and continues it, as a shell's Ctrl-Z and `fg` would.
fn stop_and_continue_this_process() {
    let pid = std::process::id().to_string();
    let status = std::process::Command::new("sh")
        .args(["-c", "kill -STOP $1; sleep 0.3; kill -CONT $1", "sh", &pid])
        .status()
        .expect("run sh");
    assert!(status.success(), "stopping and continuing the test process");
}

/// Once every thread of `tids` is blocked (on the frozen `server`), stops and continues this
/// process, then thaws the server.
fn stop_while_blocked(server: &RedisServer, tids: &[&str]) {
    for tid in tids {
        await_blocked(tid);
    }
    stop_and_continue_this_process();
    server.thaw();
}

/// Runs `op` on a thread of its own, sending that thread's id first; returns the id too.
fn spawn_with_id<T: Send + 'static>(
    op: impl FnOnce() -> T + Send + 'static,
) -> (std::thread::JoinHandle<T>, String) {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        tid_tx.send(thread_id()).expect("send tid");
        op()
    });
    (thread, tid_rx.recv().expect("the thread's id"))
}

/// Runs `op` on a thread of its own while `server` is frozen, stops and continues this process
/// while `op` waits for its reply, thaws the server, and returns what `op` returned.
fn through_a_stop<T: Send + 'static>(
    server: &RedisServer,
    op: impl FnOnce() -> T + Send + 'static,
) -> T {
    server.freeze();
    let (running, tid) = spawn_with_id(op);
    stop_while_blocked(server, &[&tid]);
    running.join().expect("the thread")
}

/// Whether a log line contains `text`.
fn was_logged(text: &str) -> bool {
    logged().iter().any(|line| line.contains(text))
}

/// Fails the test unless a command's reply wait was interrupted and the command sent again:
/// otherwise the stop came at another moment and the run proved nothing.
fn assert_sent_again_after_an_interrupt() {
    assert!(
        was_logged("waiting for the reply was interrupted"),
        "the stop did not interrupt the command, so this run proved nothing; logged: {:?}",
        logged()
    );
}

/// Waits for `thread` to say it got past the stop; if it does not, shows how it ended.
fn await_step(
    step: &std::sync::mpsc::Receiver<()>,
    thread: std::thread::JoinHandle<Result<()>>,
) -> std::thread::JoinHandle<Result<()>> {
    if step.recv_timeout(Duration::from_secs(30)).is_err() {
        let outcome = thread.join().expect("the thread");
        panic!("failed after the stop: {outcome:?}; logged: {:?}", logged());
    }
    thread
}

/// The hold counts of lock `name` on the server, one per owner.
fn hold_counts(conn: &mut redis::Connection, name: &str) -> Vec<i64> {
    redis::cmd("HVALS").arg(name).query(conn).expect("HVALS")
}

fn exists(conn: &mut redis::Connection, name: &str) -> bool {
    redis::cmd("EXISTS").arg(name).query(conn).expect("EXISTS")
}

/// A builder whose timeouts no stop in these tests outlasts.
fn patient_builder(url: &str) -> redis_rlock::LockManagerBuilder {
    LockManager::builder(url)
        .connect_timeout(Duration::from_secs(60))
        .response_timeout(Duration::from_secs(60))
}

fn patient_manager(url: &str) -> Result<LockManager> {
    patient_builder(url).build()
}

#[test]
fn a_connect_interrupted_by_a_stop_and_continue_of_the_process_is_made_again() {
    let _turn = one_at_a_time();
    let server = RedisServer::start();
    // A frozen server accepts the TCP connection (the kernel does) but answers nothing: the
    // builder's first connect waits in its setup read (the SELECT of database 1) until the
    // server is thawed.
    let url = format!("{}1", server.url());
    let built = through_a_stop(&server, move || -> Result<()> {
        let manager = patient_manager(&url)?;
        let guard = manager.lock("after-a-stop")?;
        guard.unlock()
    });
    assert!(
        built.is_ok(),
        "the connect failed after the stop: {built:?}; logged: {:?}",
        logged()
    );
    assert!(
        was_logged("connecting to Redis was interrupted"),
        "the stop did not interrupt the connect, so this run proved nothing; logged: {:?}",
        logged()
    );
}

/// Runs `op` on a thread of its own while `proxy` holds back every request containing `held`,
/// stops and continues this process while `op` waits for that request's reply, lets the
/// requests through, and returns what `op` returned and how long it took from then. Fails
/// unless `logged_line` shows the interrupt (else the stop came at another moment and the run
/// proved nothing).
fn through_a_stop_at<T: Send + 'static>(
    proxy: &support::proxy::Proxy,
    held: &[u8],
    logged_line: &str,
    op: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    proxy.hold_requests_containing(held);
    let (running, tid) = spawn_with_id(op);
    assert!(
        support::eventually(Duration::from_secs(30), || proxy.held() >= 1),
        "{} was never sent",
        String::from_utf8_lossy(held)
    );
    await_blocked(&tid);
    stop_and_continue_this_process();
    let released = Instant::now();
    proxy.release_requests();
    let outcome = running.join().expect("the thread");
    let took = released.elapsed();
    assert!(
        was_logged(logged_line),
        "the stop did not interrupt the held request, so this run proved nothing; logged: {:?}",
        logged()
    );
    (outcome, took)
}

/// Builds a manager (and takes a lock) through a proxy, with the stop coming while the builder
/// waits for the reply to its request containing `held`; `build()` must then succeed.
fn build_through_a_stop_at(held: &[u8], logged_line: &str) {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let url = proxy.url();
    let (built, _) = through_a_stop_at(&proxy, held, logged_line, move || -> Result<()> {
        let manager = patient_manager(&url)?;
        let guard = manager.lock("after-an-interrupted-build")?;
        guard.unlock()
    });
    assert!(
        built.is_ok(),
        "build() failed after the stop: {built:?}; logged: {:?}",
        logged()
    );
}

/// Finding the deployment reads too (`INFO replication` here, which counts the replicas;
/// `CLUSTER SLOTS` or a sentinel's answer the same way): with a single server, seed or
/// sentinel there is nowhere else to ask, so an interrupted read is asked again rather than
/// failing `build()`.
#[test]
fn a_discovery_read_interrupted_by_a_stop_and_continue_is_asked_again() {
    let _turn = one_at_a_time();
    build_through_a_stop_at(b"replication", "waiting for a reply was interrupted");
}

/// The check of the right to subscribe (on a connection of its own) is made again.
#[test]
fn the_subscribe_rights_check_interrupted_by_a_stop_and_continue_is_made_again() {
    let _turn = one_at_a_time();
    build_through_a_stop_at(
        b"SUBSCRIBE",
        "checking the right to subscribe was interrupted",
    );
}

/// [`through_a_stop_at`] a `WAIT`.
fn through_a_stop_at_wait<T: Send + 'static>(
    proxy: &support::proxy::Proxy,
    op: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    through_a_stop_at(
        proxy,
        b"WAIT",
        "waiting for WAIT's reply was interrupted",
        op,
    )
}

/// Replica sync's `WAIT` is asked again on the same connection (with a 1 ms timeout, as the
/// first one still runs on the server): it counts the acknowledgements of the acquire that
/// connection just wrote, which is not rolled back.
#[test]
fn a_replica_wait_interrupted_by_a_stop_and_continue_is_asked_again() -> Result<()> {
    let _turn = one_at_a_time();
    let (master, _replica) = support::master_with_replica();
    let proxy = support::proxy::Proxy::start(master.port());
    let manager = patient_builder(&proxy.url())
        .replica_sync_timeout(Duration::from_secs(60))
        .build()?;
    let name = "interrupted-wait";
    let (locked, _) = through_a_stop_at_wait(&proxy, {
        let manager = manager.clone();
        move || -> Result<()> {
            let guard = manager.lock(name)?;
            // Each reply paired with its own command afterwards: a WAIT reply (1) read for
            // the count would pass the first check, not the second.
            assert_eq!(manager.get_lock(name).hold_count()?, 1, "held once");
            let again = manager.lock(name)?;
            assert_eq!(manager.get_lock(name).hold_count()?, 2, "held twice");
            again.unlock()?;
            guard.unlock()
        }
    });
    assert!(
        locked.is_ok(),
        "the acquire failed after the stop: {locked:?}; logged: {:?}",
        logged()
    );
    assert!(!exists(&mut master.conn(), name), "unlocked afterwards");
    Ok(())
}

/// The repeated `WAIT` keeps the call's time: with no replica acknowledging, the acquire
/// fails as soon as it does without a stop, not one replica sync timeout later (a repeat with
/// the full timeout would wait behind the first `WAIT` and then as long again).
#[test]
fn a_repeated_replica_wait_keeps_the_calls_time() -> Result<()> {
    const SYNC_TIMEOUT: Duration = Duration::from_secs(3);
    let _turn = one_at_a_time();
    let (master, replica) = support::master_with_replica();
    let proxy = support::proxy::Proxy::start(master.port());
    let manager = patient_builder(&proxy.url())
        .replica_sync_timeout(SYNC_TIMEOUT)
        .build()?;
    let name = "interrupted-unacknowledged-wait";
    // A frozen replica stays connected and acknowledges nothing: the acquire's WAIT, and the
    // rollback's, each take the whole timeout.
    replica.freeze();
    let started = Instant::now();
    let err = manager.lock(name).expect_err("no replica acknowledged");
    let without_a_stop = started.elapsed();
    assert!(err.is_not_replicated(), "{err:?}");
    let (locked, with_a_stop) = through_a_stop_at_wait(&proxy, {
        let manager = manager.clone();
        move || manager.lock(name).map(drop)
    });
    replica.thaw();
    let err = locked.expect_err("no replica acknowledged");
    assert!(err.is_not_replicated(), "{err:?}");
    assert!(
        with_a_stop < without_a_stop + SYNC_TIMEOUT / 2,
        "took {with_a_stop:?} after the stop against {without_a_stop:?} without: the repeated \
         WAIT waited a second replica sync timeout"
    );
    assert!(!exists(&mut master.conn(), name), "rolled back");
    Ok(())
}

#[test]
fn a_release_interrupted_by_a_stop_and_continue_of_the_process_is_sent_again_and_counted_once(
) -> Result<()> {
    let _turn = one_at_a_time();
    let server = RedisServer::start();
    let manager = patient_manager(&server.url())?;
    let name = "interrupted-release";
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (unlock_tx, unlock_rx) = std::sync::mpsc::channel::<()>();
    let (locking, tid) = {
        let manager = manager.clone();
        spawn_with_id(move || -> Result<()> {
            // Held twice: a release run twice would free the lock where once leaves it held.
            let outer = manager.lock(name)?;
            let inner = manager.lock(name)?;
            locked_tx.send(()).expect("test alive");
            unlock_rx.recv().expect("test alive");
            inner.unlock()?;
            locked_tx.send(()).expect("test alive");
            unlock_rx.recv().expect("test alive");
            outer.unlock()
        })
    };
    locked_rx.recv().expect("locked twice");
    server.freeze();
    unlock_tx.send(()).expect("locking thread alive");
    stop_while_blocked(&server, &[&tid]);
    let locking = await_step(&locked_rx, locking);
    assert_sent_again_after_an_interrupt();
    let mut conn = server.conn();
    assert_eq!(
        hold_counts(&mut conn, name),
        vec![1],
        "one of the two holds released, once"
    );
    unlock_tx.send(()).expect("locking thread alive");
    locking.join().expect("the locking thread")?;
    assert!(!exists(&mut conn, name), "the second unlock freed the lock");
    Ok(())
}

/// A force unlock sent again could delete the lock of whoever took it in between: when its
/// reply was interrupted the caller is told, as after any lost reply.
#[test]
fn a_force_unlock_interrupted_by_a_stop_and_continue_is_not_sent_again() -> Result<()> {
    let _turn = one_at_a_time();
    let server = RedisServer::start();
    let manager = patient_manager(&server.url())?;
    let other = patient_manager(&server.url())?;
    let name = "interrupted-force-unlock";
    let held = other.lock(name)?;
    // Warm up the pool: the force unlock goes out at once on the idle connection.
    assert!(manager.get_lock(name).is_locked()?);
    let forced = {
        let manager = manager.clone();
        through_a_stop(&server, move || manager.get_lock(name).force_unlock())
    };
    let err = forced.expect_err("an interrupted force unlock is an error");
    assert!(err.is_connection_error(), "{err:?}");
    assert!(
        !was_logged("waiting for the reply was interrupted; sending it again"),
        "sent again: {:?}",
        logged()
    );
    // It ran once, on the server, after the thaw.
    assert!(!manager.get_lock(name).is_locked()?);
    assert!(held.unlock().is_err(), "the old holder's lock was forced");
    Ok(())
}

#[test]
fn an_acquire_interrupted_by_a_stop_and_continue_of_the_process_is_sent_again_and_counted_once(
) -> Result<()> {
    let _turn = one_at_a_time();
    let server = RedisServer::start();
    let manager = patient_manager(&server.url())?;
    let name = "interrupted-acquire";
    // Warm up: the scripts are loaded and the pooled connection is idle, so the acquire
    // below goes out on it at once.
    manager.lock(name)?.unlock()?;

    server.freeze();
    let (unlock_tx, unlock_rx) = std::sync::mpsc::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (locking, tid) = {
        let manager = manager.clone();
        spawn_with_id(move || -> Result<()> {
            let guard = manager.lock(name)?;
            held_tx.send(()).expect("test alive");
            unlock_rx.recv().expect("test alive");
            guard.unlock()
        })
    };
    stop_while_blocked(&server, &[&tid]);

    let locking = await_step(&held_rx, locking);
    assert_sent_again_after_an_interrupt();
    // The first send (still in the frozen server's buffer when the connection was dropped)
    // and the repeat both reached the server; the attempt id makes them one hold.
    let mut conn = server.conn();
    assert_eq!(
        hold_counts(&mut conn, name),
        vec![1],
        "one hold, counted once"
    );
    unlock_tx.send(()).expect("locking thread alive");
    locking.join().expect("the locking thread")?;
    assert!(!exists(&mut conn, name), "one unlock freed the lock");
    Ok(())
}

/// The resend after an interrupt takes the place of the interrupted connection: a thread
/// waiting for a connection meanwhile must not get that place too, or the pool would grow
/// past its size and stay there.
#[test]
fn a_resend_after_an_interrupt_keeps_the_pool_within_its_size() -> Result<()> {
    let _turn = one_at_a_time();
    let server = RedisServer::start();
    let manager = patient_builder(&server.url()).pool_size(1).build()?;
    manager.lock("pool:warm-up")?.unlock()?;
    let mut conn = server.conn();
    let clients = |conn: &mut redis::Connection| -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(conn)
            .expect("CLIENT LIST");
        list.lines().count()
    };
    support::await_listener(&mut conn, &manager);
    // The listener, the pool's one connection, and this one.
    assert_eq!(clients(&mut conn), 3);

    server.freeze();
    let spawn_locker = |name: &'static str| {
        let manager = manager.clone();
        spawn_with_id(move || -> Result<()> { manager.lock(name)?.unlock() })
    };
    // One thread waits for its acquire's reply, the other for the pool's only connection.
    let (first, first_tid) = spawn_locker("pool:first");
    await_blocked(&first_tid);
    let (second, second_tid) = spawn_locker("pool:second");
    stop_while_blocked(&server, &[&second_tid]);
    first.join().expect("first thread")?;
    second.join().expect("second thread")?;
    assert_sent_again_after_an_interrupt();
    // The interrupted connection is closed; the resend's took its place.
    assert!(
        support::eventually(Duration::from_secs(10), || clients(&mut conn) == 3),
        "{} connections: the pool grew past its size",
        clients(&mut conn)
    );
    Ok(())
}

/// The pub/sub listener, always waiting in a read, is interrupted by every stop: it reads on
/// over the same connection (nothing was lost, the messages wait in the socket) instead of
/// reconnecting and making every waiter look again.
#[test]
fn the_listener_reads_on_after_a_stop_and_continue_of_the_process() -> Result<()> {
    let _turn = one_at_a_time();
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let other = LockManager::new(&server.url())?;
    let name = "listener-after-a-stop";
    let mut conn = server.conn();
    support::await_listener(&mut conn, &manager);
    let held = other.lock(name)?;
    let waiter = {
        let manager = manager.clone();
        std::thread::spawn(move || -> Result<()> { manager.lock(name)?.unlock() })
    };
    let channel = format!("redisson_lock__channel:{{{name}}}");
    assert!(support::await_subscribers(&mut conn, &channel, 1));

    stop_and_continue_this_process();
    assert!(
        support::eventually(Duration::from_secs(10), || was_logged(
            "the read was interrupted; reading on"
        )),
        "the stop did not interrupt the listener's read, so this run proved nothing; logged: {:?}",
        logged()
    );
    // The waiter is woken through the same subscription.
    held.unlock()?;
    waiter.join().expect("the waiter")?;
    assert!(
        !was_logged("pub/sub connection"),
        "a listener reconnected: {:?}",
        logged()
    );
    assert_eq!(manager.stats().reconnects, 0);
    assert_eq!(other.stats().reconnects, 0);
    Ok(())
}
