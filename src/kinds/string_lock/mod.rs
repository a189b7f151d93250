//! [`StringLock`]: redis-py's lock format (`redis.lock.Lock`, also redsync's and
//! bsm/redislock's): one string key, the lock's name, holding the owner's token with the lease
//! as its TTL. Taken only while the key is missing (`SET name token NX PX lease`), renewed and
//! deleted only while it holds the owner's token. Nothing is published: waiters are woken by
//! the server's client tracking of the key, as a spin lock's are, through the same engine path
//! (`LockKind::spins`), and poll only where tracking is refused.
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
//! Releases use the newer compare-and-set commands where the server knows them (per server,
//! `crate::topology::newer_commands`): the last release `DELIFEQ` or `DELEX … IFEQ`, a
//! release that leaves holds `SET … IFEQ`; else scripts with redis-py's semantics. The
//! watchdog always renews with a script (`STRING_RENEW`, one call per 100 holds).
//! docs/design/wire-format.md ("String lock (redis-py's Lock)") has the wire format and the
//! interoperation.
//!
//! Here: the handle; its kind as the engine knows it (`kind`), its protocol (`protocol`), its
//! scripts (`scripts`), and what its guards' `Lock` answers with (`format`).

mod format;
mod kind;
mod protocol;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use redis::Connection;

use crate::engine::options::AcquireOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::lock::{acquire_shorthands, Lock, LockGuard};
use crate::names::LockKeys;
use crate::store::Op;
use format::STRING_FORMAT;
pub(crate) use kind::STRING;
use protocol::no_fencing;
use scripts::FORCE_UNLOCK_SCRIPT;
pub use scripts::{
    STRING_ACQUIRE, STRING_EXTEND, STRING_FORCE_UNLOCK, STRING_RELEASE, STRING_RENEW,
};

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
/// a waiter is woken by the server's client tracking of the key (any change: redis-py's
/// release, an expiry, a `DEL`), or where tracking is refused polls with the spin lock's
/// back-off (1 ms doubling to 128 ms); a manager's threads take turns as on a
/// [`SpinLock`](crate::SpinLock).
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
        let store = self.lock.engine()?.store();
        crate::kinds::lock::protocol::remaining_ttl_of_type(store, self.lock.keys()?, "string")
    }

    /// Deletes the lock whoever holds it (redis-py's holder included), announcing nothing
    /// (client tracking tells the waiters); `true` if it was held. The former holder's guards then fail to
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
