//! The read-write lock (Redisson's `RReadWriteLock`): shared reads, exclusive writes, a
//! writer's own reads, the timeout keys the watchdog renews, and a "Redisson side" doing with
//! plain commands what Redisson's read and write lock scripts do (docs/design/README.md,
//! "Read-write lock").

use redis_rlock_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{AcquireOptions, LockManager, Result};
use support::RedisServer;

const JAVA: &str = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:5";

fn channel(name: &str) -> String {
    format!("redisson_rwlock:{{{name}}}")
}

fn read_timeout_key(name: &str, owner: &str, n: u32) -> String {
    format!("{{{name}}}:{owner}:rwlock_timeout:{n}")
}

/// The owner field of the manager's thread that holds something on `name`.
fn owner_in(conn: &mut redis::Connection, name: &str, manager: &LockManager) -> String {
    let fields: Vec<String> = conn.hkeys(name).unwrap();
    let field = fields
        .into_iter()
        .find(|f| f.starts_with(manager.client_id()))
        .expect("a field of the manager");
    field.trim_end_matches(":write").to_string()
}

/// Runs `f` on a thread of its own: a thread that holds a read lock must not ask for the
/// write lock itself (refused: it would wait for itself).
fn elsewhere<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    thread::scope(|s| s.spawn(f).join().expect("helper thread"))
}

/// Redisson's first read hold on a free lock, in raw commands.
fn java_read_lock(conn: &mut redis::Connection, name: &str) {
    let _: () = redis::pipe()
        .atomic()
        .hset(name, "mode", "read")
        .hincr(name, JAVA, 1)
        .set(read_timeout_key(name, JAVA, 1), 1)
        .pexpire(read_timeout_key(name, JAVA, 1), 30_000)
        .pexpire(name, 30_000)
        .query(conn)
        .unwrap();
}

/// Redisson's release of its only read hold when no one else holds the lock.
fn java_read_unlock_last(conn: &mut redis::Connection, name: &str) {
    let _: () = redis::pipe()
        .atomic()
        .hdel(name, JAVA)
        .del(read_timeout_key(name, JAVA, 1))
        .del(name)
        .publish(channel(name), 0)
        .query(conn)
        .unwrap();
}

#[test]
fn readers_share_and_writers_exclude() -> Result<()> {
    const NAME: &str = "rw:share";
    let server = RedisServer::start();
    // A short watchdog: a waiter that misses a wake-up sleeps at most this long.
    let managers: Vec<LockManager> = (0..2)
        .map(|_| support::manager_with_watchdog(&server, Duration::from_secs(2)))
        .collect();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for i in 0..6 {
        let rw = managers[i % 2].get_read_write_lock(NAME);
        let (readers, writers) = (Arc::clone(&readers), Arc::clone(&writers));
        let (most_readers, violations) = (Arc::clone(&most_readers), Arc::clone(&violations));
        let writes = Arc::clone(&writes);
        threads.push(thread::spawn(move || -> Result<()> {
            let writer = i >= 4;
            for _ in 0..15 {
                if writer {
                    let guard = rw.write_lock().lock()?;
                    if writers.fetch_add(1, Ordering::SeqCst) != 0
                        || readers.load(Ordering::SeqCst) != 0
                    {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(3));
                    writes.fetch_add(1, Ordering::SeqCst);
                    writers.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()?;
                } else {
                    let guard = rw.read_lock().lock()?;
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        violations.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(10));
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock()?;
                }
                thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        }));
    }
    for t in threads {
        t.join().expect("worker thread")?;
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0, "a writer overlapped");
    assert_eq!(
        writes.load(Ordering::SeqCst),
        30,
        "every write got its turn"
    );
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers held the lock together"
    );
    let mut conn = server.conn();
    assert!(
        !conn.exists::<_, bool>(NAME).unwrap(),
        "nothing left behind"
    );
    Ok(())
}

