//! [`FairLock`]: Redisson's `RFairLock`, a reentrant lock granted first come, first served
//! across every client, through a queue kept in Redis.
//!
//! The lock itself is the reentrant lock's hash (one owner field, a hold count, the lease as
//! TTL). Beside it, `redisson_lock_queue:{name}` lists the waiters' owner fields in arrival
//! order, and `redisson_lock_timeout:{name}` gives each waiter the epoch millisecond after
//! which it counts as gone (a client that crashed while queued must not block the queue
//! forever). The lock is granted only to the head of the queue (or to anyone while the queue
//! is empty), and a release tells only the head, on its own channel
//! `redisson_lock__channel:{name}:<owner>`. docs/design/wire-format.md ("Fair lock (RFairLock)", under "On the wire") has the
//! wire format.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::engine::kind::{AttemptArgs, KindId, LockKind};
use crate::engine::options::AcquireOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::lock::{acquire_shorthands, Lock, LockGuard};
use crate::names::LockKeys;
use crate::store::scripts::{
    attempt_script, holder_pttl, latched_script, not_a_lock_fn, replay_lock_reply, Script,
};
use crate::store::{Attempt, LockStore, Op, Release, UNLOCK_MESSAGE};

/// The fair acquire attempt.
///
/// `KEYS[1]` lock key, `KEYS[2]` queue, `KEYS[3]` queue timeouts, `KEYS[4]` the owner's
/// attempt marker, `KEYS[5]` (optional) fencing counter. `ARGV[1]` lease ms, `ARGV[2]` owner
/// field, `ARGV[3]` queue timeout ms, `ARGV[4]` now (epoch ms), `ARGV[5]` `1` to join the
/// queue when the lock is not granted, `0` for a single attempt that leaves no trace,
/// `ARGV[6]` attempt id, `ARGV[7]` marker TTL ms (a repeated send of one attempt gets the
/// first send's answer: see `ACQUIRE`).
///
/// First drops the waiters at the head whose queue timeout has passed. Grants the lock (hold
/// count 1, the lease as TTL) when it is free and the queue is empty or headed by the
/// caller: the caller leaves the queue and every remaining waiter's timeout comes
/// `ARGV[3]` ms earlier (each moved up one place). Re-enters when the caller holds it.
/// Otherwise, when asked to, appends the caller to the queue (if not there yet) with the
/// timeout: the last waiter's timeout (or the lock's expiry when nobody waits, or when the
/// last waiter has no timeout, as Redisson 3.45 does) plus
/// `ARGV[3]`. Replies nil (or `{token}` when fenced) when granted, else how long to wait
/// before trying again in ms: the lock's PTTL when it is held (-1: no TTL), or, when it is
/// free but others are ahead, until the head's timeout, at most 1 s. A hash without TTL whose
/// fields are not hold counts is refused with WRONGTYPE (somebody's data, see `ACQUIRE`).
pub const FAIR_ACQUIRE: &str = attempt_script!(
    marker = 4,
    id = 6,
    ttl = 7,
    held = "redis.call('hexists', KEYS[1], ARGV[2]) == 1",
    replay = replay_lock_reply!(),
    concat!(
        not_a_lock_fn!(),
        r#"
local now = tonumber(ARGV[4])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if not first then
        break
    end
    local gone = redis.call('zscore', KEYS[3], first)
    if not gone or tonumber(gone) > now then
        break
    end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
end
local function hold()
    if KEYS[5] then
        redis.call('incr', KEYS[5])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[5] then
        local token = redis.call('get', KEYS[5])
        taken(token)
        return {token}
    end
    taken()
    return nil
end
local first = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not first or first == ARGV[2]) then
    if first then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    local step = -tonumber(ARGV[3])
    for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], step, waiter)
    end
    return hold()
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return hold()
end
"#,
        holder_pttl!(),
        r#"
if ARGV[5] == '1' and not redis.call('zscore', KEYS[3], ARGV[2]) then
    local last = redis.call('lindex', KEYS[2], -1)
    local after = nil
    if last and last ~= ARGV[2] then
        after = redis.call('zscore', KEYS[3], last)
    end
    local ahead = pttl
    if after then
        ahead = tonumber(after) - now
    end
    if redis.call('zadd', KEYS[3], ahead + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then
        redis.call('rpush', KEYS[2], ARGV[2])
    end
end
if pttl == -2 then
    local wait = 1000
    local head = redis.call('lindex', KEYS[2], 0)
    local gone = head and redis.call('zscore', KEYS[3], head)
    if gone then
        wait = math.max(1, math.min(wait, tonumber(gone) - now))
    end
    return wait
end
return pttl
"#
    )
);

