//! [`StringLock`]: redis-py's lock format (`redis.lock.Lock`, also redsync's and
//! bsm/redislock's): one string key, the lock's name, holding the owner's token with the lease
//! as its TTL. Taken only while the key is missing (`SET name token NX PX lease`), renewed and
//! deleted only while it holds the owner's token. Nothing is published: waiters poll, as a
//! spin lock's do, through the same engine path (`LockKind::spins`).
//!
//! The token is chosen per acquisition, `<client id>:<thread number>:<n>` with `n` counting
//! this process's fresh acquisitions, and kept with the hold in the engine's registry: a
//! re-entry and a resend of an attempt whose reply was lost send it again and find their own
//! token (they take nothing more), while a release sent late (held back on its way, its
//! resend having freed the lock) finds the thread's next hold under another token and leaves
//! it alone. The key holds one token however many holds the thread has: the count is kept in
//! this process, and only the last release deletes the key. The `Lock` that its guards hand
//! out answers for it (`OtherFormat`).
//!
//! Renewals and releases use the newer compare-and-set commands where the servers know them
//! (`SET … IFEQ`, `DELIFEQ`, `DELEX … IFEQ`: `crate::topology::newer_commands`, per server), else scripts
//! with redis-py's semantics. docs/design/wire-format.md ("String lock (redis-py's Lock)") has
//! the wire format and the interoperation.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Connection;

use crate::engine::kind::{AttemptArgs, KindId, LockKind, TakesTurns};
use crate::engine::options::AcquireOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::lock::{acquire_shorthands, Lock, LockGuard, OtherFormat};
use crate::names::LockKeys;
use crate::store::scripts::Script;
use crate::store::{Attempt, LockStore, Op, Release};
use crate::topology::newer_commands::{Newer, NewerCommands};

/// The string lock's acquire. `KEYS[1]` lock key; `ARGV[1]` the owner's token, `ARGV[2]` lease
/// ms. Takes a missing key as `SET KEYS[1] ARGV[1] NX PX ARGV[2]` does, and a key that holds
/// the token already (a re-entry, or a resend whose first reply was lost) gets the lease anew;
/// both reply nil. Otherwise replies the holder's PTTL (-1 for a key without TTL, as redis-py
/// writes with `timeout=None`). A key of another type fails with WRONGTYPE, untouched.
pub const STRING_ACQUIRE: &str = r#"
local token = redis.call('get', KEYS[1])
if token == false then
    redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])
    return nil
end
if token == ARGV[1] then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// The string lock's release where the server has neither `DELIFEQ` nor `DELEX`, redis-py's
/// `LUA_RELEASE_SCRIPT`: `KEYS[1]` lock key, `ARGV[1]` token. Deletes the key and replies 1
/// only while it holds the token, else replies 0 and changes nothing.
pub const STRING_RELEASE: &str = r#"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
return 1
"#;

/// The string lock's renewal of one key where the server has no `SET … IFEQ`, redis-py's
/// `LUA_REACQUIRE_SCRIPT` (its extend with `replace_ttl`): `KEYS[1]` lock key, `ARGV[1]` token,
/// `ARGV[2]` lease ms. Sets the TTL and replies 1 only while the key holds the token, else 0.
pub const STRING_EXTEND: &str = r#"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
"#;

/// The watchdog's renewal of many string locks: KEYS lock keys, `ARGV[1]` lease ms,
/// `ARGV[i + 1]` the token of `KEYS[i]`. Replies one integer per key: 1 renewed, 0 the token
/// is gone (lost). `pcall` keeps one key of another type from failing the whole batch.
pub const STRING_RENEW: &str = r#"
local out = {}
for i, key in ipairs(KEYS) do
    if redis.pcall('get', key) == ARGV[i + 1] then
        redis.call('pexpire', key, ARGV[1])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
"#;

