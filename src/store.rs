//! Where lock state lives: every Redis command the crate sends goes through [`LockStore`].
//!
//! This is the one seam between the lock logic and the deployment. Today it is one Redis
//! server (or a proxy in front of one) reached through a connection pool; Sentinel, Cluster
//! (slot-aware renewal batches, `SPUBLISH`) and Redlock over several masters are meant to be
//! other implementations of the same handful of operations.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Client, Connection, ErrorKind, IntoConnectionInfo, RedisError, RedisResult};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::pool::Pool;
use crate::scripts::Scripts;
use crate::stats::Counters;

/// Redis allows many keys per script call, but a renewal script runs while the server does
/// nothing else; 100 keys keeps each call short (Redisson uses the same batch size).
const RENEW_KEYS_PER_CALL: usize = 100;

/// The message published when a lock is released: Java parses it as a number, and `0` is
/// Redisson's "unlocked" (wakes one waiter).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours (new, or one more hold), with its fencing token if fenced.
    Acquired { token: Option<u64> },
    /// Someone else holds it; their remaining lease in ms, or `None` when the key has no TTL
    /// (only a foreign writer can leave it like that).
    HeldByOther(Option<u64>),
}

impl Attempt {
    pub(crate) fn is_acquired(self) -> bool {
        matches!(self, Attempt::Acquired { .. })
    }

    /// The acquire script's reply: nil when acquired, else the holder's PTTL.
    fn from_reply(pttl: Option<i64>) -> Self {
        match pttl {
            None => Attempt::Acquired { token: None },
            Some(ms) => Attempt::HeldByOther(u64::try_from(ms).ok()),
        }
    }