#[test]
fn a_writer_may_read_and_its_reads_outlive_its_write() -> Result<()> {
    const NAME: &str = "rw:downgrade";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let other = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let rw = manager.get_read_write_lock(NAME);
    assert_eq!(rw.name(), NAME);

    let write = rw.write_lock().lock()?;
    let read = rw
        .read_lock()
        .try_lock(Duration::ZERO)?
        .expect("the writer reads");
    let owner = owner_in(&mut conn, NAME, &manager);
    let mode: String = conn.hget(NAME, "mode").unwrap();
    assert_eq!(mode, "write");
    let writes: i64 = conn.hget(NAME, format!("{owner}:write")).unwrap();
    let reads: i64 = conn.hget(NAME, &owner).unwrap();
    assert_eq!((writes, reads), (1, 1));
    let ttl: i64 = conn.pttl(read_timeout_key(NAME, &owner, 1)).unwrap();
    assert!(
        ttl > 20_000,
        "the read hold's timeout key has its lease: {ttl}"
    );

    let theirs = other.get_read_write_lock(NAME);
    assert!(theirs.read_lock().try_lock(Duration::ZERO)?.is_none());

    let mut listener = server.conn();
    let mut pubsub = support::watch_channel(&mut listener, &channel(NAME));
    write.unlock()?;
    let mode: String = conn.hget(NAME, "mode").unwrap();
    assert_eq!(mode, "read", "the writer's reads remain, as a read lock");
    let msg = pubsub.get_message().expect("waiting readers are told");
    assert_eq!(msg.get_payload::<String>().unwrap(), "1");

    let shared = theirs
        .read_lock()
        .try_lock(Duration::ZERO)?
        .expect("shared now");
    assert!(elsewhere(|| theirs.write_lock().try_lock(Duration::ZERO))?.is_none());
    read.unlock()?;
    assert!(conn.exists::<_, bool>(NAME).unwrap(), "their read remains");
    shared.unlock()?;
    assert!(!conn.exists::<_, bool>(NAME).unwrap());
    let msg = pubsub
        .get_message()
        .expect("the last read release is announced");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");

    // The reverse, a reader taking the write lock, would wait for itself: refused.
    let read = rw.read_lock().lock()?;
    let err = rw
        .write_lock()
        .try_lock(Duration::from_secs(1))
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = rw
        .read_lock()
        .acquire(AcquireOptions::new().fenced(true))
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    read.unlock()?;

    // Reentrant write holds, fenced.
    let w1 = rw
        .write_lock()
        .acquire(AcquireOptions::new().fenced(true))?
        .unwrap();
    let w2 = rw
        .write_lock()
        .acquire(AcquireOptions::new().fenced(true))?
        .unwrap();
    assert!(w2.fencing_token() > w1.fencing_token());
    w2.unlock()?;
    assert!(theirs.read_lock().try_lock(Duration::ZERO)?.is_none());
    w1.unlock()?;
    assert!(!conn.exists::<_, bool>(NAME).unwrap());
    Ok(())
}

#[test]
fn a_redisson_reader_blocks_our_writer_and_its_release_wakes_it() -> Result<()> {
    const NAME: &str = "rw:java-reads";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = server.conn();
    java_read_lock(&mut java, NAME);

    let rw = manager.get_read_write_lock(NAME);
    assert!(rw.write_lock().try_lock(Duration::ZERO)?.is_none());
    // Our reader shares with Java's, and its release leaves Java's hold (and its TTL) alone.
    let ours = rw.read_lock().try_lock(Duration::ZERO)?.expect("shared");
    ours.unlock()?;
    let ttl: i64 = java.pttl(NAME).unwrap();
    assert!(
        ttl > 20_000,
        "the hash lives as long as Java's timeout key: {ttl}"
    );

    let writer = rw.write_lock();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = thread::spawn(move || -> Result<()> {
        let guard = writer.lock()?;
        tx.send(Instant::now()).unwrap();
        guard.unlock()
    });
    assert!(support::await_subscribers(&mut java, &channel(NAME), 1));
    let released = Instant::now();
    java_read_unlock_last(&mut java, NAME);
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("our writer got the lock");
    t.join().expect("writer thread")?;
    let waited = acquired.saturating_duration_since(released);
    assert!(
        waited < Duration::from_secs(3),
        "woken by the message: {waited:?}"
    );
    Ok(())
}

