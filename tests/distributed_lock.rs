//! One API shape: every method of `DistributedLock`, run by one generic function on each of
//! the five kinds (`Lock`, `FairLock`, `SpinLock`, `ReadLock`, `WriteLock`) and through
//! `dyn DistributedLock`, checked against the server's hash and Redisson's `RLock` meaning
//! for each kind; the read and write halves' own answers; `MultiLock` and `RedLock`'s lease
//! shorthands; `MultiLockGuard::lost_signal`; the latch's `wait` and `wait_timeout`.

use redis_rlock_testkit as support;

use std::collections::HashMap;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{
    AcquireOptions, DistributedLock, Error, Lease, LockManager, MultiLock, RedLock, Result,
};
use support::RedisServer;

/// Far more than any step here takes on a loaded machine, and far less than the watchdog's
/// 30 s lease: a waiter that gets the lock within it was woken, not let in by the expiry.
const PATIENCE: Duration = Duration::from_secs(10);

/// A fixed lease long enough never to run out during a test.
const LEASE: Duration = Duration::from_secs(60);

/// How a kind keeps its holds in the lock's hash.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hash {
    /// The reentrant lock's hash (lock, fair lock, spin lock): one field per owner, no mode.
    Plain,
    /// A read-write lock in `read` mode, the reader's field being the owner.
    Read,
    /// A read-write lock in `write` mode, the writer's field being `<owner>:write`.
    Write,
}

impl Hash {
    fn mode(self) -> Option<&'static str> {
        match self {
            Hash::Plain => None,
            Hash::Read => Some("read"),
            Hash::Write => Some("write"),
        }
    }

    /// The hold count in the holder's field, as the server has it (`None`: no such field).
    fn holds(self, fields: &HashMap<String, String>) -> Option<u32> {
        let mut counts = fields.iter().filter(|(field, _)| match self {
            Hash::Plain | Hash::Read => *field != "mode" && !field.ends_with(":write"),
            Hash::Write => field.ends_with(":write"),
        });
        let (_, count) = counts.next()?;
        assert!(counts.next().is_none(), "one holder: {fields:?}");
        Some(count.parse().expect("a hold count"))
    }
}

/// How to see from the server that a waiter of a kind waits.
#[derive(Clone, Debug)]
enum Waiting {
    /// Subscribed to this channel.
    Subscribed(String),
    /// In this fair-lock queue.
    Queued(String),
    /// Polling (a spin lock): a few more scripts run than before it started.
    Polling,
}

impl Waiting {
    fn seen(&self, conn: &mut redis::Connection, scripts_before: u64) -> bool {
        match self {
            Waiting::Subscribed(channel) => support::numsub(conn, channel) >= 1,
            Waiting::Queued(queue) => conn.llen::<_, i64>(queue).unwrap() >= 1,
            Waiting::Polling => support::command_calls(conn, "evalsha") >= scripts_before + 5,
        }
    }
}

fn hash(conn: &mut redis::Connection, name: &str) -> HashMap<String, String> {
    conn.hgetall(name).unwrap()
}

fn pttl(conn: &mut redis::Connection, name: &str) -> i64 {
    redis::cmd("PTTL").arg(name).query(conn).unwrap()
}

/// Checks the hash of `name` against `shape` held with `holds` holds by one owner.
fn assert_hash(conn: &mut redis::Connection, name: &str, shape: Hash, holds: u32) {
    let fields = hash(conn, name);
    assert_eq!(
        fields.get("mode").map(String::as_str),
        shape.mode(),
        "{fields:?}"
    );
    assert_eq!(shape.holds(&fields), Some(holds), "{fields:?}");
}

