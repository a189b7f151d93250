//! The fair lock (Redisson's `RFairLock`): first come first served across managers and
//! Redisson clients, through the queue in Redis. The "Redisson side" here is a stand-in that
//! does, with plain commands, what Redisson's fair lock scripts do (docs/design/wire-format.md,
//! "Fair lock (RFairLock)").

use redis_rlock_testkit as support;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redis_rlock::{AcquireOptions, LockManager, Result};
use support::RedisServer;

fn queue(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn waiter_channel(name: &str, owner: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}:{owner}")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Waits (up to 10 s) until the queue has `n` waiters.
fn await_queue(conn: &mut redis::Connection, name: &str, n: usize) {
    assert!(
        support::eventually(Duration::from_secs(10), || {
            conn.llen::<_, usize>(queue(name)).unwrap() == n
        }),
        "the queue of {name} reached {n} waiters"
    );
}

/// What a Redisson client's `RFairLock` does, in raw commands (the test makes sure nothing
/// runs in between, so the checks and the writes need not be one script).
struct JavaFair {
    conn: redis::Connection,
    owner: String,
}

/// Redisson's `fairLockWaitTimeout` default.
const JAVA_WAIT_MS: i64 = 300_000;

impl JavaFair {
    fn new(server: &RedisServer, thread_id: u64) -> Self {
        JavaFair {
            conn: server.conn(),
            owner: format!("0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:{thread_id}"),
        }
    }

    /// `lock()`'s attempt: acquire when free and first in line (leaving the queue, everyone
    /// behind moving up by the wait), else join the queue's end. `true` when acquired.
    fn attempt(&mut self, name: &str) -> bool {
        let conn = &mut self.conn;
        let exists: bool = conn.exists(name).unwrap();
        let head: Option<String> = conn.lindex(queue(name), 0).unwrap();
        if !exists && head.as_deref().is_none_or(|h| h == self.owner) {
            let _: () = conn.lpop(queue(name), None).unwrap();
            let _: () = conn.zrem(timeouts(name), &self.owner).unwrap();
            let others: Vec<String> = conn.zrange(timeouts(name), 0, -1).unwrap();
            for other in others {
                let _: () = conn.zincr(timeouts(name), other, -JAVA_WAIT_MS).unwrap();
            }
            let _: () = conn.hset(name, &self.owner, 1).unwrap();
            let _: () = conn.pexpire(name, 30_000).unwrap();
            return true;
        }
        let queued: Option<f64> = conn.zscore(timeouts(name), &self.owner).unwrap();
        if queued.is_none() {
            let last: Option<String> = conn.lindex(queue(name), -1).unwrap();
            let now = now_ms();
            let ttl = match last {
                Some(last) => {
                    let score: f64 = conn.zscore(timeouts(name), last).unwrap();
                    score as i64 - now
                }
                None => conn.pttl(name).unwrap(),
            };
            let _: () = conn
                .zadd(timeouts(name), &self.owner, ttl + JAVA_WAIT_MS + now)
                .unwrap();
            let _: () = conn.rpush(queue(name), &self.owner).unwrap();
        }
        false
    }

    /// `unlock()` of the last hold: delete, and tell the head of the queue on its channel.
    fn unlock(&mut self, name: &str) {
        let conn = &mut self.conn;
        let _: () = conn.del(name).unwrap();
        let head: Option<String> = conn.lindex(queue(name), 0).unwrap();
        if let Some(head) = head {
            let _: () = conn.publish(waiter_channel(name, &head), 0).unwrap();
        }
    }
}

#[test]
fn waiters_of_three_managers_get_the_lock_in_arrival_order() -> Result<()> {
    const NAME: &str = "fair:fifo";
    let server = RedisServer::start();
    let managers: Vec<LockManager> = (0..3)
        .map(|_| LockManager::new(&server.url()))
        .collect::<Result<_>>()?;
    let mut conn = server.conn();
    let holder = managers[0].get_fair_lock(NAME).lock()?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..6 {
        let manager = managers[i % 3].clone();
        let order = Arc::clone(&order);
        threads.push(thread::spawn(move || -> Result<()> {
            let guard = manager.get_fair_lock(NAME).lock()?;
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(5));
            guard.unlock()
        }));
        // The next one starts only once this one has its place.
        await_queue(&mut conn, NAME, i + 1);
    }
    // Six waiters, one pub/sub connection per manager: waiters share their manager's.
    assert_eq!(support::client_count(&mut conn, "pubsub"), 3);
    holder.unlock()?;
    for t in threads {
        t.join().expect("waiter thread")?;
    }
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
    let left: usize = conn.llen(queue(NAME)).unwrap();
    let timed: usize = conn.zcard(timeouts(NAME)).unwrap();
    assert_eq!((left, timed), (0, 0), "everyone left the queue");
    Ok(())
}

