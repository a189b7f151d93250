//! The reentrant lock's protocol (Redisson's `RLock`): its acquire, fenced acquire, release,
//! renewal, force unlock and inspections, as calls of its scripts (`scripts.rs`) through the
//! store, which routes, resends and waits for replicas as for every kind.

use std::time::Duration;

use super::scripts::LOCK_SCRIPTS;
use crate::engine::kind::{Listeners, Waiting};
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::store::scripts::ScriptInvocation;
use crate::store::{Attempt, LockStore, Op, Release, UNLOCK_MESSAGE};

/// How long a waiter's registration outlives the moment it is due to look again (its
/// holder's TTL, or its wait's end), for the scheduling and the round trip in between: a
/// registration that lapses early only means that the waiter is not granted the lock.
const REGISTRATION_MARGIN: Duration = Duration::from_millis(1000);

/// One acquire attempt: takes the lock (or one more hold) for `owner` with a TTL of
/// `lease_ms`, or reports the holder's remaining lease. A repeated send takes nothing more: a
/// re-entry's by its `attempt_id` (the same in every send, see `attempt_script!`), a fresh
/// attempt's because it sets the owner's hold to one (`ACQUIRE`), so that one sends no
/// attempt id and writes no marker ([`marker_id`]).
///
/// An owner that holds nothing of the lock as far as it knows (`fresh`) takes a grant a
/// release made to it (docs/design/engine.md, "Grants") instead of counting a second hold. With
/// `waiting`, a fresh attempt that finds the lock held registers the caller as a waiter that a
/// release may grant the lock to. A re-entry never registers (the plan does not ask it to): a
/// grant would write its owner's only hold, where the re-entry counts one more.
pub(crate) fn try_acquire(
    store: &LockStore,
    keys: &LockKeys,
    lease_ms: u64,
    owner: &str,
    attempt_id: &str,
    fresh: bool,
    waiting: Option<&Waiting>,
) -> Result<Attempt> {
    let waiting = waiting.filter(|_| fresh);
    let mut call = acquire_call(
        store,
        keys,
        lease_ms,
        owner,
        marker_id(store, attempt_id, fresh),
        false,
        fresh,
    );
    if let Some(waiting) = waiting {
        call.arg(waiting.number)
            .arg(waiting.left_ms.map_or(String::new(), |ms| ms.to_string()))
            .arg(REGISTRATION_MARGIN.as_millis() as u64)
            .arg(&waiting.control);
    }
    let pttl: Option<i64> =
        store.run_attempt(&keys.name, |conn| call.invoke(conn), Option::is_none)?;
    Ok(Attempt::from_reply(pttl))
}

/// The attempt id a plain acquire sends: empty (no attempt marker) for a fresh attempt, except
/// on a cluster. There a later re-entry during a slot migration finds its marker moved to the
/// target with the lock; a marker that was never written is a key missing on the target, which
/// holds the re-entry back with TRYAGAIN until the migration ends.
fn marker_id<'a>(store: &LockStore, attempt_id: &'a str, fresh: bool) -> &'a str {
    if fresh && !store.topology().capabilities().routes_by_slot {
        ""
    } else {
        attempt_id
    }
}

/// One fenced acquire attempt: as [`try_acquire`] (without waiting),
/// and on success the lock's fencing counter is incremented and the new token returned.
pub(crate) fn try_acquire_fenced(
    store: &LockStore,
    keys: &LockKeys,
    lease_ms: u64,
    owner: &str,
    attempt_id: &str,
    fresh: bool,
) -> Result<Attempt> {
    let call = acquire_call(store, keys, lease_ms, owner, attempt_id, true, fresh);
    store.run_attempt(
        &keys.name,
        |conn| {
            let reply = call.invoke(conn)?;
            Attempt::from_fenced_reply(reply)
        },
        |attempt| attempt.is_acquired(),
    )
}

/// A call of the acquire script up to `ARGV[4]`, or with `fenced` of the fenced one,
/// naming the waiters hash with `waiters` (see `scripts.rs` for their KEYS and ARGV: the
/// fenced one has the counter as `KEYS[2]`, the waiters hash as `KEYS[4]`). The waiters
/// hash is named only where needed: during a slot migration, a key missing on the target
/// holds a call back with TRYAGAIN, and re-entries must go on then.
fn acquire_call(
    store: &LockStore,
    keys: &LockKeys,
    lease_ms: u64,
    owner: &str,
    attempt_id: &str,
    fenced: bool,
    waiters: bool,
) -> ScriptInvocation<'static> {
    let mut call;
    if fenced {
        call = LOCK_SCRIPTS.fenced_acquire.key(&*keys.name);
        call.key(keys.token_key()).key(keys.attempt_marker(owner));
    } else {
        call = LOCK_SCRIPTS.acquire.key(&*keys.name);
        call.key(keys.attempt_marker(owner));
    }
    if waiters {
        call.key(keys.waiters_key());
    }
    call.arg(lease_ms)
        .arg(owner)
        .arg(attempt_id)
        .arg(store.latch_ttl_ms());
    call
}

