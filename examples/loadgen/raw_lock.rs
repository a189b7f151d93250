//! The floor's lock: this crate's own scripts sent raw, used by W1, W2 and the cluster rows.

use redis_rlock_testkit as support;

/// The floor's lock: this crate's own acquire and release scripts, sent raw with EVALSHA on
/// one connection, with no pool, no watchdog and no bookkeeping.
pub(crate) struct RawLock {
    conn: redis::Connection,
    acquire: redis::Script,
    release: redis::Script,
    key: String,
    channel: String,
    owner: String,
    request: u64,
    /// Unique to this RawLock: a later one on the same key must not meet this one's latches.
    latch_prefix: String,
    /// `publish`, or `spublish` on a cluster with sharded pub/sub (as the lock's scripts).
    publish: &'static str,
    /// What counts the channel's subscribers for grants: `numsub`, or `shardnumsub` with
    /// sharded pub/sub (as the lock's scripts).
    numsub: &'static str,
    /// Whether acquires carry an attempt id (and so write the attempt marker), as the lock's
    /// fresh acquires do on a cluster only.
    marked: bool,
}

impl RawLock {
    pub(crate) fn connect(url: &str, key: &str) -> Self {
        let mut conn = support::nodelay_conn(url);
        let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
        let release = redis::Script::new(redis_rlock::lua::RELEASE);
        acquire.load(&mut conn).expect("SCRIPT LOAD");
        release.load(&mut conn).expect("SCRIPT LOAD");
        RawLock {
            conn,
            acquire,
            release,
            key: key.to_owned(),
            channel: format!("redisson_lock__channel:{{{key}}}"),
            owner: "00000000-0000-0000-0000-000000000000:1".to_owned(),
            request: 0,
            latch_prefix: format!(
                "redisson_unlock_latch:{{{key}}}:{}",
                uuid::Uuid::new_v4().simple()
            ),
            publish: "publish",
            numsub: "numsub",
            marked: false,
        }
    }

    /// Acquires with attempt ids, as the lock's fresh acquires on a cluster.
    pub(crate) fn marked(mut self) -> Self {
        self.marked = true;
        self
    }

    /// Announces releases with `command` (`spublish` on a Redis 7 cluster).
    pub(crate) fn publishing_with(mut self, command: &'static str) -> Self {
        self.publish = command;
        self.numsub = if command == "spublish" {
            "shardnumsub"
        } else {
            "numsub"
        };
        self
    }

    pub(crate) fn acquire(&mut self) {
        let held_by_other: Option<i64> = self
            .acquire
            .key(&self.key)
            .key(format!(
                "redis_rlock__attempt:{{{}}}:{}",
                self.key, self.owner
            ))
            .key(format!("redis_rlock__waiters:{{{}}}", self.key))
            .arg(30_000)
            .arg(&self.owner)
            // The attempt id (the release below moves it on), or none: a fresh acquire outside
            // a cluster writes no attempt marker.
            .arg(if self.marked {
                self.request.to_string()
            } else {
                String::new()
            })
            .arg(11_000)
            .invoke(&mut self.conn)
            .expect("raw acquire");
        assert!(held_by_other.is_none(), "the raw lock is uncontended");
    }

    pub(crate) fn release(&mut self) {
        self.request += 1;
        let latch = format!("{}-{}", self.latch_prefix, self.request);
        let released: Option<i64> = self
            .release
            .key(&self.key)
            .key(&self.channel)
            .key(latch)
            .key(format!("redis_rlock__waiters:{{{}}}", self.key))
            // The previous call's latch, deleted by this one, as the lock's releases do.
            .key(format!("{}-{}", self.latch_prefix, self.request - 1))
            .arg("0")
            .arg(30_000)
            .arg(&self.owner)
            .arg(self.publish)
            .arg(11_000)
            .arg(0) // no listener of our own
            .arg("") // no handoff
            .arg(0)
            .arg(0) // not listening
            .arg(self.numsub) // looks for registered waiters, as the lock's releases do
            .invoke(&mut self.conn)
            .expect("raw release");
        // 3: released, and a waiter (W3's raw one) heard the unlock message.
        assert!(
            matches!(released, Some(1 | 3)),
            "the raw lock was held: {released:?}"
        );
    }
}