/// The string lock's force unlock: `KEYS[1]` lock key. Deletes a string key, whoever's token
/// it holds, and replies 1, or 0 when there was none. A key of another type, or a string that
/// is a count rather than a token (a semaphore's permits, a latch's count: a decimal integer,
/// optionally negative, of at most 19 digits, as `INCRBY` keeps them), is refused with
/// WRONGTYPE and left alone. No lock's token is such a count: redis-py's is 32 hex digits
/// (too long), ours contains ':'. Publishes nothing.
pub const STRING_FORCE_UNLOCK: &str = r#"
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local digits = string.match(redis.call('get', KEYS[1]), '^%-?(%d+)$')
if digits and #digits <= 19 then
    return redis.error_reply('WRONGTYPE the key holds a count (a semaphore or latch), not a lock')
end
return redis.call('del', KEYS[1])
"#;

static ACQUIRE_SCRIPT: Script = Script::new(STRING_ACQUIRE);
static RELEASE_SCRIPT: Script = Script::new(STRING_RELEASE);
static EXTEND_SCRIPT: Script = Script::new(STRING_EXTEND);
static RENEW_SCRIPT: Script = Script::new(STRING_RENEW);
static FORCE_UNLOCK_SCRIPT: Script = Script::new(STRING_FORCE_UNLOCK);

/// Fresh acquisitions by this process so far: the last part of their tokens, which the
/// client id (one per manager) makes unique across managers and processes.
static ACQUISITIONS: AtomicU64 = AtomicU64::new(0);

/// As for the other kinds' renewals: 100 keys per script call keeps each call short.
const RENEW_KEYS_PER_CALL: usize = 100;

/// The string lock's kind, shared by every [`StringLock`].
pub(crate) static STRING: StringKind = StringKind;

/// redis-py's lock: a string holding the owner's token, released silently, waited for by
/// polling.
pub(crate) struct StringKind;

impl LockKind for StringKind {
    fn id(&self) -> KindId {
        KindId::StringLock
    }

    fn spins(&self) -> bool {
        true
    }

