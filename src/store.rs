//! Where lock state lives: every Redis command the crate sends goes through [`LockStore`].
//!
//! This is the one seam between the lock logic and the deployment. Each command is routed by
//! its lock's name to the master that serves it ([`Topology`]: one server, the master Sentinel
//! names, or the slot's master in a cluster), follows MOVED and ASK redirections, and finds
//! the master again after a failover; a command is sent again where it did not run, where
//! running it twice changes nothing (an acquire carries its attempt id, a release its latch),
//! and after a pooled connection died, where it most likely did not run (docs/DESIGN.md,
//! "Never twice blindly"); a timeout never is. With replica sync on, acquires and releases
//! wait for a replica's acknowledgement (`WAIT`) on the connection that made them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Connection, ErrorKind, RedisError, RedisResult};

use crate::config::Config;
use crate::endpoints::Endpoints;
use crate::error::{server_code, Error, Result};
use crate::names::LockKeys;
use crate::pool::Pool;
use crate::pubsub_connection::{PubSubConnection, PubSubProtocol};
use crate::scripts::Scripts;
use crate::stats::Counters;
use crate::topology::Topology;

mod renewal;

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
    pub(crate) fn from_reply(pttl: Option<i64>) -> Self {
        match pttl {
            None => Attempt::Acquired { token: None },
            Some(ms) => Attempt::HeldByOther(u64::try_from(ms).ok()),
        }
    }

    /// The fenced acquire script's reply: `[token]` when acquired, else the holder's PTTL.
    pub(crate) fn from_fenced_reply(reply: redis::Value) -> RedisResult<Self> {
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

/// How long a waiter's registration outlives the moment it is due to look again (its
/// holder's TTL, or its wait's end), for the scheduling and the round trip in between: a
/// registration that lapses early only means that the waiter is not granted the lock.
const REGISTRATION_MARGIN: Duration = Duration::from_millis(1000);

/// A waiter's registration, as an acquire attempt sends it (docs/DESIGN.md, "Grants").
pub(crate) struct Waiting {
    /// The wait's number, published when a release grants it the lock.
    pub(crate) number: u64,
    /// How long the waiter still waits at most, in ms (`None`: without limit).
    pub(crate) left_ms: Option<u64>,
    /// The control channel of the manager's listener on the lock's server, by which a
    /// release tells that the waiter's manager still listens.
    pub(crate) control: String,
}

/// Which of a lock channel's subscribers a release counts as nobody waiting.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Listeners {
    /// How many subscribers to disregard before the lock is left free for the others
    /// (this client's own listener, or all of them while yields are suspended).
    pub(crate) ignored: u64,
    /// Whether this client's own listener is subscribed (never a waiter to grant to).
    pub(crate) own: bool,
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
    /// The last hold was released and the lock granted to a registered waiter of another
    /// client (docs/DESIGN.md, "Grants").
    Granted,
    /// One hold fewer; the owner still holds the lock.
    StillHeld,
    /// The owner held no hold: expired, force-unlocked, or someone else's.
    NotHeld,
}

impl Release {
    /// The release script's reply (see `RELEASE` in scripts.rs); other kinds' release
    /// scripts reply in the same codes.
    pub(crate) fn from_reply(reply: Option<i64>) -> Self {
        match reply {
            None => Release::NotHeld,
            Some(0) => Release::StillHeld,
            Some(2) => Release::HandedOver,
            Some(3) => Release::LeftForOthers,
            Some(4) => Release::Granted,
            Some(_) => Release::Released,
        }
    }
}

/// Above this many locks remembered, the latches of earlier releases are forgotten (they
/// expire by themselves): the memory stays bounded however many names are used.
const LATCHES_REMEMBERED: usize = 1024;
/// At most this many latches of one lock wait for deletion (overlapping releases).
const LATCHES_PER_LOCK: usize = 8;

/// How often acquires and releases count a master's replicas again (with `ROLE`) while
/// replica sync is on.
const REPLICAS_RECOUNT: Duration = Duration::from_secs(10);
/// How often instead while the master had no replica when last counted, where masters can
/// be replaced: a replica promoted while its master was stopped has none until its old
/// master comes back as its replica, and a count of none sends no `WAIT`.
const REPLICAS_RECOUNT_NONE: Duration = Duration::from_millis(100);
/// How many MOVED or ASK redirections one command follows before giving up.
const REDIRECTS_MAX: u32 = 5;
/// How long to wait before asking again while a failover is under way (CLUSTERDOWN,
/// TRYAGAIN, a refused connection to a master that just died).
const FAILOVER_RETRY: Duration = Duration::from_millis(50);

pub(crate) struct LockStore {
    topology: Topology,
    scripts: Scripts,
    /// `publish`, or `spublish` on a cluster with sharded pub/sub (what Redisson does there).
    publish_command: &'static str,
    /// The `PUBSUB` subcommand that counts a lock channel's subscribers where releases are
    /// published (`numsub`, or `shardnumsub` with sharded pub/sub), or empty where it cannot
    /// count them all (a cluster without sharded pub/sub, whose plain messages reach every
    /// node): then no release grants a lock to a registered waiter (docs/DESIGN.md, "Grants").
    numsub_command: &'static str,
    /// How long an acquire or release waits for a replica's acknowledgement (`None`: it does
    /// not wait; see `LockManagerBuilder::replica_sync`).
    replica_sync: Option<Duration>,
    latch_ttl_ms: u64,
    /// How long a fair-lock waiter without a wait limit keeps its place, in ms.
    fair_lock_wait_ms: u64,
    response_timeout: Duration,
    /// What the pub/sub listeners speak (`LockManagerBuilder::pubsub_protocol`).
    pubsub_protocol: PubSubProtocol,
    /// The latches of this client's releases of each lock whose replies are in hand (usually
    /// one; more when releases overlapped): the next release of that lock deletes them (see
    /// `RELEASE`), so a busy lock leaves a latch or two behind, not one per unlock.
    last_latch: Mutex<HashMap<Box<str>, Vec<String>>>,
    /// What this client sent; the listener and the watchdog count here too.
    pub(crate) counters: Arc<Counters>,
}

