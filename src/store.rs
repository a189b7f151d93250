//! Where lock state lives: every Redis command the crate sends goes through [`LockStore`].
//!
//! This is the one seam between the lock logic and the deployment. Today it is one Redis
//! server (or a proxy in front of one) reached through a connection pool; Sentinel, Cluster
//! (slot-aware renewal batches, `SPUBLISH`) and Redlock over several masters are meant to be
//! other implementations of the same handful of operations.

use std::time::Duration;

use redis::{Client, Connection, ErrorKind, IntoConnectionInfo, RedisError, RedisResult};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::pool::Pool;
use crate::scripts::Scripts;

/// Redis allows many keys per script call, but a renewal script runs while the server does
/// nothing else; 100 keys keeps each call short (Redisson uses the same batch size).
const RENEW_KEYS_PER_CALL: usize = 100;

/// The message published when a lock is released: Java parses it as a number, and `0` is
/// Redisson's "unlocked" (wakes one waiter).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours (new, or one more hold).
    Acquired,
    /// Someone else holds it; their remaining lease in ms, or `None` when the key has no TTL
    /// (only a foreign writer can leave it like that).
    HeldByOther(Option<u64>),
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The last hold was released and the unlock was announced.
    Released,
    /// One hold fewer; the owner still holds the lock.
    StillHeld,
    /// The owner held no hold: expired, force-unlocked, or someone else's.
    NotHeld,
}

pub(crate) struct LockStore {
    pool: Pool,
    scripts: Scripts,
    /// `publish` on a single server; `spublish` will be needed on a Redis 7 cluster.
    publish_command: &'static str,
    latch_ttl_ms: u64,
    response_timeout: Duration,
}

impl LockStore {
    /// Parses the URL, opens the first connection (so a wrong address or password is reported
    /// now rather than at the first lock) and loads the scripts.
    pub(crate) fn connect(url: &str, config: &Config) -> Result<Self> {
        let info = url
            .into_connection_info()
            .map_err(|source| Error::InvalidUrl { source })?;
        // Every request is a small write followed by a wait for the reply: Nagle's algorithm
        // would only add delay (up to a delayed-ACK period) to each of them.
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let client = Client::open(info.set_tcp_settings(tcp))
            .map_err(|source| Error::InvalidUrl { source })?;
        let store = LockStore {
            pool: Pool::new(
                client,
                config.pool_size,
                config.connect_timeout,
                config.response_timeout,
            ),
            scripts: Scripts::new(),
            publish_command: "publish",
            latch_ttl_ms: config.latch_ttl_ms(),
            response_timeout: config.response_timeout,
        };
        let load = Scripts::load_all();
        store.run("loading the lock scripts", "", |conn| {
            load.query::<()>(conn)
        })?;
        Ok(store)
    }

    /// Opens the pub/sub listener's own connection (not counted against the pool).
    pub(crate) fn connect_subscriber(&self) -> Result<Connection> {
        self.pool.connect_dedicated()
    }

    /// One acquire attempt: takes the lock (or one more hold) for `owner` with a TTL of
    /// `lease_ms`, or reports the holder's remaining lease.
    pub(crate) fn try_acquire(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
    ) -> Result<Attempt> {
        let pttl: Option<i64> = self.run("acquire", &keys.name, |conn| {
            self.scripts
                .acquire
                .key(&keys.name)
                .arg(lease_ms)
                .arg(owner)
                .invoke(conn)
        })?;
        Ok(match pttl {
            None => Attempt::Acquired,
            Some(ms) => Attempt::HeldByOther(u64::try_from(ms).ok()),
        })
    }

    /// Releases one hold of `owner`. Idempotent: a retry after a lost reply reuses the same
    /// latch and gets the first call's answer.
    pub(crate) fn release(&self, keys: &LockKeys, lease_ms: u64, owner: &str) -> Result<Release> {
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let latch = keys.latch(&request_id);
        let reply: Option<i64> = self.run("release", &keys.name, |conn| {
            self.scripts
                .release
                .key(&keys.name)
                .key(&keys.channel)
                .key(&latch)
                .arg(UNLOCK_MESSAGE)
                .arg(lease_ms)
                .arg(owner)
                .arg(self.publish_command)
                .arg(self.latch_ttl_ms)
                .invoke(conn)
        })?;
        Ok(match reply {
            None => Release::NotHeld,
            Some(0) => Release::StillHeld,
            Some(_) => Release::Released,
        })
    }