    fn fresh_token(&self, owner: &str) -> Option<String> {
        let n = ACQUISITIONS.fetch_add(1, Ordering::Relaxed) + 1;
        Some(format!("{owner}:{n}"))
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        if args.fenced {
            return Err(no_fencing(&keys.name));
        }
        let mut call = ACQUIRE_SCRIPT.key(&*keys.name);
        call.arg(args.owner).arg(args.lease_ms);
        let pttl: Result<Option<i64>> =
            store.run_attempt(&keys.name, |conn| call.invoke(conn), Option::is_none);
        match pttl {
            // A fresh acquisition's token is sent by no later acquire: what it may have
            // taken would stay until its lease ends. A re-entry's token is its hold's.
            Err(err) if args.fresh && (err.is_timeout() || err.is_connection_error()) => {
                take_back(store, keys, args.owner);
                Err(err)
            }
            pttl => Ok(Attempt::from_reply(pttl?)),
        }
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Release> {
        self.release_counted(store, keys, owner, lease_ms, true)
    }

    fn release_counted(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        last: bool,
    ) -> Result<Release> {
        if last {
            delete_if_ours(store, keys, owner)
        } else {
            // The key holds the token until the last release: the holds that remain get their
            // lease, as a counting kind's release gives them.
            let renewed = send_again_if_lost(&keys.name, || {
                store.run_knowing(Op::Release, &keys.name, |conn, newer| {
                    extend_if_ours(newer, conn, &keys.name, owner, lease_ms)
                })
            })?;
            Ok(if renewed {
                Release::StillHeld
            } else {
                Release::NotHeld
            })
        }
    }

    fn channel(&self, keys: &LockKeys, _owner: &str) -> String {
        // Never subscribed to nor published on; the engine asks it only for bookkeeping.
        keys.channel()
    }

    fn renew(
        &self,
        store: &LockStore,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>> {
        // One script call per 100 holds, as the other kinds: fewer commands than a
        // `SET … IFEQ` per hold, and the same on every server.
        let script = &RENEW_SCRIPT;
        store.per_master(batch, budget, RENEW_KEYS_PER_CALL, script, |pipe, chunk| {
            let mut call = script.prepare_invoke();
            for (key, _) in chunk {
                call.key(*key);
            }
            call.arg(timeout_ms);
            for (_, owner) in chunk {
                call.arg(*owner);
            }
            call.add_to(pipe);
        })
    }

    fn takes_turns(&self) -> Option<&dyn TakesTurns> {
        Some(self)
    }
}

/// Threads of one manager take turns, as on a spin lock (whose runs leave gaps for other
/// clients' pollers); the release script acquires for nobody.
impl TakesTurns for StringKind {}

/// Deletes the key while it holds `owner`'s token: `DELIFEQ`, `DELEX … IFEQ` or the script.
///
/// No latch key is written: a release sent twice (its first reply lost) that finds the token
/// gone reports the release done, the first send's or the lease's end in between; the lock is
/// not the owner's either way.
fn delete_if_ours(store: &LockStore, keys: &LockKeys, owner: &str) -> Result<Release> {
    let sends = Cell::new(0u32);
    let deleted = send_again_if_lost(&keys.name, || {
        store.run_knowing(Op::Release, &keys.name, |conn, newer| {
            sends.set(sends.get() + 1);
            delete_call(newer, conn, &keys.name, owner)
        })
    })?;
    Ok(if deleted == 1 || sends.get() > 1 {
        Release::Released
    } else {
        Release::NotHeld
    })
}

/// After a fresh acquisition's attempt whose reply was lost (it may have set the key with a
/// token no later acquire sends): deletes the key while it holds `token`, once, at best. An
/// attempt of the same acquire sent again later (riding out a failover) sets it anew.
fn take_back(store: &LockStore, keys: &LockKeys, token: &str) {
    let deleted = store.run_knowing(Op::Release, &keys.name, |conn, newer| {
        delete_call(newer, conn, &keys.name, token)
    });
    if let Err(err) = deleted {
        log::debug!(
            "string lock {:?}: an acquire's reply was lost, and taking back what it may have \
             taken failed ({err}); it expires with its lease",
            keys.name
        );
    }
}

/// Runs `send`, and once more when its reply was lost (a timeout, a broken connection): a
/// token-checked delete or renewal changes nothing more when it ran already.
fn send_again_if_lost<T>(name: &str, send: impl Fn() -> Result<T>) -> Result<T> {
    match send() {
        Err(err) if err.is_timeout() || err.is_connection_error() => {
            log::debug!("release of {name:?}: {err}; sending it again");
            send()
        }
        other => other,
    }
}

/// One send of the token-checked delete: 1 deleted, 0 not ours.
fn delete_call(
    newer: &NewerCommands,
    conn: &mut Connection,
    name: &str,
    owner: &str,
) -> redis::RedisResult<i64> {
    if let Some(reply) = newer.send(Newer::DelIfEq, conn, |conn| {
        redis::cmd("DELIFEQ").arg(name).arg(owner).query(conn)
    }) {
        return reply;
    }
    if let Some(reply) = newer.send(Newer::DelEx, conn, |conn| {
        redis::cmd("DELEX")
            .arg(name)
            .arg("IFEQ")
            .arg(owner)
            .query(conn)
    }) {
        return reply;
    }
    RELEASE_SCRIPT.key(name).arg(owner).invoke(conn)
}

/// Sets the key's TTL to `lease_ms` while it holds `owner`'s token: `SET … IFEQ` or the
/// script. Whether it did.
fn extend_if_ours(
    newer: &NewerCommands,
    conn: &mut Connection,
    name: &str,
    owner: &str,
    lease_ms: u64,
) -> redis::RedisResult<bool> {
    let set = newer.send(Newer::Set, conn, |conn| {
        redis::cmd("SET")
            .arg(name)
            .arg(owner)
            .arg("IFEQ")
            .arg(owner)
            .arg("PX")
            .arg(lease_ms)
            .query::<Option<String>>(conn)
    });
    match set {
        Some(reply) => Ok(reply?.is_some()),
        None => {
            let renewed: i64 = EXTEND_SCRIPT
                .key(name)
                .arg(owner)
                .arg(lease_ms)
                .invoke(conn)?;
            Ok(renewed == 1)
        }
    }
}

/// The string lock has no fencing counter.
fn no_fencing(name: &str) -> Error {
    Error::InvalidArgument {
        what: "fenced",
        reason: format!(
            "string lock {name:?}: redis-py's lock format has no fencing counter; use a Lock \
             for fencing tokens"
        ),
    }
}

/// A handle on one lock in redis-py's format (`redis.lock.Lock`): a string key, the lock's
/// name, holding the owner's token with the lease as its TTL. Cheap to create
/// ([`LockManager::get_string_lock`](crate::LockManager::get_string_lock) does no I/O) and to
/// clone.
///
/// Python code that takes `redis.Redis().lock(name)` and this handle share one lock: each
/// takes it only while the key is missing, and renews or deletes it only while it holds its
/// own token. This handle's token is chosen per acquisition, `<client id>:<thread
/// number>:<n>`, and kept while the thread re-enters (redis-py's is a random hex per `Lock`
/// object): a release sent late never deletes the thread's next hold. Nothing is published:
/// a waiter polls with the spin lock's back-off (1 ms doubling to 128 ms), and a manager's
/// threads take turns as on a [`SpinLock`](crate::SpinLock).
///
/// Reentrant per thread: the key holds one token, and the holds are counted in this
/// process; only the last release deletes the key, the others renew its lease. Every acquire
/// returns a [`LockGuard`] that releases one hold. The watchdog renews it like any lock. The
/// guard's [`LockGuard::lock`] is a [`Lock`] that answers for this string lock: its
/// acquires take string-lock holds (fencing refused), and its inspection calls and force
/// unlock are this handle's ([`Lock::current_token`] reads Redisson's fencing counter, which
/// a string lock never writes: `None`).
///
/// No fencing tokens: [`lock_fenced`](Self::lock_fenced) and fenced options are
/// [`Error::InvalidArgument`]. A key of this name of another type (a [`Lock`]'s hash, say) is
/// [`Error::WrongType`], left alone: a lock and a string lock of one name are never both held.
#[derive(Clone)]
pub struct StringLock {
    lock: Lock,
}

impl StringLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        StringLock {
            lock: Lock::in_format(engine, name, &STRING_FORMAT),
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Acquires as `options` say (wait limit, lease, cancellation); the general form of the
    /// shorthands. Fencing is refused ([`Error::InvalidArgument`]). `Ok(None)` only when a
    /// wait limit was given and passed.
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        if options.get_fenced() {
            return Err(no_fencing(self.name()));
        }
        self.lock.acquire_as(&STRING, options)
    }

    acquire_shorthands!("the string lock, polling");

    /// Whether anyone (any thread, process or client, redis-py's included) holds the lock:
    /// whether its key exists.
    pub fn is_locked(&self) -> Result<bool> {
        let keys = self.lock.keys()?;
        let kind: String = self.run(Op::IsLocked, |conn| {
            redis::cmd("TYPE").arg(&*keys.name).query(conn)
        })?;
        match kind.as_str() {
            "string" => Ok(true),
            "none" => Ok(false),
            _ => Err(wrong_type(keys)),
        }
    }

    /// Whether the calling thread holds the lock through this manager: whether the key holds
    /// the token of its hold.
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.token_is_ours(Op::IsHeldBy)
    }

