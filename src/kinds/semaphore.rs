//! [`Semaphore`]: Redisson's `RSemaphore`, a counted set of permits shared by every client,
//! and [`SemaphorePermits`], permits that go back when dropped.
//!
//! On the wire (docs/design/wire-format.md, "Semaphore (RSemaphore)"): the key is the name
//! itself and holds the number of free permits as a decimal string, with no TTL. Every
//! change that adds permits publishes the new number of free permits on `redisson_sc:{name}`
//! (brace rule), and a waiter of Redisson's, or of this crate's, wakes up to that many
//! waiters. The scripts below are this crate's own, with the effects of Redisson's.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use crate::attempt_id::AttemptId;
use crate::cancel::CancelToken;
use crate::engine::options::WaitOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::counting::{deadline_after, wait_on_channel};
use crate::names::{attempt_marker, check_name, semaphore_channel};
use crate::stop::Stop;
use crate::store::scripts::{attempt_script, Script};
use crate::store::Op;

/// `KEYS[1]` the semaphore, `KEYS[2]` its channel. `ARGV[1]` permits, `ARGV[2]` publish
/// command. Only a semaphore that does not exist gets its permits: sets the key to `ARGV[1]`,
/// announces that count on the channel (waiters for a semaphore that was missing look
/// again), replies 1. An existing semaphore is left as it is, reply 0. A key of another
/// type is refused with WRONGTYPE. The publish cannot undo the set: a refused publish (an
/// ACL without channel rights) only means nobody heard it.
pub const SEMAPHORE_TRY_SET_PERMITS: &str = r#"
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
    return 0
elseif kind ~= 'none' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a semaphore')
end
redis.call('set', KEYS[1], ARGV[1])
redis.pcall(ARGV[2], KEYS[2], ARGV[1])
return 1
"#;

/// `KEYS[1]` the semaphore, `KEYS[2]` the calling thread's attempt marker
/// (`redis_rlock__attempt:{name}:<client id>:<thread>`). `ARGV[1]` permits wanted, `ARGV[2]`
/// attempt id, `ARGV[3]` marker TTL ms. Takes them when at least that many are free (the
/// count goes down by `ARGV[1]`), reply 1; otherwise, or when the semaphore does not exist,
/// changes nothing, reply 0. A value that is not a number is refused with WRONGTYPE (so is a
/// key of another type, by GET itself). A repeated send of one attempt whose first send took
/// the permits replies 1 and takes nothing more (see `ACQUIRE`).
pub const SEMAPHORE_TRY_ACQUIRE: &str = attempt_script!(
    marker = 2,
    id = 2,
    ttl = 3,
    held = "true",
    replay = "return 1",
    r#"
local free = redis.call('get', KEYS[1])
if free == false then
    return 0
end
free = tonumber(free)
if free == nil then
    return redis.error_reply('WRONGTYPE the key holds a string that is not a permit count')
end
local wanted = tonumber(ARGV[1])
if free < wanted then
    return 0
end
redis.call('decrby', KEYS[1], wanted)
taken()
return 1
"#
);

/// `KEYS[1]` the semaphore, `KEYS[2]` its channel. `ARGV[1]` permits given back, `ARGV[2]`
/// publish command, `ARGV[3]` the most permits the semaphore may hold. Adds the permits (a
/// missing semaphore is created with them), publishes the new count of free permits, and
/// replies it. A release that would take the count past `ARGV[3]` changes nothing and
/// replies nil (*ours*: Redisson would let it grow beyond what its own clients can read).
pub const SEMAPHORE_RELEASE: &str = r#"
local free = redis.call('get', KEYS[1])
if free == false then
    free = 0
else
    free = tonumber(free)
    if free == nil then
        return redis.error_reply('WRONGTYPE the key holds a string that is not a permit count')
    end
end
if free + tonumber(ARGV[1]) > tonumber(ARGV[3]) then
    return false
end
local now = redis.call('incrby', KEYS[1], ARGV[1])
redis.pcall(ARGV[2], KEYS[2], now)
return now
"#;

static TRY_SET_PERMITS: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_TRY_SET_PERMITS));
static TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_TRY_ACQUIRE));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_RELEASE));