#[test]
fn a_redisson_holder_blocks_ours_and_its_unlock_wakes_our_waiter() -> Result<()> {
    const NAME: &str = "fair:java-holds";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut java = JavaFair::new(&server, 1);
    assert!(java.attempt(NAME));

    let lock = manager.get_fair_lock(NAME);
    assert!(lock.is_locked()?);
    assert!(lock.try_lock(Duration::ZERO)?.is_none());
    let mut conn = server.conn();
    let queued: usize = conn.llen(queue(NAME)).unwrap();
    assert_eq!(queued, 0, "a single attempt does not queue");

    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || -> Result<()> {
        let guard = lock.lock()?;
        tx.send(Instant::now()).unwrap();
        guard.unlock()
    });
    await_queue(&mut conn, NAME, 1);
    let head: String = conn.lindex(queue(NAME), 0).unwrap();
    assert!(
        head.starts_with(manager.client_id()),
        "ours is queued: {head}"
    );
    assert!(support::await_subscribers(
        &mut conn,
        &waiter_channel(NAME, &head),
        1
    ));
    let released = Instant::now();
    java.unlock(NAME);
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("our waiter got the lock");
    waiter.join().expect("waiter thread")?;
    let waited = acquired.saturating_duration_since(released);
    assert!(
        waited < Duration::from_secs(3),
        "woken by the message on its own channel, not by the 30 s TTL: {waited:?}"
    );
    let left: usize = conn.llen(queue(NAME)).unwrap();
    assert_eq!(left, 0, "the waiter left the queue when it got the lock");
    Ok(())
}

#[test]
fn our_unlock_wakes_a_redisson_waiter_on_its_channel() -> Result<()> {
    const NAME: &str = "fair:java-waits";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let guard = manager.get_fair_lock(NAME).lock()?;

    let mut java = JavaFair::new(&server, 9);
    assert!(!java.attempt(NAME), "Java queues behind our hold");
    let score: f64 = java.conn.zscore(timeouts(NAME), &java.owner).unwrap();
    let expected = now_ms() + 30_000 + JAVA_WAIT_MS;
    assert!(
        (score as i64 - expected).abs() < 2_000,
        "{score} vs {expected}"
    );

    let mut listener = server.conn();
    let channel = waiter_channel(NAME, &java.owner);
    let mut pubsub = support::watch_channel(&mut listener, &channel);
    guard.unlock()?;
    let msg = pubsub
        .get_message()
        .expect("Java is told on its own channel");
    assert_eq!(msg.get_channel_name(), channel);
    let payload: String = msg.get_payload().unwrap();
    assert_eq!(payload, "0");
    assert!(java.attempt(NAME), "and, first in line, acquires");
    let count: i64 = java.conn.hget(NAME, &java.owner).unwrap();
    assert_eq!(count, 1);
    Ok(())
}