    /// The fenced acquire script's reply: `[token]` when acquired, else the holder's PTTL.
    fn from_fenced_reply(reply: redis::Value) -> RedisResult<Self> {
        use redis::Value;
        match reply {
            Value::Int(ms) => Ok(Attempt::HeldByOther(u64::try_from(ms).ok())),
            Value::Array(items) => {
                let token: String = match items.as_slice() {
                    [item] => redis::from_redis_value_ref(item)?,
                    _ => String::new(),
                };
                let token = token.parse::<u64>().map_err(|_| {
                    RedisError::from((
                        ErrorKind::Parse,
                        "the fencing token counter does not hold a non-negative integer",
                    ))
                })?;
                Ok(Attempt::Acquired { token: Some(token) })
            }
            other => Err(RedisError::from((
                ErrorKind::Parse,
                "unexpected reply to the fenced acquire",
                format!("{other:?}"),
            ))),
        }
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The last hold was released; nobody else was told, and no handoff was asked for.
    Released,
    /// The last hold was released and the lock acquired for the next local owner.
    HandedOver,
    /// The last hold was released and someone besides this client heard the unlock: the lock
    /// was left free for them.
    LeftForOthers,
    /// One hold fewer; the owner still holds the lock.
    StillHeld,
    /// The owner held no hold: expired, force-unlocked, or someone else's.
    NotHeld,
}

impl Release {
    /// The release script's reply (see `RELEASE` in scripts.rs).
    fn from_reply(reply: Option<i64>) -> Self {
        match reply {
            None => Release::NotHeld,
            Some(0) => Release::StillHeld,
            Some(2) => Release::HandedOver,
            Some(3) => Release::LeftForOthers,
            Some(_) => Release::Released,
        }
    }
}

/// Above this many locks remembered, the latches of earlier releases are forgotten (they
/// expire by themselves): the memory stays bounded however many names are used.
const LATCHES_REMEMBERED: usize = 1024;
/// At most this many latches of one lock wait for deletion (overlapping releases).
const LATCHES_PER_LOCK: usize = 8;

pub(crate) struct LockStore {
    pool: Pool,
    scripts: Scripts,
    /// `publish` on a single server; `spublish` will be needed on a Redis 7 cluster.
    publish_command: &'static str,
    latch_ttl_ms: u64,
    response_timeout: Duration,
    /// The latches of this client's releases of each lock whose replies are in hand (usually
    /// one; more when releases overlapped): the next release of that lock deletes them (see
    /// `RELEASE`), so a busy lock leaves a latch or two behind, not one per unlock.
    last_latch: Mutex<HashMap<Box<str>, Vec<String>>>,
    /// What this client sent; the listener and the watchdog count here too.
    pub(crate) counters: Arc<Counters>,
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
        // CLIENT SETINFO (which redis-rs sends on connect unless told not to) is informative
        // only and its replies are ignored, but a paused server makes each of them cost a
        // full timeout of the connect.
        let redis = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_tcp_settings(tcp).set_redis_settings(redis);
        let client = match &config.tls_root_certificate {
            #[cfg(feature = "tls")]
            Some(pem) => Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.0.clone()),
                },
            ),
            _ => Client::open(info),
        }
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
            last_latch: Mutex::new(HashMap::new()),
            counters: Arc::new(Counters::default()),
        };
        let load = Scripts::load_all();
        store.run("loading the lock scripts", "", 5, |conn| {
            load.query::<()>(conn)
        })?;
        Ok(store)
    }

    /// The command scripts publish with (Redisson passes it to its scripts the same way).
    pub(crate) fn publish_command(&self) -> &'static str {
        self.publish_command
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
        let call = self.acquire_call(keys, lease_ms, owner);
        let pttl: Option<i64> = self.run("acquire", &keys.name, 1, |conn| {
            query_loading_scripts(conn, |conn| call.query(conn))
        })?;
        Ok(Attempt::from_reply(pttl))
    }

    /// One fenced acquire attempt: as [`try_acquire`](Self::try_acquire), and on success the
    /// lock's fencing counter is incremented and the new token returned.
    pub(crate) fn try_acquire_fenced(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
    ) -> Result<Attempt> {
        let call = self.fenced_acquire_call(keys, lease_ms, owner);
        self.run("acquire", &keys.name, 1, |conn| {
            let reply = query_loading_scripts(conn, |conn| call.query(conn))?;
            Attempt::from_fenced_reply(reply)
        })
    }

    /// `EVALSHA` of the acquire script (see `scripts.rs` for its KEYS and ARGV).
    fn acquire_call(&self, keys: &LockKeys, lease_ms: u64, owner: &str) -> redis::Cmd {
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.scripts.acquire.get_hash())
            .arg(1)
            .arg(&*keys.name)
            .arg(lease_ms)
            .arg(owner);
        call
    }

    /// `EVALSHA` of the fenced acquire script (see `scripts.rs` for its KEYS and ARGV).
    fn fenced_acquire_call(&self, keys: &LockKeys, lease_ms: u64, owner: &str) -> redis::Cmd {
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.scripts.fenced_acquire.get_hash())
            .arg(2)
            .arg(&*keys.name)
            .arg(keys.token_key())
            .arg(lease_ms)
            .arg(owner);
        call
    }

    /// Releases one hold of `owner` (holds that remain get `lease_ms`) and, when it was the
    /// last and nobody but this client's own listener (`own_listener`) heard the unlock,
    /// acquires for `next` (owner field, lease ms) in the same script call: the handoff to the
    /// next local thread.
    ///
    /// Idempotent: when the reply is lost (a timeout, a broken connection) the call is sent
    /// once more with the same latch, and gets the first call's answer if that one ran (the
    /// handoff included: it is never done twice, nor reported undone when it was done).
    pub(crate) fn release(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
        own_listener: bool,
        next: Option<(&str, u64)>,
    ) -> Result<Release> {
        let latch = keys.latch(&uuid::Uuid::new_v4().simple().to_string());
        let previous = self
            .last_latch
            .lock()
            .remove(&*keys.name)
            .unwrap_or_default();
        let (next_owner, next_lease_ms) = next.unwrap_or(("", 0));
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.scripts.release.get_hash())
            .arg(3 + previous.len())
            .arg(&*keys.name)
            .arg(keys.channel())
            .arg(&latch)
            .arg(&previous);
        call.arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(owner)
            .arg(self.publish_command)
            .arg(self.latch_ttl_ms)
            .arg(u8::from(own_listener))
            .arg(next_owner)
            .arg(next_lease_ms);
        let send = || {
            self.run("release", &keys.name, 1, |conn| {
                query_loading_scripts(conn, |conn| call.query::<Option<i64>>(conn))
            })
        };
        let reply = match send() {
            Err(err) if is_lost_reply(&err) => {
                log::debug!("release of {:?}: {err}; sending it again", keys.name);
                send()?
            }
            other => other?,
        };
        let mut latches = self.last_latch.lock();
        if latches.len() >= LATCHES_REMEMBERED {
            latches.clear();
        }
        let pending = latches.entry(keys.name.clone()).or_default();
        if pending.len() >= LATCHES_PER_LOCK {
            pending.remove(0); // it expires by itself
        }
        pending.push(latch);
        Ok(Release::from_reply(reply))
    }

    /// Runs one script invocation (EVALSHA, loading the script on NOSCRIPT) as one round trip
    /// on a pooled connection: for lock kinds whose scripts live with them.
    pub(crate) fn invoke<T: redis::FromRedisValue>(
        &self,
        operation: &'static str,
        name: &str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T> {
        self.run(operation, name, 1, |conn| invocation.invoke(conn))
    }

    /// Renews every `(lock key, owner field)` of `batch` to `timeout_ms`, 100 keys per script
    /// call and all calls in one pipeline (one round trip). Returns, per entry, whether the
    /// hold was still there.
    ///
    /// The whole call (waiting for a connection, connecting, the reply) takes at most
    /// `budget`, so that a stalled server cannot hold the watchdog past the leases it renews.
    pub(crate) fn renew(
        &self,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Result<Vec<bool>> {
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
        let calls = batch.len().div_ceil(RENEW_KEYS_PER_CALL) as u64;
        let replies: Vec<Vec<i64>> = self.run_within("renew", "", calls, budget, |conn| {
            query_loading_scripts(conn, |conn| pipe.query(conn))
        })?;
        Ok(replies.into_iter().flatten().map(|r| r == 1).collect())
    }

    /// Deletes the lock whoever holds it and announces the release. `true` if there was one.
    pub(crate) fn force_unlock(&self, keys: &LockKeys) -> Result<bool> {
        let deleted: i64 = self.run("force unlock", &keys.name, 1, |conn| {
            self.scripts
                .force_unlock
                .key(&*keys.name)
                .key(keys.channel())
                .arg(UNLOCK_MESSAGE)
                .arg(self.publish_command)
                .invoke(conn)
        })?;
        Ok(deleted == 1)
    }

    /// Whether anyone holds the lock. A key of another type is an error, not "locked".
    pub(crate) fn is_locked(&self, keys: &LockKeys) -> Result<bool> {
        let kind: String = self.run("is_locked", &keys.name, 1, |conn| {
            redis::cmd("TYPE").arg(&*keys.name).query(conn)
        })?;
        match kind.as_str() {
            "none" => Ok(false),
            "hash" => Ok(true),
            _ => Err(Error::WrongType {
                name: keys.name.to_string(),
            }),
        }
    }

    /// How many holds `owner` has (0 when none).
    pub(crate) fn hold_count(&self, keys: &LockKeys, owner: &str) -> Result<u32> {
        let count: Option<i64> = self.run("hold_count", &keys.name, 1, |conn| {
            redis::cmd("HGET").arg(&*keys.name).arg(owner).query(conn)
        })?;
        let count = count.unwrap_or(0);
        u32::try_from(count).map_err(|_| Error::WrongType {
            name: keys.name.to_string(),
        })
    }

    /// Whether `owner` holds the lock.
    pub(crate) fn is_held_by(&self, keys: &LockKeys, owner: &str) -> Result<bool> {
        self.run("is_held_by_current_thread", &keys.name, 1, |conn| {
            redis::cmd("HEXISTS")
                .arg(&*keys.name)
                .arg(owner)
                .query(conn)
        })
    }

    /// The lock's remaining lease; `None` when it is not held or has no expiry.
    pub(crate) fn remaining_ttl(&self, keys: &LockKeys) -> Result<Option<Duration>> {
        let (kind, pttl): (String, i64) = self.run("remaining_ttl", &keys.name, 2, |conn| {
            redis::pipe()
                .cmd("TYPE")
                .arg(&*keys.name)
                .cmd("PTTL")
                .arg(&*keys.name)
                .query(conn)
        })?;
        if kind != "hash" && kind != "none" {
            return Err(Error::WrongType {
                name: keys.name.to_string(),
            });
        }
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Publishes `message` on `channel` (the listener's private wake-up channel).
    pub(crate) fn publish(&self, channel: &str, message: &str) -> Result<()> {
        self.run("publish", "", 1, |conn| {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query::<i64>(conn)
        })?;
        Ok(())
    }

    /// Runs `op`, one round trip of `commands` commands, on a pooled connection, within one
    /// response timeout in all (see [`run_within`](Self::run_within)).
    fn run<T>(
        &self,
        operation: &'static str,
        name: &str,
        commands: u64,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within(operation, name, commands, self.response_timeout, op)
    }

    /// Runs `op`, one round trip of `commands` commands, on a pooled connection, and returns
    /// within `budget` in all: waiting for a connection, connecting, a retry on a fresh
    /// connection and every reply share it (a call must return within its wait plus one
    /// response timeout, and a stalled server must not hold the watchdog past the leases it
    /// renews). Each step also keeps to its own configured timeout.
    ///
    /// A connection that sat idle may have died with a server restart; when such a connection
    /// fails as dropped, `op` runs once more on a fresh one, in what is left of the budget.
    /// Only then: a timeout is never retried, since the command may still run on the server.
    pub(crate) fn run_within<T>(
        &self,
        operation: &'static str,
        name: &str,
        commands: u64,
        budget: Duration,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let started = Instant::now();
        let deadline = started + budget.max(Duration::from_millis(1));
        let mut conn = self.pool.get_by(deadline)?;
        self.counters.sent(commands);
        let err = match self.call(&mut conn, commands, deadline, &op) {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        if !(conn.reused && is_dead_connection(&err)) {
            if is_broken(&err) {
                conn.discard();
            }
            return Err(self.classify(operation, name, err, started));
        }
        conn.discard();
        if Instant::now() >= deadline {
            // Nothing ran (the connection was dead) and no time is left to try again.
            return Err(Error::Timeout {
                operation,
                after: round_ms(started.elapsed()),
            });
        }
        log::debug!("{operation}: pooled connection was dead ({err}); retrying on a new one");
        let mut conn = self.pool.get_fresh_by(deadline)?;
        self.counters.reconnect();
        self.counters.sent(commands);
        self.call(&mut conn, commands, deadline, &op)
            .map_err(|err| {
                if is_broken(&err) {
                    conn.discard();
                }
                self.classify(operation, name, err, started)
            })
    }

    /// Runs `op` on `conn` with its replies due by `deadline`.
    fn call<T>(
        &self,
        conn: &mut Connection,
        commands: u64,
        deadline: Instant,
        op: &impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        // The socket's timeout applies to each read, and redis-rs reads every reply of a
        // pipeline even after one timed out: with a paused server, `commands` replies cost
        // `commands` timeouts. Each reply gets its share of the time left.
        let left = deadline.saturating_duration_since(Instant::now());
        let commands = u32::try_from(commands.max(1)).unwrap_or(u32::MAX);
        let per_reply = (left.min(self.response_timeout) / commands).max(Duration::from_millis(1));
        // Setting the timeout costs two system calls: only when it is shorter by more than the
        // few milliseconds that waiting for the connection took.
        let shortened = per_reply + READ_TIMEOUT_SLACK < self.response_timeout;
        if shortened {
            conn.set_read_timeout(Some(per_reply))?;
        }
        let result = op(conn);
        if shortened && !result.as_ref().is_err_and(is_broken) {
            conn.set_read_timeout(Some(self.response_timeout))?;
        }
        result
    }

    /// The error for a failed command; a timeout says what timed out, after how long.
    fn classify(
        &self,
        operation: &'static str,
        name: &str,
        err: RedisError,
        started: Instant,
    ) -> Error {
        if err.is_timeout() {
            Error::Timeout {
                operation,
                after: round_ms(started.elapsed()),
            }
        } else {
            Error::from_command(operation, name, err)
        }
    }
}

/// How much longer than its budget a call may take rather than pay two system calls to
/// shorten its read timeout: the time it may spend getting a pooled connection.
const READ_TIMEOUT_SLACK: Duration = Duration::from_millis(5);

/// `d` to whole milliseconds, for messages.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// Runs `query`; when the server has lost the scripts (a restart, `SCRIPT FLUSH`), loads them
/// all and runs it once more. Nothing of a call refused with NOSCRIPT ran, and the release
/// script is idempotent, so the rerun is safe.
fn query_loading_scripts<T>(
    conn: &mut Connection,
    query: impl Fn(&mut Connection) -> RedisResult<T>,
) -> RedisResult<T> {
    match query(conn) {
        Err(err) if is_noscript(&err) || has_noscript(&err) => {
            Scripts::load_all().query::<()>(conn)?;
            query(conn)
        }
        other => other,
    }
}

/// The reply may be lost although the command ran: a timeout or a broken connection.
fn is_lost_reply(err: &Error) -> bool {
    err.is_timeout() || err.is_connection_error()
}

/// Whether one command of a failed pipeline was refused with NOSCRIPT.
fn has_noscript(err: &RedisError) -> bool {
    err.clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "NOSCRIPT"))
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
