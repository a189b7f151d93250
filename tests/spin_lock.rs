//! The spin lock (Redisson's `RSpinLock`): the lock's hash, owner field and latch, but a
//! release publishes nothing and waiters poll with Redisson's back-off (1 ms doubling to
//! 128 ms). The Java side is Redisson's own spin-lock scripts, run raw.

mod support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{AcquireOptions, CancelToken, Error, LockManager, Result};
use support::RedisServer;

/// Redisson's `RedissonSpinLock.tryLockInnerAsync` (the same as `RedissonLock`'s): `KEYS[1]`
/// lock, `ARGV[1]` lease ms, `ARGV[2]` owner field. Nil when acquired, else the PTTL.
const REDISSON_SPIN_LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// Redisson's `RedissonSpinLock.unlockInnerAsync`: `RedissonLock`'s unlock without the
/// publish. `KEYS[1]` lock, `KEYS[2]` unlock latch; `ARGV[1]` lease ms, `ARGV[2]` owner field,
/// `ARGV[3]` latch TTL ms.
const REDISSON_SPIN_UNLOCK: &str = "local val = redis.call('get', KEYS[2]); \
    if val ~= false then \
    return tonumber(val);\
    end; \
    if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then \
    return nil;\
    end; \
    local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
    if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    redis.call('set', KEYS[2], 0, 'px', ARGV[3]); \
    return 0; \
    else \
    redis.call('del', KEYS[1]); \
    redis.call('set', KEYS[2], 1, 'px', ARGV[3]); \
    return 1; \
    end; ";

/// A Java thread's `RSpinLock`, as raw scripts (sent with EVAL; ours go with EVALSHA).
struct JavaSpinLock {
    conn: redis::Connection,
    owner: String,
}

impl JavaSpinLock {
    fn new(server: &RedisServer, thread_id: u64) -> Self {
        JavaSpinLock {
            conn: server.conn(),
            owner: format!("0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:{thread_id}"),
        }
    }

    /// One `tryAcquire` with the 30 s watchdog lease: `None` when acquired, else the PTTL.
    fn attempt(&mut self, name: &str) -> Option<i64> {
        redis::cmd("EVAL")
            .arg(REDISSON_SPIN_LOCK)
            .arg(1)
            .arg(name)
            .arg(30_000)
            .arg(&self.owner)
            .query(&mut self.conn)
            .expect("Redisson's lock script")
    }

    /// `tryLock(wait)`: attempts with Redisson's `ExponentialBackOffPolicy` between them (its
    /// random 0 to n - 1 ms of jitter at the n-th doubling is n / 2 here).
    fn try_lock(&mut self, name: &str, wait: Duration) -> bool {
        let started = Instant::now();
        let (mut next, mut fails) = (1u64, 0u64);
        loop {
            if self.attempt(name).is_none() {
                return true;
            }
            if started.elapsed() >= wait {
                return false;
            }
            std::thread::sleep(Duration::from_millis(next));
            if next < 128 {
                fails += 1;
                next = (next * 2 + fails / 2).min(128);
            }
        }
    }

    /// `unlock()`: Redisson's reply (nil: not the owner, 0: still held, 1: released).
    fn unlock(&mut self, name: &str) -> Option<i64> {
        let latch = format!("redisson_unlock_latch:{{{name}}}:{}", uuid_hex());
        redis::cmd("EVAL")
            .arg(REDISSON_SPIN_UNLOCK)
            .arg(2)
            .arg(name)
            .arg(latch)
            .arg(30_000)
            .arg(&self.owner)
            .arg(13_500)
            .query(&mut self.conn)
            .expect("Redisson's unlock script")
    }
}

/// A request id for a latch: 32 hex digits, unique enough for one test.
fn uuid_hex() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    format!("{:032x}", now.unwrap().as_nanos())
}

fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// How many channels anyone subscribes to under the lock channels' prefix.
fn lock_channels(conn: &mut redis::Connection) -> usize {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("redisson_lock__channel*")
        .query(conn)
        .unwrap();
    channels.len()
}

