//! Count-down latches (Redisson's `RCountDownLatch`) against a real redis-server: waiters in
//! several managers wake when the count reaches zero, waits time out, a count is set only on
//! an open latch, a Redisson-style client (raw commands, as docs/design/README.md describes its
//! latch) and this crate wake each other, bad input and foreign keys are refused, a restart.

use redis_rlock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::{CountDownLatch, LockManager};
use support::RedisServer;

/// Raw redis-rs calls fail with their own error type.
type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Long enough for anything here to happen on a loaded machine, short enough to fail a test
/// rather than hang it.
const PATIENCE: Duration = Duration::from_secs(20);

fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// What a Redisson client's `RCountDownLatch` does, in raw commands on its own connection.
struct RedissonLatch {
    conn: redis::Connection,
    name: String,
}

impl RedissonLatch {
    fn new(server: &RedisServer, name: &str) -> Self {
        RedissonLatch {
            conn: server.conn(),
            name: name.to_owned(),
        }
    }

    /// `trySetCount(n)`: only when the key is absent; announces `1` (a new count).
    fn try_set_count(&mut self, n: i64) -> bool {
        let set: bool = redis::cmd("SET")
            .arg(&self.name)
            .arg(n)
            .arg("NX")
            .query(&mut self.conn)
            .unwrap();
        if set {
            let _: i64 = self.conn.publish(channel(&self.name), 1).unwrap();
        }
        set
    }

    /// `countDown()`: DECR; at zero or below delete, at exactly zero announce `0`.
    fn count_down(&mut self) {
        let left: i64 = self.conn.decr(&self.name, 1).unwrap();
        if left <= 0 {
            let _: i64 = self.conn.del(&self.name).unwrap();
        }
        if left == 0 {
            let _: i64 = self.conn.publish(channel(&self.name), 0).unwrap();
        }
    }

    /// `getCount()`.
    fn count(&mut self) -> i64 {
        let count: Option<i64> = self.conn.get(&self.name).unwrap();
        count.unwrap_or(0)
    }
}

/// A thread in `latch.wait_timeout(PATIENCE)` that reports its outcome and, through `opened`,
/// whether the count had been brought to zero by then.
struct Waiter {
    done: mpsc::Receiver<(redis_rlock::Result<bool>, bool)>,
}

impl Waiter {
    fn spawn(latch: &CountDownLatch, opened: &Arc<AtomicBool>) -> Self {
        let (tx, done) = mpsc::channel();
        let latch = latch.clone();
        let opened = Arc::clone(opened);
        thread::spawn(move || {
            let outcome = latch.wait_timeout(PATIENCE);
            let _ = tx.send((outcome, opened.load(Ordering::SeqCst)));
        });
        Waiter { done }
    }

    fn is_waiting(&self) -> bool {
        matches!(self.done.try_recv(), Err(mpsc::TryRecvError::Empty))
    }

    /// Waits for the waiter's outcome; panics unless it saw the latch open after `opened` was
    /// set.
    fn assert_opened(self) {
        let (outcome, after_opening) = self
            .done
            .recv_timeout(PATIENCE + Duration::from_secs(5))
            .expect("the waiter returned");
        assert!(outcome.expect("the wait succeeded"), "the wait timed out");
        assert!(
            after_opening,
            "the waiter returned before the count reached zero"
        );
    }
}

