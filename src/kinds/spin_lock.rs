//! [`SpinLock`]: Redisson's `RSpinLock`, a reentrant lock whose release publishes nothing:
//! Redisson's waiters poll with a back-off, ours are woken by the server's client tracking.
//!
//! The lock is the reentrant lock's hash (one owner field `<client id>:<thread>`, a hold count,
//! the lease as TTL), taken with the same acquire and renewed by the same watchdog; a release
//! has the same unlock latch. What differs is pub/sub: a spin lock's release (and force
//! unlock) publishes nothing, and its waiters subscribe to nothing. The server tracks the key
//! for a waiter (client tracking, docs/design/threads.md) and tells it of any change, so a
//! release is found within milliseconds whoever made it; where tracking is refused, a waiter
//! looks again after Redisson's default back-off (`LockOptions.ExponentialBackOff`: 1 ms,
//! doubled plus a little jitter, at most 128 ms; `crate::backoff::SpinBackoff`), within about
//! 128 ms. Redisson offers it for large clusters, where every lock's channel
//! costs every node; docs/design/wire-format.md ("Spin lock (RSpinLock)", under "On the wire") has the wire format.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::engine::kind::{AttemptArgs, KindId, LockKind, TakesTurns};
use crate::engine::options::AcquireOptions;
use crate::engine::Engine;
use crate::error::Result;
use crate::kinds::lock::REENTRANT;
use crate::kinds::lock::{acquire_shorthands, Lock, LockGuard};
use crate::names::LockKeys;
use crate::store::scripts::{latched_script, refuse_non_lock_key, Script};
use crate::store::{Attempt, LockStore, Op, Release};

/// The spin lock's release: Redisson's `RLock` release without the message. `KEYS[1]` lock
/// key, `KEYS[2]` this call's latch, `KEYS[3..]` latches of this client's earlier releases of
/// the lock (deleted). `ARGV[1]` lease ms for holds that remain, `ARGV[2]` owner field,
/// `ARGV[3]` latch TTL ms.
///
/// A repeated call (same latch) gets the first reply. Replies nil when the owner holds no hold
/// (nothing changed), 0 when one hold fewer remains (lease re-applied), 1 when that was the
/// last and the key is deleted. Nothing is published: spin-lock waiters are told by client
/// tracking, or poll.
pub const SPIN_RELEASE: &str = latched_script!(
    latch = 2,
    earlier = 3,
    r#"
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local result = 1
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    result = 0
else
    redis.call('del', KEYS[1])
end
redis.call('set', KEYS[2], result, 'px', ARGV[3])
return result
"#
);

/// The spin lock's force unlock: `KEYS[1]` lock key. Deletes it and replies 1, or 0 when there
/// was none; publishes nothing (Redisson's `RSpinLock.forceUnlock` neither). As
/// `FORCE_UNLOCK`, a key that is not a hash, or a hash whose fields are not hold counts, is
/// refused with WRONGTYPE and left alone: it is somebody's data, not a lock.
pub const SPIN_FORCE_UNLOCK: &str = concat!(
    refuse_non_lock_key!(),
    r#"
return redis.call('del', KEYS[1])
"#
);

static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SPIN_RELEASE));
static FORCE_UNLOCK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SPIN_FORCE_UNLOCK));

/// The spin lock's kind, shared by every [`SpinLock`].
pub(crate) static SPIN: Spin = Spin;

/// Redisson's spin lock: the reentrant lock's hash, released silently, waited for by polling.
pub(crate) struct Spin;

impl LockKind for Spin {
    fn id(&self) -> KindId {
        KindId::SpinLock
    }