/// Every method of `lock`, generic over the kind (and unsized, so a `dyn DistributedLock`
/// runs it too). `waiter` is a lock of another manager on the same name that must wait while
/// `lock` is held (the same kind, except for a read lock, whose rival is a writer).
fn every_method<L: DistributedLock + ?Sized>(
    server: &RedisServer,
    lock: &L,
    waiter: Arc<dyn DistributedLock>,
    shape: Hash,
    waiting: Waiting,
) -> Result<()> {
    let mut conn = server.conn();
    let name = lock.name().to_owned();
    assert_eq!(waiter.name(), name);

    // Free: nothing held, nothing to force.
    assert!(!lock.is_locked()?);
    assert!(!lock.is_held_by_current_thread()?);
    assert_eq!(lock.hold_count()?, 0);
    assert_eq!(lock.remaining_ttl()?, None);
    assert!(
        !lock.force_unlock()?,
        "force_unlock of a free lock is false"
    );

    // lock(): one hold, watchdog lease, seen by the server and by the other manager.
    let first = lock.lock()?;
    assert_eq!(first.lease(), None, "watchdog lease");
    assert_hash(&mut conn, &name, shape, 1);
    assert!(lock.is_locked()?);
    assert!(lock.is_held_by_current_thread()?);
    assert_eq!(lock.hold_count()?, 1);
    let ttl = lock.remaining_ttl()?.expect("held, so a TTL");
    assert!(
        ttl <= Duration::from_secs(30) && ttl > Duration::from_secs(20),
        "{ttl:?}"
    );
    assert!(!waiter.is_held_by_current_thread()?);
    assert_eq!(waiter.hold_count()?, 0);
    // Redisson's isLocked of a read-write half asks whether the hash is in *its* mode.
    assert_eq!(waiter.is_locked()?, shape != Hash::Read);
    assert!(waiter.try_lock(Duration::ZERO)?.is_none(), "excluded");

    // The other shorthands re-enter from this thread, each one hold more.
    let again = lock.try_lock(Duration::ZERO)?.expect("re-entered");
    assert_eq!(lock.hold_count()?, 2);
    assert_hash(&mut conn, &name, shape, 2);
    again.unlock()?;
    let leased = lock.lock_with_lease(LEASE)?;
    assert_eq!(leased.lease(), Some(LEASE));
    assert_eq!(lock.hold_count()?, 2);
    drop(leased);
    let leased = lock
        .try_lock_with_lease(Duration::ZERO, LEASE)?
        .expect("re-entered");
    assert_eq!(leased.lease(), Some(LEASE));
    drop(leased);
    let general = lock
        .acquire(AcquireOptions::new().wait(Duration::from_secs(1)))?
        .expect("re-entered");
    assert_eq!(lock.hold_count()?, 2);
    drop(general);
    fenced_shorthands(lock, &mut conn, shape)?;
    assert_hash(&mut conn, &name, shape, 1);

    // force_unlock wakes a waiter: it gets the lock long before the 30 s lease would end.
    let (got_tx, got) = mpsc::channel();
    let scripts_before = support::command_calls(&mut conn, "evalsha");
    let rival = waiter_thread(waiter, got_tx);
    assert!(
        support::eventually(PATIENCE, || waiting.seen(&mut conn, scripts_before)),
        "the waiter does not wait"
    );
    assert!(lock.force_unlock()?, "force_unlock of a held lock is true");
    got.recv_timeout(PATIENCE)
        .expect("the waiter was not woken");
    assert!(!lock.is_held_by_current_thread()?);
    assert_eq!(lock.hold_count()?, 0);
    assert!(
        matches!(first.unlock(), Err(Error::NotHeld { .. })),
        "the forced-out hold is gone"
    );
    rival.join().unwrap()?;
    assert!(!lock.is_locked()?);
    assert_eq!(hash(&mut conn, &name), HashMap::new());
    Ok(())
}

/// `lock_fenced` and `try_lock_fenced` (re-entries here): increasing tokens from the name's
/// counter; a read lock refuses them, as its holds are shared.
fn fenced_shorthands<L: DistributedLock + ?Sized>(
    lock: &L,
    conn: &mut redis::Connection,
    shape: Hash,
) -> Result<()> {
    if shape == Hash::Read {
        assert!(matches!(
            lock.lock_fenced(),
            Err(Error::InvalidArgument { .. })
        ));
        let refused = lock.try_lock_fenced(Duration::ZERO);
        assert!(matches!(refused, Err(Error::InvalidArgument { .. })));
        return Ok(());
    }
    let one = lock.lock_fenced()?.fencing_token().expect("a token");
    let guard = lock.try_lock_fenced(Duration::ZERO)?.expect("re-entered");
    let two = guard.fencing_token().expect("a token");
    assert!(two > one, "{two} after {one}");
    let counter: u64 = conn
        .get(format!("redisson_lock_token:{{{}}}", lock.name()))
        .unwrap();
    assert_eq!(counter, two);
    Ok(())
}

