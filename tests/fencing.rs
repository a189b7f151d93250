//! Fencing tokens: a counter per lock name (Redisson's `redisson_lock_token:{name}`) that every
//! fenced acquisition increments, so tokens strictly increase across clients and processes.

use redis_rlock_testkit as support;

use std::sync::Mutex;
use std::thread;

use redis::Commands;
use redis_rlock::{LockManager, Result};
use support::RedisServer;

#[test]
fn tokens_strictly_increase_across_clients_and_reentries() -> Result<()> {
    let server = RedisServer::start();
    let (a, b) = (
        LockManager::new(&server.url())?,
        LockManager::new(&server.url())?,
    );
    let mut conn = server.conn();

    let outer = a.lock_fenced("fence:orders")?;
    let inner = a.lock_fenced("fence:orders")?; // a re-entry takes a token too
    let (t1, t2) = (
        outer.fencing_token().unwrap(),
        inner.fencing_token().unwrap(),
    );
    assert!(t2 > t1, "{t1} then {t2}");
    inner.unlock()?;
    outer.unlock()?;

    // Unfenced acquisitions leave the counter alone and carry no token.
    let plain = b.lock("fence:orders")?;
    assert_eq!(plain.fencing_token(), None);
    plain.unlock()?;
    let counter: u64 = conn.get("redisson_lock_token:{fence:orders}").unwrap();
    assert_eq!(counter, t2);

    let other = b.try_lock_fenced("fence:orders", std::time::Duration::from_secs(1))?;
    let t3 = other.expect("free").fencing_token().unwrap();
    assert!(t3 > t2);
    let ttl: i64 = conn.pttl("redisson_lock_token:{fence:orders}").unwrap();
    assert_eq!(ttl, -1, "the counter never expires");
    Ok(())
}

#[test]
fn tokens_above_2_pow_53_stay_exact() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    // 2^53 + 2: the next token, 2^53 + 3, is odd and has no exact double.
    let seed: u64 = (1 << 53) + 2;
    let _: () = conn.set("redisson_lock_token:{fence:big}", seed).unwrap();
    let guard = manager.lock_fenced("fence:big")?;
    assert_eq!(guard.fencing_token(), Some(seed + 1));
    // And near the top of Redis' counters.
    let _: () = conn
        .set("redisson_lock_token:{fence:top}", i64::MAX - 1)
        .unwrap();
    let top = manager.lock_fenced("fence:top")?;
    assert_eq!(top.fencing_token(), Some(i64::MAX as u64));
    Ok(())
}

#[test]
fn a_counter_that_cannot_be_incremented_fails_the_acquire_and_leaves_the_lock_free() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    for (name, value) in [
        ("fence:text", "not a number".to_string()),
        ("fence:full", i64::MAX.to_string()),
    ] {
        let counter = format!("redisson_lock_token:{{{name}}}");
        let _: () = conn.set(&counter, &value).unwrap();
        let err = manager.lock_fenced(name).unwrap_err();
        assert!(!err.is_invalid_argument(), "{err}");
        assert!(
            !manager.get_lock(name).is_locked()?,
            "{name} was left locked"
        );
        let after: String = conn.get(&counter).unwrap();
        assert_eq!(after, value, "the counter is unchanged");
    }
    Ok(())
}

#[test]
fn threads_taking_turns_get_tokens_in_the_order_they_held_the_lock() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let seen = Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    let guard = manager.lock_fenced("fence:line").expect("lock");
                    // Recorded inside the critical section: the order of the holds.
                    seen.lock().unwrap().push(guard.fencing_token().unwrap());
                    guard.unlock().expect("unlock");
                }
            });
        }
    });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 100);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "tokens out of order: {seen:?}"
    );
    Ok(())
}

#[test]
fn the_counter_follows_redissons_brace_rule() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let guard = manager.lock_fenced("{orders}:42")?;
    let counter: u64 = conn.get("redisson_lock_token:{orders}:42").unwrap();
    assert_eq!(Some(counter), guard.fencing_token());
    Ok(())
}

