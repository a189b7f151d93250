//! [`PermitExpirableSemaphore`]: Redisson's `RPermitExpirableSemaphore`, a semaphore whose
//! permits each have an id and, if asked, a lease after which they come back by themselves.
//!
//! On the wire (docs/design/wire-format.md, "Permit-expirable semaphore (RPermitExpirableSemaphore)"): the key is the name itself and
//! holds the number of free permits as a decimal string, as a plain semaphore's does. Every
//! acquired permit is a member of the sorted set `{name}:timeout` (Redisson's `suffixName`:
//! `name:timeout` when the name has a `{`): its id as 16 raw bytes, scored by the end of its
//! lease in epoch ms by the acquiring client's clock (`922337203685477` without a lease).
//! Every script first takes back the permits whose lease ended, so an expired permit needs no
//! release. Releases are announced on `redisson_sc:{name}` with the new number of free permits,
//! as the plain semaphore's are. The scripts below are this crate's own, with the effects of
//! Redisson's.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cancel::CancelToken;
use crate::engine::options::WaitOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::counting::{deadline_after, wait_on_channel_or_timer, Look};
use crate::kinds::semaphore::Semaphore;
use crate::names::{check_cluster_name, check_name, permit_timeout_key, semaphore_channel};
use crate::stop::Stop;
use crate::store::scripts::Script;
use crate::store::Op;

/// The score of a permit without a lease: Redisson's `nonExpirableTimeout` (about 29,000 years
/// from 1970), so that both clients read such a permit as never expiring.
const NO_EXPIRY: u64 = 922_337_203_685_477;

/// The Lua that starts every script but `try_set_permits`: takes back the permits whose lease
/// ended (`KEYS[2]` scores up to `ARGV[1]`, now in epoch ms), adds them to the free count
/// (`KEYS[1]`), and announces the new count on `KEYS[3]` with `ARGV[2]` (the publish command)
/// when it is positive. Leaves `free`, the free count, for the rest of the script. A count
/// that is not an integer is refused with WRONGTYPE, as is a key of another type (by GET or
/// ZREMRANGEBYSCORE themselves).
macro_rules! take_back_expired {
    ($rest:literal) => {
        concat!(
            r#"
local free = redis.call('get', KEYS[1])
if free ~= false and tonumber(free) == nil then
    return redis.error_reply('WRONGTYPE the key holds a string that is not a permit count')
end
free = tonumber(free or 0)
local expired = redis.call('zremrangebyscore', KEYS[2], 0, ARGV[1])
if expired > 0 then
    free = redis.call('incrby', KEYS[1], expired)
    if free > 0 then
        redis.pcall(ARGV[2], KEYS[3], free)
    end
end
"#,
            $rest
        )
    };
}

/// `KEYS[1]` the count, `KEYS[2]` the acquired permits, `KEYS[3]` the channel. `ARGV[1]` now
/// (epoch ms), `ARGV[2]` publish command, `ARGV[3]` the permit's expiry score, `ARGV[4]` its
/// id (16 bytes), `ARGV[5]` the score of "no lease". Takes one free permit under that id,
/// reply 0. None free: replies the nearest lease end in epoch ms (a leased permit comes back
/// then without a message), or -1 when every acquired permit is unleased (or none is). A
/// repeated send whose first send took the permit finds its id and replies 0, taking nothing.
/// The acquired set gets the count's TTL, if it has one (as Redisson's).
pub const PERMIT_SEMAPHORE_ACQUIRE: &str = take_back_expired!(
    r#"
if redis.call('zscore', KEYS[2], ARGV[4]) then
    return 0
end
if free >= 1 then
    redis.call('decr', KEYS[1])
    redis.call('zadd', KEYS[2], ARGV[3], ARGV[4])
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return 0
end
local nearest = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if nearest[2] and tonumber(nearest[2]) < tonumber(ARGV[5]) then
    return tonumber(nearest[2])
end
return -1
"#
);

/// `KEYS` and `ARGV[1..2]` as `PERMIT_SEMAPHORE_ACQUIRE`; `ARGV[3]` the permit's id. Gives the
/// permit back (one more free, announced), reply 1; an id not acquired (never, released
/// already, or its lease ended: then it was just taken back) changes nothing, reply 0.
pub const PERMIT_SEMAPHORE_RELEASE: &str = take_back_expired!(
    r#"
if redis.call('zrem', KEYS[2], ARGV[3]) == 0 then
    return 0
end
local now = redis.call('incrby', KEYS[1], 1)
redis.pcall(ARGV[2], KEYS[3], now)
return 1
"#
);

