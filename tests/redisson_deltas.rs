//! Redisson's script changes since this crate's scripts were first matched to it (issue 32's
//! list), each checked against Redisson's **current** script text, run raw on a real server as
//! the Java side, next to ours: a read/write unlock of a lock that is gone (3.44), the fair
//! acquire's guard of the last waiter's score (3.45), a fair waiter that gives up or whose
//! attempt timed out (4.7), and several permits taken and released at once by the
//! permit-expirable semaphore (3.51). docs/design/wire-format.md ("Redisson versions matched")
//! names the commit each of our scripts matches.

use redis_rlock_testkit as support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::proxy::Proxy;
use support::RedisServer;

// Redisson's scripts below are verbatim (the Java string concatenations joined) from
// redisson/redisson at 66863978b (4.7.0 and 62 commits, 2026-08-21), under
// redisson/src/main/java/org/redisson/.

/// RedissonReadLock.unlockInnerAsync. KEYS: name, channel, the owner's timeout prefix, the
/// key prefix, latch. ARGV: message 0, owner, publish command, latch TTL ms.
const REDISSON_READ_UNLOCK: &str = r#"local val = redis.call('get', KEYS[5]); if val ~= false then return tonumber(val);end; local mode = redis.call('hget', KEYS[1], 'mode'); if (mode == false) then redis.call(ARGV[3], KEYS[2], ARGV[1]); redis.call('set', KEYS[5], 1, 'px', ARGV[4]); return nil; end; local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); if (lockExists == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); if (counter == 0) then redis.call('hdel', KEYS[1], ARGV[2]); end;redis.call('del', KEYS[3] .. ':' .. (counter+1)); if (redis.call('hlen', KEYS[1]) > 1) then local maxRemainTime = -3; local keys = redis.call('hkeys', KEYS[1]); for n, key in ipairs(keys) do counter = tonumber(redis.call('hget', KEYS[1], key)); if type(counter) == 'number' then for i=counter, 1, -1 do local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); maxRemainTime = math.max(remainTime, maxRemainTime);end; end; end; if maxRemainTime > 0 then redis.call('pexpire', KEYS[1], maxRemainTime); redis.call('set', KEYS[5], 0, 'px', ARGV[4]); return 0; end;if mode == 'write' then redis.call('set', KEYS[5], 0, 'px', ARGV[4]); return 0;end; end; redis.call('del', KEYS[1]); redis.call(ARGV[3], KEYS[2], ARGV[1]); redis.call('set', KEYS[5], 1, 'px', ARGV[4]); return 1; "#;

/// RedissonWriteLock.unlockInnerAsync. KEYS: name, channel, latch. ARGV: message 1, lease ms,
/// writer field, publish command, latch TTL ms.
const REDISSON_WRITE_UNLOCK: &str = r#"local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val);end; local mode = redis.call('hget', KEYS[1], 'mode'); if (mode == false) then redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return nil; end;if (mode == 'write') then local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); if (lockExists == 0) then return nil;else local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0; else redis.call('hdel', KEYS[1], ARGV[3]); if (redis.call('hlen', KEYS[1]) == 1) then redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); else redis.call('hset', KEYS[1], 'mode', 'read'); end; redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end; end; end; return nil;"#;

/// RedissonFairLock.tryLockInnerAsync, the EVAL_LONG form (`lock()` and `tryLock(wait)`).
/// KEYS: name, queue, timeouts. ARGV: lease ms, owner, wait ms, now.
const REDISSON_FAIR_TRY_LOCK: &str = r#"while true do local firstThreadId2 = redis.call('lindex', KEYS[2], 0);if firstThreadId2 == false then break;end;local timeout = redis.call('zscore', KEYS[3], firstThreadId2);if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then redis.call('zrem', KEYS[3], firstThreadId2);redis.call('lpop', KEYS[2]);else break;end;end;if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', KEYS[2]) == 0) or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then redis.call('lpop', KEYS[2]);redis.call('zrem', KEYS[3], ARGV[2]);local keys = redis.call('zrange', KEYS[3], 0, -1);for i = 1, #keys, 1 do redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);end;redis.call('hset', KEYS[1], ARGV[2], 1);redis.call('pexpire', KEYS[1], ARGV[1]);return nil;end;if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then redis.call('hincrby', KEYS[1], ARGV[2],1);redis.call('pexpire', KEYS[1], ARGV[1]);return nil;end;local timeout = redis.call('zscore', KEYS[3], ARGV[2]);if timeout ~= false then local ttl = redis.call('pttl', KEYS[1]);return math.max(0, ttl); end;local lastThreadId = redis.call('lindex', KEYS[2], -1);local ttl;if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);else ttl = redis.call('pttl', KEYS[1]);end;local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then redis.call('rpush', KEYS[2], ARGV[2]);end;return ttl;"#;