#[test]
fn a_java_spin_release_is_found_within_the_back_off_cap_without_a_subscription() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = JavaSpinLock::new(&server, 1);
    assert_eq!(java.attempt("spin:stock"), None, "Java takes the lock");
    let mut conn = server.conn();
    let polls_before = support::command_calls(&mut conn, "evalsha");

    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let spin = manager.get_spin_lock("spin:stock");
        std::thread::spawn(move || {
            let guard = spin.try_lock(Duration::from_secs(20));
            acquired_tx.send(Instant::now()).unwrap();
            guard.map(|g| g.map(|g| g.unlock()))
        })
    };
    // Polling, and at its cap: 12 looks take under a second with Redisson's back-off (a
    // plain lock's waiter, 100 ms doubling to 2 s, needs about 15 s for them).
    assert!(
        support::eventually(Duration::from_secs(10), || {
            support::command_calls(&mut conn, "evalsha") >= polls_before + 12
        }),
        "the waiter does not poll"
    );
    assert_eq!(
        lock_channels(&mut conn),
        0,
        "a spin waiter subscribes to nothing"
    );
    assert_eq!(java.unlock("spin:stock"), Some(1), "Java releases silently");
    let released = Instant::now();
    let at = acquired
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter returns");
    waiter
        .join()
        .expect("waiter")?
        .expect("the waiter got the lock")?;
    let after = at.saturating_duration_since(released);
    println!("acquired {after:?} after Java's silent release");
    assert!(after < Duration::from_secs(1), "found only after {after:?}");
    Ok(())
}

#[test]
fn our_release_publishes_nothing_and_a_java_poller_gets_the_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut listener = server.conn();
    let mut watcher = support::watch_channel(&mut listener, &channel("spin:report"));
    let spin = manager.get_spin_lock("spin:report");
    let outer = spin.lock()?;
    let inner = spin.lock()?;

    let (polling_tx, polling) = mpsc::channel();
    let java = {
        let mut java = JavaSpinLock::new(&server, 9);
        std::thread::spawn(move || {
            assert!(java.attempt("spin:report").is_some(), "ours holds it");
            polling_tx.send(()).unwrap();
            let got = java.try_lock("spin:report", Duration::from_secs(20));
            (got, Instant::now(), java)
        })
    };
    polling.recv().unwrap();
    inner.unlock()?;
    outer.unlock()?;
    let released = Instant::now();
    let (got, at, mut java) = java.join().expect("Java waiter");
    assert!(got, "the Java poller got the lock");
    let after = at.saturating_duration_since(released);
    assert!(after < Duration::from_secs(1), "found only after {after:?}");
    let mut conn = server.conn();
    let fields: Vec<(String, i64)> = conn.hgetall("spin:report").unwrap();
    assert_eq!(fields, vec![(java.owner.clone(), 1)]);
    assert_eq!(java.unlock("spin:report"), Some(1));

    // A force unlock announces nothing either.
    let guard = spin.lock()?;
    assert!(spin.force_unlock()?);
    assert!(matches!(guard.unlock(), Err(Error::NotHeld { .. })));
    // The first message the channel carries is the test's own: ours published none.
    let _: () = conn.publish(channel("spin:report"), "end").unwrap();
    let first: String = watcher.get_message().unwrap().get_payload().unwrap();
    assert_eq!(first, "end", "a spin lock's release published {first:?}");
    Ok(())
}

#[test]
fn reentrancy_and_owner_checks_as_for_a_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let spin = manager.get_spin_lock("spin:owner");
    let first = spin.lock()?;
    let second = spin.try_lock(Duration::ZERO)?.expect("re-entered");
    assert_eq!(spin.hold_count()?, 2);
    assert!(spin.is_held_by_current_thread()?);
    let ttl = spin.remaining_ttl()?.expect("a lease");
    assert!(
        ttl > Duration::from_secs(20) && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );

    // Redisson's layout: one field `<uuid>:<thread>` holding the count.
    let mut conn = server.conn();
    let fields: Vec<(String, i64)> = conn.hgetall("spin:owner").unwrap();
    assert_eq!(fields.len(), 1);
    let (owner, count) = &fields[0];
    let (client, thread) = owner.rsplit_once(':').expect("owner field");
    assert_eq!((client.len(), *count), (36, 2), "{owner}");
    assert!(thread.parse::<u64>().is_ok(), "{owner}");

    // Java is not the owner: its unlock changes nothing, its attempt waits.
    let mut java = JavaSpinLock::new(&server, 3);
    assert_eq!(java.unlock("spin:owner"), None);
    assert!(java.attempt("spin:owner").is_some());
    std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            assert!(spin.is_locked()?);
            assert!(!spin.is_held_by_current_thread()?);
            assert_eq!(spin.hold_count()?, 0);
            assert!(
                spin.try_lock(Duration::ZERO)?.is_none(),
                "another thread waits"
            );
            Ok(())
        })
        .join()
        .unwrap()
    })?;
    second.unlock()?;
    assert_eq!(spin.hold_count()?, 1);
    assert!(spin.is_locked()?, "one hold left");
    first.unlock()?;
    assert!(!spin.is_locked()?);

    // A Java holder, re-entering: ours waits, and gets it after Java's last unlock.
    assert_eq!(java.attempt("spin:owner"), None);
    assert_eq!(java.attempt("spin:owner"), None);
    let started = Instant::now();
    assert!(spin.try_lock(Duration::from_millis(300))?.is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(java.unlock("spin:owner"), Some(0));
    assert_eq!(java.unlock("spin:owner"), Some(1));
    spin.try_lock(Duration::from_secs(5))?
        .expect("free after Java's release")
        .unlock()?;
    Ok(())
}

