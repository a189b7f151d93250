//! Permit-expirable semaphores (Redisson's `RPermitExpirableSemaphore`) against a real
//! redis-server: Redisson's own scripts (the Java side) and this crate acquire, release and
//! extend each other's permits, a leased permit comes back by itself, waiters are woken by
//! releases and by expiries, bad input and foreign keys are refused, and a real cluster.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redis_rlock::{LockManager, PermitExpirableSemaphore, Semaphore};
use support::cluster::RedisCluster;
use support::RedisServer;

/// Raw redis-rs calls fail with their own error type.
type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Long enough for anything here to happen on a loaded machine, short enough to fail a test
/// rather than hang it.
const PATIENCE: Duration = Duration::from_secs(20);

/// Redisson's score of a permit without a lease (`nonExpirableTimeout`).
const NO_EXPIRY: i64 = 922_337_203_685_477;

// The scripts below are Redisson's, verbatim, from
// redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java
// (tryAcquireAsync(List<String>, long), tryReleaseAsync(String), updateLeaseTimeAsync,
// availablePermitsAsync, trySetPermitsAsync): they act as the Java side.

/// KEYS: name, timeout set, channel. ARGV: permits, timeoutDate, now, nonExpirableTimeout,
/// publish command, ids (raw bytes).
const REDISSON_TRY_ACQUIRE: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;end; local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then redis.call('decrby', KEYS[1], ARGV[1]); for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); end; local ttl = redis.call('pttl', KEYS[1]); if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; return 'OK'; end; local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); end return nil;";

/// KEYS: name, channel, timeout set. ARGV: id, 1, now, publish command.
const REDISSON_TRY_RELEASE: &str = "local expire = redis.call('zscore', KEYS[3], ARGV[1]);local removed = redis.call('zrem', KEYS[3], ARGV[1]);if tonumber(removed) ~= 1 then return 0;end;local value = redis.call('incrby', KEYS[1], ARGV[2]); redis.call(ARGV[4], KEYS[2], value); if tonumber(expire) <= tonumber(ARGV[3]) then return 0;end;return 1;";

/// KEYS: name, timeout set, channel. ARGV: id, timeoutDate, now, publish command.
const REDISSON_UPDATE_LEASE_TIME: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[4], KEYS[3], value); end;end; local value = redis.call('zscore', KEYS[2], ARGV[1]); if (value ~= false) then redis.call('zadd', KEYS[2], ARGV[2], ARGV[1]); return 1;end;return 0;";

/// KEYS: name, timeout set, channel. ARGV: now, publish command.
const REDISSON_AVAILABLE_PERMITS: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[2], KEYS[3], value); end;return value; end; local ret = redis.call('get', KEYS[1]); return ret == false and 0 or ret;";

/// KEYS: name, channel. ARGV: permits, publish command.
const REDISSON_TRY_SET_PERMITS: &str = "local value = redis.call('get', KEYS[1]); if (value == false) then redis.call('set', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1;end;return 0;";

/// Redisson's `suffixName(name, "timeout")`.
fn timeout_key(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:timeout")
    } else {
        format!("{{{name}}}:timeout")
    }
}

