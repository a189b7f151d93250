//! [`CountDownLatch`]: Redisson's `RCountDownLatch`, a count that threads and processes
//! wait on until it reaches zero.
//!
//! On the wire (docs/design/wire-format.md, "Semaphore (RSemaphore)"): the key is the name
//! itself and holds the count as a decimal string, with no TTL; the key is deleted when the
//! count reaches zero, so "no key" and "zero" are the same. On
//! `redisson_countdownlatch__channel__{name}` (always braces), `0` announces that the count
//! reached zero and `1` that a new count was set. The scripts below are this crate's own,
//! with the effects of Redisson's.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::engine::options::WaitOptions;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kinds::counting::{deadline_after, wait_on_channel};
use crate::names::{check_name, count_down_latch_channel, shown};
use crate::store::scripts::Script;
use crate::store::Op;

/// Published when the count reaches zero: every waiter may go (Redisson's message).
const ZERO_MESSAGE: &str = "0";
/// Published when a new count is set: the latch is closed again (Redisson's message).
const NEW_COUNT_MESSAGE: &str = "1";

/// `KEYS[1]` the latch, `KEYS[2]` its channel. `ARGV[1]` the count, `ARGV[2]` the message
/// announcing a new count (`1`), `ARGV[3]` publish command. When the latch does not exist
/// (its count is zero), sets it to `ARGV[1]`, announces `ARGV[2]`, replies 1; an existing
/// count is left as it is, reply 0. A key of another type is refused with WRONGTYPE (*ours*:
/// Redisson would report "exists"). A refused publish does not undo the set.
pub const COUNT_DOWN_LATCH_TRY_SET_COUNT: &str = r#"
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'string' then
    return 0
elseif kind ~= 'none' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a count-down latch')
end
redis.call('set', KEYS[1], ARGV[1])
redis.pcall(ARGV[3], KEYS[2], ARGV[2])
return 1
"#;

/// `KEYS[1]` the latch, `KEYS[2]` its channel. `ARGV[1]` the message announcing zero (`0`),
/// `ARGV[2]` publish command. Takes one off the count; when that leaves nothing, deletes the
/// key, and when it reached exactly zero, announces `ARGV[1]`. Replies the count left. A
/// latch that does not exist stays so, without a message (DECR makes it -1, deleted at
/// once). A key that is not a string of an integer is refused with WRONGTYPE, unchanged.
pub const COUNT_DOWN_LATCH_COUNT_DOWN: &str = r#"
local left = redis.pcall('decr', KEYS[1])
if type(left) == 'table' then
    return redis.error_reply('WRONGTYPE the key is not a count-down latch (' .. tostring(left.err) .. ')')
end
if left > 0 then
    return left
end
redis.call('del', KEYS[1])
if left == 0 then
    redis.pcall(ARGV[2], KEYS[2], ARGV[1])
end
return 0
"#;

static TRY_SET_COUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(COUNT_DOWN_LATCH_TRY_SET_COUNT));
static COUNT_DOWN: LazyLock<Script> = LazyLock::new(|| Script::new(COUNT_DOWN_LATCH_COUNT_DOWN));

/// A handle on one named count-down latch: a count in Redis that any thread, process or Redisson
/// client may count down, and that waiters wait on until it reaches zero. Cheap to create
/// ([`LockManager::get_count_down_latch`](crate::LockManager::get_count_down_latch) does no I/O)
/// and to clone; it keeps its manager alive.
///
/// It behaves as Redisson's `RCountDownLatch`: [`try_set_count`](Self::try_set_count) arms it
/// (only while its count is zero), [`count_down`](Self::count_down) takes one off,
/// [`wait`](Self::wait) returns once the count is zero (as `std::sync::Condvar`: `wait` without
/// limit, [`wait_timeout`](Self::wait_timeout) bounded). Unlike
/// `java.util.concurrent.CountDownLatch` it can be armed again after it opened.
///
/// A count of zero is stored as no key at all: a latch that was never set, one that opened,
/// and one whose key was lost (a Redis restart without persistence, a `DEL`) all look open.
/// Waiters then return `true`, as Redisson's do.
///
/// ```no_run
/// use std::time::Duration;
/// # let manager = redis_rlock::LockManager::new("redis://127.0.0.1/")?;
/// let ready = manager.get_count_down_latch("batch:42:ready");
/// ready.try_set_count(3)?;
/// // ... three workers, anywhere, each call `ready.count_down()` when done ...
/// if ready.wait_timeout(Duration::from_secs(60))? {
///     // all three are done
/// }
/// # Ok::<(), redis_rlock::Error>(())
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    engine: Arc<Engine>,
    name: Arc<str>,
}