#[test]
fn our_write_release_tells_redisson_and_redisson_shares_our_reads() -> Result<()> {
    const NAME: &str = "rw:java-waits";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let rw = manager.get_read_write_lock(NAME);
    let mut java = server.conn();
    let mut listener = server.conn();
    let mut pubsub = support::watch_channel(&mut listener, &channel(NAME));

    let write = rw.write_lock().lock()?;
    let mode: String = java.hget(NAME, "mode").unwrap();
    assert_eq!(mode, "write", "Redisson's read attempt must wait");
    write.unlock()?;
    let msg = pubsub.get_message().expect("Java is told");
    assert_eq!(msg.get_payload::<String>().unwrap(), "1", "wake all");
    java_read_lock(&mut java, NAME);

    // Ours joins Java's read; when ours goes, Java's hold keeps the lock alive.
    let read = rw.read_lock().lock()?;
    let owner = owner_in(&mut java, NAME, &manager);
    let count: i64 = java.hget(NAME, &owner).unwrap();
    assert_eq!(count, 1);
    read.unlock()?;
    let java_count: i64 = java.hget(NAME, JAVA).unwrap();
    assert_eq!(java_count, 1, "Java still reads");
    assert!(!java
        .exists::<_, bool>(read_timeout_key(NAME, &owner, 1))
        .unwrap());
    Ok(())
}

#[test]
fn renewal_keeps_the_read_timeout_keys_alive() -> Result<()> {
    const NAME: &str = "rw:renewal";
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let manager = support::manager_with_watchdog(&server, watchdog);
    let other = support::manager_with_watchdog(&server, watchdog);
    let mut conn = server.conn();
    let rw = manager.get_read_write_lock(NAME);
    let first = rw.read_lock().lock()?;
    let second = rw.read_lock().lock()?;
    let owner = owner_in(&mut conn, NAME, &manager);

    thread::sleep(watchdog * 3);
    assert!(!first.is_lost() && !second.is_lost());
    for n in 1..=2 {
        let ttl: i64 = conn.pttl(read_timeout_key(NAME, &owner, n)).unwrap();
        assert!(ttl > 0, "timeout key {n} renewed: {ttl}");
    }
    // Another reader's release recomputes the hash's TTL from the timeout keys: renewed
    // ones keep it alive.
    let theirs = other.get_read_write_lock(NAME).read_lock().lock()?;
    theirs.unlock()?;
    let ours: Option<i64> = conn.hget(NAME, &owner).unwrap();
    assert_eq!(ours, Some(2), "our reads survive their release");

    second.unlock()?;
    first.unlock()?;
    assert!(!conn.exists::<_, bool>(NAME).unwrap());
    Ok(())
}

#[test]
fn a_stream_of_overlapping_readers_keeps_a_writer_out_as_in_redisson() -> Result<()> {
    const NAME: &str = "rw:starve";
    let server = RedisServer::start();
    let readers = LockManager::new(&server.url())?;
    let writers = LockManager::new(&server.url())?;
    let stop = Arc::new(AtomicBool::new(false));
    // Released only while another read hold is there: read holds never leave a gap.
    let holding = Arc::new(Mutex::new(0usize));
    let mut threads = Vec::new();
    for _ in 0..2 {
        let read = readers.get_read_write_lock(NAME).read_lock();
        let (stop, holding) = (Arc::clone(&stop), Arc::clone(&holding));
        threads.push(thread::spawn(move || -> Result<u32> {
            let mut holds = 0;
            while !stop.load(Ordering::SeqCst) {
                let guard = read.lock()?;
                holds += 1;
                *holding.lock().unwrap() += 1;
                thread::sleep(Duration::from_millis(20));
                loop {
                    let mut count = holding.lock().unwrap();
                    if *count >= 2 || stop.load(Ordering::SeqCst) {
                        *count -= 1;
                        guard.unlock()?;
                        break;
                    }
                    drop(count);
                    thread::sleep(Duration::from_millis(1));
                }
            }
            Ok(holds)
        }));
    }
    assert!(support::eventually(Duration::from_secs(10), || {
        *holding.lock().unwrap() >= 2
    }));
    let write = writers.get_read_write_lock(NAME).write_lock();
    assert!(
        write.try_lock(Duration::from_millis(1500))?.is_none(),
        "readers overlap without a gap: the writer never gets in"
    );
    stop.store(true, Ordering::SeqCst);
    let mut holds = 0;
    for t in threads {
        holds += t.join().expect("reader thread")?;
    }
    assert!(holds > 4, "readers came and went meanwhile: {holds}");
    let started = Instant::now();
    let guard = write.lock()?;
    assert!(started.elapsed() < Duration::from_secs(5));
    guard.unlock()
}