    /// Renews every `(lock key, owner field)` of `batch` to `timeout_ms`, 100 keys per script
    /// call and all calls in one pipeline (one round trip). Returns, per entry, whether the
    /// hold was still there.
    pub(crate) fn renew(&self, batch: &[(&str, &str)], timeout_ms: u64) -> Result<Vec<bool>> {
        let mut pipe = redis::pipe();
        for chunk in batch.chunks(RENEW_KEYS_PER_CALL) {
            let call = pipe
                .cmd("EVALSHA")
                .arg(self.scripts.renew.get_hash())
                .arg(chunk.len());
            for (key, _) in chunk {
                call.arg(*key);
            }
            call.arg(timeout_ms);
            for (_, owner) in chunk {
                call.arg(*owner);
            }
        }
        let replies: Vec<Vec<i64>> = self.run("renew", "", |conn| match pipe.query(conn) {
            Err(err) if is_noscript(&err) => {
                self.scripts.renew.load(conn)?;
                pipe.query(conn)
            }
            other => other,
        })?;
        Ok(replies.into_iter().flatten().map(|r| r == 1).collect())
    }

    /// Deletes the lock whoever holds it and announces the release. `true` if there was one.
    pub(crate) fn force_unlock(&self, keys: &LockKeys) -> Result<bool> {
        let deleted: i64 = self.run("force unlock", &keys.name, |conn| {
            self.scripts
                .force_unlock
                .key(&keys.name)
                .key(&keys.channel)
                .arg(UNLOCK_MESSAGE)
                .arg(self.publish_command)
                .invoke(conn)
        })?;
        Ok(deleted == 1)
    }

    /// Whether anyone holds the lock. A key of another type is an error, not "locked".
    pub(crate) fn is_locked(&self, keys: &LockKeys) -> Result<bool> {
        let kind: String = self.run("is_locked", &keys.name, |conn| {
            redis::cmd("TYPE").arg(&keys.name).query(conn)
        })?;
        match kind.as_str() {
            "none" => Ok(false),
            "hash" => Ok(true),
            _ => Err(Error::WrongType {
                name: keys.name.clone(),
            }),
        }
    }

    /// How many holds `owner` has (0 when none).
    pub(crate) fn hold_count(&self, keys: &LockKeys, owner: &str) -> Result<u32> {
        let count: Option<i64> = self.run("hold_count", &keys.name, |conn| {
            redis::cmd("HGET").arg(&keys.name).arg(owner).query(conn)
        })?;
        let count = count.unwrap_or(0);
        u32::try_from(count).map_err(|_| Error::WrongType {
            name: keys.name.clone(),
        })
    }

    /// Whether `owner` holds the lock.
    pub(crate) fn is_held_by(&self, keys: &LockKeys, owner: &str) -> Result<bool> {
        self.run("is_held_by_current_thread", &keys.name, |conn| {
            redis::cmd("HEXISTS").arg(&keys.name).arg(owner).query(conn)
        })
    }

    /// The lock's remaining lease; `None` when it is not held or has no expiry.
    pub(crate) fn remaining_ttl(&self, keys: &LockKeys) -> Result<Option<Duration>> {
        let (kind, pttl): (String, i64) = self.run("remaining_ttl", &keys.name, |conn| {
            redis::pipe()
                .cmd("TYPE")
                .arg(&keys.name)
                .cmd("PTTL")
                .arg(&keys.name)
                .query(conn)
        })?;
        if kind != "hash" && kind != "none" {
            return Err(Error::WrongType {
                name: keys.name.clone(),
            });
        }
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Publishes `message` on `channel` (the listener's private wake-up channel).
    pub(crate) fn publish(&self, channel: &str, message: &str) -> Result<()> {
        self.run("publish", "", |conn| {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query::<i64>(conn)
        })?;
        Ok(())
    }

    /// Runs `op` on a pooled connection.
    ///
    /// A connection that sat idle may have died with a server restart; when such a connection
    /// fails as dropped, `op` runs once more on a fresh one. Only then: a timeout is never
    /// retried, since the command may still run on the server.
    fn run<T>(
        &self,
        operation: &'static str,
        name: &str,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let mut conn = self.pool.get()?;
        let err = match op(&mut conn) {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        if !(conn.reused && is_dead_connection(&err)) {
            if is_broken(&err) {
                conn.discard();
            }
            return Err(self.classify(operation, name, err));
        }
        conn.discard();
        log::debug!("{operation}: pooled connection was dead ({err}); retrying on a new one");
        let mut conn = self.pool.get_fresh()?;
        op(&mut conn).map_err(|err| {
            if is_broken(&err) {
                conn.discard();
            }
            self.classify(operation, name, err)
        })
    }

    fn classify(&self, operation: &'static str, name: &str, err: RedisError) -> Error {
        if err.is_timeout() {
            Error::Timeout {
                operation,
                after: self.response_timeout,
            }
        } else {
            Error::from_command(operation, name, err)
        }
    }
}

fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// The connection is gone: nothing was read from it, so the server never answered.
fn is_dead_connection(err: &RedisError) -> bool {
    err.is_connection_dropped() || err.is_connection_refusal()
}

/// The connection's state is unknown (I/O failed or a reply may still arrive): never reuse it.
fn is_broken(err: &RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || is_dead_connection(err)
}