/// Redisson's `prefixName("redisson_sc", name)`.
fn channel(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_sc:{name}")
    } else {
        format!("redisson_sc:{{{name}}}")
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn hex(raw: &[u8]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(id: &str) -> Vec<u8> {
    (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
        .collect()
}

/// What Redisson's tryAcquire answered.
#[derive(Debug, PartialEq)]
enum Acquired {
    Id(String),
    /// None free; the nearest lease ends then (epoch ms).
    Nearest(i64),
    Nothing,
}

/// A Redisson client's `RPermitExpirableSemaphore`: its scripts on its own connection.
struct RedissonPermits {
    conn: redis::Connection,
    name: String,
}

impl RedissonPermits {
    fn new(conn: redis::Connection, name: &str) -> Self {
        RedissonPermits {
            conn,
            name: name.to_owned(),
        }
    }

    /// `tryAcquire(1, lease)` once: Redisson's id is 16 random bytes.
    fn try_acquire(&mut self, lease_ms: Option<i64>) -> Acquired {
        let id = *uuid::Uuid::new_v4().as_bytes();
        let timeout_date = lease_ms.map_or(NO_EXPIRY, |ms| now_ms() + ms);
        let reply: Option<String> = redis::Script::new(REDISSON_TRY_ACQUIRE)
            .key(&self.name)
            .key(timeout_key(&self.name))
            .key(channel(&self.name))
            .arg(1)
            .arg(timeout_date)
            .arg(now_ms())
            .arg(NO_EXPIRY)
            .arg("publish")
            .arg(&id[..])
            .invoke(&mut self.conn)
            .unwrap();
        match reply.as_deref() {
            None => Acquired::Nothing,
            Some("OK") => Acquired::Id(hex(&id)),
            Some(nearest) => Acquired::Nearest(nearest[1..].parse().unwrap()),
        }
    }

    fn try_release(&mut self, id: &str) -> bool {
        redis::Script::new(REDISSON_TRY_RELEASE)
            .key(&self.name)
            .key(channel(&self.name))
            .key(timeout_key(&self.name))
            .arg(unhex(id))
            .arg(1)
            .arg(now_ms())
            .arg("publish")
            .invoke(&mut self.conn)
            .unwrap()
    }

    fn update_lease_time(&mut self, id: &str, lease_ms: i64) -> bool {
        redis::Script::new(REDISSON_UPDATE_LEASE_TIME)
            .key(&self.name)
            .key(timeout_key(&self.name))
            .key(channel(&self.name))
            .arg(unhex(id))
            .arg(now_ms() + lease_ms)
            .arg(now_ms())
            .arg("publish")
            .invoke(&mut self.conn)
            .unwrap()
    }

    fn available_permits(&mut self) -> i64 {
        redis::Script::new(REDISSON_AVAILABLE_PERMITS)
            .key(&self.name)
            .key(timeout_key(&self.name))
            .key(channel(&self.name))
            .arg(now_ms())
            .arg("publish")
            .invoke(&mut self.conn)
            .unwrap()
    }

    fn try_set_permits(&mut self, permits: i64) -> bool {
        redis::Script::new(REDISSON_TRY_SET_PERMITS)
            .key(&self.name)
            .key(channel(&self.name))
            .arg(permits)
            .arg("publish")
            .invoke(&mut self.conn)
            .unwrap()
    }
}

/// A thread that waits (as long as `wait`) for a permit and reports the id and how long it
/// waited.
fn spawn_waiter(
    semaphore: &PermitExpirableSemaphore,
    wait: Duration,
) -> mpsc::Receiver<(Option<String>, Duration)> {
    let (tx, rx) = mpsc::channel();
    let semaphore = semaphore.clone();
    thread::spawn(move || {
        let started = Instant::now();
        let id = semaphore
            .try_acquire(wait, None)
            .expect("the waiter's acquire");
        let _ = tx.send((id, started.elapsed()));
    });
    rx
}

#[test]
fn redisson_and_this_crate_release_each_others_permits() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "pes:interop";
    let semaphore = manager.get_permit_expirable_semaphore(name);
    let mut java = RedissonPermits::new(server.conn(), name);
    let mut conn = server.conn();

    assert!(java.try_set_permits(2));
    assert!(!semaphore.try_set_permits(5)?, "Redisson created it");
    let Acquired::Id(java_id) = java.try_acquire(None) else {
        panic!("Redisson got a permit");
    };
    assert_eq!(semaphore.available_permits()?, 1);
    assert_eq!(semaphore.acquired_permits()?, 1);

    let ours = semaphore.acquire(None)?;
    assert_eq!(ours.len(), 32, "{ours}");
    // Stored as Redisson stores ids: 16 raw bytes, scored "never" without a lease.
    let score: Option<i64> = conn.zscore(timeout_key(name), unhex(&ours))?;
    assert_eq!(score, Some(NO_EXPIRY));
    let free: i64 = conn.get(name)?;
    assert_eq!(free, 0);
    assert_eq!(
        java.try_acquire(None),
        Acquired::Nothing,
        "none free, none leased"
    );

    // Each releases the other's permit.
    assert!(java.try_release(&ours));
    assert!(!java.try_release(&ours), "released once only");
    semaphore.release(&java_id)?;
    assert_eq!(java.available_permits(), 2);
    assert_eq!(semaphore.acquired_permits()?, 0);

    // A leased permit of ours: Redisson's tryAcquire reports its end as the nearest expiry.
    let before = now_ms();
    let leased = semaphore.acquire(Some(Duration::from_secs(60)))?;
    let also = semaphore.acquire(Some(Duration::from_secs(90)))?;
    match java.try_acquire(None) {
        Acquired::Nearest(at) => assert!(
            (before + 60_000..=now_ms() + 60_000).contains(&at),
            "{at} is not 60 s after {before}"
        ),
        other => panic!("{other:?}"),
    }
    let leases = semaphore.acquired_permit_leases()?;
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[0].id, leased, "soonest first");
    assert_eq!(leases[1].id, also);
    assert!(leases[0].expires_at.unwrap() < leases[1].expires_at.unwrap());
    semaphore.release(&leased)?;
    assert!(java.try_release(&also));
    Ok(())
}

#[test]
fn a_redisson_release_wakes_a_waiter_and_a_release_of_ours_wakes_redisson() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "pes:wake";
    let semaphore = manager.get_permit_expirable_semaphore(name);
    let mut java = RedissonPermits::new(server.conn(), name);
    assert!(semaphore.try_set_permits(1)?);
    let Acquired::Id(java_id) = java.try_acquire(None) else {
        panic!("Redisson got the permit");
    };

    let waiter = spawn_waiter(&semaphore, PATIENCE);
    let mut conn = server.conn();
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    assert!(java.try_release(&java_id));
    let (id, _) = waiter.recv_timeout(PATIENCE)?;
    let id = id.expect("woken by Redisson's release");
    assert!(manager.stats().wakeups >= 1, "by the message, not the poll");

    // Our release announces the new free count, which Redisson's waiters read.
    let mut watcher_conn = server.conn();
    let mut watcher = support::watch_channel(&mut watcher_conn, &channel(name));
    semaphore.release(&id)?;
    let announced: i64 = watcher.get_message()?.get_payload()?;
    assert_eq!(announced, 1);
    assert!(matches!(java.try_acquire(None), Acquired::Id(_)));
    Ok(())
}