/// A thread that waits for `lock` (as long as it takes, through the trait object), reports
/// when it got it, and releases it.
fn waiter_thread(
    lock: Arc<dyn DistributedLock>,
    got: mpsc::Sender<()>,
) -> thread::JoinHandle<Result<()>> {
    thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(60))?.expect("woken");
        got.send(()).unwrap();
        guard.unlock()
    })
}

fn two_managers(server: &RedisServer) -> Result<(LockManager, LockManager)> {
    Ok((
        LockManager::new(&server.url())?,
        LockManager::new(&server.url())?,
    ))
}

#[test]
fn a_lock_answers_every_method_as_redissons_rlock() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let waiting = Waiting::Subscribed("redisson_lock__channel:{dl:lock}".into());
    let lock = a.get_lock("dl:lock");
    every_method(
        &server,
        &lock,
        Arc::new(b.get_lock("dl:lock")),
        Hash::Plain,
        waiting,
    )
}

#[test]
fn a_fair_lock_answers_every_method_as_redissons_rfairlock() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let waiting = Waiting::Queued("redisson_lock_queue:{dl:fair}".into());
    let lock = a.get_fair_lock("dl:fair");
    every_method(
        &server,
        &lock,
        Arc::new(b.get_fair_lock("dl:fair")),
        Hash::Plain,
        waiting,
    )
}

#[test]
fn a_spin_lock_answers_every_method_as_redissons_rspinlock() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let lock = a.get_spin_lock("dl:spin");
    let waiter = Arc::new(b.get_spin_lock("dl:spin"));
    every_method(&server, &lock, waiter, Hash::Plain, Waiting::Polling)
}

#[test]
fn a_read_lock_answers_every_method_as_redissons_read_lock() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let waiter = Arc::new(b.get_read_write_lock("dl:rw").write_lock());
    let waiting = Waiting::Subscribed("redisson_rwlock:{dl:rw}".into());
    let read = a.get_read_write_lock("dl:rw").read_lock();
    every_method(&server, &read, waiter, Hash::Read, waiting)
}

#[test]
fn a_write_lock_answers_every_method_as_redissons_write_lock() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let waiter = Arc::new(b.get_read_write_lock("dl:rw").write_lock());
    let waiting = Waiting::Subscribed("redisson_rwlock:{dl:rw}".into());
    let write = a.get_read_write_lock("dl:rw").write_lock();
    every_method(&server, &write, waiter, Hash::Write, waiting)
}

#[test]
fn every_kind_runs_through_a_dyn_distributed_lock() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let rw = |m: &LockManager| m.get_read_write_lock("dyn:rw");
    type Case = (
        Box<dyn DistributedLock>,
        Arc<dyn DistributedLock>,
        Hash,
        Waiting,
    );
    let cases: Vec<Case> = vec![
        (
            Box::new(a.get_lock("dyn:lock")),
            Arc::new(b.get_lock("dyn:lock")),
            Hash::Plain,
            Waiting::Subscribed("redisson_lock__channel:{dyn:lock}".into()),
        ),
        (
            Box::new(a.get_fair_lock("dyn:fair")),
            Arc::new(b.get_fair_lock("dyn:fair")),
            Hash::Plain,
            Waiting::Queued("redisson_lock_queue:{dyn:fair}".into()),
        ),
        (
            Box::new(a.get_spin_lock("dyn:spin")),
            Arc::new(b.get_spin_lock("dyn:spin")),
            Hash::Plain,
            Waiting::Polling,
        ),
        (
            Box::new(rw(&a).read_lock()),
            Arc::new(rw(&b).write_lock()),
            Hash::Read,
            Waiting::Subscribed("redisson_rwlock:{dyn:rw}".into()),
        ),
        (
            Box::new(rw(&a).write_lock()),
            Arc::new(rw(&b).write_lock()),
            Hash::Write,
            Waiting::Subscribed("redisson_rwlock:{dyn:rw}".into()),
        ),
    ];
    for (lock, waiter, shape, waiting) in cases {
        every_method(&server, lock.as_ref(), waiter, shape, waiting)?;
    }
    Ok(())
}