/// A waiter gives up. `KEYS[1]` queue, `KEYS[2]` queue timeouts, `KEYS[3]` lock key,
/// `KEYS[4]` the lock's channel (waiter channels are `<this>:<owner>`). `ARGV[1]` owner
/// field, `ARGV[2]` its queue timeout ms, `ARGV[3]` message, `ARGV[4]` publish command.
///
/// Every waiter behind the caller gets its timeout `ARGV[2]` ms earlier (each moved up one
/// place), and the caller leaves the queue and the timeouts. Ours, beyond Redisson's: when
/// the caller was the head and the lock is free, the new head is told (Redisson leaves it to
/// wake at its next timeout). Replies nothing useful.
pub const FAIR_ABANDON: &str = r#"
local queue = redis.call('lrange', KEYS[1], 0, -1)
local behind = false
local step = -tonumber(ARGV[2])
for _, waiter in ipairs(queue) do
    if behind then
        redis.call('zincrby', KEYS[2], step, waiter)
    elseif waiter == ARGV[1] then
        behind = true
    end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
if queue[1] == ARGV[1] and redis.call('exists', KEYS[3]) == 0 then
    local head = redis.call('lindex', KEYS[1], 0)
    if head then
        redis.pcall(ARGV[4], KEYS[4] .. ':' .. head, ARGV[3])
    end
end
return 0
"#;

/// The fair release. `KEYS[1]` lock key, `KEYS[2]` queue, `KEYS[3]` queue timeouts,
/// `KEYS[4]` the lock's channel (waiter channels are `<this>:<owner>`), `KEYS[5]` this call's
/// latch, `KEYS[6..]` latches of this client's earlier releases (deleted). `ARGV[1]` message,
/// `ARGV[2]` lease ms for holds that remain, `ARGV[3]` owner field, `ARGV[4]` now (epoch ms),
/// `ARGV[5]` publish command, `ARGV[6]` latch TTL ms.
///
/// A repeated call (same latch) gets the first reply. Drops the waiters at the head whose
/// queue timeout passed. When the lock is already gone, tells the head and replies nil
/// (Redisson replies "released" there; here it is `NotHeld`, as for every kind). When the
/// caller holds no hold: nil. Else one hold fewer: 0 while holds remain (lease re-applied);
/// on the last, the lock is deleted, `0` is published on the head waiter's channel, and the
/// reply is 1. No local handoff: the queue decides who is next.
pub const FAIR_RELEASE: &str = latched_script!(
    latch = 5,
    earlier = 6,
    r#"
local now = tonumber(ARGV[4])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if not first then
        break
    end
    local gone = redis.call('zscore', KEYS[3], first)
    if not gone or tonumber(gone) > now then
        break
    end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
end
local function tell_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        redis.pcall(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
    end
end
if redis.call('exists', KEYS[1]) == 0 then
    tell_head()
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local result = 1
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    result = 0
else
    redis.call('del', KEYS[1])
    tell_head()
end
redis.call('set', KEYS[5], result, 'px', ARGV[6])
return result
"#
);

static ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FAIR_ACQUIRE));
static ABANDON_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FAIR_ABANDON));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FAIR_RELEASE));

/// The fair lock's kind, shared by every [`FairLock`].
pub(crate) static FAIR: Fair = Fair;

/// Redisson's fair lock: the reentrant lock's hash, granted in queue order.
pub(crate) struct Fair;

/// The wall clock in epoch ms: queue timeouts are absolute times, which Redisson takes from
/// each client's clock (so clients' clocks must agree, as for any Redisson fair lock).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long `args`' waiter keeps its place in the queue: its wait limit, or (waiting without
/// limit) the manager's `fair_lock_wait_timeout`, as Redisson does.
fn queue_timeout_ms(store: &LockStore, args: &AttemptArgs<'_>) -> u64 {
    match args.wait_ms {
        Some(wait) if wait > 0 => wait,
        _ => store.fair_lock_wait_ms(),
    }
}

impl LockKind for Fair {
    fn id(&self) -> KindId {
        KindId::FairLock
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        let mut call = ACQUIRE_SCRIPT.prepare_invoke();
        call.key(&*keys.name)
            .key(keys.queue_key())
            .key(keys.queue_timeout_key())
            .key(keys.attempt_marker(args.owner));
        if args.fenced {
            call.key(keys.token_key());
        }
        // A single attempt (`try_lock(0)`) does not queue: it would leave a place nobody
        // takes, which Redisson's `tryLock()` does not either.
        let queue = args.wait_ms != Some(0);
        call.arg(args.lease_ms)
            .arg(args.owner)
            .arg(queue_timeout_ms(store, args))
            .arg(now_ms())
            .arg(u8::from(queue))
            .arg(args.attempt_id)
            .arg(store.latch_ttl_ms());
        let reply = store.invoke_attempt(&keys.name, &call)?;
        parse_attempt(reply, args.fenced, &keys.name)
    }