impl LockStore {
    /// Finds the deployment's masters (so a wrong address or password is reported now rather
    /// than at the first lock) and loads the scripts on each.
    pub(crate) fn connect(endpoints: &Endpoints, config: &Config) -> Result<Self> {
        let topology = Topology::connect(endpoints, config)?;
        let publish_command = if topology.sharded_pubsub() {
            "spublish"
        } else {
            "publish"
        };
        let numsub_command = if topology.sharded_pubsub() {
            "shardnumsub"
        } else if topology.is_cluster() {
            ""
        } else {
            "numsub"
        };
        let store = LockStore {
            topology,
            scripts: Scripts::new(),
            publish_command,
            numsub_command,
            replica_sync: config.replica_sync.then_some(config.replica_sync_timeout),
            latch_ttl_ms: config.latch_ttl_ms(),
            fair_lock_wait_ms: config.fair_lock_wait_timeout_ms,
            response_timeout: config.response_timeout,
            pubsub_protocol: config.pubsub_protocol,
            last_latch: Mutex::new(HashMap::new()),
            counters: Arc::new(Counters::default()),
        };
        store.load_scripts()?;
        Ok(store)
    }

    /// Loads the scripts on every master. On a cluster a master that cannot be reached is
    /// passed over (a failover may be under way as the manager starts; its replica gets the
    /// scripts on its first NOSCRIPT), as long as one master loaded them.
    fn load_scripts(&self) -> Result<()> {
        let mut unreachable = Vec::new();
        let masters = self.topology.map();
        for pool in masters.masters() {
            match self.load_scripts_on(pool) {
                Ok(()) => {}
                Err(err) if self.topology.is_cluster() && is_unreachable(&err) => {
                    log::warn!(
                        "cannot load the lock scripts on the master at {}: {err}; passing it \
                         over (its slots work once it answers, or its replica is promoted)",
                        pool.addr()
                    );
                    unreachable.push((pool.addr().to_owned(), err));
                }
                Err(err) if self.topology.follows_failovers() => {
                    return Err(Error::at(pool.addr(), err))
                }
                Err(err) => return Err(err),
            }
        }
        if unreachable.len() == masters.masters().len() {
            return Err(Error::Nodes {
                asked: "no master answered".into(),
                tried: unreachable,
            });
        }
        Ok(())
    }

    fn load_scripts_on(&self, pool: &Pool) -> Result<()> {
        // One script per round trip: a pipeline's replies would share one response timeout
        // (see `call`), and compiling a script can take a while on a busy server.
        for source in Scripts::SOURCES {
            let load = |conn: &mut Connection| {
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(source)
                    .query::<String>(conn)
            };
            let deadline = Instant::now() + self.response_timeout;
            self.run_on(
                pool,
                "loading the lock scripts",
                1,
                deadline,
                false,
                (&load, &|_| false),
            )
            .map_err(|failed| failed.into_error(self, "loading the lock scripts", ""))?;
        }
        Ok(())
    }

    /// Opens a pub/sub listener's own connection (RESP3 or RESP2, see
    /// `LockManagerBuilder::pubsub_protocol`; not counted against any pool) to the node at
    /// `addr`.
    pub(crate) fn connect_listener_at(&self, addr: &str) -> Result<PubSubConnection> {
        self.topology
            .node(addr)
            .and_then(|pool| pool.connect_listener(self.pubsub_protocol))
    }

    /// Whether an acquire of `name` now waits for a replica's acknowledgement (replica sync
    /// on, and the master has replicas, as last counted).
    pub(crate) fn waits_for_replicas(&self, name: &str) -> bool {
        self.replica_sync.is_some()
            && self
                .topology
                .route(name)
                .is_ok_and(|(pool, _)| pool.replicas() > 0 && pool.knows_wait())
    }

    /// The deployment's topology (for the listener, which follows the masters too).
    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// One acquire attempt: takes the lock (or one more hold) for `owner` with a TTL of
    /// `lease_ms`, or reports the holder's remaining lease. Every send of one attempt carries
    /// the same `attempt_id`: a repeated send takes nothing more (see `attempt_script!`).
    ///
    /// An owner that holds nothing of the lock as far as it knows (`fresh`) takes a grant a
    /// release made to it (docs/DESIGN.md, "Grants") instead of counting a second hold. With
    /// `waiting` (always fresh), an attempt that finds the lock held registers the caller as a
    /// waiter that a release may grant the lock to.
    pub(crate) fn try_acquire(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
        attempt_id: &str,
        fresh: bool,
        waiting: Option<&Waiting>,
    ) -> Result<Attempt> {
        let mut call = self.acquire_call(
            keys,
            lease_ms,
            owner,
            attempt_id,
            false,
            fresh || waiting.is_some(),
        );
        if let Some(waiting) = waiting {
            call.arg(waiting.number)
                .arg(waiting.left_ms.map_or(String::new(), |ms| ms.to_string()))
                .arg(REGISTRATION_MARGIN.as_millis() as u64)
                .arg(&waiting.control);
        }
        let pttl: Option<i64> = self.run_attempt(
            &keys.name,
            |conn| query_loading_scripts(conn, |conn| call.query(conn)),
            Option::is_none,
        )?;
        Ok(Attempt::from_reply(pttl))
    }

