//! Redisson's spin lock (`RSpinLock`) as a Java client sends it: its scripts, run raw with
//! EVAL, and its default back-off between attempts. Tests and the load generator use it as the
//! Java side of a shared spin lock.

use std::time::{Duration, Instant};

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
pub struct JavaSpinLock {
    conn: redis::Connection,
    pub owner: String,
}

impl JavaSpinLock {
    pub fn new(conn: redis::Connection, thread_id: u64) -> Self {
        JavaSpinLock {
            conn,
            owner: format!("0b7c6f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f:{thread_id}"),
        }
    }

    /// One `tryAcquire` with the 30 s watchdog lease: `None` when acquired, else the PTTL.
    pub fn attempt(&mut self, name: &str) -> Option<i64> {
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
    pub fn try_lock(&mut self, name: &str, wait: Duration) -> bool {
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
    pub fn unlock(&mut self, name: &str) -> Option<i64> {
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