impl CountDownLatch {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        CountDownLatch {
            engine,
            name: Arc::from(name),
        }
    }

    /// The latch's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the count to `count` if it is zero (the latch is open or was never set); `true`
    /// if it was set. A latch still counting keeps its count (`false`).
    ///
    /// `count` is at least 1 (a count of zero is an open latch: there is nothing to set) and
    /// at most `i64::MAX` (Redis' integers); other values are an [`Error::InvalidArgument`].
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        let engine = self.engine()?;
        if count == 0 || count > i64::MAX as u64 {
            return Err(Error::invalid(
                "count",
                format!("{count}: a latch's count is between 1 and {}", i64::MAX),
            ));
        }
        let store = engine.store();
        let set: i64 = store.invoke(
            Op::LatchTrySetCount,
            &self.name,
            TRY_SET_COUNT
                .key(&*self.name)
                .key(self.channel())
                .arg(count)
                .arg(NEW_COUNT_MESSAGE)
                .arg(store.publish_command()),
        )?;
        Ok(set == 1)
    }

    /// Takes one off the count; when it reaches zero, every waiter (in any process) is woken.
    /// On a latch whose count is already zero it does nothing.
    ///
    /// When the reply is lost (a timeout, a broken connection) the count may or may not have
    /// gone down: the call is not repeated, since counting down twice would open the latch
    /// early.
    pub fn count_down(&self) -> Result<()> {
        let engine = self.engine()?;
        let store = engine.store();
        let _left: i64 = store.invoke(
            Op::LatchCountDown,
            &self.name,
            COUNT_DOWN
                .key(&*self.name)
                .key(self.channel())
                .arg(ZERO_MESSAGE)
                .arg(store.publish_command()),
        )?;
        Ok(())
    }

    /// The count right now (0 when the latch is open or was never set).
    pub fn count(&self) -> Result<u64> {
        let engine = self.engine()?;
        self.read_count(engine)
    }

    /// Waits as long as it takes for the count to reach zero (Redisson's `await()`). Ends
    /// early only with an error, or with [`Error::Shutdown`] when the manager is shut down;
    /// [`wait_with`](Self::wait_with) also takes a [`CancelToken`](crate::CancelToken).
    ///
    /// The thread sleeps until the count-reached-zero message, looking again once a second.
    /// Redis unreachable is an error (after riding out one connect timeout once waiting).
    pub fn wait(&self) -> Result<()> {
        let engine = self.engine()?;
        self.wait_until(engine, None, None).map(drop)
    }

    /// Waits until the count is zero, for at most `timeout` (`Duration::ZERO`: one look);
    /// `true` if it is zero, `false` when the wait passed first (Redisson's
    /// `await(timeout, unit)`). Returns at most one response timeout after `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        let engine = self.engine()?;
        let deadline = deadline_after(timeout)?;
        self.wait_until(engine, Some(deadline), None)
    }

    /// Waits as `options` say: for its wait limit (none: as long as it takes), unless its
    /// [`CancelToken`](crate::CancelToken) is cancelled or the manager shut down first
    /// ([`Error::Cancelled`], [`Error::Shutdown`]). `true` once the count is zero, `false`
    /// when the wait passed first.
    ///
    /// ```no_run
    /// use redis_rlock::{CancelToken, LockManager, WaitOptions};
    /// # let manager = LockManager::new("redis://127.0.0.1/")?;
    /// let token = CancelToken::new();
    /// let ready = manager.get_count_down_latch("batch:42:ready");
    /// // `token.cancel()` from another thread ends the wait with `Error::Cancelled`.
    /// match ready.wait_with(WaitOptions::new().cancel_token(&token)) {
    ///     Ok(_) => println!("all done"),
    ///     Err(err) if err.is_cancelled() => println!("no longer waiting"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn wait_with(&self, options: WaitOptions) -> Result<bool> {
        let engine = self.engine()?;
        let deadline = options.deadline()?;
        self.wait_until(engine, deadline, options.get_cancel_token())
    }

    fn wait_until(
        &self,
        engine: &Engine,
        deadline: Option<std::time::Instant>,
        token: Option<&crate::CancelToken>,
    ) -> Result<bool> {
        let stop = engine.stop(&self.name, token);
        wait_on_channel(engine, &self.name, &self.channel(), deadline, &stop, || {
            Ok(self.read_count(engine)? == 0)
        })
    }

    fn read_count(&self, engine: &Engine) -> Result<u64> {
        let budget = engine.config().response_timeout;
        let value: Option<String> =
            engine
                .store()
                .run_within(Op::LatchCount, &self.name, 1, budget, |conn| {
                    redis::cmd("GET").arg(&*self.name).query(conn)
                })?;
        let Some(value) = value else {
            return Ok(0);
        };
        let count: i64 = value.parse().map_err(|_| Error::WrongType {
            name: self.name.to_string(),
        })?;
        // Never below zero through these scripts or Redisson's; a foreign writer's negative
        // count opens the latch, as it does for Redisson's waiters.
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn channel(&self) -> String {
        count_down_latch_channel(&self.name)
    }

    /// The manager's engine, refused in a child made by `fork()`; then the name is checked.
    fn engine(&self) -> Result<&Engine> {
        let engine = &self.engine;
        engine.check_process()?;
        check_name(&self.name)?;
        if engine.store().topology().capabilities().routes_by_slot {
            check_cluster_latch_name(&self.name)?;
        }
        Ok(engine)
    }
}

/// On a cluster, refuses a latch name whose channel hashes to another slot than its key (the
/// scripts touch both). Redisson wraps the name in braces for the channel whatever it holds,
/// so a name with a `{` usually moves the channel's hash tag away from the key's.
fn check_cluster_latch_name(name: &str) -> Result<()> {
    let channel = count_down_latch_channel(name);
    if crate::slot::of(name.as_bytes()) != crate::slot::of(channel.as_bytes()) {
        return Err(Error::InvalidName {
            reason: format!(
                "on a cluster, the count-down latch {:?} and its channel hash to different \
                 slots (Redisson's layout wraps the name in braces): use a name without `{{`",
                shown(name)
            ),
        });
    }
    Ok(())
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name())
            .finish()
    }
}