#[test]
fn a_key_of_another_type_is_reported_not_touched() -> Result<()> {
    const NAME: &str = "rw:wrongtype";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let _: () = conn.set(NAME, "not a lock").unwrap();
    let rw = manager.get_read_write_lock(NAME);
    let err = rw.read_lock().try_lock(Duration::ZERO).unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let err = rw.write_lock().lock().unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let value: String = conn.get(NAME).unwrap();
    assert_eq!(value, "not a lock");
    Ok(())
}

#[test]
fn the_read_write_lock_works_after_a_server_restart() -> Result<()> {
    const NAME: &str = "rw:restart";
    let mut server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let other = LockManager::new(&server.url())?;
    let rw = manager.get_read_write_lock(NAME);
    rw.read_lock().lock()?.unlock()?;
    rw.write_lock().lock()?.unlock()?;
    server.restart();

    let read = rw.read_lock().lock()?;
    let theirs = other.get_read_write_lock(NAME);
    let shared = theirs
        .read_lock()
        .try_lock(Duration::ZERO)?
        .expect("shared");
    assert!(elsewhere(|| theirs.write_lock().try_lock(Duration::ZERO))?.is_none());
    shared.unlock()?;
    read.unlock()?;
    theirs
        .write_lock()
        .try_lock(Duration::ZERO)?
        .expect("free")
        .unlock()
}

#[test]
fn read_and_write_holds_that_vanish_are_reported_lost() -> Result<()> {
    const NAME: &str = "rw:lost";
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_millis(600));
    let mut conn = server.conn();
    let rw = manager.get_read_write_lock(NAME);

    let read = rw.read_lock().lock()?;
    let lost = read.lost_signal();
    let _: () = conn.del(NAME).unwrap();
    lost.recv_timeout(Duration::from_secs(5))
        .expect("the watchdog found the read hold gone");
    assert!(read.is_lost());
    assert!(read.unlock().unwrap_err().is_not_held());

    let write = rw
        .write_lock()
        .lock_with_lease(Duration::from_millis(300))?;
    let lost = write.lost_signal();
    lost.recv_timeout(Duration::from_secs(5))
        .expect("the fixed lease ran out");
    assert!(support::eventually(Duration::from_secs(5), || {
        !conn.exists::<_, bool>(NAME).unwrap()
    }));
    assert!(write.unlock().unwrap_err().is_not_held());
    Ok(())
}

/// A force unlock (the command line's `unlock --force`) of a read-write lock wakes its
/// waiters on the read-write lock's channel: the waiter's manager counts a wake-up, rather
/// than finding the lock free at its next back-off look (up to 2.5 s later).
#[test]
fn a_force_unlock_wakes_the_waiters() -> Result<()> {
    const NAME: &str = "rw:forced";
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiting = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let _held = holder.get_read_write_lock(NAME).write_lock().lock()?;
    let evals = support::command_calls(&mut conn, "evalsha");

    let rw = waiting.get_read_write_lock(NAME);
    let stats = waiting.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || -> Result<()> {
        let guard = rw.write_lock().try_lock(Duration::from_secs(60))?;
        let guard = guard.expect("acquired");
        // Read before the release below, whose own message this manager may hear too.
        tx.send((Instant::now(), stats.stats().wakeups)).unwrap();
        guard.unlock()
    });
    assert!(support::await_subscribers(&mut conn, &channel(NAME), 1));
    // Asleep: it attempted before subscribing and once more after (a release announced
    // before it subscribed), so the force unlock comes while it sleeps.
    assert!(
        support::eventually(Duration::from_secs(10), || {
            support::command_calls(&mut conn, "evalsha") >= evals + 2
        }),
        "the waiter attempted twice"
    );
    let before = waiting.stats().wakeups;

    let forced = Instant::now();
    let other = LockManager::new(&server.url())?;
    assert!(other.get_lock(NAME).force_unlock()?, "the lock was held");
    let (acquired, wakeups) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter got the lock");
    waiter.join().expect("waiter thread")?;
    let waited = acquired.saturating_duration_since(forced);
    assert!(
        wakeups > before,
        "the force unlock woke nobody (wake-ups {before} → {wakeups}); the waiter found the \
         lock free {waited:?} later by looking again"
    );
    Ok(())
}