#[test]
fn waiters_in_several_managers_wake_when_the_count_reaches_zero() -> TestResult {
    let server = RedisServer::start();
    let managers: Vec<LockManager> = (0..3)
        .map(|_| LockManager::new(&server.url()))
        .collect::<redis_rlock::Result<_>>()?;
    let name = "latch:workers";
    let latch = managers[0].get_count_down_latch(name);
    assert!(latch.try_set_count(3)?);
    assert_eq!(latch.count()?, 3);

    let opened = Arc::new(AtomicBool::new(false));
    let waiters: Vec<Waiter> = managers
        .iter()
        .flat_map(|m| {
            let latch = m.get_count_down_latch(name);
            let opened = Arc::clone(&opened);
            (0..3).map(move |_| Waiter::spawn(&latch, &opened))
        })
        .collect();
    let mut conn = server.conn();
    assert!(
        support::await_subscribers(&mut conn, &channel(name), 3),
        "each manager's listener subscribed"
    );

    // Counted down from other managers and threads; not open until the last.
    managers[1].get_count_down_latch(name).count_down()?;
    let last = managers[2].get_count_down_latch(name);
    thread::spawn(move || last.count_down())
        .join()
        .expect("thread")?;
    assert_eq!(latch.count()?, 1);
    assert!(waiters.iter().all(Waiter::is_waiting));
    opened.store(true, Ordering::SeqCst);
    latch.count_down()?;
    for waiter in waiters {
        waiter.assert_opened();
    }
    assert_eq!(latch.count()?, 0);
    let exists: bool = conn.exists(name)?;
    assert!(!exists, "an open latch is no key at all");
    // Counting down an open latch changes nothing.
    latch.count_down()?;
    assert_eq!(latch.count()?, 0);
    let exists: bool = conn.exists(name)?;
    assert!(!exists);
    Ok(())
}

#[test]
fn wait_times_out_while_the_count_is_above_zero() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let latch = manager.get_count_down_latch("latch:slow");
    // Never set: open.
    assert!(latch.wait_timeout(Duration::ZERO)?);
    assert!(latch.try_set_count(1)?);
    assert!(!latch.wait_timeout(Duration::ZERO)?);
    assert_eq!(
        manager.waiting_channel_count(),
        0,
        "one look, no subscription"
    );
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    assert!(!latch.wait_timeout(wait)?);
    let took = started.elapsed();
    assert!(took >= wait, "gave up early, after {took:?}");
    assert!(took < wait + Duration::from_secs(5), "took {took:?}");
    assert_eq!(manager.waiting_channel_count(), 0, "the waiter left");
    assert_eq!(latch.count()?, 1);
    Ok(())
}

#[test]
fn a_count_is_set_only_on_an_open_latch() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let latch = manager.get_count_down_latch("latch:reset");
    assert!(latch.try_set_count(2)?);
    assert!(!latch.try_set_count(5)?, "still counting");
    assert_eq!(latch.count()?, 2);
    latch.count_down()?;
    assert!(!latch.try_set_count(5)?);
    latch.count_down()?;
    assert_eq!(latch.count()?, 0);
    assert!(latch.try_set_count(5)?, "open again: it may be armed again");
    assert_eq!(latch.count()?, 5);
    let mut conn = server.conn();
    let ttl: i64 = conn.pttl("latch:reset")?;
    assert_eq!(ttl, -1, "a latch has no TTL");
    Ok(())
}

#[test]
fn a_redisson_count_down_wakes_a_rust_waiter() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "latch:interop-in";
    let mut java = RedissonLatch::new(&server, name);
    assert!(java.try_set_count(2));
    let latch = manager.get_count_down_latch(name);
    assert_eq!(latch.count()?, 2);
    assert!(!latch.try_set_count(9)?, "Redisson armed it");

    let opened = Arc::new(AtomicBool::new(false));
    let waiter = Waiter::spawn(&latch, &opened);
    let mut conn = server.conn();
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    // A `0` that is not true (the count is still 2, as a foreign publisher could send) wakes
    // the waiter, which looks, finds the latch closed, and waits on: proof that the message
    // reaches it, without racing its own periodic look.
    let _: i64 = conn.publish(channel(name), 0)?;
    assert!(
        support::eventually(PATIENCE, || manager.stats().wakeups == 1),
        "Redisson's `0` woke the waiter"
    );
    assert!(waiter.is_waiting());
    java.count_down();
    opened.store(true, Ordering::SeqCst);
    java.count_down();
    waiter.assert_opened();
    Ok(())
}