    fn abandon(&self, store: &LockStore, keys: &LockKeys, args: &AttemptArgs<'_>) -> Result<()> {
        let mut call = ABANDON_SCRIPT.prepare_invoke();
        call.key(keys.queue_key())
            .key(keys.queue_timeout_key())
            .key(&*keys.name)
            .key(keys.channel())
            .arg(args.owner)
            .arg(queue_timeout_ms(store, args))
            .arg(UNLOCK_MESSAGE)
            .arg(store.publish_command());
        store.invoke::<()>(Op::LeaveQueue, &keys.name, &call)
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
            call.key(&*keys.name)
                .key(keys.queue_key())
                .key(keys.queue_timeout_key())
                .key(keys.channel())
                .key(latch);
            for key in previous {
                call.key(key);
            }
            call.arg(UNLOCK_MESSAGE)
                .arg(lease_ms)
                .arg(owner)
                .arg(now_ms())
                .arg(store.publish_command())
                .arg(store.latch_ttl_ms());
            call.invoke::<Option<i64>>(conn)
        })?;
        Ok(Release::from_reply(reply))
    }

    fn channel(&self, keys: &LockKeys, owner: &str) -> String {
        keys.waiter_channel(owner)
    }

    fn renew(
        &self,
        store: &LockStore,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>> {
        // The hold is the reentrant lock's hash and field: Redisson renews it the same way.
        crate::kinds::lock::protocol::renew(store, batch, timeout_ms, budget)
    }
}

/// An acquire script's reply: nil (or `{token}` when fenced) when acquired, else the ms to
/// wait (-1: the key has no TTL). Shared by the kinds whose scripts reply like that.
pub(crate) fn parse_attempt(reply: redis::Value, fenced: bool, name: &str) -> Result<Attempt> {
    let parsed = if fenced {
        Attempt::from_fenced_reply(reply)
    } else {
        redis::from_redis_value::<Option<i64>>(reply)
            .map(Attempt::from_reply)
            .map_err(redis::RedisError::from)
    };
    parsed.map_err(|source| Error::from_command("acquire", name, source))
}

/// A handle on one fair lock: Redisson's `RFairLock`. Cheap to create
/// ([`LockManager::get_fair_lock`](crate::LockManager::get_fair_lock) does no I/O) and to clone.
///
/// Waiters are served **first come, first served across every client** (threads of this
/// manager, other managers and processes, Redisson clients alike): each waiter joins a queue
/// in Redis and the lock is granted only to the queue's head; a release wakes only the head.
/// Reentrant per thread like [`Lock`], and one lock with the [`Lock`] and the spin lock of its
/// name: a thread holding one of them re-enters by this one, as in Redisson. Every acquire
/// returns a [`LockGuard`] that releases one hold, with the lost signal and (through
/// [`lock_fenced`](Self::lock_fenced), or [`acquire`](Self::acquire) with
/// [`AcquireOptions::fenced`]) fencing tokens from the same counter as [`Lock::lock_fenced`].
///
/// A waiter keeps its place for its wait limit (`try_lock(wait)`), or, when it waits without
/// limit, for the manager's
/// [`fair_lock_wait_timeout`](crate::LockManagerBuilder::fair_lock_wait_timeout) (5 minutes,
/// as Redisson's `fairLockWaitTimeout`) after the place before it ran out; a waiter that stays longer (the holder keeps the lock that long)
/// loses its place to waiters behind it and queues again at the end. A waiter that gives up,
/// or whose first attempt timed out (it may have queued, its reply lost), leaves the queue at
/// once. `try_lock(Duration::ZERO)` makes one attempt and never queues.
///
/// The queue replaces the manager's local line: a fair lock's release never hands the lock to
/// another local thread in the same call, so a contended fair lock costs a pub/sub hop per
/// handoff that a [`Lock`] between threads of one manager does not.
#[derive(Clone)]
pub struct FairLock {
    lock: Lock,
}

impl FairLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        FairLock {
            lock: Lock::new(engine, name),
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

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

    /// Deletes the lock whoever holds it and tells the first live waiter in the queue, on its
    /// own channel (Redisson's `RFairLock.forceUnlock`); `true` if it was held. As
    /// [`Lock::force_unlock`], which it is.
    pub fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock()
    }

    /// Acquires as `options` say (wait limit, lease, fencing token); the general form of the
    /// shorthands. `Ok(None)` only when a wait limit was given and passed.
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        self.lock.acquire_as(&FAIR, options)
    }

    acquire_shorthands!("the fair lock in queue order");
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name())
            .finish()
    }
}