/// A counter that is not a non-negative integer INCR can raise to a valid token fails the
/// fenced acquire before anything is written: the error names the counter, the lock stays
/// free (or, for a re-entry, keeps its hold count), and the counter keeps its value and type.
#[test]
fn a_bad_counter_fails_the_fenced_acquire_before_the_lock_or_counter_is_touched() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let mut conn = server.conn();
    let bad_values = [
        "-5",
        "-0",
        "+3",
        "007",
        "1.5",
        "",
        " 1",
        "1\n2",
        "9223372036854775807",  // i64::MAX: INCR would overflow
        "9223372036854775808",  // above i64::MAX
        "99999999999999999999", // 20 digits
    ];
    for (i, value) in bad_values.iter().enumerate() {
        let name = format!("fence:bad:{i}");
        let counter = format!("redisson_lock_token:{{{name}}}");
        let _: () = conn.set(&counter, value).unwrap();
        let err = manager.lock_fenced(&name).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&counter), "{value:?}: {text}");
        assert!(
            text.contains("not a non-negative integer"),
            "{value:?}: {text}"
        );
        // The same from try_lock_fenced, which must not wait on a call that cannot succeed.
        let err = manager
            .try_lock_fenced(&name, std::time::Duration::from_secs(5))
            .unwrap_err();
        assert!(!err.is_invalid_argument(), "{err}");
        let exists: i64 = conn.exists(&name).unwrap();
        assert_eq!(exists, 0, "{value:?}: the lock was left taken");
        let after: String = conn.get(&counter).unwrap();
        assert_eq!(after, *value, "the counter is unchanged");
    }

    // A counter of another type: refused the same way, and left as it was.
    let _: () = conn.rpush("redisson_lock_token:{fence:list}", "7").unwrap();
    let err = manager.lock_fenced("fence:list").unwrap_err();
    assert!(err.to_string().contains("holds a list"), "{err}");
    assert!(
        !err.is_wrong_type(),
        "the lock key is not the one of the wrong type: {err}"
    );
    let exists: i64 = conn.exists("fence:list").unwrap();
    assert_eq!(exists, 0, "the lock was left taken");
    let list: Vec<String> = conn
        .lrange("redisson_lock_token:{fence:list}", 0, -1)
        .unwrap();
    assert_eq!(list, ["7"]);

    // A re-entry meeting a bad counter keeps the existing hold as it was.
    let held = manager.lock_fenced("fence:reentry")?;
    let _: () = conn
        .set("redisson_lock_token:{fence:reentry}", "-1")
        .unwrap();
    assert!(manager.lock_fenced("fence:reentry").is_err());
    assert_eq!(manager.get_lock("fence:reentry").hold_count()?, 1);
    held.unlock()?;
    let exists: i64 = conn.exists("fence:reentry").unwrap();
    assert_eq!(exists, 0, "released");

    // The largest counter that can still be raised, and zero, work.
    for (name, value, token) in [
        ("fence:zero", "0", 1),
        ("fence:edge", "9223372036854775806", i64::MAX as u64),
    ] {
        let _: () = conn
            .set(format!("redisson_lock_token:{{{name}}}"), value)
            .unwrap();
        let guard = manager.lock_fenced(name)?;
        assert_eq!(guard.fencing_token(), Some(token));
        guard.unlock()?;
    }
    Ok(())
}

#[test]
fn current_token_reads_the_counter_without_acquiring() -> Result<()> {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url())?;
    let lock = manager.get_lock("fence:peek");
    assert_eq!(lock.current_token()?, None, "no fenced acquire yet");
    let plain = lock.lock()?;
    assert_eq!(
        lock.current_token()?,
        None,
        "unfenced acquires take no token"
    );
    plain.unlock()?;

    let fenced = lock.lock_fenced()?;
    let token = fenced.fencing_token().unwrap();
    assert_eq!(lock.current_token()?, Some(token));
    fenced.unlock()?;
    assert_eq!(lock.current_token()?, Some(token), "reading takes none");
    let next = lock.lock_fenced()?;
    assert_eq!(next.fencing_token(), Some(token + 1));
    assert!(!lock.is_locked()? || lock.is_held_by_current_thread()?);

    // Redisson's counter, by the brace rule; a key of another type is reported.
    let mut conn = server.conn();
    let _: () = conn.set("redisson_lock_token:{orders}:1", 41).unwrap();
    assert_eq!(manager.get_lock("{orders}:1").current_token()?, Some(41));
    let _: () = conn
        .hset("redisson_lock_token:{fence:odd}", "f", "v")
        .unwrap();
    let err = manager.get_lock("fence:odd").current_token().unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    assert!(manager
        .get_lock("")
        .current_token()
        .unwrap_err()
        .is_invalid_argument());
    Ok(())
}