/// `KEYS[1]` the semaphore, `KEYS[2]` its channel. `ARGV[1]` permits to add (negative takes
/// some away), `ARGV[2]` publish command, `ARGV[3]` the largest count allowed either way.
/// Adds them (a missing semaphore counts as 0), announces the new count when permits were
/// added and some are free (Redisson's `addPermits` announces it always; a count of zero or
/// less wakes nobody), replies the new count. A count that would leave ±`ARGV[3]` changes
/// nothing, reply nil (*ours*, as `SEMAPHORE_RELEASE`).
pub const SEMAPHORE_ADD_PERMITS: &str = r#"
local free = redis.call('get', KEYS[1])
if free == false then
    free = 0
else
    free = tonumber(free)
    if free == nil then
        return redis.error_reply('WRONGTYPE the key holds a string that is not a permit count')
    end
end
local now = free + tonumber(ARGV[1])
if math.abs(now) > tonumber(ARGV[3]) then
    return false
end
redis.call('set', KEYS[1], now)
if tonumber(ARGV[1]) > 0 and now > 0 then
    redis.pcall(ARGV[2], KEYS[2], now)
end
return now
"#;

/// `KEYS[1]` the semaphore. Takes every free permit: sets a positive count to 0 and replies
/// it; an absent semaphore, or a count of zero or less, is left as it is, reply 0 (*ours*:
/// Redisson would set a negative count to 0, creating permits). A value that is not a number
/// is refused with WRONGTYPE.
pub const SEMAPHORE_DRAIN_PERMITS: &str = r#"
local free = redis.call('get', KEYS[1])
if free == false then
    return 0
end
free = tonumber(free)
if free == nil then
    return redis.error_reply('WRONGTYPE the key holds a string that is not a permit count')
end
if free <= 0 then
    return 0
end
redis.call('set', KEYS[1], 0)
return free
"#;

static ADD_PERMITS: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_ADD_PERMITS));
static DRAIN_PERMITS: LazyLock<Script> = LazyLock::new(|| Script::new(SEMAPHORE_DRAIN_PERMITS));

/// A handle on one named semaphore: a count of permits in Redis, shared by every thread, process
/// and Redisson client that uses the name. Cheap to create
/// ([`LockManager::get_semaphore`](crate::LockManager::get_semaphore) does no I/O) and to clone; it
/// keeps its manager alive.
///
/// It behaves as Redisson's `RSemaphore` (non-fair): [`try_set_permits`](Self::try_set_permits)
/// creates it with a number of permits, [`acquire`](Self::acquire) takes some (waiting until
/// enough are free), [`release`](Self::release) gives some back. Permits have **no owner**:
/// any thread or client may release them, also permits it never acquired, and a release can
/// raise the count above the number first set (as `java.util.concurrent.Semaphore`).
/// [`acquire_guard`](Self::acquire_guard) returns [`SemaphorePermits`] that give their
/// permits back when dropped, for the usual case of releasing what one acquired.
///
/// Permits have no lease either: permits taken by a process that dies are never given back
/// (Redisson's semaphore has the same limit; its `RPermitExpirableSemaphore` is another
/// protocol: [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore)).
///
/// Every count is at most [`MAX_PERMITS`](Semaphore::MAX_PERMITS) (a Java `int`, Redisson's
/// limit); asking for zero permits, or more than that, is an [`Error::InvalidArgument`].
///
/// ```no_run
/// use std::time::Duration;
/// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
/// let pool = manager.get_semaphore("connections:db");
/// pool.try_set_permits(10)?; // false if it existed already: the count is kept
/// {
///     let _permit = pool.acquire_guard(1)?; // waits until one is free
///     // ... use the connection; the permit goes back when `_permit` is dropped ...
/// }
/// if let Some(permits) = pool.try_acquire_guard(3, Duration::from_millis(500))? {
///     permits.release()?; // or drop it
/// }
/// # Ok::<(), redis_rlock::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    engine: Arc<Engine>,
    name: Arc<str>,
}

