//! [`ReadWriteLock`]: Redisson's `RReadWriteLock`, with its [`ReadLock`] (shared) and
//! [`WriteLock`] (exclusive) on one name.
//!
//! Both live in one hash at the lock's name: the field `mode` (`read` or `write`), one field
//! per reader owner (`<owner>`) holding its read hold count, and the writer's field
//! (`<owner>:write`) holding its write hold count. Each read hold also has a timeout key
//! `{name}:<owner>:rwlock_timeout:<n>` with that hold's lease, from which a read release
//! recomputes the hash's TTL when other holds remain. Releases are announced on
//! `redisson_rwlock:{name}`: a read release publishes `0` (wake one waiter), a write release
//! `1` (wake them all). docs/design/wire-format.md ("Read-write lock (RReadWriteLock)", under
//! "On the wire") has the wire format.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::engine::kind::{AttemptArgs, KindId, LockKind};
use crate::engine::options::AcquireOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::fair_lock::parse_attempt;
use crate::kinds::lock::{acquire_shorthands, Lock, LockGuard};
use crate::names::LockKeys;
use crate::store::scripts::{attempt_script, latched_script, replay_lock_reply, Script};

/// Lua, the start of both acquires: `mode` is the lock's mode, and a key of the name that is
/// not a read-write lock is refused with WRONGTYPE and left untouched (a string or a list by
/// HGET itself; a hash without `mode`, such as somebody's data or a plain lock of the same
/// name, here: taking it over would write into it, and its last release would delete it).
macro_rules! refuse_hash_without_mode {
    () => {
        r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode and redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE the key holds a hash without a mode: not a read-write lock')
end
"#
    };
}
use crate::store::{Attempt, LockStore, Op, Release, UNLOCK_MESSAGE};

/// What a write release publishes: Redisson's "read unlock" message, which wakes every
/// waiter (readers may all get in at once).
const WAKE_ALL_MESSAGE: &str = "1";

/// At most this many holds per renewal script call (two keys each): the same 100 keys per
/// call as the reentrant renewal.
const READ_RENEWALS_PER_CALL: usize = 50;

/// The read acquire. `KEYS[1]` lock key, `KEYS[2]` the owner's read timeout prefix
/// (`{name}:<owner>:rwlock_timeout`), `KEYS[3]` the owner's attempt marker. `ARGV[1]` lease
/// ms, `ARGV[2]` owner field, `ARGV[3]` the owner's writer field (`<owner>:write`), `ARGV[4]`
/// attempt id, `ARGV[5]` marker TTL ms (a repeated send of one attempt gets the first send's
/// answer: see `ACQUIRE`).
///
/// Granted when nobody holds the lock (mode becomes `read`), when it is in `read` mode, or when
/// it is in `write` mode and the caller is the writer: the caller's count goes up by one (to
/// `n`), its timeout key `<prefix>:<n>` is set with the lease, and the hash's TTL becomes the
/// larger of what it had and the lease (the lease, for a new lock). Replies nil when granted,
/// else the hash's PTTL.
pub const READ_ACQUIRE: &str = attempt_script!(
    marker = 3,
    id = 4,
    ttl = 5,
    held = "redis.call('hexists', KEYS[1], ARGV[2]) == 1",
    replay = "return nil",
    concat!(
        refuse_hash_without_mode!(),
        r#"
if not mode then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    taken()
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
    taken()
    return nil
end
return redis.call('pttl', KEYS[1])
"#
    )
);

