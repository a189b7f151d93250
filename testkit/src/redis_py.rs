//! redis-py's `Lock` (`redis/lock.py`) as a Python client sends it: `SET name token NX PX`
//! to acquire, its release and extend scripts run raw with EVAL, its token a uuid1 hex per
//! `Lock` object, and its 100 ms sleep between attempts. Tests use it as the Python side of a
//! shared string lock.

use std::time::{Duration, Instant};

/// redis-py's `LUA_RELEASE_SCRIPT`: `KEYS[1]` lock, `ARGV[1]` token; 1 released, 0 not ours.
const REDIS_PY_RELEASE: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        redis.call('del', KEYS[1])
        return 1
    ";

/// redis-py's `LUA_EXTEND_SCRIPT`: `KEYS[1]` lock, `ARGV[1]` token, `ARGV[2]` ms, `ARGV[3]`
/// "1" to replace the TTL, "0" to add to it; 1 extended, 0 not ours.
const REDIS_PY_EXTEND: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        local expiration = redis.call('pttl', KEYS[1])
        if not expiration then
            expiration = 0
        end
        if expiration < 0 then
            return 0
        end

        local newttl = ARGV[2]
        if ARGV[3] == \"0\" then
            newttl = ARGV[2] + expiration
        end
        redis.call('pexpire', KEYS[1], newttl)
        return 1
    ";

/// redis-py's default `sleep` between two attempts of a blocking `acquire`.
const REDIS_PY_SLEEP: Duration = Duration::from_millis(100);

/// One redis-py `Lock` object: its name, timeout and token.
pub struct PyLock {
    conn: redis::Connection,
    name: String,
    timeout_ms: u64,
    /// The token this object writes (redis-py: `uuid.uuid1().hex`, 32 hex digits).
    pub token: String,
}

impl PyLock {
    /// `redis.lock(name, timeout=timeout)`, with the token `token` (32 hex digits).
    pub fn new(conn: redis::Connection, name: &str, timeout: Duration, token: u32) -> Self {
        PyLock {
            conn,
            name: name.to_owned(),
            timeout_ms: timeout.as_millis() as u64,
            token: format!("{token:032x}"),
        }
    }

    /// `do_acquire`: `SET name token NX PX timeout`; whether it took the lock.
    pub fn attempt(&mut self) -> bool {
        let reply: Option<String> = redis::cmd("SET")
            .arg(&self.name)
            .arg(&self.token)
            .arg("NX")
            .arg("PX")
            .arg(self.timeout_ms)
            .query(&mut self.conn)
            .expect("redis-py's SET NX PX");
        reply.is_some()
    }

    /// `acquire(blocking_timeout=wait)`: attempts every 100 ms until `wait` has passed.
    pub fn acquire(&mut self, wait: Duration) -> bool {
        let started = Instant::now();
        loop {
            if self.attempt() {
                return true;
            }
            if started.elapsed() >= wait {
                return false;
            }
            std::thread::sleep(REDIS_PY_SLEEP);
        }
    }

    /// `do_release`: whether the key held this token and was deleted (redis-py raises
    /// `LockNotOwnedError` when not).
    pub fn release(&mut self) -> bool {
        let released: i64 = redis::cmd("EVAL")
            .arg(REDIS_PY_RELEASE)
            .arg(1)
            .arg(&self.name)
            .arg(&self.token)
            .query(&mut self.conn)
            .expect("redis-py's release script");
        released == 1
    }

    /// `extend(additional_time, replace_ttl)`: whether the key held this token and was
    /// extended.
    pub fn extend(&mut self, additional: Duration, replace_ttl: bool) -> bool {
        let extended: i64 = redis::cmd("EVAL")
            .arg(REDIS_PY_EXTEND)
            .arg(1)
            .arg(&self.name)
            .arg(&self.token)
            .arg(additional.as_millis() as u64)
            .arg(if replace_ttl { "1" } else { "0" })
            .query(&mut self.conn)
            .expect("redis-py's extend script");
        extended == 1
    }

    /// `owned()`: whether the key holds this token.
    pub fn owned(&mut self) -> bool {
        let held: Option<String> = redis::cmd("GET")
            .arg(&self.name)
            .query(&mut self.conn)
            .expect("GET");
        held.as_deref() == Some(self.token.as_str())
    }

    /// `locked()`: whether the key exists, whoever holds it.
    pub fn locked(&mut self) -> bool {
        let n: i64 = redis::cmd("EXISTS")
            .arg(&self.name)
            .query(&mut self.conn)
            .expect("EXISTS");
        n == 1
    }
}