    fn spins(&self) -> bool {
        true
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        // The same hash, field and lease as `RLock`'s acquire (Redisson's spin lock sends the
        // same script); a fenced attempt draws from the same counter.
        REENTRANT.attempt(store, keys, args)
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Release> {
        let reply = store.release_with_latch(keys, |conn, latch, previous| {
            let mut call = RELEASE_SCRIPT.prepare_invoke();
            call.key(&*keys.name).key(latch);
            for key in previous {
                call.key(key);
            }
            call.arg(lease_ms).arg(owner).arg(store.latch_ttl_ms());
            call.invoke::<Option<i64>>(conn)
        })?;
        Ok(Release::from_reply(reply))
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
        crate::kinds::lock::protocol::renew(store, batch, timeout_ms, budget)
    }

    fn takes_turns(&self) -> Option<&dyn TakesTurns> {
        Some(self)
    }
}

/// Threads of one manager take turns, and a release hands the turn to the next one, which
/// then attempts in Redis: the spin lock does not hand the lock over (its script cannot
/// acquire for anyone, and announces nothing to yield or grant on). A busy manager would then
/// keep the lock from other processes' pollers, who hear nothing: the engine's runs end a
/// long run with a gap for them (`crate::engine::runs`).
impl TakesTurns for Spin {}

/// A handle on one spin lock: Redisson's `RSpinLock`. Cheap to create
/// ([`LockManager::get_spin_lock`](crate::LockManager::get_spin_lock) does no I/O) and to clone.
///
/// Stored like a [`Lock`] (the same hash, owner field, lease and watchdog), so Java's
/// `getSpinLock(name)` and this handle share one lock. But nothing is published: a release
/// announces nothing, and a waiter does not subscribe. It polls instead, after a back-off of
/// 1 ms doubling (plus jitter) up to 128 ms, Redisson's default: a release is found within
/// about 128 ms, at the price of a few requests a second per waiter. Use it where pub/sub is
/// unwelcome (very large clusters) or to share a lock with Java code that uses `RSpinLock`.
///
/// Reentrant per thread like [`Lock`]; every acquire returns a [`LockGuard`] that releases one
/// hold, with the lost signal and (through [`lock_fenced`](Self::lock_fenced), or
/// [`acquire`](Self::acquire) with [`AcquireOptions::fenced`]) fencing tokens from the same
/// counter as [`Lock::lock_fenced`].
/// Threads of one manager take turns in-process, first come first served: only the first
/// polls Redis, and a release hands the turn to the next, which attempts at once. So that a
/// busy manager cannot keep the lock from other processes' pollers (ours or Java's), which
/// hear nothing, a manager that has kept it for a while (0.2 to 2 s, adapting) leaves it free
/// for 160 ms, longer than the longest back-off, before its next thread attempts.
#[derive(Clone)]
pub struct SpinLock {
    lock: Lock,
}

impl SpinLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        SpinLock {
            lock: Lock::new(engine, name),
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Acquires as `options` say (wait limit, lease, fencing token, cancellation); the general
    /// form of the shorthands. `Ok(None)` only when a wait limit was given and passed.
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        self.lock.acquire_as(&SPIN, options)
    }

    acquire_shorthands!("the spin lock, polling");

    /// Whether anyone (any thread, process or client) holds the lock.
    pub fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked()
    }

    /// Whether the calling thread holds the lock through this manager.
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.lock.is_held_by_current_thread()
    }

    /// How many holds the calling thread has on the lock (0 when it holds none).
    pub fn hold_count(&self) -> Result<u32> {
        self.lock.hold_count()
    }

    /// The lock's remaining lease as Redis sees it; `None` when nobody holds it.
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.lock.remaining_ttl()
    }

    /// Deletes the lock whoever holds it, announcing nothing (pollers find it free); `true`
    /// if it was held. The former holder's guards then fail to release with
    /// [`Error::NotHeld`](crate::Error::NotHeld). A key of this name that is not a lock is
    /// left alone and reported as [`Error::WrongType`](crate::Error::WrongType).
    pub fn force_unlock(&self) -> Result<bool> {
        let keys = self.lock.keys()?;
        let engine = self.lock.engine()?;
        let mut call = FORCE_UNLOCK_SCRIPT.prepare_invoke();
        call.key(&*keys.name);
        let deleted: i64 = engine.store().invoke(Op::ForceUnlock, &keys.name, &call)?;
        engine.forget_holds(keys);
        Ok(deleted == 1)
    }
}

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("name", &self.name())
            .finish()
    }
}