/// `KEYS` and `ARGV[1..2]` as `PERMIT_SEMAPHORE_ACQUIRE`; `ARGV[3]` the permit's id, `ARGV[4]`
/// its new expiry score. Replies 1 when the permit is acquired (its lease is then counted from
/// now again), 0 when it is not.
pub const PERMIT_SEMAPHORE_UPDATE_LEASE: &str = take_back_expired!(
    r#"
if redis.call('zscore', KEYS[2], ARGV[3]) == false then
    return 0
end
redis.call('zadd', KEYS[2], ARGV[4], ARGV[3])
return 1
"#
);

/// `KEYS` and `ARGV[1..2]` as `PERMIT_SEMAPHORE_ACQUIRE`; `ARGV[3]` the number of permits in
/// all (free and acquired), `ARGV[4]` a flag: `1` only when the semaphore does not exist
/// (Redisson's `trySetPermits`), `0` always (`setPermits`: the free count moves by the
/// difference). Announces the new free count when positive. Replies 1 when set, 0 when the
/// flag found it existing.
pub const PERMIT_SEMAPHORE_SET_PERMITS: &str = take_back_expired!(
    r#"
local exists = redis.call('exists', KEYS[1]) == 1
if exists and ARGV[4] == '1' then
    return 0
end
local acquired = redis.call('zcard', KEYS[2])
if not exists then
    free = 0
    acquired = 0
end
free = redis.call('incrby', KEYS[1], tonumber(ARGV[3]) - free - acquired)
if free > 0 then
    redis.pcall(ARGV[2], KEYS[3], free)
end
return 1
"#
);

/// `KEYS` and `ARGV[1..2]` as `PERMIT_SEMAPHORE_ACQUIRE`; `ARGV[3]` permits to add (negative
/// takes some away), `ARGV[4]` the largest count allowed either way. Replies the new free
/// count, announced when permits were added and some are free; nil, changing nothing, when
/// the count would leave ±`ARGV[4]` (*ours*: Redisson's clients read it as a Java `int`).
pub const PERMIT_SEMAPHORE_ADD_PERMITS: &str = take_back_expired!(
    r#"
local now = free + tonumber(ARGV[3])
if math.abs(now) > tonumber(ARGV[4]) then
    return false
end
redis.call('set', KEYS[1], now)
if tonumber(ARGV[3]) > 0 and now > 0 then
    redis.pcall(ARGV[2], KEYS[3], now)
end
return now
"#
);

/// `KEYS` and `ARGV[1..2]` as `PERMIT_SEMAPHORE_ACQUIRE`. Replies `{free, acquired}`, after
/// taking back the expired permits (so, as Redisson's `availablePermits`, a write).
pub const PERMIT_SEMAPHORE_COUNTS: &str =
    take_back_expired!("\nreturn {free, redis.call('zcard', KEYS[2])}\n");

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_SEMAPHORE_ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_SEMAPHORE_RELEASE));
static UPDATE_LEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_SEMAPHORE_UPDATE_LEASE));
static SET_PERMITS: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_SEMAPHORE_SET_PERMITS));
static ADD_PERMITS: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_SEMAPHORE_ADD_PERMITS));
static COUNTS: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_SEMAPHORE_COUNTS));

/// A handle on one named permit-expirable semaphore: Redisson's `RPermitExpirableSemaphore`.
/// Cheap to create (the manager's [`get_permit_expirable_semaphore`] does no I/O) and to clone;
/// it keeps its manager alive.
///
/// Unlike a [`Semaphore`], every permit taken has an **id** (32 hex characters, returned by
/// [`acquire`](Self::acquire)) that releases exactly that permit, and may have a **lease**:
/// a permit whose lease ended is free again without a release, so permits held by a process
/// that died come back. Leases are counted on the acquiring client's clock (epoch ms, as
/// Redisson's are), so clients whose clocks disagree see a permit expire at different times.
///
/// ```no_run
/// use std::time::Duration;
/// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
/// let slots = manager.get_permit_expirable_semaphore("render:slots");
/// slots.try_set_permits(4)?;
/// // At most 4 renders at once; a render whose process dies frees its slot within 60 s.
/// let id = slots.acquire(Some(Duration::from_secs(60)))?;
/// // ... a long step: keep the slot for another 60 s from now ...
/// assert!(slots.update_lease_time(&id, Duration::from_secs(60))?);
/// slots.release(&id)?;
/// # Ok::<(), redis_rlock::Error>(())
/// ```
///
/// [`get_permit_expirable_semaphore`]: crate::LockManager::get_permit_expirable_semaphore
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    engine: Arc<Engine>,
    name: Arc<str>,
}