    /// One fenced acquire attempt: as [`try_acquire`](Self::try_acquire) (without waiting),
    /// and on success the lock's fencing counter is incremented and the new token returned.
    pub(crate) fn try_acquire_fenced(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
        attempt_id: &str,
        fresh: bool,
    ) -> Result<Attempt> {
        let call = self.acquire_call(keys, lease_ms, owner, attempt_id, true, fresh);
        self.run_attempt(
            &keys.name,
            |conn| {
                let reply = query_loading_scripts(conn, |conn| call.query(conn))?;
                Attempt::from_fenced_reply(reply)
            },
            |attempt| attempt.is_acquired(),
        )
    }

    /// `EVALSHA` of the acquire script up to `ARGV[4]`, or with `fenced` of the fenced one,
    /// naming the waiters hash with `waiters` (see `scripts.rs` for their KEYS and ARGV: the
    /// fenced one has the counter as `KEYS[2]`, the waiters hash as `KEYS[4]`). The waiters
    /// hash is named only where needed: during a slot migration, a key missing on the target
    /// holds a call back with TRYAGAIN, and re-entries must go on then.
    fn acquire_call(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
        attempt_id: &str,
        fenced: bool,
        waiters: bool,
    ) -> redis::Cmd {
        let mut call = redis::cmd("EVALSHA");
        if fenced {
            call.arg(self.scripts.fenced_acquire.get_hash())
                .arg(3 + u8::from(waiters))
                .arg(&*keys.name)
                .arg(keys.token_key())
                .arg(keys.attempt_marker(owner));
        } else {
            call.arg(self.scripts.acquire.get_hash())
                .arg(2 + u8::from(waiters))
                .arg(&*keys.name)
                .arg(keys.attempt_marker(owner));
        }
        if waiters {
            call.arg(keys.waiters_key());
        }
        call.arg(lease_ms)
            .arg(owner)
            .arg(attempt_id)
            .arg(self.latch_ttl_ms);
        call
    }

    /// Releases one hold of `owner` (holds that remain get `lease_ms`). On the last, the lock
    /// is granted to the first registered waiter of another client when every subscriber of
    /// its channel but this client's own listener (`own_listener`) is such a waiter
    /// (docs/DESIGN.md, "Grants"); otherwise, when no more than `ignored_listeners` of the
    /// subscribers heard the unlock, it is acquired for `next` (owner field, lease ms) in the
    /// same script call: the handoff to the next local thread.
    ///
    /// Idempotent: when the reply is lost (a timeout, a broken connection) the call is sent
    /// once more with the same latch, and gets the first call's answer if that one ran (the
    /// handoff included: it is never done twice, nor reported undone when it was done).
    pub(crate) fn release(
        &self,
        keys: &LockKeys,
        lease_ms: u64,
        owner: &str,
        listeners: Listeners,
        next: Option<(&str, u64)>,
    ) -> Result<Release> {
        let (next_owner, next_lease_ms) = next.unwrap_or(("", 0));
        let reply = self.release_with_latch(keys, |conn, latch, previous| {
            let mut call = redis::cmd("EVALSHA");
            call.arg(self.scripts.release.get_hash())
                .arg(4 + previous.len())
                .arg(&*keys.name)
                .arg(keys.channel())
                .arg(latch)
                .arg(keys.waiters_key())
                .arg(previous);
            call.arg(UNLOCK_MESSAGE)
                .arg(lease_ms)
                .arg(owner)
                .arg(self.publish_command)
                .arg(self.latch_ttl_ms)
                .arg(listeners.ignored)
                .arg(next_owner)
                .arg(next_lease_ms)
                .arg(u64::from(listeners.own))
                .arg(self.numsub_command);
            query_loading_scripts(conn, |conn| call.query::<Option<i64>>(conn))
        })?;
        Ok(Release::from_reply(reply))
    }