#[test]
fn queue_order_holds_across_our_waiters_and_redissons() -> Result<()> {
    const NAME: &str = "fair:mixed";
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let other = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let guard = holder.get_fair_lock(NAME).lock()?;

    let mut java = JavaFair::new(&server, 4);
    assert!(!java.attempt(NAME));
    let mut listener = server.conn();
    let mut pubsub = support::watch_channel(&mut listener, &waiter_channel(NAME, &java.owner));

    let lock = other.get_fair_lock(NAME);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || -> Result<()> {
        let guard = lock.lock()?;
        tx.send(Instant::now()).unwrap();
        guard.unlock()
    });
    await_queue(&mut conn, NAME, 2);
    let second: String = conn.lindex(queue(NAME), 1).unwrap();
    assert!(second.starts_with(other.client_id()), "ours is behind Java");

    guard.unlock()?;
    pubsub
        .get_message()
        .expect("the release told Java, first in line");
    // Java's turn: ours must not take the free lock meanwhile.
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "ours did not jump the queue");
    assert!(java.attempt(NAME), "Java gets its turn");
    let left: Vec<String> = conn.lrange(queue(NAME), 0, -1).unwrap();
    assert_eq!(left, vec![second], "ours is first in line now");

    let released = Instant::now();
    java.unlock(NAME);
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("ours got the lock after Java");
    waiter.join().expect("waiter thread")?;
    let waited = acquired.saturating_duration_since(released);
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    Ok(())
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_and_those_behind_move_up() -> Result<()> {
    const NAME: &str = "fair:timeout";
    let server = RedisServer::start();
    let managers: Vec<LockManager> = (0..3)
        .map(|_| LockManager::new(&server.url()))
        .collect::<Result<_>>()?;
    let mut conn = server.conn();
    let holder = managers[0].get_fair_lock(NAME).lock()?;

    let impatient = managers[1].get_fair_lock(NAME);
    let a = thread::spawn(move || {
        impatient
            .try_lock(Duration::from_millis(800))
            .map(|g| g.is_none())
    });
    await_queue(&mut conn, NAME, 1);
    let patient = managers[2].get_fair_lock(NAME);
    let b = thread::spawn(move || patient.lock().and_then(|g| g.unlock()));
    await_queue(&mut conn, NAME, 2);
    let waiters: Vec<String> = conn.lrange(queue(NAME), 0, -1).unwrap();
    let before: f64 = conn.zscore(timeouts(NAME), &waiters[1]).unwrap();
    let a_score: f64 = conn.zscore(timeouts(NAME), &waiters[0]).unwrap();
    // The impatient waiter keeps its place for its own wait, after the holder's lease.
    let expected = now_ms() + 30_000 + 800;
    assert!(
        (a_score as i64 - expected).abs() < 2_000,
        "{a_score} vs {expected}"
    );

    assert!(a.join().expect("impatient thread")?, "its wait passed");
    let left: Vec<String> = conn.lrange(queue(NAME), 0, -1).unwrap();
    assert_eq!(left, vec![waiters[1].clone()], "it left the queue");
    let gone: Option<f64> = conn.zscore(timeouts(NAME), &waiters[0]).unwrap();
    assert_eq!(gone, None, "and the timeouts");
    let after: f64 = conn.zscore(timeouts(NAME), &waiters[1]).unwrap();
    assert_eq!(before - after, 800.0, "the one behind moved up by its wait");

    holder.unlock()?;
    b.join().expect("patient thread")?;
    Ok(())
}

#[test]
fn reentry_fencing_the_lost_signal_and_a_wrong_key_type() -> Result<()> {
    const NAME: &str = "fair:misc";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let lock = manager.get_fair_lock(NAME);
    assert_eq!(lock.name(), NAME);

    let outer = lock.lock()?;
    let inner = lock.try_lock(Duration::from_secs(1))?.expect("re-entered");
    let field = format!("{}:", manager.client_id());
    let holds: Vec<(String, i64)> = conn.hgetall(NAME).unwrap();
    assert_eq!(holds.len(), 1);
    assert!(holds[0].0.starts_with(&field));
    assert_eq!(holds[0].1, 2, "two holds of one owner");
    inner.unlock()?;
    assert!(lock.is_locked()?);
    outer.unlock()?;
    assert!(!lock.is_locked()?);

    let first = lock.acquire(AcquireOptions::new().fenced(true))?.unwrap();
    let t1 = first.fencing_token().expect("fenced");
    first.unlock()?;
    let second = lock.acquire(AcquireOptions::new().fenced(true))?.unwrap();
    assert!(second.fencing_token().expect("fenced") > t1);
    second.unlock()?;

    let short = lock.lock_with_lease(Duration::from_millis(300))?;
    let lost = short.lost_signal();
    lost.recv_timeout(Duration::from_secs(5))
        .expect("the fixed lease ran out and the guard was told");
    assert!(short.is_lost());
    // The guard counts its lease from before the request was sent: the server's expires a
    // moment later.
    assert!(support::eventually(Duration::from_secs(5), || {
        !conn.exists::<_, bool>(NAME).unwrap()
    }));
    assert!(short.unlock().unwrap_err().is_not_held());

    let _: () = conn.set(NAME, "not a lock").unwrap();
    let err = lock.try_lock(Duration::ZERO).unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    Ok(())
}