impl Semaphore {
    /// The most permits one call may ask for, and the most a semaphore may hold: Redisson
    /// counts permits in a Java `int`, and its clients could not read a larger count. (C has
    /// `REDIS_RLOCK_SEMAPHORE_MAX_PERMITS`; the line below keeps this one out of the header.)
    ///
    /// cbindgen:ignore
    pub const MAX_PERMITS: u32 = i32::MAX as u32;

    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        Semaphore {
            engine,
            name: Arc::from(name),
        }
    }

    /// The semaphore's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the semaphore with `permits` free permits, if it does not exist; `true` if it
    /// was created. An existing semaphore keeps its count (`false`), whatever it is. Zero is
    /// allowed: a semaphore that starts empty and is filled by releases.
    ///
    /// Waiters for a semaphore that did not exist yet (they wait, as Redisson's do) are woken.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        let engine = self.engine()?;
        check_permits(permits, true)?;
        let store = engine.store();
        let created: i64 = store.invoke(
            Op::SemaphoreTrySetPermits,
            &self.name,
            TRY_SET_PERMITS
                .key(&*self.name)
                .key(self.channel())
                .arg(permits)
                .arg(store.publish_command()),
        )?;
        Ok(created == 1)
    }

    /// Takes `permits` permits, waiting as long as it takes until that many are free at once.
    ///
    /// A semaphore that does not exist has no permits: the call waits until one is created
    /// ([`try_set_permits`](Self::try_set_permits)) or permits are released into it. Waiting
    /// costs no polling beyond one look a second: the thread sleeps until a release is
    /// announced. Redis unreachable is an error (after riding out one connect timeout once
    /// waiting, as a lock's waiter does). An attempt whose connection died under it is sent
    /// again with the same attempt id and takes its permits once; an attempt whose reply timed
    /// out is an error, and the permits may have been taken by it: they are not given back
    /// blindly, since that could create permits that were never taken.
    pub fn acquire(&self, permits: u32) -> Result<()> {
        self.acquire_by(permits, None, None).map(|_| ())
    }

    /// Takes `permits` permits if that many become free within `wait` (`Duration::ZERO`: one
    /// attempt); `false` when the wait passed. Returns at most one response timeout after
    /// `wait`.
    pub fn try_acquire(&self, permits: u32, wait: Duration) -> Result<bool> {
        let deadline = self.check_wait(wait)?;
        self.acquire_by(permits, Some(deadline), None)
    }

    /// Takes `permits` permits as `options` say: within its wait limit (none: as long as it
    /// takes; `Duration::ZERO`: one attempt), unless its [`CancelToken`](crate::CancelToken)
    /// is cancelled or the manager shut down first
    /// ([`Error::Cancelled`], [`Error::Shutdown`]; permits taken as the cancel came are given
    /// back). `false` when the wait passed.
    ///
    /// ```no_run
    /// use redis_rlock::{CancelToken, LockManager, WaitOptions};
    /// # let manager = LockManager::new("redis://127.0.0.1/")?;
    /// let token = CancelToken::new();
    /// let uploads = manager.get_semaphore("uploads");
    /// // `token.cancel()` from another thread ends the wait.
    /// if uploads.acquire_with(1, WaitOptions::new().cancel_token(&token))? {
    ///     // ... upload ...
    ///     uploads.release(1)?;
    /// }
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn acquire_with(&self, permits: u32, options: WaitOptions) -> Result<bool> {
        self.engine()?;
        let deadline = options.deadline()?;
        self.acquire_by(permits, deadline, options.get_cancel_token())
    }

    /// Like [`acquire`](Self::acquire), and the permits come back when the returned
    /// [`SemaphorePermits`] is dropped.
    pub fn acquire_guard(&self, permits: u32) -> Result<SemaphorePermits> {
        self.acquire(permits)?;
        Ok(SemaphorePermits::new(self.clone(), permits))
    }

    /// Like [`try_acquire`](Self::try_acquire), with the permits in a [`SemaphorePermits`];
    /// `None` when the wait passed.
    pub fn try_acquire_guard(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        Ok(self
            .try_acquire(permits, wait)?
            .then(|| SemaphorePermits::new(self.clone(), permits)))
    }

    /// Gives `permits` permits back, whoever took them (or none were taken: the count grows),
    /// and wakes as many waiters as there are free permits now. A semaphore that does not
    /// exist is created with `permits` (as Redisson's release does).
    ///
    /// A release that would take the count past [`MAX_PERMITS`](Self::MAX_PERMITS) changes
    /// nothing and is an [`Error::InvalidArgument`]. When the reply is lost (a timeout, a
    /// broken connection), the permits may or may not have been released: the call is not
    /// repeated, since releasing twice would create permits.
    pub fn release(&self, permits: u32) -> Result<()> {
        let engine = self.engine()?;
        check_permits(permits, false)?;
        let free = self.change_count(engine, Op::SemaphoreRelease, &RELEASE, i64::from(permits))?;
        match free {
            Some(_) => Ok(()),
            None => Err(Error::invalid(
                "permits",
                format!(
                    "releasing {permits} would take semaphore {:?} past {} permits \
                     (Redisson's limit); nothing was changed",
                    self.name,
                    Self::MAX_PERMITS
                ),
            )),
        }
    }

    /// How many permits are free right now (0 when the semaphore does not exist; also 0 when
    /// a foreign writer, such as Redisson's `reducePermits`, left the count below zero).
    pub fn available_permits(&self) -> Result<u64> {
        let engine = self.engine()?;
        let budget = engine.config().response_timeout;
        let value: Option<String> = engine.store().run_within(
            Op::SemaphoreAvailablePermits,
            &self.name,
            1,
            budget,
            |conn| redis::cmd("GET").arg(&*self.name).query(conn),
        )?;
        let Some(value) = value else {
            return Ok(0);
        };
        let count: i64 = value.parse().map_err(|_| Error::WrongType {
            name: self.name.to_string(),
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn acquire_by(
        &self,
        permits: u32,
        deadline: Option<Instant>,
        token: Option<&CancelToken>,
    ) -> Result<bool> {
        let engine = self.engine()?;
        check_permits(permits, false)?;
        let stop = engine.stop(&self.name, token);
        let acquired = self.take(engine, permits, deadline, &stop)?;
        if let Err(err) = stop.check() {
            // Stopped as the permits came: a stopped call takes nothing.
            if acquired {
                if let Err(release) = self.release(permits) {
                    log::warn!(
                        "semaphore {:?}: giving back permits taken as the wait was stopped \
                         failed: {release}",
                        self.name
                    );
                }
            }
            return Err(err);
        }
        Ok(acquired)
    }

    /// The acquire script until it takes the permits, the deadline or the stop.
    fn take(
        &self,
        engine: &Engine,
        permits: u32,
        deadline: Option<Instant>,
        stop: &Stop,
    ) -> Result<bool> {
        let store = engine.store();
        let marker = attempt_marker(&self.name, &engine.current_owner());
        let mut attempt = AttemptId::new();
        wait_on_channel(engine, &self.name, &self.channel(), deadline, stop, || {
            attempt.start();
            let taken = store.invoke::<i64>(
                Op::SemaphoreAcquire,
                &self.name,
                TRY_ACQUIRE
                    .key(&*self.name)
                    .key(&marker)
                    .arg(permits)
                    .arg(attempt.current())
                    .arg(store.latch_ttl_ms()),
            );
            attempt.ended(&taken);
            Ok(taken? == 1)
        })
    }

    fn check_wait(&self, wait: Duration) -> Result<Instant> {
        self.engine()?;
        deadline_after(wait)
    }

    /// Runs `script`, a release or an addition of `permits` (its keys the count and the
    /// channel; its arguments the permits, the publish command and the bound): the count after
    /// it, or `None` when it would pass [`MAX_PERMITS`](Self::MAX_PERMITS) and changed nothing.
    fn change_count(
        &self,
        engine: &Engine,
        operation: Op,
        script: &Script,
        permits: i64,
    ) -> Result<Option<i64>> {
        let store = engine.store();
        store.invoke(
            operation,
            &self.name,
            script
                .key(&*self.name)
                .key(self.channel())
                .arg(permits)
                .arg(store.publish_command())
                .arg(Self::MAX_PERMITS),
        )
    }

    fn channel(&self) -> String {
        semaphore_channel(&self.name)
    }

    /// The manager's engine, refused in a child made by `fork()`; then the name is checked.
    fn engine(&self) -> Result<&Engine> {
        let engine = &self.engine;
        engine.check_process()?;
        check_name(&self.name)?;
        Ok(engine)
    }
}

/// Adding and draining permits (Redisson's `addPermits` and `drainPermits`).
impl Semaphore {
    /// Adds `permits` free permits, or takes `-permits` away (the count may then go below
    /// zero, as Redisson's `reducePermits` leaves it); a missing semaphore counts as 0. When
    /// permits were added, the new count is announced and as many waiters are woken.
    ///
    /// Zero, or a change that would take the count past ±[`MAX_PERMITS`](Self::MAX_PERMITS),
    /// is an [`Error::InvalidArgument`] and changes nothing. A lost reply is not sent again
    /// (adding twice would create permits).
    pub fn add_permits(&self, permits: i32) -> Result<()> {
        let engine = self.engine()?;
        if permits == 0 {
            return Err(Error::invalid(
                "permits",
                "0 permits: add or remove at least 1",
            ));
        }
        let now = self.change_count(
            engine,
            Op::SemaphoreAddPermits,
            &ADD_PERMITS,
            i64::from(permits),
        )?;
        now.map(drop).ok_or_else(|| {
            Error::invalid(
                "permits",
                format!(
                    "adding {permits} would take semaphore {:?} past ±{} permits (Redisson's \
                     limit); nothing was changed",
                    self.name,
                    Self::MAX_PERMITS
                ),
            )
        })
    }

    /// Takes every free permit at once and returns how many that was (0 when none are free or
    /// the semaphore does not exist). Nobody is woken: nothing was given back.
    pub fn drain_permits(&self) -> Result<u64> {
        let engine = self.engine()?;
        let drained: i64 = engine.store().invoke(
            Op::SemaphoreDrainPermits,
            &self.name,
            &DRAIN_PERMITS.key(&*self.name),
        )?;
        Ok(u64::try_from(drained).unwrap_or(0))
    }
}

/// Refuses counts that mean nothing (zero, except when setting) or that a Redisson client
/// could not read.
fn check_permits(permits: u32, zero_allowed: bool) -> Result<()> {
    if permits == 0 && !zero_allowed {
        return Err(Error::invalid(
            "permits",
            "0 permits: acquire or release at least 1",
        ));
    }
    let max = Semaphore::MAX_PERMITS;
    if permits > max {
        return Err(Error::invalid(
            "permits",
            format!(
                "{permits} is more than {max}, the most a semaphore holds (Redisson counts \
                 permits in a Java int)"
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .finish()
    }
}

/// Permits taken from a [`Semaphore`], given back when dropped or
/// [`release`](Self::release)d.
///
/// Dropping releases on a best-effort basis and logs a failure with `log::warn!`; call
/// [`release`](Self::release) to see the error instead. It may be moved to another thread and
/// released there (permits have no owner). Dropped in a child made by `fork()`, it gives
/// nothing back: the permits are the parent's.
#[must_use = "the permits are released as soon as they are dropped"]
pub struct SemaphorePermits {
    semaphore: Semaphore,
    permits: u32,
    released: bool,
}

impl SemaphorePermits {
    fn new(semaphore: Semaphore, permits: u32) -> Self {
        SemaphorePermits {
            semaphore,
            permits,
            released: false,
        }
    }

    /// How many permits these are.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The semaphore they were taken from.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// Gives the permits back and reports the outcome (see [`Semaphore::release`]).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.semaphore.release(self.permits)
    }
}

impl Drop for SemaphorePermits {
    fn drop(&mut self) {
        if self.released || self.semaphore.engine.is_forked() {
            return;
        }
        if let Err(err) = self.semaphore.release(self.permits) {
            log::warn!(
                "releasing {} permits of semaphore {:?} on drop failed: {err}",
                self.permits,
                self.semaphore.name()
            );
        }
    }
}

impl fmt::Debug for SemaphorePermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermits")
            .field("name", &self.semaphore.name())
            .field("permits", &self.permits)
            .finish()
    }
}