    /// Takes `owner`'s registration as a waiter with `number` out of the lock's waiters
    /// (see `STOP_WAITING`): `true` when a release had granted it the lock meanwhile, which
    /// it then holds with a lease of `lease_ms` from now.
    pub(crate) fn stop_waiting(
        &self,
        keys: &LockKeys,
        owner: &str,
        number: u64,
        lease_ms: u64,
    ) -> Result<bool> {
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.scripts.stop_waiting.get_hash())
            .arg(2)
            .arg(&*keys.name)
            .arg(keys.waiters_key())
            .arg(owner)
            .arg(number)
            .arg(lease_ms);
        let granted: i64 = self.run("stop waiting", &keys.name, 1, |conn| {
            query_loading_scripts(conn, |conn| call.query(conn))
        })?;
        Ok(granted == 1)
    }

    /// Whether releases of this deployment's locks may grant them to registered waiters
    /// (see `numsub_command`).
    pub(crate) fn grants_possible(&self) -> bool {
        !self.numsub_command.is_empty()
    }

    /// Runs one release script call made idempotent by a latch (see `RELEASE`): `call` gets
    /// a connection, this call's new latch key and the latches of this client's earlier
    /// releases of the lock, which the script deletes. When the reply is lost (a timeout, a
    /// broken connection) the call is sent once more with the same latch, and gets the first
    /// call's answer if that one ran. Every kind's release goes through here.
    pub(crate) fn release_with_latch<T>(
        &self,
        keys: &LockKeys,
        call: impl Fn(&mut Connection, &str, &[String]) -> RedisResult<T>,
    ) -> Result<T> {
        let latch = keys.latch(&uuid::Uuid::new_v4().simple().to_string());
        let previous = self
            .last_latch
            .lock()
            .remove(&*keys.name)
            .unwrap_or_default();
        let send = || {
            self.run("release", &keys.name, 1, |conn| {
                call(conn, &latch, &previous)
            })
        };
        let reply = match send() {
            Err(err) if is_lost_reply(&err) => {
                log::debug!("release of {:?}: {err}; sending it again", keys.name);
                // The first send may still reach the server after this one (a retransmission,
                // a proxy): its latch must outlive it, so it is left to expire, not deleted.
                return send();
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
        Ok(reply)
    }

    /// The command that publishes unlock messages (`publish` on a single server).
    pub(crate) fn publish_command(&self) -> &'static str {
        self.publish_command
    }

    /// How long a fair-lock waiter without a wait limit keeps its place in the queue, in ms
    /// (a setting of the manager that only the fair lock's scripts need).
    pub(crate) fn fair_lock_wait_ms(&self) -> u64 {
        self.fair_lock_wait_ms
    }

    /// How long an unlock latch lives, in ms.
    pub(crate) fn latch_ttl_ms(&self) -> u64 {
        self.latch_ttl_ms
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

    /// [`invoke`](Self::invoke) for an acquire attempt whose script answers the holder's
    /// remaining lease (an integer) when it took nothing: then replica sync waits for nobody.
    pub(crate) fn invoke_attempt(
        &self,
        name: &str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<redis::Value> {
        self.run_attempt(
            name,
            |conn| invocation.invoke(conn),
            |reply| !matches!(reply, redis::Value::Int(_)),
        )
    }

    /// Renews every `(lock key, owner field)` of `batch` to `timeout_ms`: 100 keys per script
    /// call, and all calls for one master in one pipeline (one round trip per master). Returns,
    /// per entry, whether the hold was still there (`None` where its master did not answer).
    ///
    /// The whole call (waiting for a connection, connecting, the reply) takes at most
    /// `budget`, so that a stalled server cannot hold the watchdog past the leases it renews.
    pub(crate) fn renew(
        &self,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>> {
        let hash = self.scripts.renew.get_hash();
        self.per_master(
            batch,
            budget,
            RENEW_KEYS_PER_CALL,
            &self.scripts.renew,
            |pipe, chunk| {
                let call = pipe.cmd("EVALSHA").arg(hash).arg(chunk.len());
                for (key, _) in chunk {
                    call.arg(*key);
                }
                call.arg(timeout_ms);
                for (_, owner) in chunk {
                    call.arg(*owner);
                }
            },
        )
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

    /// Whether anyone holds the lock, and how many holds `owner` has. A key of another type,
    /// or a hash of somebody's data, is [`Error::WrongType`], not "locked" (`INSPECT`).
    fn inspect(
        &self,
        operation: &'static str,
        keys: &LockKeys,
        owner: &str,
    ) -> Result<(bool, u32)> {
        let (held, holds): (i64, i64) = self.run(operation, &keys.name, 1, |conn| {
            self.scripts
                .inspect
                .key(&*keys.name)
                .arg(owner)
                .invoke(conn)
        })?;
        let holds = u32::try_from(holds).map_err(|_| Error::WrongType {
            name: keys.name.to_string(),
        })?;
        Ok((held == 1, holds))
    }

    /// Whether anyone holds the lock.
    pub(crate) fn is_locked(&self, keys: &LockKeys) -> Result<bool> {
        Ok(self.inspect("is_locked", keys, "")?.0)
    }

    /// How many holds `owner` has (0 when none).
    pub(crate) fn hold_count(&self, keys: &LockKeys, owner: &str) -> Result<u32> {
        Ok(self.inspect("hold_count", keys, owner)?.1)
    }

    /// Whether `owner` holds the lock.
    pub(crate) fn is_held_by(&self, keys: &LockKeys, owner: &str) -> Result<bool> {
        Ok(self.inspect("is_held_by_current_thread", keys, owner)?.1 > 0)
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

    /// Publishes `message` on `channel` at the node `addr` (`host:port`) within `budget`: a
    /// listener's private wake-up channel, at the master whose connection it reads, so that
    /// another master that stalls or is gone does not hold up (or lose) the wake-up; and the
    /// start-up's check of the channel rights, at a master that answers.
    pub(crate) fn publish_at(
        &self,
        addr: &str,
        channel: &str,
        message: &str,
        budget: Duration,
    ) -> Result<()> {
        let pool = self.topology.node(addr)?;
        let deadline = Instant::now() + budget.max(Duration::from_millis(1));
        let op = |conn: &mut Connection| publish_query(conn, channel, message);
        self.run_on(&pool, "publish", 1, deadline, false, (&op, &|_| false))
            .map_err(|failed| failed.into_error(self, "publish", ""))?;
        Ok(())
    }

    /// How long one command may wait for its reply.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Runs `op`, one round trip of `commands` commands, on a pooled connection to the master
    /// of `name`, within one response timeout in all (see [`run_within`](Self::run_within)).
    fn run<T>(
        &self,
        operation: &'static str,
        name: &str,
        commands: u64,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within(operation, name, commands, self.response_timeout, op)
    }

    /// [`run`](Self::run) for an acquire attempt: replica sync waits for the replicas only
    /// when `acquired` says the reply is a hold taken (an attempt that found the lock held
    /// wrote nothing, and waiting for replicas that lag would only fail it).
    fn run_attempt<T>(
        &self,
        name: &str,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
        acquired: impl Fn(&T) -> bool,
    ) -> Result<T> {
        self.run_within_if("acquire", name, 1, self.response_timeout, op, &acquired)
    }

    /// Runs `op`, one round trip of `commands` commands, on a pooled connection to the master
    /// that serves `name` (any master for `""`), and returns within `budget` in all: waiting
    /// for a connection, connecting, retries and every reply share it (a call must return
    /// within its wait plus one response timeout, and a stalled server must not hold the
    /// watchdog past the leases it renews).
    ///
    /// `op` runs again only where it did not run: after a MOVED or ASK reply (on the node
    /// named), after READONLY or CLUSTERDOWN or a refused connection during a failover (on
    /// the master found again), and on a fresh connection when a pooled one turned out dead
    /// (where it may have run after all: see `may_repeat`; an acquire's attempt id makes the
    /// second send take nothing more). Besides, an idempotent `op` is sent again when the wait
    /// for its reply was interrupted (`is_idempotent`). A timeout is never retried, since the
    /// command may still run on the server.
    pub(crate) fn run_within<T>(
        &self,
        operation: &'static str,
        name: &str,
        commands: u64,
        budget: Duration,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_within_if(operation, name, commands, budget, op, &|_| true)
    }

    /// [`run_within`](Self::run_within), where replica sync waits for the replicas only when
    /// `wrote` says of the reply that the script changed something.
    fn run_within_if<T>(
        &self,
        operation: &'static str,
        name: &str,
        commands: u64,
        budget: Duration,
        op: impl Fn(&mut Connection) -> RedisResult<T>,
        wrote: &dyn Fn(&T) -> bool,
    ) -> Result<T> {
        let started = Instant::now();
        let deadline = started + budget.max(Duration::from_millis(1));
        let (mut pool, mut generation) = self.topology.route_by(name, Some(deadline))?;
        let mut asking = false;
        let mut redirects = 0;
        // What made the call look for the master again, last: when the time runs out while it
        // looks, that (the failover) is what the caller is told, not a timeout of nothing.
        let mut failover: Option<(Failed, String)> = None;
        loop {
            let failed =
                match self.run_on(&pool, operation, commands, deadline, asking, (&op, wrote)) {
                    Ok(value) => return Ok(value),
                    Err(Failed::Other(Error::Timeout { .. })) if failover.is_some() => {
                        let (failed, addr) = failover.expect("checked");
                        return Err(Error::at(addr, failed.into_error(self, operation, name)));
                    }
                    Err(failed) => failed,
                };
            let time_left = Instant::now() < deadline;
            asking = false;
            if let Some((addr, ask)) = failed.redirection() {
                if time_left && redirects < REDIRECTS_MAX {
                    redirects += 1;
                    if ask {
                        // The slot is moving: this key is at `addr` already, for this command
                        // only (ASKING first).
                        pool = self.topology.node(&addr)?;
                        asking = true;
                    } else {
                        // The slot moved: ask for the new map, and send this command where
                        // the server said (the map may be too fresh to be asked again yet).
                        self.topology.refresh_by(generation, deadline);
                        generation = self.topology.map().generation;
                        pool = self.topology.node(&addr)?;
                    }
                    continue;
                }
            } else if time_left && redirects < REDIRECTS_MAX && failed.is_not_local() {
                // A managed cluster behind one endpoint (ElastiCache Serverless, under load)
                // sent the script to a node that does not serve its slot. It stopped at its
                // first key, and every key of a call shares one slot: nothing ran. Asked
                // again, as after a redirection (the endpoint routes it anew).
                redirects += 1;
                log::debug!("{operation} at {}: {failed:?}; asking again", pool.addr());
                std::thread::sleep(
                    FAILOVER_RETRY.min(deadline.saturating_duration_since(Instant::now())),
                );
                if self.topology.follows_failovers() {
                    self.topology.refresh_by(generation, deadline);
                }
                (pool, generation) = self.topology.route_by(name, Some(deadline))?;
                continue;
            } else if time_left && failed.means_topology_changed(self) {
                // Waiting for a failover or a migration to end is progress, not a loop of
                // redirections: a slot half-way through a migration answers TRYAGAIN (from
                // its new owner, for a script whose keys are not all there yet) until it ends.
                redirects = 0;
                log::debug!(
                    "{operation} at {}: {failed:?}; finding the master again",
                    pool.addr()
                );
                std::thread::sleep(
                    FAILOVER_RETRY.min(deadline.saturating_duration_since(Instant::now())),
                );
                self.topology.refresh_by(generation, deadline);
                failover = Some((failed, pool.addr().to_owned()));
                (pool, generation) = self.topology.route_by(name, Some(deadline))?;
                // `run_on` sends nothing once the deadline has passed.
                continue;
            }
            let in_failover = !time_left && failed.means_topology_changed(self);
            let err = failed.into_error(self, operation, name).timed(started);
            // Out of time in a failover: which master failed is part of the news.
            return Err(if in_failover {
                Error::at(pool.addr(), err)
            } else {
                err
            });
        }
    }

    /// Runs `op` on a pooled connection to `pool`'s server by `deadline` (`ASKING` first when
    /// `asking`), retrying once on a fresh connection when a reused one turned out dead or the
    /// wait for the reply was interrupted (the process stopped and continued); then,
    /// for acquires and releases with replica sync on, waits for the replicas.
    fn run_on<T, F: Fn(&mut Connection) -> RedisResult<T>>(
        &self,
        pool: &Pool,
        operation: &'static str,
        commands: u64,
        deadline: Instant,
        asking: bool,
        (op, wrote): (&F, &dyn Fn(&T) -> bool),
    ) -> std::result::Result<T, Failed> {
        let mut conn = pool.get_by(deadline).map_err(Failed::Other)?;
        if Instant::now() >= deadline {
            // An idle connection is handed out whatever the time: a command sent now could
            // only run with its reply given up on (a hold nobody knows of, for an acquire).
            return Err(Failed::Other(Error::Timeout {
                operation,
                after: Duration::ZERO,
            }));
        }
        self.counters.sent(commands + u64::from(asking));
        let mut result = self.call(&mut conn, commands, deadline, asking, op);
        if let Err(err) = &result {
            // Interrupted: the process was stopped and continued while it waited for the
            // reply (see `pool::connect_by`); the server is fine, and the command has almost
            // surely run.
            let interrupted = crate::pool::is_interrupted(err);
            if (conn.reused && is_dead_connection(err)) || interrupted {
                let repeat = if interrupted {
                    is_idempotent(operation)
                } else {
                    may_repeat(operation)
                };
                if !repeat {
                    // The server may have run it (before the connection died, in a CLIENT
                    // KILL's pass; almost surely, when the wait was interrupted): sent again,
                    // it would count twice. The caller is told; after a dead connection the
                    // next call gets a new one.
                    conn.discard();
                    if !interrupted {
                        pool.drop_idle();
                    }
                    return Err(Failed::Redis(result.err().expect("an error")));
                }
                if Instant::now() >= deadline {
                    conn.discard();
                    // No time is left to send it again (and wait for the reply).
                    return Err(Failed::Other(Error::Timeout {
                        operation,
                        after: Duration::ZERO,
                    }));
                }
                if interrupted {
                    log::debug!("{operation}: waiting for the reply was interrupted; sending it again on a new connection");
                } else {
                    log::debug!(
                        "{operation}: pooled connection was dead ({err}); retrying on a new one"
                    );
                }
                if !interrupted {
                    // Its idle siblings are most likely dead too (a restart). After an
                    // interrupt they are fine: none of them was waiting.
                    pool.drop_idle();
                }
                conn = conn.reconnect(deadline).map_err(Failed::Other)?;
                if Instant::now() >= deadline {
                    // Connecting took the time left: a command sent now could only run with
                    // its reply given up on.
                    return Err(Failed::Other(Error::Timeout {
                        operation,
                        after: Duration::ZERO,
                    }));
                }
                self.counters.reconnect();
                self.counters.sent(commands + u64::from(asking));
                result = self.call(&mut conn, commands, deadline, asking, op);
            }
        }
        let value = match result {
            Ok(value) => value,
            Err(err) => {
                if is_broken(&err) {
                    conn.discard();
                }
                return Err(Failed::Redis(err));
            }
        };
        if let Some(timeout) = self.replica_sync {
            if is_replicated_operation(operation) {
                let wrote = wrote(&value);
                match self.sync_replicas(pool, &mut conn, operation, timeout, wrote) {
                    Ok(()) => {}
                    // A release happened whatever the replicas say, or whether asking them
                    // failed (its reply is in): the lock is free on the master, and failing
                    // the unlock would only make the caller retry it, or take a release that
                    // ran for one that did not.
                    Err(failed) if operation == "release" => {
                        if let Failed::Redis(err) = &failed {
                            if is_broken(err) {
                                conn.discard();
                            }
                        }
                        log::warn!("release at {}: {failed:?}", pool.addr());
                    }
                    // The acquire took its hold, and whether a replica has it is unknown (the
                    // reply was lost, or WAIT was refused): the caller rolls it back as it
                    // does when none acknowledged (a plain error would leave a hold that
                    // nobody releases or renews).
                    Err(Failed::Redis(err)) if wrote && operation == "acquire" => {
                        if is_broken(&err) {
                            conn.discard();
                        }
                        log::warn!(
                            "acquire at {}: no replica acknowledgement could be read ({err})",
                            pool.addr()
                        );
                        return Err(Failed::Other(Error::NotReplicated {
                            operation,
                            replicas: pool.replicas(),
                            timeout,
                        }));
                    }
                    Err(failed) => {
                        if matches!(failed, Failed::Redis(_)) {
                            conn.discard();
                        }
                        return Err(failed);
                    }
                }
            }
        }
        Ok(value)
    }

    /// After an acquire or release with replica sync on: counts the master's replicas again
    /// when the count is old (replicas added since must be waited for too), then, when the
    /// script `wrote` and there are replicas, waits for them.
    fn sync_replicas(
        &self,
        pool: &Pool,
        conn: &mut crate::pool::PooledConnection<'_>,
        operation: &'static str,
        timeout: Duration,
        wrote: bool,
    ) -> std::result::Result<(), Failed> {
        let recount = if pool.replicas() == 0 && self.topology.follows_failovers() {
            REPLICAS_RECOUNT_NONE
        } else {
            REPLICAS_RECOUNT
        };
        if pool.replicas_older_than(recount) {
            self.counters.sent(1);
            match crate::pool::query_again_if_interrupted::<redis::Value>(conn, &redis::cmd("ROLE"))
            {
                Ok(role) => {
                    let Some(counted) = crate::topology::replicas_of_role(&role) else {
                        // Not a master any more: the write went to a master demoted since (one
                        // continued after its failover), and is dropped with its data.
                        self.topology
                            .refresh_unless_under_way(self.topology.map().generation);
                        return Err(Failed::Other(Error::NotReplicated {
                            operation,
                            replicas: pool.replicas(),
                            timeout,
                        }));
                    };
                    if pool.count_replicas(counted)
                        && !self.topology.failover_suspected(pool.addr())
                    {
                        pool.set_replicas(counted);
                    }
                }
                Err(err) if is_broken(&err) => return Err(Failed::Redis(err)),
                // Not allowed (an ACL without ROLE): the count stays as it was.
                Err(_) => pool.set_replicas(pool.replicas()),
            }
        }
        if wrote && pool.replicas() > 0 && pool.knows_wait() {
            self.wait_for_replicas(pool, conn, operation, timeout)?;
        } else if wrote
            && operation == "acquire"
            && pool.replicas() == 0
            && self.topology.follows_failovers()
            && !self.topology.is_cluster()
            && self.topology.failover_suspected(pool.addr())
        {
            // No replica to wait for, and the sentinels do not vouch for this master: a master
            // stopped past its failover and continued answers as a master with its replica
            // gone (promoted), until the sentinels demote it and drop what it wrote meanwhile.
            self.topology
                .refresh_unless_under_way(self.topology.map().generation);
            return Err(Failed::Other(Error::NotReplicated {
                operation,
                replicas: 0,
                timeout,
            }));
        }
        Ok(())
    }

    /// `WAIT <replicas> <timeout>` on the connection that just wrote, then
    /// [`judge_acknowledgements`](Self::judge_acknowledgements).
    fn wait_for_replicas(
        &self,
        pool: &Pool,
        conn: &mut crate::pool::PooledConnection<'_>,
        operation: &'static str,
        timeout: Duration,
    ) -> std::result::Result<(), Failed> {
        let replicas = pool.replicas();
        let read_timeout = timeout + self.response_timeout;
        let waited = (|| -> RedisResult<bool> {
            conn.set_read_timeout(Some(read_timeout))?;
            self.counters.sent(1);
            let wait = |ms: u64| {
                let mut wait = redis::cmd("WAIT");
                wait.arg(replicas).arg(ms);
                wait
            };
            let acked: usize = match wait(timeout.as_millis() as u64).query(&mut **conn) {
                // The process was stopped and continued meanwhile (see `pool::connect_by`).
                // The first WAIT still runs on the server, and a WAIT sent now is answered
                // after it: one millisecond more is all it needs to count the acknowledgements
                // of this connection's last write again, so the call keeps its time. redis-rs
                // skips the first WAIT's reply when it comes.
                Err(err) if crate::pool::is_interrupted(&err) => {
                    log::debug!("waiting for WAIT's reply was interrupted ({err}); asking again");
                    self.counters.sent(1);
                    wait(1).query(&mut **conn)?
                }
                acked => acked?,
            };
            if acked >= replicas {
                return Ok(true);
            }
            self.counters.sent(1);
            let connected = connected_replicas(conn)?;
            Ok(self.judge_acknowledgements(pool, acked, connected))
        })();
        let restored = conn.set_read_timeout(Some(self.response_timeout));
        match (waited, restored) {
            (Ok(true), Ok(())) => Ok(()),
            (Ok(false), Ok(())) => Err(Failed::Other(Error::NotReplicated {
                operation,
                replicas,
                timeout,
            })),
            // A managed service or proxy without WAIT (ElastiCache Serverless): nothing can
            // be waited for there, and the write stands, as without replica sync (Redisson
            // skips WAIT where its probe finds none). Told once; never sent there again.
            (Err(err), Ok(())) if is_unknown_command(&err) => {
                if !pool.knows_no_wait_from_now() {
                    log::warn!(
                        "{} does not know WAIT ({err}): acquires and releases there do not \
                         wait for replicas",
                        pool.addr()
                    );
                }
                Ok(())
            }
            (Err(err), _) | (_, Err(err)) => Err(Failed::Redis(err)),
        }
    }

    /// Whether a write that `acked` of the master's replicas acknowledged, fewer than it
    /// had, is safe, with `connected` replicas connected to it now (docs/DESIGN.md,
    /// "Replica sync through a failover"). A replica being promoted leaves the old master
    /// first, and the others follow the new master soon after, dropping what the old one
    /// wrote meanwhile: so on Sentinel, a shortfall counts only when the sentinels say that
    /// no failover of this master is under way. A master left with no replica acknowledging
    /// is trusted only on a single server, where nobody promotes a replica.
    fn judge_acknowledgements(&self, pool: &Pool, acked: usize, connected: usize) -> bool {
        let follows = self.topology.follows_failovers();
        let safe = if acked == 0 {
            !follows && connected == 0
        } else {
            !self.topology.failover_suspected(pool.addr())
        };
        if safe {
            // The missing replicas failed: later writes wait for those left.
            pool.set_replicas(connected.max(acked));
        } else if follows {
            // The master may have been replaced (a failover under way): the next command
            // goes where the deployment says the master is. Only if nobody is asking
            // already: this call has waited long enough.
            self.topology
                .refresh_unless_under_way(self.topology.map().generation);
        }
        safe
    }

    /// Runs `op` on `conn` with its replies due by `deadline`.
    fn call<T>(
        &self,
        conn: &mut Connection,
        commands: u64,
        deadline: Instant,
        asking: bool,
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
        let result = if asking {
            redis::cmd("ASKING")
                .query::<()>(conn)
                .and_then(|()| op(conn))
        } else {
            op(conn)
        };
        if shortened && !result.as_ref().is_err_and(is_broken) {
            conn.set_read_timeout(Some(self.response_timeout))?;
        }
        result
    }

    /// The error for a failed command; a timeout says what timed out, after how long.
    fn classify(&self, operation: &'static str, name: &str, err: RedisError) -> Error {
        if err.is_timeout() {
            Error::Timeout {
                operation,
                after: Duration::ZERO,
            }
        } else {
            Error::from_command(operation, name, err)
        }
    }
}

/// How one attempt at a command failed, before it is told to the caller.
#[derive(Debug)]
enum Failed {
    /// Redis (or the connection) answered with an error.
    Redis(RedisError),
    /// Something before or after the command: no connection, no replica acknowledgement.
    Other(Error),
}

impl Failed {
    /// A MOVED or ASK redirection: the node's address, and whether it is ASK.
    fn redirection(&self) -> Option<(String, bool)> {
        let Failed::Redis(err) = self else {
            return None;
        };
        let ask = match err.code() {
            Some("MOVED") => false,
            Some("ASK") => true,
            _ => return None,
        };
        err.redirect_node().map(|(addr, _)| (addr.to_owned(), ask))
    }

    /// Whether a script was refused for touching a key its node does not serve (see
    /// [`is_not_local`]).
    fn is_not_local(&self) -> bool {
        matches!(self, Failed::Redis(err) if is_not_local(err))
    }

    /// Whether this means the master moved (a failover, a resharding): nothing ran, and the
    /// command may go to the master found again. Only where masters can move.
    fn means_topology_changed(&self, store: &LockStore) -> bool {
        if !store.topology.follows_failovers() {
            return false;
        }
        match self {
            Failed::Redis(err) => {
                matches!(
                    server_code(err).as_deref(),
                    Some("MOVED" | "READONLY" | "CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN")
                ) || err.is_connection_refusal()
            }
            Failed::Other(Error::Connect { source }) => source.is_connection_refusal(),
            Failed::Other(_) => false,
        }
    }

    fn into_error(self, store: &LockStore, operation: &'static str, name: &str) -> Error {
        match self {
            Failed::Redis(err) => store.classify(operation, name, err),
            Failed::Other(err) => err,
        }
    }
}

impl Error {
    /// A timeout error reports how long this store call took (routing, the command, any retry
    /// on a new connection), not the caller's wait before it.
    fn timed(self, started: Instant) -> Self {
        match self {
            Error::Timeout { operation, .. } => Error::Timeout {
                operation,
                after: round_ms(started.elapsed()),
            },
            other => other,
        }
    }
}

/// Plain `PUBLISH` of `message` on `channel`; replies how many connections heard it.
fn publish_query(conn: &mut Connection, channel: &str, message: &str) -> RedisResult<i64> {
    redis::cmd("PUBLISH").arg(channel).arg(message).query(conn)
}

/// Whether a command may be sent again on a new connection when the pooled one it went out
/// on turns out dead (docs/DESIGN.md, "Never twice blindly"): not those that would count
/// twice, whose callers are told that the outcome is unknown instead.
fn may_repeat(operation: &str) -> bool {
    !matches!(
        operation,
        "semaphore release" | "count-down latch count_down"
    )
}

/// Whether a command that has almost surely run may be sent again: one whose second run
/// changes nothing (reads, publishing a wake-up, leaving a queue) or answers as the first did
/// (an acquire, by its attempt id; a release, by its latch). Not a force unlock (it would
/// delete the lock of whoever took it in between) nor the setting of a count, whose repeat
/// answers "already set" or sets it again after others changed it.
fn is_idempotent(operation: &str) -> bool {
    matches!(
        operation,
        "acquire"
            | "release"
            | "stop waiting"
            | "semaphore acquire"
            | "leave the queue"
            | "publish"
            | "loading the lock scripts"
            | "is_locked"
            | "hold_count"
            | "is_held_by_current_thread"
            | "remaining_ttl"
            | "semaphore available_permits"
            | "count-down latch count"
    )
}

/// Acquires and releases of locks wait for replicas when replica sync is on (docs/DESIGN.md,
/// "Replica acknowledgement"): every lock kind's scripts go through here under these names.
fn is_replicated_operation(operation: &str) -> bool {
    matches!(operation, "acquire" | "release")
}

/// `connected_slaves` from `INFO replication`.
fn connected_replicas(conn: &mut Connection) -> RedisResult<usize> {
    let info: String =
        crate::pool::query_again_if_interrupted(conn, redis::cmd("INFO").arg("replication"))?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0))
}

/// An error reply saying that the server does not know the command.
fn is_unknown_command(err: &RedisError) -> bool {
    err.code() == Some("ERR") && err.to_string().contains("unknown command")
}

/// "Script attempted to access a non local key in a cluster node script": a script sent to a
/// node that does not serve its keys' slot, which a managed cluster behind one endpoint
/// (ElastiCache Serverless) answers under load (Redisson #5586, #6718). Told by the words:
/// the code is a plain `ERR`.
pub(crate) fn is_not_local(err: &RedisError) -> bool {
    err.to_string().contains("non local key")
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

/// A node that does not answer at all: refused, unreachable, or silent.
fn is_unreachable(err: &Error) -> bool {
    err.is_connection_error() || err.is_timeout()
}

/// The connection's state is unknown (I/O failed or a reply may still arrive): never reuse it.
fn is_broken(err: &RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || is_dead_connection(err)
}