/// The read release. `KEYS[1]` lock key, `KEYS[2]` channel, `KEYS[3]` the owner's read
/// timeout prefix, `KEYS[4]` the lock's key prefix (`{name}`: timeout keys are
/// `<this>:<field>:rwlock_timeout:<n>`), `KEYS[5]` this call's latch, `KEYS[6..]` latches of
/// this client's earlier releases (deleted). `ARGV[1]` message `0`, `ARGV[2]` owner field,
/// `ARGV[3]` publish command, `ARGV[4]` latch TTL ms.
///
/// A repeated call (same latch) gets the first reply. Nothing held at all: `0` is published
/// anyway (as Redisson does) and the reply is nil (Redisson's too, since 3.44). The owner has no read hold: nil. Else its
/// count goes down (the field goes at 0) and its newest timeout key is deleted. If other
/// fields remain, the hash's TTL becomes the longest TTL among all remaining read timeout
/// keys, and the reply is 0 (still held); if none has any TTL left, a lock in `write` mode is
/// still held (0), a lock in `read` mode is over. Over: the hash is deleted, `0` published,
/// reply 1.
pub const READ_RELEASE: &str = latched_script!(
    latch = 5,
    earlier = 6,
    r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.pcall(ARGV[3], KEYS[2], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if n == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (n + 1))
local result = 1
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local count = tonumber(redis.call('hget', KEYS[1], field))
        if count then
            for i = count, 1, -1 do
                local left = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(longest, left)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        result = 0
    elseif mode == 'write' then
        result = 0
    end
end
if result == 1 then
    redis.call('del', KEYS[1])
    redis.pcall(ARGV[3], KEYS[2], ARGV[1])
end
redis.call('set', KEYS[5], result, 'px', ARGV[4])
return result
"#
);

/// The write acquire. `KEYS[1]` lock key, `KEYS[2]` the owner's attempt marker, `KEYS[3]`
/// (optional) fencing counter. `ARGV[1]` lease ms, `ARGV[2]` the writer field
/// (`<owner>:write`), `ARGV[3]` attempt id, `ARGV[4]` marker TTL ms (a repeated send of one
/// attempt gets the first send's answer: see `ACQUIRE`).
///
/// Granted when nobody holds the lock (mode `write`, the writer's count 1, the lease as TTL),
/// or re-entered when the caller is the writer: count + 1 and the TTL becomes what was left
/// **plus** the lease (Redisson's arithmetic). Read holds, even the caller's own, keep a
/// writer out. Replies nil (fenced: `{token}`) when granted, else the hash's PTTL.
pub const WRITE_ACQUIRE: &str = attempt_script!(
    marker = 2,
    id = 3,
    ttl = 4,
    held = "redis.call('hexists', KEYS[1], ARGV[2]) == 1",
    replay = replay_lock_reply!(),
    concat!(
        refuse_hash_without_mode!(),
        r#"
local function token()
    if KEYS[3] then
        redis.call('incr', KEYS[3])
        local granted = redis.call('get', KEYS[3])
        taken(granted)
        return {granted}
    end
    taken()
    return nil
end
if not mode then
    local granted = token()
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return granted
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local granted = token()
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], left + tonumber(ARGV[1]))
    return granted
end
return redis.call('pttl', KEYS[1])
"#
    )
);

/// The write release. `KEYS[1]` lock key, `KEYS[2]` channel, `KEYS[3]` this call's latch,
/// `KEYS[4..]` latches of this client's earlier releases (deleted). `ARGV[1]` message `1`,
/// `ARGV[2]` lease ms for write holds that remain, `ARGV[3]` writer field, `ARGV[4]` publish
/// command, `ARGV[5]` latch TTL ms.
///
/// A repeated call gets the first reply. Nothing held at all: `1` is published anyway (as
/// Redisson does), reply nil. Not in `write` mode, or the caller is not the writer: nil.
/// Else count − 1; while write holds remain, the lease is re-applied and the reply is 0. On
/// the last write hold the field goes; with no other field but `mode` the hash is deleted and
/// `1` published; with the writer's own read holds left, the mode becomes `read` and `1` is
/// published too (ours: Redisson publishes nothing there, leaving waiting readers to their
/// TTL). Reply 1.
pub const WRITE_RELEASE: &str = latched_script!(
    latch = 3,
    earlier = 4,
    r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.pcall(ARGV[4], KEYS[2], ARGV[1])
    return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local result = 1
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    result = 0
else
    redis.call('hdel', KEYS[1], ARGV[3])
    if redis.call('hlen', KEYS[1]) == 1 then
        redis.call('del', KEYS[1])
    else
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.pcall(ARGV[4], KEYS[2], ARGV[1])
end
redis.call('set', KEYS[3], result, 'px', ARGV[5])
return result
"#
);