#[test]
fn the_fair_lock_works_after_a_server_restart() -> Result<()> {
    const NAME: &str = "fair:restart";
    let mut server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let other = LockManager::new(&server.url())?;
    manager.get_fair_lock(NAME).lock()?.unlock()?;
    server.restart();

    let guard = manager.get_fair_lock(NAME).lock()?;
    assert!(
        other
            .get_fair_lock(NAME)
            .try_lock(Duration::ZERO)?
            .is_none(),
        "held again after the restart"
    );
    let waiter = other.get_fair_lock(NAME);
    let t = thread::spawn(move || {
        waiter
            .try_lock(Duration::from_secs(10))
            .map(|g| g.is_some())
    });
    let mut conn = server.conn();
    await_queue(&mut conn, NAME, 1);
    guard.unlock()?;
    assert!(
        t.join().expect("waiter thread")?,
        "the queued waiter got it"
    );
    Ok(())
}

#[test]
fn a_waiter_without_a_wait_limit_keeps_its_place_for_the_fair_lock_wait_timeout() -> Result<()> {
    const NAME: &str = "fair:wait-timeout";
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&server.url())
        .fair_lock_wait_timeout(Duration::from_secs(10))
        .build()?;
    let mut conn = server.conn();
    let guard = holder.get_fair_lock(NAME).lock()?;
    let lock = waiter.get_fair_lock(NAME);
    let t = thread::spawn(move || lock.lock().and_then(|g| g.unlock()));
    await_queue(&mut conn, NAME, 1);
    let head: String = conn.lindex(queue(NAME), 0).unwrap();
    let score: f64 = conn.zscore(timeouts(NAME), &head).unwrap();
    // After the holder's 30 s lease, 10 s more: the configured timeout, not Redisson's 5 min.
    let expected = now_ms() + 30_000 + 10_000;
    assert!(
        (score as i64 - expected).abs() < 2_000,
        "{score} vs {expected}"
    );
    guard.unlock()?;
    t.join().expect("waiter thread")
}

#[test]
fn a_crashed_waiter_holds_its_place_until_its_queue_timeout_passes() -> Result<()> {
    const NAME: &str = "fair:ghost";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    // A Redisson client queued and died: the lock is free, but it is first in line.
    let ghost = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:13";
    let _: () = conn.rpush(queue(NAME), ghost).unwrap();
    let _: () = conn.zadd(timeouts(NAME), ghost, now_ms() + 800).unwrap();

    let lock = manager.get_fair_lock(NAME);
    assert!(
        lock.try_lock(Duration::ZERO)?.is_none(),
        "not ours while it is first"
    );
    let started = Instant::now();
    let guard = lock
        .try_lock(Duration::from_secs(5))?
        .expect("ours once its place ran out");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(3),
        "woken about when the ghost's timeout passed: {waited:?}"
    );
    let left: usize = conn.llen(queue(NAME)).unwrap();
    assert_eq!(left, 0, "the ghost was dropped, and ours left the queue");
    guard.unlock()
}

/// A force unlock (the command line's `unlock --force`) wakes the fair lock's first waiter
/// through its own channel: the waiter's manager counts a wake-up, rather than finding the
/// lock free at its next back-off look (up to 2.5 s later).
#[test]
fn a_force_unlock_wakes_the_first_waiter_on_its_channel() -> Result<()> {
    const NAME: &str = "fair:forced";
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url())?;
    let waiting = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let _held = holder.get_fair_lock(NAME).lock()?;
    let evals = support::command_calls(&mut conn, "evalsha");

    let lock = waiting.get_fair_lock(NAME);
    let stats = waiting.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || -> Result<()> {
        let guard = lock.try_lock(Duration::from_secs(60))?.expect("acquired");
        // Read before the release below, whose own message this manager may hear too.
        tx.send((Instant::now(), stats.stats().wakeups)).unwrap();
        guard.unlock()
    });
    await_queue(&mut conn, NAME, 1);
    let head: String = conn.lindex(queue(NAME), 0).unwrap();
    assert!(support::await_subscribers(
        &mut conn,
        &waiter_channel(NAME, &head),
        1
    ));
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