#[test]
fn each_half_of_a_read_write_lock_force_unlocks_only_its_own_mode() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let mut conn = server.conn();
    let (read, write) = {
        let rw = b.get_read_write_lock("dl:halves");
        (rw.read_lock(), rw.write_lock())
    };
    let writer = a.get_read_write_lock("dl:halves").write_lock();
    let held = writer.lock()?;
    assert!(
        !read.is_locked()?,
        "held for writing: the read half is not locked"
    );
    assert!(
        !read.force_unlock()?,
        "the read half leaves a write lock alone"
    );
    assert_eq!(hash(&mut conn, "dl:halves").get("mode").unwrap(), "write");
    assert!(write.is_locked()?);
    // Both halves read the one hash's TTL, whichever holds it.
    assert!(read.remaining_ttl()?.is_some() && write.remaining_ttl()?.is_some());
    assert!(pttl(&mut conn, "dl:halves") > 0);
    assert!(write.force_unlock()?);
    assert!(held.unlock().is_err(), "forced out");

    // The writer's own read holds count for its read half only.
    let w = writer.lock()?;
    let r = writer_read(&a).lock()?;
    assert_eq!(writer_read(&a).hold_count()?, 1);
    assert_eq!(writer.hold_count()?, 1);
    drop(w);
    assert_eq!(hash(&mut conn, "dl:halves").get("mode").unwrap(), "read");
    assert!(writer_read(&a).is_locked()? && !writer.is_locked()?);
    assert!(
        !writer.force_unlock()?,
        "the write half leaves a read lock alone"
    );
    assert!(writer_read(&a).force_unlock()?);
    assert!(r.unlock().is_err(), "forced out");
    assert_eq!(hash(&mut conn, "dl:halves"), HashMap::new());

    // A key that is not a hash is no read-write lock: refused, and left alone.
    let _: () = conn.set("dl:halves", "data").unwrap();
    assert!(matches!(read.is_locked(), Err(Error::WrongType { .. })));
    assert!(matches!(write.hold_count(), Err(Error::WrongType { .. })));
    assert!(matches!(write.force_unlock(), Err(Error::WrongType { .. })));
    assert_eq!(conn.get::<_, String>("dl:halves").unwrap(), "data");
    Ok(())
}

fn writer_read(manager: &LockManager) -> redis_rlock::ReadLock {
    manager.get_read_write_lock("dl:halves").read_lock()
}

#[test]
fn a_multi_lock_takes_every_lock_with_a_fixed_lease_or_gives_up_within_the_wait() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = two_managers(&server)?;
    let mut conn = server.conn();
    let both = MultiLock::new(vec![a.get_lock("ml:a"), a.get_lock("ml:b")]);

    let guard = both.lock_with_lease(LEASE)?;
    for (name, each) in ["ml:a", "ml:b"].iter().zip(guard.guards()) {
        assert_eq!(each.lease(), Some(LEASE));
        let left = pttl(&mut conn, name);
        assert!(left > 50_000 && left <= 60_000, "{name}: {left} ms");
    }
    guard.unlock()?;

    let guard = both
        .try_lock_with_lease(Duration::ZERO, LEASE)?
        .expect("free");
    assert!(guard.guards().iter().all(|g| g.lease() == Some(LEASE)));
    guard.unlock()?;

    // Another manager holds the second lock: the wait passes, and the first is given back.
    let blocker = b.get_lock("ml:b").lock()?;
    let started = Instant::now();
    assert!(both
        .try_lock_with_lease(Duration::from_millis(300), LEASE)?
        .is_none());
    assert!(started.elapsed() < PATIENCE);
    assert!(
        !a.get_lock("ml:a").is_locked()?,
        "the first lock was released"
    );
    blocker.unlock()?;
    Ok(())
}