/// The read renewal. For each hold `i`: `KEYS[2i - 1]` lock key, `KEYS[2i]` the lock's key
/// prefix; `ARGV[1]` watchdog timeout ms, `ARGV[i + 1]` the owner field. If the owner still
/// has read holds (count `c`), its timeout keys `1..c` and the hash get the timeout, reply 1;
/// else 0 (lost). A key of the wrong type makes only its hold lost. Redisson renews a read
/// lock the same way (its timeout keys, then the hash).
pub const READ_RENEW: &str = r#"
local out = {}
for i = 1, #KEYS / 2 do
    local key = KEYS[2 * i - 1]
    local owner = ARGV[i + 1]
    local count = redis.pcall('hget', key, owner)
    count = type(count) == 'string' and tonumber(count) or nil
    if count then
        for c = count, 1, -1 do
            redis.call('pexpire', KEYS[2 * i] .. ':' .. owner .. ':rwlock_timeout:' .. c, ARGV[1])
        end
        redis.call('pexpire', key, ARGV[1])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
"#;

/// A half's inspection. `KEYS[1]` lock key, `ARGV[1]` the half's field of the caller (the
/// owner for the read lock, `<owner>:write` for the write lock). Replies `{mode, count}`:
/// the lock's mode (`''` when nobody holds it) and the field's hold count, 0 without a mode
/// (a plain lock of this name is not a read-write lock, so holds nothing of it). A key that is
/// not a hash is refused by HGET itself (WRONGTYPE).
pub const RW_INSPECT: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    return {'', 0}
end
return {mode, tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0') or -1}
"#;

/// A half's force unlock (Redisson's `RReadWriteLock` halves' `forceUnlock`). `KEYS[1]` lock
/// key, `KEYS[2]` channel. `ARGV[1]` the half's mode (`read` or `write`), `ARGV[2]` message,
/// `ARGV[3]` publish command. Deletes the hash and publishes only when it is in that mode
/// (reply 1), else changes nothing (reply 0). A key that is not a hash: WRONGTYPE.
pub const RW_FORCE_UNLOCK: &str = r#"
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
redis.pcall(ARGV[3], KEYS[2], ARGV[2])
return 1
"#;

static INSPECT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RW_INSPECT));
static FORCE_UNLOCK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RW_FORCE_UNLOCK));
static READ_ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ_ACQUIRE));
static READ_RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ_RELEASE));
static READ_RENEW_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ_RENEW));
static WRITE_ACQUIRE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_ACQUIRE));
static WRITE_RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_RELEASE));

/// The read lock's kind, shared by every [`ReadLock`].
pub(crate) static READ: Read = Read;
/// The write lock's kind, shared by every [`WriteLock`].
pub(crate) static WRITE: Write = Write;

/// Redisson's read lock: shared holds, each with its own timeout key.
pub(crate) struct Read;
/// Redisson's write lock: one writer, who may also take read holds.
pub(crate) struct Write;

/// The writer's field of `owner`.
fn writer_field(owner: &str) -> String {
    format!("{owner}:write")
}

impl LockKind for Read {
    fn id(&self) -> KindId {
        KindId::ReadLock
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        let mut call = READ_ACQUIRE_SCRIPT.prepare_invoke();
        call.key(&*keys.name)
            .key(keys.read_timeout_prefix(args.owner))
            .key(keys.attempt_marker(args.owner))
            .arg(args.lease_ms)
            .arg(args.owner)
            .arg(writer_field(args.owner))
            .arg(args.attempt_id)
            .arg(store.latch_ttl_ms());
        let reply = store.invoke_attempt(&keys.name, &call)?;
        parse_attempt(reply, false, &keys.name)
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        _lease_ms: u64,
    ) -> Result<Release> {
        let reply = store.release_with_latch(keys, |conn, latch, previous| {
            let mut call = READ_RELEASE_SCRIPT.prepare_invoke();
            call.key(&*keys.name)
                .key(keys.rwlock_channel())
                .key(keys.read_timeout_prefix(owner))
                .key(keys.read_key_prefix())
                .key(latch);
            for key in previous {
                call.key(key);
            }
            call.arg(UNLOCK_MESSAGE)
                .arg(owner)
                .arg(store.publish_command())
                .arg(store.latch_ttl_ms());
            call.invoke::<Option<i64>>(conn)
        })?;
        Ok(Release::from_reply(reply))
    }