#[test]
fn an_expired_permit_comes_back_without_a_release() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "pes:expiry";
    let semaphore = manager.get_permit_expirable_semaphore(name);
    assert!(semaphore.try_set_permits(1)?);

    let lease = Duration::from_millis(200);
    let acquired_at = Instant::now();
    let first = semaphore.acquire(Some(lease))?;
    // A waiter gets it once the lease ends: nobody releases or publishes anything.
    let waiter = spawn_waiter(&semaphore, PATIENCE);
    let (second, _) = waiter.recv_timeout(PATIENCE)?;
    let second = second.expect("the expired permit");
    let took = acquired_at.elapsed();
    assert!(
        took >= lease,
        "got it after {took:?}, before the lease ended"
    );
    assert!(
        took < Duration::from_secs(10),
        "woken at the expiry, took {took:?}"
    );
    assert_ne!(first, second);
    // The first id is gone: its release is an error and changes nothing.
    let err = semaphore.release(&first).expect_err("expired");
    assert!(err.is_not_held(), "{err}");
    assert_eq!(semaphore.available_permits()?, 0);
    assert!(!semaphore.update_lease_time(&first, Duration::from_secs(1))?);

    // Redisson's scripts take back one of ours that expired, and the other way round.
    let mut java = RedissonPermits::new(server.conn(), name);
    semaphore.release(&second)?;
    let _short = semaphore.acquire(Some(Duration::from_millis(100)))?;
    assert!(
        support::eventually(PATIENCE, || matches!(
            java.try_acquire(Some(100)),
            Acquired::Id(_)
        )),
        "Redisson took back our expired permit"
    );
    let got = semaphore.try_acquire(PATIENCE, None)?;
    assert!(got.is_some(), "we took back Redisson's expired permit");
    assert_eq!(semaphore.acquired_permits()?, 1);
    Ok(())
}