#[test]
fn a_multi_lock_guard_signals_the_first_lost_hold_and_disconnects_once_released() -> Result<()> {
    let server = RedisServer::start();
    // Renewals every second: a forced-out hold is found at the next one.
    let holder = support::manager_with_watchdog(&server, Duration::from_secs(3));
    let other = LockManager::new(&server.url())?;
    let both = MultiLock::new(vec![holder.get_lock("mls:a"), holder.get_lock("mls:b")]);

    let guard = both.lock()?;
    let lost = guard.lost_signal();
    assert_eq!(lost.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    assert!(other.get_lock("mls:b").force_unlock()?);
    lost.recv_timeout(PATIENCE)
        .expect("the lost hold is signalled");
    assert!(guard.is_lost());
    drop(guard);

    let guard = both.lock()?;
    let lost = guard.lost_signal();
    guard.unlock()?;
    assert_eq!(
        lost.recv_timeout(PATIENCE),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected),
        "released without a loss: disconnected"
    );
    Ok(())
}

#[test]
fn a_red_lock_waits_for_a_quorum_with_a_fixed_lease() -> Result<()> {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let managers = servers
        .iter()
        .map(|server| LockManager::new(&server.url()))
        .collect::<Result<Vec<_>>>()?;
    let redlock = RedLock::new(managers.iter().map(|m| m.get_lock("rl:lease")).collect());

    let guard = redlock.lock_with_lease(LEASE)?;
    assert!(guard.validity() <= LEASE && guard.validity() > LEASE / 2);
    for server in &servers {
        let left = pttl(&mut server.conn(), "rl:lease");
        assert!(left > 50_000 && left <= 60_000, "{left} ms");
    }
    guard.unlock()?;
    let guard = redlock
        .try_lock_with_lease(Duration::from_secs(1), LEASE)?
        .expect("free");
    assert!(guard.validity() <= LEASE);
    guard.unlock()?;
    let guard = redlock.try_lock(Duration::ZERO)?.expect("free");
    guard.unlock()?;
    Ok(())
}

#[test]
fn the_latch_waits_without_limit_or_with_a_timeout_like_a_condvar() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let latch = manager.get_count_down_latch("dl:latch");
    assert!(latch.wait_timeout(Duration::ZERO)?, "never set: open");
    latch.wait()?;
    assert!(latch.try_set_count(1)?);

    assert!(!latch.wait_timeout(Duration::ZERO)?);
    let started = Instant::now();
    assert!(!latch.wait_timeout(Duration::from_millis(300))?);
    assert!(started.elapsed() >= Duration::from_millis(300));

    let (done_tx, done) = mpsc::channel();
    let waiter = {
        let latch = latch.clone();
        thread::spawn(move || done_tx.send(latch.wait()).unwrap())
    };
    let channel = "redisson_countdownlatch__channel__{dl:latch}";
    assert!(support::await_subscribers(&mut conn, channel, 1));
    assert!(
        matches!(done.try_recv(), Err(mpsc::TryRecvError::Empty)),
        "still waiting"
    );
    latch.count_down()?;
    done.recv_timeout(PATIENCE).expect("woken")?;
    waiter.join().unwrap();
    assert!(latch.wait_timeout(Duration::ZERO)?);
    // A bad timeout is an error, not a panic.
    assert!(matches!(
        latch.wait_timeout(Duration::MAX),
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

#[test]
fn options_are_read_back_by_their_get_getters() {
    let token = redis_rlock::CancelToken::new();
    let options = AcquireOptions::new()
        .wait(Duration::from_secs(2))
        .lease(Lease::Fixed(LEASE))
        .fenced(true)
        .cancel_token(&token);
    assert_eq!(options.get_wait(), Some(Duration::from_secs(2)));
    assert_eq!(options.get_lease(), Lease::Fixed(LEASE));
    assert!(options.get_fenced());
    assert_eq!(options.get_max_hold(), None);
    assert!(options.get_cancel_token().is_some());
    let options = AcquireOptions::new().max_hold(LEASE);
    assert_eq!(options.get_max_hold(), Some(LEASE));
    let wait = redis_rlock::WaitOptions::new().wait(Duration::ZERO);
    assert_eq!(wait.get_wait(), Some(Duration::ZERO));
    assert!(wait.get_cancel_token().is_none());
}