#[test]
fn threads_of_one_manager_poll_for_themselves() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let spin = manager.get_spin_lock("spin:local");
    let guard = spin.lock()?;
    let mut conn = server.conn();
    let polls_before = support::command_calls(&mut conn, "evalsha");
    let (acquired_tx, acquired) = mpsc::channel();
    let waiter = {
        let spin = spin.clone();
        std::thread::spawn(move || -> Result<()> {
            let guard = spin.try_lock(Duration::from_secs(20))?.expect("acquired");
            acquired_tx.send(Instant::now()).unwrap();
            guard.unlock()
        })
    };
    // The other thread polls Redis itself (no turn in-process, no subscription).
    assert!(support::eventually(Duration::from_secs(10), || {
        support::command_calls(&mut conn, "evalsha") >= polls_before + 6
    }));
    assert_eq!(lock_channels(&mut conn), 0, "nobody subscribed");
    guard.unlock()?;
    let released = Instant::now();
    let at = acquired.recv_timeout(Duration::from_secs(20)).unwrap();
    waiter.join().unwrap()?;
    let after = at.saturating_duration_since(released);
    assert!(after < Duration::from_secs(1), "found only after {after:?}");
    Ok(())
}

#[test]
fn fenced_tokens_come_from_redissons_counter() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let spin = manager.get_spin_lock("spin:fenced");
    let fenced = || AcquireOptions::new().fenced(true);
    let first = spin.acquire(fenced())?.expect("no wait limit");
    let t1 = first.fencing_token().expect("a token");
    first.unlock()?;
    let second = spin.acquire(fenced())?.expect("no wait limit");
    let t2 = second.fencing_token().expect("a token");
    assert!(t2 > t1, "{t1} then {t2}");
    let counter: u64 = server
        .conn()
        .get("redisson_lock_token:{spin:fenced}")
        .unwrap();
    assert_eq!(counter, t2);
    assert_eq!(manager.get_lock("spin:fenced").current_token()?, Some(t2));
    second.unlock()?;
    Ok(())
}

#[test]
fn the_watchdog_renews_a_spin_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = support::manager_with_watchdog(&server, Duration::from_secs(1));
    let spin = manager.get_spin_lock("spin:renewed");
    let guard = spin.lock()?;
    // Three leases long: only renewals keep it.
    std::thread::sleep(Duration::from_secs(3));
    assert!(spin.is_held_by_current_thread()?, "renewed");
    assert!(!guard.is_lost());
    guard.unlock()?;
    assert!(!spin.is_locked()?);
    Ok(())
}

#[test]
fn a_spin_waiter_is_cancelled_at_once() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = JavaSpinLock::new(&server, 5);
    assert_eq!(java.attempt("spin:cancel"), None);
    let token = CancelToken::new();
    let started = Instant::now();
    let outcome = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let options = AcquireOptions::new().cancel_token(&token);
            manager.get_spin_lock("spin:cancel").acquire(options)
        });
        let mut conn = server.conn();
        assert!(support::eventually(Duration::from_secs(10), || {
            support::command_calls(&mut conn, "evalsha") >= 4
        }));
        token.cancel();
        waiter.join().unwrap()
    });
    assert!(
        matches!(outcome, Err(Error::Cancelled { .. })),
        "{outcome:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    Ok(())
}

#[test]
fn bad_input_is_a_clear_error() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let nameless = manager.get_spin_lock("");
    assert!(matches!(nameless.lock(), Err(Error::InvalidName { .. })));
    assert!(matches!(
        nameless.force_unlock(),
        Err(Error::InvalidName { .. })
    ));
    let spin = manager.get_spin_lock("spin:bad");
    assert!(matches!(
        spin.try_lock_with_lease(Duration::ZERO, Duration::ZERO),
        Err(Error::InvalidArgument { .. })
    ));
    let mut conn = server.conn();
    let _: () = conn.set("spin:bad", "somebody's data").unwrap();
    assert!(matches!(
        spin.try_lock(Duration::ZERO),
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(spin.is_locked(), Err(Error::WrongType { .. })));
    assert!(matches!(spin.force_unlock(), Err(Error::WrongType { .. })));
    let kept: String = conn.get("spin:bad").unwrap();
    assert_eq!(kept, "somebody's data", "left alone");
    Ok(())
}