/// One acquired permit of a [`PermitExpirableSemaphore`], as
/// [`PermitExpirableSemaphore::acquired_permit_leases`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquiredPermit {
    /// The permit's id, 32 hex characters.
    pub id: String,
    /// When its lease ends, by the acquiring client's clock; `None` without a lease.
    pub expires_at: Option<SystemTime>,
}

impl PermitExpirableSemaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        PermitExpirableSemaphore {
            engine,
            name: Arc::from(name),
        }
    }

    /// The semaphore's name, which is also the Redis key of its free count.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the semaphore with `permits` free permits if it does not exist; `true` if it
    /// was created, `false` (nothing changed) if it existed.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.set(permits, true)
    }

    /// Makes `permits` the number of permits in all, free and acquired: the free count moves
    /// by the difference (and may go below zero while more are acquired than that, until
    /// enough are released). Creates the semaphore when it does not exist.
    pub fn set_permits(&self, permits: u32) -> Result<()> {
        self.set(permits, false).map(drop)
    }

    /// Adds `permits` free permits, or takes `-permits` away (the count may go below zero);
    /// waiters are woken when permits were added. Zero, or a change that would take the free
    /// count past ±[`Semaphore::MAX_PERMITS`], is an [`Error::InvalidArgument`] (nothing is
    /// changed). A lost reply is not sent again: adding twice would create permits.
    pub fn add_permits(&self, permits: i32) -> Result<()> {
        let engine = self.engine()?;
        if permits == 0 {
            return Err(Error::invalid(
                "permits",
                "0 permits: add or remove at least 1",
            ));
        }
        let now: Option<i64> = self.invoke(
            engine,
            Op::PermitSemaphoreAddPermits,
            &ADD_PERMITS,
            |call| {
                call.arg(permits).arg(Semaphore::MAX_PERMITS);
            },
        )?;
        now.map(drop).ok_or_else(|| {
            Error::invalid(
                "permits",
                format!(
                    "adding {permits} would take {:?} past ±{} free permits (Redisson's \
                     limit); nothing was changed",
                    self.name,
                    Semaphore::MAX_PERMITS
                ),
            )
        })
    }

    /// Takes one permit, waiting as long as it takes, and returns its id. With a `lease`, the
    /// permit is free again that long after it was taken unless released first (at least 1
    /// ms, at most 100 years); without, it stays acquired until released.
    ///
    /// A waiter sleeps until a release is announced or the nearest lease of an acquired
    /// permit ends, looking again once a second at the latest.
    pub fn acquire(&self, lease: Option<Duration>) -> Result<String> {
        self.acquire_by(lease, None, None)
            .map(|id| id.expect("waits without limit"))
    }

    /// Takes one permit if one becomes free within `wait` (`Duration::ZERO`: one attempt) and
    /// returns its id; `None` when the wait passed. `lease` as in [`acquire`](Self::acquire).
    pub fn try_acquire(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<String>> {
        self.engine()?;
        let deadline = deadline_after(wait)?;
        self.acquire_by(lease, Some(deadline), None)
    }

    /// Takes one permit as `options` say and returns its id: within its wait limit (none: as
    /// long as it takes; `Duration::ZERO`: one attempt), unless its
    /// [`CancelToken`](crate::CancelToken) is cancelled or the manager shut down first
    /// ([`Error::Cancelled`], [`Error::Shutdown`]; a permit taken as the stop came is given
    /// back). `None` when the wait passed. `lease` as in [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_rlock::{CancelToken, LockManager, WaitOptions};
    /// # let manager = LockManager::new("redis://127.0.0.1/")?;
    /// let token = CancelToken::new();
    /// let slots = manager.get_permit_expirable_semaphore("render:slots");
    /// // `token.cancel()` from another thread ends the wait with `Error::Cancelled`.
    /// let options = WaitOptions::new().cancel_token(&token);
    /// if let Some(id) = slots.acquire_with(Some(Duration::from_secs(60)), options)? {
    ///     // ... render ...
    ///     slots.release(&id)?;
    /// }
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn acquire_with(
        &self,
        lease: Option<Duration>,
        options: WaitOptions,
    ) -> Result<Option<String>> {
        self.engine()?;
        let deadline = options.deadline()?;
        self.acquire_by(lease, deadline, options.get_cancel_token())
    }

    /// Gives back the permit `id`. An id that is not acquired (never was, was released, or
    /// its lease ended) is [`Error::PermitNotHeld`] ([`Error::is_not_held`]), as Redisson's
    /// `release` throws; an id that is not 32 hex characters is [`Error::InvalidArgument`].
    pub fn release(&self, id: &str) -> Result<()> {
        if self.try_release(id)? {
            return Ok(());
        }
        Err(Error::PermitNotHeld {
            name: self.name.to_string(),
            id: id.to_owned(),
        })
    }

    /// Gives back the permit `id`; `false` when it was not acquired (see
    /// [`release`](Self::release)). A lost reply is not sent again.
    pub fn try_release(&self, id: &str) -> Result<bool> {
        let engine = self.engine()?;
        let raw = parse_id(id)?;
        let released: i64 = self.invoke(engine, Op::PermitSemaphoreRelease, &RELEASE, |call| {
            call.arg(&raw[..]);
        })?;
        Ok(released == 1)
    }

    /// Sets the lease of the acquired permit `id` to `lease` from now; `false` when it is not
    /// acquired (its lease may have ended already).
    pub fn update_lease_time(&self, id: &str, lease: Duration) -> Result<bool> {
        let engine = self.engine()?;
        let raw = parse_id(id)?;
        let lease_ms = crate::limits::to_millis("lease", lease)?;
        let updated: i64 = self.invoke(
            engine,
            Op::PermitSemaphoreUpdateLease,
            &UPDATE_LEASE,
            |call| {
                call.arg(&raw[..]).arg(now_ms() + lease_ms);
            },
        )?;
        Ok(updated == 1)
    }

    /// How many permits are free (expired ones taken back first; 0 when the semaphore does not
    /// exist, or when the count is below zero).
    pub fn available_permits(&self) -> Result<u64> {
        Ok(u64::try_from(self.counts()?.0).unwrap_or(0))
    }

    /// How many permits are acquired and not expired.
    pub fn acquired_permits(&self) -> Result<u64> {
        Ok(self.counts()?.1)
    }

    /// The acquired permits with the end of their lease, soonest first, as stored: read only,
    /// so permits whose lease ended and that no script took back yet are listed too.
    pub fn acquired_permit_leases(&self) -> Result<Vec<AcquiredPermit>> {
        let engine = self.engine()?;
        let key = permit_timeout_key(&self.name);
        let budget = engine.config().response_timeout;
        let members: Vec<(Vec<u8>, u64)> = engine.store().run_within(
            Op::PermitSemaphoreLeases,
            &self.name,
            1,
            budget,
            |conn| {
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(conn)
            },
        )?;
        Ok(members
            .into_iter()
            .map(|(id, score)| AcquiredPermit {
                id: hex(&id),
                expires_at: (score < NO_EXPIRY).then(|| UNIX_EPOCH + Duration::from_millis(score)),
            })
            .collect())
    }

    fn set(&self, permits: u32, only_if_absent: bool) -> Result<bool> {
        let engine = self.engine()?;
        check_count(permits)?;
        let set: i64 = self.invoke(
            engine,
            Op::PermitSemaphoreSetPermits,
            &SET_PERMITS,
            |call| {
                call.arg(permits)
                    .arg(if only_if_absent { "1" } else { "0" });
            },
        )?;
        Ok(set == 1)
    }

    fn counts(&self) -> Result<(i64, u64)> {
        let engine = self.engine()?;
        self.invoke(engine, Op::PermitSemaphoreCounts, &COUNTS, |_| {})
    }

    /// Waits (until `deadline`; `None`: no limit; ended by `token` or the shutdown) for one
    /// permit, under one id for the whole wait: an attempt sent again after a lost reply finds
    /// the id it took and takes nothing more. A stopped call takes nothing: a permit taken as
    /// the stop came is given back.
    fn acquire_by(
        &self,
        lease: Option<Duration>,
        deadline: Option<Instant>,
        token: Option<&CancelToken>,
    ) -> Result<Option<String>> {
        let engine = self.engine()?;
        let lease_ms = lease
            .map(|lease| crate::limits::to_millis("lease", lease))
            .transpose()?;
        let raw = *uuid::Uuid::new_v4().as_bytes();
        let stop = engine.stop(&self.name, token);
        let taken = self.take(engine, &raw, lease_ms, deadline, &stop)?;
        if let Err(err) = stop.check() {
            if taken {
                self.give_back_stopped(&raw);
            }
            return Err(err);
        }
        Ok(taken.then(|| hex(&raw)))
    }

    /// The acquire script under the id `raw` until it takes a permit, the deadline or the stop.
    fn take(
        &self,
        engine: &Engine,
        raw: &[u8; 16],
        lease_ms: Option<u64>,
        deadline: Option<Instant>,
        stop: &Stop,
    ) -> Result<bool> {
        let channel = self.channel();
        wait_on_channel_or_timer(engine, &self.name, &channel, deadline, stop, || {
            let expiry = lease_ms.map_or(NO_EXPIRY, |ms| now_ms() + ms);
            let reply: i64 = self.invoke(engine, Op::PermitSemaphoreAcquire, &ACQUIRE, |call| {
                call.arg(expiry).arg(&raw[..]).arg(NO_EXPIRY);
            })?;
            Ok(match u64::try_from(reply) {
                Ok(0) => Look::Got,
                // The nearest lease ends then: look again 1 ms after (scores are inclusive).
                Ok(at) => Look::Wait(Some(Duration::from_millis(
                    at.saturating_sub(now_ms()).saturating_add(1),
                ))),
                Err(_) => Look::Wait(None),
            })
        })
    }

    /// Releases the permit `raw` that a stopped wait took as the stop came (only logged when
    /// that fails: the call reports its stop, and a leased permit comes back by itself).
    fn give_back_stopped(&self, raw: &[u8; 16]) {
        let id = hex(raw);
        if let Err(err) = self.try_release(&id) {
            log::warn!(
                "permit-expirable semaphore {:?}: giving back permit {id}, taken as the wait \
                 was stopped, failed: {err}",
                self.name
            );
        }
    }

    /// Runs `script` (one of this file's) with the keys and `ARGV[1..2]` that every one of
    /// them takes, then the arguments `more` adds.
    fn invoke<T: redis::FromRedisValue>(
        &self,
        engine: &Engine,
        operation: Op,
        script: &Script,
        more: impl FnOnce(&mut crate::store::scripts::ScriptInvocation<'_>),
    ) -> Result<T> {
        let store = engine.store();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&*self.name)
            .key(permit_timeout_key(&self.name))
            .key(self.channel())
            .arg(now_ms())
            .arg(store.publish_command());
        more(&mut invocation);
        store.invoke(operation, &self.name, &invocation)
    }

    fn channel(&self) -> String {
        semaphore_channel(&self.name)
    }

    /// The manager's engine, refused in a child made by `fork()`; then the name is checked
    /// (on a cluster also that its three keys share a slot).
    fn engine(&self) -> Result<&Engine> {
        let engine = &self.engine;
        engine.check_process()?;
        check_name(&self.name)?;
        if engine.store().topology().capabilities().routes_by_slot {
            check_cluster_name(&self.name)?;
        }
        Ok(engine)
    }
}