#[test]
fn update_lease_time_extends_a_permit_of_either_client() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "pes:lease";
    let semaphore = manager.get_permit_expirable_semaphore(name);
    let mut java = RedissonPermits::new(server.conn(), name);
    let mut conn = server.conn();
    assert!(semaphore.try_set_permits(2)?);

    let ours = semaphore.acquire(Some(Duration::from_millis(200)))?;
    assert!(semaphore.update_lease_time(&ours, Duration::from_secs(60))?);
    let score: i64 = conn.zscore(timeout_key(name), unhex(&ours))?;
    assert!(score >= now_ms() + 50_000, "moved to a minute from now");
    let Acquired::Id(theirs) = java.try_acquire(Some(200)) else {
        panic!("Redisson got the other permit");
    };
    // Each extends the other's permit.
    assert!(semaphore.update_lease_time(&theirs, Duration::from_secs(60))?);
    assert!(java.update_lease_time(&ours, 120_000));
    // Neither comes back when its first lease would have ended.
    assert_eq!(
        semaphore.try_acquire(Duration::from_millis(600), None)?,
        None
    );
    assert_eq!(semaphore.acquired_permits()?, 2);

    // Not acquired: false, for a released id and one never taken alike.
    semaphore.release(&theirs)?;
    assert!(!semaphore.update_lease_time(&theirs, Duration::from_secs(1))?);
    let stranger = hex(uuid::Uuid::new_v4().as_bytes());
    assert!(!semaphore.update_lease_time(&stranger, Duration::from_secs(1))?);
    Ok(())
}

#[test]
fn releasing_an_unknown_id_is_an_error_and_bad_input_is_refused() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let semaphore = manager.get_permit_expirable_semaphore("pes:bad");
    assert!(semaphore.try_set_permits(1)?);
    let stranger = hex(uuid::Uuid::new_v4().as_bytes());
    let err = semaphore.release(&stranger).expect_err("unknown id");
    assert!(err.is_not_held(), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "permit {stranger:?} of semaphore \"pes:bad\" is not acquired (released already, \
             its lease ended, or it never was); nothing was changed"
        ),
        "worded for a permit, not a lock"
    );
    assert!(!semaphore.try_release(&stranger)?);
    assert_eq!(semaphore.available_permits()?, 1, "nothing was created");

    let before = manager.stats().commands;
    let refused = [
        semaphore.release("not hex").map(drop),
        semaphore.try_release(&stranger[..30]).map(drop),
        semaphore.release(&format!("{stranger}00")).map(drop),
        semaphore
            .update_lease_time(&stranger, Duration::ZERO)
            .map(drop),
        semaphore.acquire(Some(Duration::ZERO)).map(drop),
        semaphore.acquire(Some(Duration::MAX)).map(drop),
        semaphore.try_acquire(Duration::MAX, None).map(drop),
        semaphore
            .try_set_permits(Semaphore::MAX_PERMITS + 1)
            .map(drop),
        semaphore.set_permits(u32::MAX),
        semaphore.add_permits(0),
        manager
            .get_permit_expirable_semaphore("")
            .available_permits()
            .map(drop),
    ];
    for (i, outcome) in refused.into_iter().enumerate() {
        let err = outcome.expect_err("refused");
        assert!(err.is_invalid_argument(), "case {i}: {err}");
    }
    assert_eq!(manager.stats().commands, before, "nothing was sent");

    // A count past Redisson's int range changes nothing.
    semaphore.add_permits(i32::MAX - 1)?;
    let err = semaphore.add_permits(1).expect_err("overflow");
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(
        semaphore.available_permits()?,
        u64::from(Semaphore::MAX_PERMITS)
    );
    Ok(())
}

