//! The peer floor of W1 and W2: Redisson's own `RLock` scripts (its hash acquire and its
//! latched unlock, as Redisson 3.2x–4.x sends them) run raw with EVALSHA on one connection.
//! Redisson also deletes each unlock latch with a separate `DEL` after the reply; the floor
//! leaves that command out, so it is the two scripts and nothing else.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_rlock_testkit as support;
use support::redisson::{REDISSON_LOCK, REDISSON_UNLOCK};

/// Redisson's lock on one key, sent raw: no pool, no watchdog, no bookkeeping.
pub(crate) struct RedissonRaw {
    lock: redis::Script,
    unlock: redis::Script,
    key: String,
    channel: String,
    latch_prefix: String,
    request: AtomicU64,
}

impl RedissonRaw {
    /// Loads the scripts on `conn`'s server.
    pub(crate) fn new(conn: &mut redis::Connection, key: &str) -> Self {
        let lock = redis::Script::new(REDISSON_LOCK);
        let unlock = redis::Script::new(REDISSON_UNLOCK);
        lock.load(conn).expect("SCRIPT LOAD");
        unlock.load(conn).expect("SCRIPT LOAD");
        RedissonRaw {
            lock,
            unlock,
            key: key.to_owned(),
            channel: format!("redisson_lock__channel:{{{key}}}"),
            latch_prefix: format!(
                "redisson_unlock_latch:{{{key}}}:{}",
                uuid::Uuid::new_v4().simple()
            ),
            request: AtomicU64::new(0),
        }
    }

    /// One attempt for `owner`: true when it took the lock.
    pub(crate) fn try_lock(&self, conn: &mut redis::Connection, owner: &str) -> bool {
        let pttl: Option<i64> = self
            .lock
            .key(&self.key)
            .arg(30_000)
            .arg(owner)
            .invoke(conn)
            .expect("Redisson lock script");
        pttl.is_none()
    }

    /// Releases `owner`'s hold, with a new latch.
    pub(crate) fn unlock(&self, conn: &mut redis::Connection, owner: &str) {
        let request = self.request.fetch_add(1, Ordering::Relaxed);
        let released: Option<i64> = self
            .unlock
            .key(&self.key)
            .key(&self.channel)
            .key(format!("{}-{request}", self.latch_prefix))
            .arg(0)
            .arg(30_000)
            .arg(owner)
            .arg("publish")
            .arg(11_000)
            .invoke(conn)
            .expect("Redisson unlock script");
        assert_eq!(released, Some(1), "the Redisson lock was held");
    }
}

/// W1's peer floor: one thread's lock+unlock cycles on its own connection.
pub(crate) struct RedissonCycle {
    conn: redis::Connection,
    lock: RedissonRaw,
}

impl RedissonCycle {
    pub(crate) fn connect(url: &str, key: &str) -> Self {
        let mut conn = support::nodelay_conn(url);
        let lock = RedissonRaw::new(&mut conn, key);
        RedissonCycle { conn, lock }
    }

    /// One uncontended cycle.
    pub(crate) fn cycle(&mut self) {
        let owner = "00000000-0000-0000-0000-000000000000:1";
        assert!(self.lock.try_lock(&mut self.conn, owner), "uncontended");
        self.lock.unlock(&mut self.conn, owner);
    }
}