/// Refuses a count that a Redisson client could not read.
fn check_count(permits: u32) -> Result<()> {
    if permits > Semaphore::MAX_PERMITS {
        return Err(Error::invalid(
            "permits",
            format!(
                "{permits} is more than {}, the most a semaphore holds (Redisson counts \
                 permits in a Java int)",
                Semaphore::MAX_PERMITS
            ),
        ));
    }
    Ok(())
}

/// Now, in ms since the epoch by this machine's clock: what Redisson scores leases by.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// A permit id's 16 bytes as Redisson shows them: 32 lowercase hex characters.
fn hex(raw: &[u8]) -> String {
    raw.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The 16 bytes of a permit id given as 32 hex characters (either case).
fn parse_id(id: &str) -> Result<[u8; 16]> {
    let refused = || {
        Error::invalid(
            "permit id",
            format!(
                "{:?} is not a permit id (32 hex characters)",
                crate::names::shown(id)
            ),
        )
    };
    if id.len() != 32 || !id.is_ascii() {
        return Err(refused());
    }
    let mut raw = [0u8; 16];
    for (i, byte) in raw.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).map_err(|_| refused())?;
    }
    Ok(raw)
}

impl fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitExpirableSemaphore")
            .field("name", &self.name())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex() {
        let raw = [
            0u8, 1, 0x7f, 0x80, 0xff, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xab, 0xcd,
        ];
        let shown = hex(&raw);
        assert_eq!(shown, "00017f80ff02030405060708090aabcd");
        assert_eq!(parse_id(&shown).unwrap(), raw);
        assert_eq!(parse_id(&shown.to_uppercase()).unwrap(), raw);
        for bad in [
            "",
            "00",
            &format!("{shown}00"),
            &shown.replace('0', "g"),
            "é".repeat(16).as_str(),
        ] {
            assert!(parse_id(bad).unwrap_err().is_invalid_argument(), "{bad}");
        }
    }
}