#[test]
fn a_rust_latch_speaks_to_a_redisson_subscriber() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "latch:interop-out";
    let latch = manager.get_count_down_latch(name);
    let mut java = RedissonLatch::new(&server, name);
    let mut watcher_conn = server.conn();
    let mut watcher = support::watch_channel(&mut watcher_conn, &channel(name));

    assert!(latch.try_set_count(2)?);
    let message: i64 = watcher.get_message()?.get_payload()?;
    assert_eq!(message, 1, "a new count is announced with `1`");
    assert!(!java.try_set_count(4), "Redisson sees it armed");
    assert_eq!(java.count(), 2);
    latch.count_down()?;
    assert_eq!(java.count(), 1);
    latch.count_down()?;
    let message: i64 = watcher.get_message()?.get_payload()?;
    assert_eq!(message, 0, "reaching zero is announced with `0`");
    assert_eq!(java.count(), 0);
    assert!(java.try_set_count(1), "Redisson may arm it again");
    Ok(())
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let latch = manager.get_count_down_latch("latch:bad");
    let before = manager.stats().commands;
    let refused = [
        latch.try_set_count(0).map(|_| ()),
        latch.try_set_count(u64::MAX).map(|_| ()),
        latch.try_set_count(i64::MAX as u64 + 1).map(|_| ()),
        latch.wait_timeout(Duration::MAX).map(|_| ()),
        manager.get_count_down_latch("").count_down(),
        manager.get_count_down_latch("").count().map(|_| ()),
    ];
    for (i, outcome) in refused.into_iter().enumerate() {
        let err = outcome.expect_err("refused");
        assert!(err.is_invalid_argument(), "case {i}: {err}");
    }
    assert_eq!(manager.stats().commands, before, "nothing was sent");
    assert!(latch.try_set_count(i64::MAX as u64)?, "the largest count");
    assert_eq!(latch.count()?, i64::MAX as u64);
    Ok(())
}

#[test]
fn a_key_of_another_type_is_reported_and_left_alone() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();

    let _: () = conn.hset("latch:hash", "field", "value")?;
    let _: () = conn.set("latch:text", "not a number")?;
    for name in ["latch:hash", "latch:text"] {
        let latch = manager.get_count_down_latch(name);
        let outcomes = [
            latch.count_down(),
            latch.count().map(|_| ()),
            latch.wait_timeout(Duration::ZERO).map(|_| ()),
        ];
        for (i, outcome) in outcomes.into_iter().enumerate() {
            let err = outcome.expect_err("wrong type");
            assert!(err.is_wrong_type(), "{name}, case {i}: {err}");
        }
    }
    let err = manager
        .get_count_down_latch("latch:hash")
        .try_set_count(1)
        .expect_err("wrong type");
    assert!(err.is_wrong_type(), "{err}");
    let fields: Vec<(String, String)> = conn.hgetall("latch:hash")?;
    assert_eq!(fields, vec![("field".to_owned(), "value".to_owned())]);
    let text: String = conn.get("latch:text")?;
    assert_eq!(text, "not a number");
    Ok(())
}

/// Without persistence a restart forgets the count, and a latch without a key is open:
/// waiters return `true`, exactly as Redisson's do (its `await` loops while `getCount() > 0`,
/// and a missing key counts 0). Whoever relies on a latch across restarts needs persistence.
#[test]
fn after_a_restart_the_latch_is_open() -> TestResult {
    let mut server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "latch:restart";
    let latch = manager.get_count_down_latch(name);
    assert!(latch.try_set_count(2)?);
    let opened = Arc::new(AtomicBool::new(false));
    let waiter = Waiter::spawn(&latch, &opened);
    let mut conn = server.conn();
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    assert!(waiter.is_waiting());

    opened.store(true, Ordering::SeqCst);
    server.restart();
    waiter.assert_opened();
    assert_eq!(latch.count()?, 0);
    assert!(latch.try_set_count(1)?, "it may be armed again");
    assert!(!latch.wait_timeout(Duration::ZERO)?);
    Ok(())
}