/// RedissonFairLock.acquireFailedAsync. KEYS: queue, timeouts. ARGV: owner, wait ms.
const REDISSON_FAIR_ACQUIRE_FAILED: &str = r#"local queue = redis.call('lrange', KEYS[1], 0, -1);local i = 1;while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1;end;i = i + 1;while i <= #queue do redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);i = i + 1;end;redis.call('zrem', KEYS[2], ARGV[1]);redis.call('lrem', KEYS[1], 0, ARGV[1]);"#;

/// RedissonPermitExpirableSemaphore.tryAcquireAsync(List<String>, long): several ids at once.
/// KEYS: name, timeout set, channel. ARGV: permits, timeoutDate, now, nonExpirableTimeout,
/// publish command, ids (raw bytes).
const REDISSON_PES_TRY_ACQUIRE: &str = r#"local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;end; local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then redis.call('decrby', KEYS[1], ARGV[1]); for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); end; local ttl = redis.call('pttl', KEYS[1]); if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; return 'OK'; end; local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); end return nil;"#;

/// RedissonPermitExpirableSemaphore.tryReleaseAsync(List<String>): all or nothing since 3.41.
/// KEYS: name, channel, timeout set. ARGV: count, now, publish command, ids (raw bytes).
const REDISSON_PES_TRY_RELEASE_ALL: &str = r#"for i = 4, #ARGV, 1 do local expire = redis.call('zscore', KEYS[3], ARGV[i]);if expire== false or tonumber(expire) <= tonumber(ARGV[2]) then return 0;end; end; local expiredIds = redis.call('zrangebyscore', KEYS[3], 0, ARGV[2], 'limit', 0, -1); if #expiredIds > 0 then redis.call('zrem', KEYS[3], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[3], KEYS[2], value); end; end; local keys = {}; for i = 4, #ARGV, 1 do table.insert(keys, ARGV[i]); end; local removed = redis.call('zrem', KEYS[3], unpack(keys)); redis.call('incrby', KEYS[1], removed); redis.call(ARGV[3], KEYS[2], removed); return removed;"#;

/// The guard 3.45 (2fe06b7a3) added to the fair acquire: without it, a last waiter without a
/// score fails the script.
const ZSCORE_GUARD: &str = " and redis.call('zscore', KEYS[3], lastThreadId) ~= false";

/// A Redisson client's owner field (its client id and a thread id).
const JAVA: &str = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:1";
const JAVA_2: &str = "0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:2";

/// Redisson's score of a permit without a lease (`nonExpirableTimeout`).
const NO_EXPIRY: i64 = 922_337_203_685_477;

/// Long enough for anything here to happen on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn queue(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn rw_channel(name: &str) -> String {
    format!("redisson_rwlock:{{{name}}}")
}

fn latch(name: &str, request: &str) -> String {
    format!("redisson_unlock_latch:{{{name}}}:{request}")
}

/// Redisson's write unlock by `owner`'s thread.
fn java_write_unlock(conn: &mut redis::Connection, name: &str, owner: &str) -> Option<i64> {
    redis::Script::new(REDISSON_WRITE_UNLOCK)
        .key(name)
        .key(rw_channel(name))
        .key(latch(name, &format!("w{}", now_ms())))
        .arg(1)
        .arg(30_000)
        .arg(format!("{owner}:write"))
        .arg("publish")
        .arg(5_000)
        .invoke(conn)
        .unwrap()
}

/// Redisson's read unlock by `owner`'s thread.
fn java_read_unlock(conn: &mut redis::Connection, name: &str, owner: &str) -> Option<i64> {
    redis::Script::new(REDISSON_READ_UNLOCK)
        .key(name)
        .key(rw_channel(name))
        .key(format!("{{{name}}}:{owner}:rwlock_timeout"))
        .key(format!("{{{name}}}"))
        .key(latch(name, &format!("r{}", now_ms())))
        .arg(0)
        .arg(owner)
        .arg("publish")
        .arg(5_000)
        .invoke(conn)
        .unwrap()
}