/// Releases one hold of `owner` (holds that remain get `lease_ms`). On the last, the lock
/// is granted to the first registered waiter of another client when every subscriber of
/// its channel but this client's own listener (`listeners.own`) is such a waiter
/// (docs/design/engine.md, "Grants"); otherwise, when no more than `listeners.ignored` of the
/// subscribers heard the unlock, it is acquired for `next` (owner field, lease ms) in the
/// same script call: the handoff to the next local thread.
///
/// `left` is how many holds of `owner` this manager still counts after this one (0: its last).
/// A release that is not the last never frees the lock: where the server had the owner's
/// count at one (a late send of a fresh acquire set it), the count becomes `left`
/// ([`Release::Kept`]).
///
/// Idempotent: when the reply is lost (a timeout, a broken connection) the call is sent
/// once more with the same latch, and gets the first call's answer if that one ran (the
/// handoff included: it is never done twice, nor reported undone when it was done).
pub(crate) fn release(
    store: &LockStore,
    keys: &LockKeys,
    lease_ms: u64,
    owner: &str,
    listeners: Listeners,
    next: Option<(&str, u64)>,
    left: u32,
) -> Result<Release> {
    let (next_owner, next_lease_ms) = next.unwrap_or(("", 0));
    let reply = store.release_with_latch(keys, |conn, latch, previous| {
        let mut call = LOCK_SCRIPTS.release.key(&*keys.name);
        call.key(keys.channel())
            .key(latch)
            .key(keys.waiters_key())
            .key(previous);
        call.arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
            .arg(owner)
            .arg(store.publish_command())
            .arg(store.latch_ttl_ms())
            .arg(listeners.ignored)
            .arg(next_owner)
            .arg(next_lease_ms)
            .arg(u64::from(listeners.own))
            .arg(store.numsub_command())
            .arg(left);
        call.invoke::<Option<i64>>(conn)
    })?;
    Ok(Release::from_reply(reply))
}

/// Takes `owner`'s registration as a waiter with `number` out of the lock's waiters
/// (see `STOP_WAITING`): `true` when a release had granted it the lock meanwhile, which
/// it then holds with a lease of `lease_ms` from now.
pub(crate) fn stop_waiting(
    store: &LockStore,
    keys: &LockKeys,
    owner: &str,
    number: u64,
    lease_ms: u64,
) -> Result<bool> {
    let mut call = LOCK_SCRIPTS.stop_waiting.key(&*keys.name);
    call.key(keys.waiters_key())
        .arg(owner)
        .arg(number)
        .arg(lease_ms);
    let granted: i64 = store.run(Op::StopWaiting, &keys.name, 1, |conn| call.invoke(conn))?;
    Ok(granted == 1)
}

/// Renews every `(lock key, owner field)` of `batch` to `timeout_ms`: 100 keys per script
/// call, and all calls for one master in one pipeline (one round trip per master). Returns,
/// per entry, whether the hold was still there (`None` where its master did not answer).
///
/// The whole call (waiting for a connection, connecting, the reply) takes at most
/// `budget`, so that a stalled server cannot hold the watchdog past the leases it renews.
pub(crate) fn renew(
    store: &LockStore,
    batch: &[(&str, &str)],
    timeout_ms: u64,
    budget: Duration,
) -> Vec<Option<bool>> {
    store.renew_owned(batch, timeout_ms, budget, &LOCK_SCRIPTS.renew)
}

/// Deletes the lock whoever holds it and announces the release where the waiters of its
/// kind listen (`FORCE_UNLOCK`). `true` if there was one.
pub(crate) fn force_unlock(store: &LockStore, keys: &LockKeys) -> Result<bool> {
    let deleted: i64 = store.run(Op::ForceUnlock, &keys.name, 1, |conn| {
        LOCK_SCRIPTS
            .force_unlock
            .key(&*keys.name)
            .key(keys.channel())
            .key(keys.queue_key())
            .key(keys.queue_timeout_key())
            .key(keys.rwlock_channel())
            .arg(UNLOCK_MESSAGE)
            .arg(store.publish_command())
            .arg(epoch_ms())
            .invoke(conn)
    })?;
    Ok(deleted == 1)
}

/// Whether anyone holds the lock, and how many holds `owner` has. A key of another type,
/// or a hash of somebody's data, is [`Error::WrongType`], not "locked" (`INSPECT`).
fn inspect(store: &LockStore, operation: Op, keys: &LockKeys, owner: &str) -> Result<(bool, u32)> {
    let (held, holds): (i64, i64) = store.run(operation, &keys.name, 1, |conn| {
        LOCK_SCRIPTS
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
pub(crate) fn is_locked(store: &LockStore, keys: &LockKeys) -> Result<bool> {
    Ok(inspect(store, Op::IsLocked, keys, "")?.0)
}

/// How many holds `owner` has (0 when none).
pub(crate) fn hold_count(store: &LockStore, keys: &LockKeys, owner: &str) -> Result<u32> {
    Ok(inspect(store, Op::HoldCount, keys, owner)?.1)
}

/// Whether `owner` holds the lock.
pub(crate) fn is_held_by(store: &LockStore, keys: &LockKeys, owner: &str) -> Result<bool> {
    Ok(inspect(store, Op::IsHeldBy, keys, owner)?.1 > 0)
}

/// The lock's remaining lease; `None` when it is not held or has no expiry.
pub(crate) fn remaining_ttl(store: &LockStore, keys: &LockKeys) -> Result<Option<Duration>> {
    remaining_ttl_of_type(store, keys, "hash")
}

/// The remaining lease of the key `keys.name`, which must be missing or of Redis type
/// `key_type` (else `WrongType`); `None` when it is missing or has no expiry. One round trip.
pub(crate) fn remaining_ttl_of_type(
    store: &LockStore,
    keys: &LockKeys,
    key_type: &str,
) -> Result<Option<Duration>> {
    let (kind, pttl): (String, i64) = store.run(Op::RemainingTtl, &keys.name, 2, |conn| {
        redis::pipe()
            .cmd("TYPE")
            .arg(&*keys.name)
            .cmd("PTTL")
            .arg(&*keys.name)
            .query(conn)
    })?;
    if kind != key_type && kind != "none" {
        return Err(Error::WrongType {
            name: keys.name.to_string(),
        });
    }
    Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
}

/// The wall clock in epoch ms, against which a fair lock's queue timeouts are kept (Redisson
/// takes them from each client's clock).
fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