    fn channel(&self, keys: &LockKeys, _owner: &str) -> String {
        keys.rwlock_channel()
    }

    fn renew(
        &self,
        store: &LockStore,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>> {
        store.per_master(
            batch,
            budget,
            READ_RENEWALS_PER_CALL,
            &READ_RENEW_SCRIPT,
            |pipe, chunk| {
                let mut call = READ_RENEW_SCRIPT.prepare_invoke();
                for (name, _) in chunk {
                    // Names in the batch come from held locks, so they are valid.
                    let prefix = LockKeys::new(name)
                        .map(|keys| keys.read_key_prefix())
                        .unwrap_or_default();
                    call.key(*name).key(prefix);
                }
                call.arg(timeout_ms);
                for (_, owner) in chunk {
                    call.arg(*owner);
                }
                call.add_to(pipe);
            },
        )
    }
}

impl LockKind for Write {
    fn id(&self) -> KindId {
        KindId::WriteLock
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        let mut call = WRITE_ACQUIRE_SCRIPT.prepare_invoke();
        call.key(&*keys.name).key(keys.attempt_marker(args.owner));
        if args.fenced {
            call.key(keys.token_key());
        }
        call.arg(args.lease_ms)
            .arg(writer_field(args.owner))
            .arg(args.attempt_id)
            .arg(store.latch_ttl_ms());
        let reply = store.invoke_attempt(&keys.name, &call)?;
        parse_attempt(reply, args.fenced, &keys.name)
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Release> {
        let writer = writer_field(owner);
        let reply = store.release_with_latch(keys, |conn, latch, previous| {
            let mut call = WRITE_RELEASE_SCRIPT.prepare_invoke();
            call.key(&*keys.name).key(keys.rwlock_channel()).key(latch);
            for key in previous {
                call.key(key);
            }
            call.arg(WAKE_ALL_MESSAGE)
                .arg(lease_ms)
                .arg(&writer)
                .arg(store.publish_command())
                .arg(store.latch_ttl_ms());
            call.invoke::<Option<i64>>(conn)
        })?;
        Ok(Release::from_reply(reply))
    }

    fn channel(&self, keys: &LockKeys, _owner: &str) -> String {
        keys.rwlock_channel()
    }

    fn renew(
        &self,
        store: &LockStore,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>> {
        // The writer's field is a hold count like the reentrant lock's: Redisson renews it
        // the same way, under the field `<owner>:write`.
        let writers: Vec<String> = batch.iter().map(|(_, owner)| writer_field(owner)).collect();
        let batch: Vec<(&str, &str)> = batch
            .iter()
            .zip(&writers)
            .map(|((name, _), writer)| (*name, writer.as_str()))
            .collect();
        crate::kinds::lock::protocol::renew(store, &batch, timeout_ms, budget)
    }
}

/// One half of a read-write lock, as the inspection calls and force unlock see it: the
/// hash's mode in which it is held, and the caller's field for it.
#[derive(Clone, Copy)]
enum Half {
    Read,
    Write,
}

impl Half {
    fn mode(self) -> &'static str {
        match self {
            Half::Read => "read",
            Half::Write => "write",
        }
    }

    /// The calling thread's field for this half.
    fn field(self, owner: String) -> String {
        match self {
            Half::Read => owner,
            Half::Write => writer_field(&owner),
        }
    }

    /// The lock's mode and the calling thread's hold count of this half (`RW_INSPECT`).
    fn inspect(self, lock: &Lock, operation: Op) -> Result<(String, u32)> {
        let keys = lock.keys()?;
        let engine = lock.engine()?;
        let mut call = INSPECT_SCRIPT.prepare_invoke();
        call.key(&*keys.name)
            .arg(self.field(engine.current_owner()));
        let (mode, count): (String, i64) = engine.store().invoke(operation, &keys.name, &call)?;
        let count = u32::try_from(count).map_err(|_| Error::WrongType {
            name: keys.name.to_string(),
        })?;
        Ok((mode, count))
    }

    /// Whether anyone holds this half: the hash is in its mode (Redisson's `isLocked` of a
    /// read or write lock).
    fn is_locked(self, lock: &Lock) -> Result<bool> {
        Ok(self.inspect(lock, Op::IsLocked)?.0 == self.mode())
    }

    /// The calling thread's holds of this half.
    fn hold_count(self, lock: &Lock) -> Result<u32> {
        Ok(self.inspect(lock, Op::HoldCount)?.1)
    }

    /// Whether the calling thread has a hold of this half.
    fn is_held_by_current_thread(self, lock: &Lock) -> Result<bool> {
        Ok(self.inspect(lock, Op::IsHeldBy)?.1 > 0)
    }

    /// Deletes the hash when it is in this half's mode, and wakes every waiter.
    fn force_unlock(self, lock: &Lock) -> Result<bool> {
        let keys = lock.keys()?;
        let engine = lock.engine()?;
        let mut call = FORCE_UNLOCK_SCRIPT.prepare_invoke();
        call.key(&*keys.name)
            .key(keys.rwlock_channel())
            .arg(self.mode())
            .arg(WAKE_ALL_MESSAGE)
            .arg(engine.store().publish_command());
        let deleted: i64 = engine.store().invoke(Op::ForceUnlock, &keys.name, &call)?;
        if deleted == 1 {
            // Every hold of the hash went with it, of either half.
            engine.forget_holds(keys);
        }
        Ok(deleted == 1)
    }
}

/// The inspection calls and force unlock of a read-write lock's half: Redisson's `RLock`
/// methods of `readLock()` and `writeLock()`, whose key is the shared hash.
macro_rules! half_inspection {
    ($half:expr, $what:literal) => {
        #[doc = concat!("Whether anyone (any thread, process or client) holds the ", $what)]
        /// lock: the shared hash is in that mode (Redisson's `isLocked` of this half).
        pub fn is_locked(&self) -> Result<bool> {
            $half.is_locked(&self.lock)
        }

        #[doc = concat!("Whether the calling thread holds the ", $what, " lock through this")]
        /// manager.
        pub fn is_held_by_current_thread(&self) -> Result<bool> {
            $half.is_held_by_current_thread(&self.lock)
        }

        #[doc = concat!("How many ", $what, " holds the calling thread has (0 when none).")]
        pub fn hold_count(&self) -> Result<u32> {
            $half.hold_count(&self.lock)
        }

        /// The shared hash's remaining lease as Redis sees it (Redisson's `remainTimeToLive`,
        /// which reads the hash whichever half holds it); `None` when nobody holds the lock.
        pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
            self.lock.remaining_ttl()
        }

        #[doc = concat!("Deletes the lock, whoever holds it, if it is held as a ", $what)]
        /// lock, and wakes every waiter; `true` if it was, `false` (nothing changed) when it
        /// is free or held in the other mode. The former holders' guards then fail to release
        /// with [`Error::NotHeld`].
        pub fn force_unlock(&self) -> Result<bool> {
            $half.force_unlock(&self.lock)
        }
    };
}

/// A handle on one read-write lock: Redisson's `RReadWriteLock`. Cheap to create
/// ([`LockManager::get_read_write_lock`](crate::LockManager::get_read_write_lock) does no I/O) and
/// to clone.
///
/// Any number of owners (threads of any client) may hold the [read lock](Self::read_lock)
/// at once; the [write lock](Self::write_lock) excludes everyone else. Both are reentrant per
/// thread. A thread holding the write lock may also take the read lock; when its last write
/// hold ends while it still has read holds, the lock becomes a read lock that other readers
/// may share. The reverse is not possible: a thread with a read hold cannot take the write
/// lock (it would wait for itself), which is refused here with
/// [`Error::InvalidArgument`]. Its hash is the key of the [`Lock`] of the same name in another
/// format: a thread that holds the read or write lock may not take that lock (nor its fair or
/// spin lock: [`Error::InvalidArgument`]), and while anyone holds that lock both halves fail
/// with [`Error::WrongType`].
///
/// **Writers are not protected from readers.** As in Redisson, a read lock is granted whenever
/// the lock is in read mode, even while writers wait: as long as read holds overlap without a
/// gap, a waiting writer does not get the lock (its `try_lock` times out). A writer gets in
/// only when the last reader leaves (it is then woken by the release message).
#[derive(Clone)]
pub struct ReadWriteLock {
    lock: Lock,
}

impl ReadWriteLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        ReadWriteLock {
            lock: Lock::new(engine, name),
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The shared half: Redisson's `readLock()`.
    pub fn read_lock(&self) -> ReadLock {
        ReadLock {
            lock: self.lock.clone(),
        }
    }