/// 3.44 (1ce49b7a2): an unlock of a read-write lock that no longer exists is "not held" (nil),
/// where Redisson replied "released" (1). Ours always said "not held": `Error::NotHeld`.
#[test]
fn an_unlock_of_a_read_write_lock_that_is_gone_is_not_held_on_both_sides() -> Result<()> {
    const NAME: &str = "delta:rw";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let rw = manager.get_read_write_lock(NAME);

    assert_eq!(java_write_unlock(&mut conn, NAME, JAVA), None);
    assert_eq!(java_read_unlock(&mut conn, NAME, JAVA), None);

    let write = rw.write_lock().lock()?;
    let _: () = conn.del(NAME).unwrap();
    let err = write.unlock().expect_err("the write lock is gone");
    assert!(err.is_not_held(), "{err}");
    let read = rw.read_lock().lock()?;
    let _: () = conn.del(NAME).unwrap();
    let err = read.unlock().expect_err("the read lock is gone");
    assert!(err.is_not_held(), "{err}");

    // Redisson's unlocks respect the owner: a Java thread cannot release our holds.
    let write = rw.write_lock().lock()?;
    assert_eq!(java_write_unlock(&mut conn, NAME, JAVA), None);
    assert_eq!(java_read_unlock(&mut conn, NAME, JAVA), None);
    assert!(rw.write_lock().is_held_by_current_thread()?);
    write.unlock()?;
    assert!(!rw.write_lock().is_locked()?);
    Ok(())
}

/// Redisson's fair `tryLock(wait)` attempt by `owner`: nil when acquired, else the ms its
/// client waits.
fn java_fair_try_lock(
    conn: &mut redis::Connection,
    script: &str,
    name: &str,
    owner: &str,
    wait_ms: i64,
) -> redis::RedisResult<Option<i64>> {
    redis::Script::new(script)
        .key(name)
        .key(queue(name))
        .key(timeouts(name))
        .arg(30_000)
        .arg(owner)
        .arg(wait_ms)
        .arg(now_ms())
        .invoke(conn)
}

/// A Java holder of `name` for 10 s, and a waiter at the queue's end that has no score (its
/// timeout entry went, its queue entry not yet): the state 3.45 (2fe06b7a3) guards against.
fn held_behind_a_waiter_without_score(conn: &mut redis::Connection, name: &str) {
    let _: () = conn.hset(name, JAVA, 1).unwrap();
    let _: () = conn.pexpire(name, 10_000).unwrap();
    let _: () = conn.rpush(queue(name), "gone:7").unwrap();
}

/// 3.45 (2fe06b7a3): a fair acquire behind a last waiter without a score queues after the
/// lock's expiry instead of failing. Ours checked the score from the start.
#[test]
fn a_fair_waiter_queues_behind_a_waiter_without_score_as_redisson_does() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    const WAIT_MS: i64 = 3_000;

    held_behind_a_waiter_without_score(&mut conn, "delta:fair-java");
    let before = REDISSON_FAIR_TRY_LOCK.replace(ZSCORE_GUARD, "");
    assert_ne!(
        before, REDISSON_FAIR_TRY_LOCK,
        "the guard is in the current text"
    );
    let err = java_fair_try_lock(&mut conn, &before, "delta:fair-java", JAVA_2, WAIT_MS)
        .expect_err("Redisson before 3.45 fails here");
    assert!(err.to_string().contains("nil"), "{err}");
    let now = now_ms();
    let ttl = java_fair_try_lock(
        &mut conn,
        REDISSON_FAIR_TRY_LOCK,
        "delta:fair-java",
        JAVA_2,
        WAIT_MS,
    )
    .unwrap()
    .expect("held");
    assert!((1..=10_000).contains(&ttl), "the lock's PTTL: {ttl}");
    let java_score: f64 = conn.zscore(timeouts("delta:fair-java"), JAVA_2).unwrap();
    let java_after_expiry = java_score as i64 - now - WAIT_MS;

    held_behind_a_waiter_without_score(&mut conn, "delta:fair-ours");
    let lock = manager.get_fair_lock("delta:fair-ours");
    let now = now_ms();
    let waiter = thread::spawn(move || -> Result<bool> {
        Ok(lock
            .try_lock(Duration::from_millis(WAIT_MS as u64))?
            .is_some())
    });
    assert!(
        support::eventually(PATIENCE, || {
            conn.llen::<_, usize>(queue("delta:fair-ours")).unwrap() == 2
        }),
        "ours queued behind the waiter without a score"
    );
    let ours: Vec<(String, f64)> = conn
        .zrange_withscores(timeouts("delta:fair-ours"), 0, -1)
        .unwrap();
    assert_eq!(ours.len(), 1, "{ours:?}");
    let our_after_expiry = ours[0].1 as i64 - now - WAIT_MS;
    // Both scored from the lock's PTTL (10 s), as Redisson 3.45 does: not from the missing
    // score, and not failing.
    for after in [java_after_expiry, our_after_expiry] {
        assert!(
            (7_000..=10_500).contains(&after),
            "queued {after} ms after the lock's expiry (Java {java_after_expiry}, ours {our_after_expiry})"
        );
    }
    assert!(
        !waiter.join().expect("the waiter")?,
        "the waiter without a score stays first"
    );
    Ok(())
}