    /// How many holds the calling thread has on the lock: as this process counts them while
    /// the key holds the token of its hold (at least 1 then), 0 when it does not.
    pub fn hold_count(&self) -> Result<u32> {
        if !self.token_is_ours(Op::HoldCount)? {
            return Ok(0);
        }
        let engine = self.lock.engine()?;
        Ok(engine.own_hold_count(&STRING, self.lock.keys()?).max(1))
    }

    /// The lock's remaining lease as Redis sees it; `None` when nobody holds it (or its key
    /// has no expiry, as redis-py writes with `timeout=None`).
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        let keys = self.lock.keys()?;
        let (kind, pttl): (String, i64) = self.run(Op::RemainingTtl, |conn| {
            redis::pipe()
                .cmd("TYPE")
                .arg(&*keys.name)
                .cmd("PTTL")
                .arg(&*keys.name)
                .query(conn)
        })?;
        if kind != "string" && kind != "none" {
            return Err(wrong_type(keys));
        }
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Deletes the lock whoever holds it (redis-py's holder included), announcing nothing
    /// (pollers find it free); `true` if it was held. The former holder's guards then fail to
    /// release with [`Error::NotHeld`]. A key of this name of another type, or a string that
    /// is a count rather than a token (a [`Semaphore`](crate::Semaphore)'s permits or a
    /// [`CountDownLatch`](crate::CountDownLatch)'s count: a decimal integer of at most 19
    /// digits, optionally negative), is left alone and reported as [`Error::WrongType`]; any
    /// other string is taken for a lock.
    pub fn force_unlock(&self) -> Result<bool> {
        let keys = self.lock.keys()?;
        let engine = self.lock.engine()?;
        let call = FORCE_UNLOCK_SCRIPT.key(&*keys.name);
        let deleted: i64 = engine.store().invoke(Op::ForceUnlock, &keys.name, &call)?;
        engine.forget_holds(keys);
        Ok(deleted == 1)
    }

    /// Whether the key holds the token of the calling thread's hold (`GET`; WRONGTYPE for a
    /// key of another type); never without a hold here, whose token it would be.
    fn token_is_ours(&self, op: Op) -> Result<bool> {
        let engine = self.lock.engine()?;
        let keys = self.lock.keys()?;
        let ours = engine.own_token(&STRING, keys);
        let token: Option<String> =
            self.run(op, |conn| redis::cmd("GET").arg(&*keys.name).query(conn))?;
        Ok(token.is_some() && token.as_deref() == ours.as_deref())
    }

    /// Runs one round trip on the master of the lock's key.
    fn run<T>(
        &self,
        op: Op,
        query: impl Fn(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let keys = self.lock.keys()?;
        self.lock.engine()?.store().run(op, &keys.name, 1, query)
    }
}

/// What the `Lock` of a string lock's guard ([`LockGuard::lock`]) answers with: the string
/// lock's own calls.
static STRING_FORMAT: StringFormat = StringFormat;

/// The string lock as an [`OtherFormat`] of [`Lock`].
struct StringFormat;

impl StringFormat {
    /// The string lock handle that `lock` is the inner `Lock` of.
    fn handle(lock: &Lock) -> StringLock {
        StringLock { lock: lock.clone() }
    }
}

impl OtherFormat for StringFormat {
    fn acquire(&self, lock: &Lock, options: AcquireOptions) -> Result<Option<LockGuard>> {
        Self::handle(lock).acquire(options)
    }

    fn is_locked(&self, lock: &Lock) -> Result<bool> {
        Self::handle(lock).is_locked()
    }

    fn is_held_by_current_thread(&self, lock: &Lock) -> Result<bool> {
        Self::handle(lock).is_held_by_current_thread()
    }

    fn hold_count(&self, lock: &Lock) -> Result<u32> {
        Self::handle(lock).hold_count()
    }

    fn remaining_ttl(&self, lock: &Lock) -> Result<Option<Duration>> {
        Self::handle(lock).remaining_ttl()
    }

    fn force_unlock(&self, lock: &Lock) -> Result<bool> {
        Self::handle(lock).force_unlock()
    }
}

/// The error for a key of the lock's name that is not a string.
fn wrong_type(keys: &LockKeys) -> Error {
    Error::WrongType {
        name: keys.name.to_string(),
    }
}

impl std::fmt::Debug for StringLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StringLock")
            .field("name", &self.name())
            .finish()
    }
}