#[test]
fn keys_of_another_type_are_reported_and_left_alone() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let _: () = conn.hset("pes:hash", "field", "value")?;
    let _: () = conn.set("pes:text", "not a number")?;
    let _: () = conn.set(timeout_key("pes:set"), "a string")?;
    for name in ["pes:hash", "pes:text", "pes:set"] {
        let semaphore = manager.get_permit_expirable_semaphore(name);
        let outcomes = [
            semaphore.acquire(None).map(drop),
            semaphore.try_acquire(Duration::ZERO, None).map(drop),
            semaphore.available_permits().map(drop),
            semaphore.acquired_permits().map(drop),
            semaphore.set_permits(1),
            semaphore.add_permits(1),
            semaphore.try_release(&hex(&[7; 16])).map(drop),
        ];
        for (i, outcome) in outcomes.into_iter().enumerate() {
            let err = outcome.expect_err("wrong type");
            assert!(err.is_wrong_type(), "{name} case {i}: {err}");
            assert!(
                err.to_string()
                    .contains("semaphore or latch of the kind asked for"),
                "not worded for a lock: {err}"
            );
        }
    }
    let fields: Vec<(String, String)> = conn.hgetall("pes:hash")?;
    assert_eq!(fields, vec![("field".to_owned(), "value".to_owned())]);
    let text: String = conn.get("pes:text")?;
    assert_eq!(text, "not a number");
    Ok(())
}

#[test]
fn set_and_add_permits_count_acquired_permits_and_wake_waiters() -> TestResult {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let name = "pes:counts";
    let semaphore = manager.get_permit_expirable_semaphore(name);
    semaphore.set_permits(3)?; // creates it
    let a = semaphore.acquire(None)?;
    let b = semaphore.acquire(None)?;
    // Five in all, two of them acquired: three free.
    semaphore.set_permits(5)?;
    assert_eq!(
        (
            semaphore.available_permits()?,
            semaphore.acquired_permits()?
        ),
        (3, 2)
    );
    // One in all while two are acquired: the free count is -1 (read as 0).
    semaphore.set_permits(1)?;
    assert_eq!(semaphore.available_permits()?, 0);
    let mut conn = server.conn();
    let free: i64 = conn.get(name)?;
    assert_eq!(free, -1);
    semaphore.release(&a)?;
    semaphore.release(&b)?;
    assert_eq!(semaphore.available_permits()?, 1);
    semaphore.add_permits(-1)?;
    assert_eq!(semaphore.available_permits()?, 0);

    // A waiter is woken by added permits.
    let waiter = spawn_waiter(&semaphore, PATIENCE);
    assert!(support::await_subscribers(&mut conn, &channel(name), 1));
    semaphore.add_permits(2)?;
    let (id, _) = waiter.recv_timeout(PATIENCE)?;
    assert!(id.is_some(), "woken by add_permits");
    assert_eq!(semaphore.available_permits()?, 1);
    Ok(())
}

#[test]
fn on_a_cluster_names_with_and_without_braces_work_with_redisson() -> TestResult {
    let cluster = RedisCluster::start();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let manager = LockManager::cluster_builder(&seeds).build()?;
    for name in ["pes:plain", "{pes}:tagged"] {
        let semaphore = manager.get_permit_expirable_semaphore(name);
        assert!(semaphore.try_set_permits(1)?);
        let ours = semaphore.acquire(Some(Duration::from_secs(60)))?;
        let master = cluster.master_for_slot(RedisCluster::slot_of(name));
        let conn = support::connect(&format!("redis://127.0.0.1:{master}/"))?;
        let mut java = RedissonPermits::new(conn, name);
        assert!(
            matches!(java.try_acquire(None), Acquired::Nearest(_)),
            "{name}"
        );
        assert!(java.try_release(&ours), "{name}");
        let Acquired::Id(theirs) = java.try_acquire(None) else {
            panic!("{name}: Redisson got the permit back")
        };
        let waiter = spawn_waiter(&semaphore, PATIENCE);
        assert!(java.try_release(&theirs), "{name}");
        let (id, _) = waiter.recv_timeout(PATIENCE)?;
        semaphore.release(&id.expect("the waiter got the permit"))?;
        assert_eq!(semaphore.available_permits()?, 1, "{name}");
    }
    // A name whose keys would split across slots is refused before anything is sent.
    let err = manager
        .get_permit_expirable_semaphore("pes}split")
        .available_permits()
        .expect_err("split");
    assert!(err.is_invalid_argument(), "{err}");
    Ok(())
}