/// A queue of three (`JAVA`, `owner`, `JAVA_2`) at `name`, one wait apart from `start`.
fn three_queued(conn: &mut redis::Connection, name: &str, owner: &str, wait_ms: i64, start: i64) {
    for (i, waiter) in [JAVA, owner, JAVA_2].into_iter().enumerate() {
        let _: () = conn.rpush(queue(name), waiter).unwrap();
        let _: () = conn
            .zadd(timeouts(name), waiter, start + i as i64 * wait_ms)
            .unwrap();
    }
}

fn queue_state(conn: &mut redis::Connection, name: &str) -> (Vec<String>, Vec<(String, f64)>) {
    (
        conn.lrange(queue(name), 0, -1).unwrap(),
        conn.zrange_withscores(timeouts(name), 0, -1).unwrap(),
    )
}

/// 4.7 (a5077398e) runs Redisson's `acquireFailed` also when an attempt timed out; its text is
/// unchanged otherwise. Ours, FAIR_ABANDON, leaves the queue as it does: the waiter out, those
/// behind it one wait earlier.
#[test]
fn a_fair_waiter_that_gives_up_leaves_the_queue_as_redissons_does() -> Result<()> {
    let server = RedisServer::start();
    let mut conn = server.conn();
    const WAIT_MS: i64 = 4_000;
    let owner = "ours:3";
    let start = now_ms() + 30_000;
    three_queued(&mut conn, "delta:leave-java", owner, WAIT_MS, start);
    let _: () = redis::Script::new(REDISSON_FAIR_ACQUIRE_FAILED)
        .key(queue("delta:leave-java"))
        .key(timeouts("delta:leave-java"))
        .arg(owner)
        .arg(WAIT_MS)
        .invoke(&mut conn)
        .unwrap();
    three_queued(&mut conn, "delta:leave-ours", owner, WAIT_MS, start);
    let _: () = redis::Script::new(redis_rlock::lua::FAIR_ABANDON)
        .key(queue("delta:leave-ours"))
        .key(timeouts("delta:leave-ours"))
        .key("delta:leave-ours")
        .key("redisson_lock__channel:{delta:leave-ours}")
        .arg(owner)
        .arg(WAIT_MS)
        .arg(0)
        .arg("publish")
        .invoke(&mut conn)
        .unwrap();

    let java = queue_state(&mut conn, "delta:leave-java");
    let ours = queue_state(&mut conn, "delta:leave-ours");
    assert_eq!(java.0, [JAVA, JAVA_2]);
    let expected = vec![
        (JAVA.to_owned(), start as f64),
        (JAVA_2.to_owned(), (start + WAIT_MS) as f64),
    ];
    assert_eq!(java.1, expected, "JAVA_2 moved up one wait");
    assert_eq!(ours, java);
    Ok(())
}

/// 4.7 (a5077398e): a fair `tryLock(wait)` whose attempt timed out leaves the queue: the
/// attempt may have run and queued the waiter, which is gone, and would hold back everyone
/// behind it until its queue timeout. Ours kept the entry until this change.
#[test]
fn a_fair_try_lock_whose_attempt_timed_out_leaves_the_queue() -> Result<()> {
    const NAME: &str = "delta:fair-timeout";
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = LockManager::new(&server.url())?;
    let waiter = LockManager::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .build()?;
    let mut conn = server.conn();
    let _held = holder.get_fair_lock(NAME).lock()?;
    let lock = waiter.get_fair_lock(NAME);
    // The reply the proxy swallows is the next one on any connection: it may be the
    // listener's; then the wait runs to its end (and leaves the queue), and it is tried again.
    let mut attempts = 0;
    let err = loop {
        attempts += 1;
        assert!(
            attempts <= 5,
            "the attempt's reply was never the one dropped"
        );
        support::await_listener(&mut conn, &waiter);
        let dropped_before = proxy.dropped();
        proxy.drop_next_reply();
        match lock.try_lock(Duration::from_secs(2)) {
            Err(err) => break err,
            Ok(got) => {
                assert!(got.is_none(), "the lock is held");
                assert!(support::eventually(PATIENCE, || proxy.dropped() > dropped_before));
            }
        }
    };
    assert!(err.is_timeout(), "{err}");
    let (queued, scored) = queue_state(&mut conn, NAME);
    assert!(
        queued.is_empty() && scored.is_empty(),
        "the waiter that timed out is still queued: {queued:?} {scored:?}"
    );
    Ok(())
}