    /// The exclusive half: Redisson's `writeLock()`.
    pub fn write_lock(&self) -> WriteLock {
        WriteLock {
            lock: self.lock.clone(),
        }
    }
}

/// The read lock of a [`ReadWriteLock`]: shared with other readers, excluded by a writer
/// (except the calling thread's own write hold). Every acquire returns a [`LockGuard`] that
/// releases one read hold; the watchdog renews it (and its timeout key) like any hold.
#[derive(Clone)]
pub struct ReadLock {
    lock: Lock,
}

impl ReadLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Acquires a read hold as `options` say. Fencing tokens are refused
    /// ([`Error::InvalidArgument`]): read holds are shared, so a token would not single out
    /// one writer to the resource. `Ok(None)` only when a wait limit was given and passed.
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        if options.get_fenced() {
            return Err(Error::InvalidArgument {
                what: "fenced",
                reason: format!(
                    "read lock {:?}: read holds are shared, so they take no fencing token; \
                     fence the write lock instead",
                    self.name()
                ),
            });
        }
        self.lock.acquire_as(&READ, options)
    }

    acquire_shorthands!("a read hold");

    half_inspection!(Half::Read, "read");
}

/// The write lock of a [`ReadWriteLock`]: excludes readers and other writers. Every acquire
/// returns a [`LockGuard`] that releases one write hold; fencing tokens
/// ([`AcquireOptions::fenced`]) come from the name's counter `redisson_lock_token:{name}`.
#[derive(Clone)]
pub struct WriteLock {
    lock: Lock,
}

impl WriteLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Acquires the write lock as `options` say. `Ok(None)` only when a wait limit was given
    /// and passed. A thread that holds read holds on this lock (and not the write lock) is
    /// refused with [`Error::InvalidArgument`]: it would wait for itself forever.
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let keys = self.lock.keys()?;
        let engine = self.lock.engine()?;
        if engine.own_hold_count(&READ, keys) > 0 && engine.own_hold_count(&WRITE, keys) == 0 {
            return Err(Error::InvalidArgument {
                what: "write lock",
                reason: format!(
                    "the calling thread holds read lock {:?}: a read lock cannot be upgraded \
                     (release the read holds first)",
                    self.name()
                ),
            });
        }
        self.lock.acquire_as(&WRITE, options)
    }

    acquire_shorthands!("the write lock");

    half_inspection!(Half::Write, "write");
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name())
            .finish()
    }
}

impl std::fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLock")
            .field("name", &self.name())
            .finish()
    }
}

impl std::fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLock")
            .field("name", &self.name())
            .finish()
    }
}