/// Redisson's `tryAcquire(n)` once, with `n` fresh ids: the ids when taken.
fn java_try_acquire(conn: &mut redis::Connection, name: &str, n: usize) -> Option<Vec<[u8; 16]>> {
    let ids: Vec<[u8; 16]> = (0..n).map(|_| *uuid::Uuid::new_v4().as_bytes()).collect();
    let text = redis::Script::new(REDISSON_PES_TRY_ACQUIRE);
    let mut script = text.prepare_invoke();
    script
        .key(name)
        .key(format!("{{{name}}}:timeout"))
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(n)
        .arg(NO_EXPIRY)
        .arg(now_ms())
        .arg(NO_EXPIRY)
        .arg("publish");
    for id in &ids {
        script.arg(&id[..]);
    }
    let reply: Option<String> = script.invoke(conn).unwrap();
    (reply.as_deref() == Some("OK")).then_some(ids)
}

/// Redisson's `tryRelease(List)`: how many it released (all or none).
fn java_try_release_all(conn: &mut redis::Connection, name: &str, ids: &[Vec<u8>]) -> i64 {
    let text = redis::Script::new(REDISSON_PES_TRY_RELEASE_ALL);
    let mut script = text.prepare_invoke();
    script
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .key(format!("{{{name}}}:timeout"))
        .arg(ids.len())
        .arg(now_ms())
        .arg("publish");
    for id in ids {
        script.arg(&id[..]);
    }
    script.invoke(conn).unwrap()
}

fn unhex(id: &str) -> Vec<u8> {
    (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
        .collect()
}

/// 3.51 (dafa31e70, then 119e41949) changed only how a Java waiter for several permits waits:
/// it wakes on any message and tries again, so every change that frees permits must announce
/// it. Our releases each announce; a Java multi-permit holder's release of all its ids at once
/// wakes as many of our waiters; a list with an id that is not acquired releases nothing.
#[test]
fn several_permits_at_once_work_across_redisson_and_ours() -> Result<()> {
    const NAME: &str = "delta:permits";
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let semaphore = manager.get_permit_expirable_semaphore(NAME);
    assert!(semaphore.try_set_permits(2)?);

    // A Java waiter for 2 permits gets them after our second release, told by its message.
    let first = semaphore.acquire(None)?;
    let second = semaphore.acquire(None)?;
    let mut watcher_conn = server.conn();
    let mut watcher = support::watch_channel(&mut watcher_conn, &format!("redisson_sc:{{{NAME}}}"));
    semaphore.release(&first)?;
    let announced: i64 = watcher.get_message().unwrap().get_payload().unwrap();
    assert_eq!(announced, 1);
    assert_eq!(java_try_acquire(&mut conn, NAME, 2), None, "one is not two");
    semaphore.release(&second)?;
    let announced: i64 = watcher.get_message().unwrap().get_payload().unwrap();
    assert_eq!(announced, 2);
    let java = java_try_acquire(&mut conn, NAME, 2).expect("both at once");
    assert_eq!(semaphore.acquired_permits()?, 2);
    assert_eq!(semaphore.available_permits()?, 0);

    // All or nothing: one of ours that is no longer acquired keeps Java's from being released.
    let java: Vec<Vec<u8>> = java.iter().map(|id| id.to_vec()).collect();
    let stale = vec![java[0].clone(), unhex(&first)];
    assert_eq!(java_try_release_all(&mut conn, NAME, &stale), 0);
    assert_eq!(semaphore.acquired_permits()?, 2);

    // Two of our waiters, both woken by the one message of Java's release of both.
    let (tx, rx) = mpsc::channel();
    for _ in 0..2 {
        let (semaphore, tx) = (semaphore.clone(), tx.clone());
        thread::spawn(move || {
            let _ = tx.send(semaphore.try_acquire(PATIENCE, None));
        });
    }
    // Our listener, besides the watcher above.
    assert!(support::await_subscribers(
        &mut conn,
        &format!("redisson_sc:{{{NAME}}}"),
        2
    ));
    let wakeups = manager.stats().wakeups;
    let released = Instant::now();
    assert_eq!(java_try_release_all(&mut conn, NAME, &java), 2);
    for _ in 0..2 {
        let id = rx.recv_timeout(PATIENCE).unwrap()?.expect("a permit");
        assert_eq!(id.len(), 32, "{id}");
    }
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "woken by the message: {took:?}"
    );
    assert!(
        manager.stats().wakeups > wakeups,
        "by the message, not a poll"
    );
    Ok(())
}
