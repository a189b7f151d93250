//! [`RedLock`]: the Redlock algorithm over independent masters (Redisson's `RedissonRedLock`).

use std::fmt;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use parking_lot::Mutex;

use crate::cancel::CancelToken;
use crate::engine::options::{AcquireOptions, Lease};
use crate::error::{Error, Result};
use crate::kinds::lock::{Lock, LockGuard, REENTRANT};
use crate::limits::check_wait;
use crate::multi::fan_out::{self, Call};
use crate::owner::current_thread_number;
use crate::stop::Stop;
use crate::workers::Workers;

/// The pause between two rounds of attempts: short, and varied so that two clients that
/// collided do not collide again in step (the distlock page's "random delay").
const BACKOFF_MIN_MS: u64 = 10;
const BACKOFF_SPREAD_MS: u64 = 40;

/// One lock of the same name on each of N independent Redis masters, held when a majority
/// (N/2 + 1) of them is: the Redlock algorithm as described on redis.io's distributed-lock
/// page, and Redisson's `RedissonRedLock`.
///
/// Give it one [`Lock`] per master, all of the same name, each from its own
/// [`LockManager`](crate::LockManager) connected to a different server (no replication
/// between them). Two locks of one name from the same manager are refused
/// ([`Error::InvalidArgument`]): they are one lock on one server, and no round could reach a
/// quorum. Two managers connected to the same server cannot be told apart from here, and make
/// the same mistake. A string lock's `Lock` (a [`StringLock`](crate::StringLock) guard's
/// [`LockGuard::lock`]) is refused too: a round takes Redisson's hash lock, not redis-py's
/// format.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_rlock::{LockManager, RedLock};
///
/// # fn main() -> redis_rlock::Result<()> {
/// let masters = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
/// let managers = masters
///     .iter()
///     .map(|url| LockManager::new(url))
///     .collect::<redis_rlock::Result<Vec<_>>>()?;
/// let redlock = RedLock::new(managers.iter().map(|m| m.get_lock("orders:42")).collect());
/// if let Some(guard) = redlock.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(10))? {
///     // Held on at least 2 of the 3 masters, for `guard.validity()` at least.
///     println!("valid for {:?}", guard.validity());
///     guard.unlock()?;
/// }
/// # Ok(())
/// # }
/// ```
///
/// # How it acquires
///
/// An acquisition runs in **rounds**. In a round every master is tried **at the same time**
/// (see below), with a single attempt (`try_lock(Duration::ZERO)`,
/// no waiting on pub/sub), so a round lasts about one round trip to the slowest master (a
/// master that does not answer holds it up to its manager's response timeout). The round wins
/// when at least N/2 + 1 masters granted the lock and the *validity* left is positive:
///
/// validity = lease − time the round took − clock drift, with drift = lease × 1 % + 2 ms.
///
/// For a watchdog lease the lease counted is the smallest confirmed lease left
/// ([`LockGuard::remaining_lease`]) among the holds won, which already has the round's time
/// taken off. A round that loses releases the lock on **every** master, including those
/// whose attempt errored (its reply may have been lost after Redis took the lock; releasing
/// someone else's hold changes nothing), then sleeps 10–50 ms and tries again
/// until the wait passes. When more than N/2 masters answered with an *error* (down,
/// unreachable, timed out), this round could not win and the next would most likely fail
/// the same way: the call releases everywhere and returns the first error at once instead of
/// retrying, also from [`lock`](Self::lock), which would otherwise wait
/// forever through an outage.
///
/// # Threads and owners
///
/// The holds are the calling thread's, as with Redisson (`tryLockAsync(…, threadId)`): every
/// attempt of a round is made in its name, whichever thread sends it. So a `RedLock` is
/// reentrant: its holder taking it again re-enters on every master (hold count 2, released
/// by two unlocks), and [`Lock::is_held_by_current_thread`] of its locks is `true` for the
/// holder and `false` for any other thread, which waits like anyone else. The guard may be
/// moved to another thread and released there: it releases the holder's holds.
///
/// A round or a release runs one master's call on the calling thread and each other one on a
/// helper thread of that master's manager: each manager keeps as many as the most calls ever
/// in flight at once on it, asleep when idle, and joins them when it is dropped. No thread is
/// started per round, and none outlives its manager. A [`RedLockGuard::lost_signal`] has one
/// watcher thread, joined when the guard is released.
///
/// An attempt whose reply was lost (a master that timed out) may still take the lock later,
/// in the caller's name: a lost round releases it at once (unless the caller already held
/// that master, whose count it must not lower), a won round leaves it to expire with its
/// lease, and meanwhile the caller's next acquisition re-enters it there.
///
/// # What Redlock promises, and what it does not
///
/// While the clocks of the client and of the masters run at about the same rate, and no
/// process pauses, at most one client holds a majority at a time, and the lock survives
/// the loss of up to (N−1)/2 masters. It does **not** protect against:
///
/// - **Process pauses** (GC, swapping, a stopped VM, a long page fault): a holder can pause
///   past its validity, the lock expires, another client takes it, and the first resumes
///   believing it still holds it. No check in the client can close that gap, since the
///   pause can come right after the check.
/// - **Clock jumps** on a master (an operator or NTP stepping the clock) make keys expire
///   early, so two clients can hold majorities at once; a master that restarts without
///   persistence forgets its holds likewise (Redis' own advice: delay its restart by a lease).
///
/// Martin Kleppmann's "How to do distributed locking" makes these points; his remedy is a
/// **fencing token** checked by the protected resource. This crate's fencing tokens
/// ([`Lock::lock_fenced`]) come from a counter on *one* master: tokens from different
/// masters are not comparable, and a `RedLock` has no token. Where correctness (not just
/// efficiency) depends on mutual exclusion, use a single lock with fencing tokens, or a
/// consensus system.
///
/// # Losing the quorum
///
/// After acquisition the holds are watched as any guard's are: each manager's watchdog renews
/// watchdog leases. [`RedLockGuard::is_lost`] says (without I/O) whether fewer than a quorum
/// of holds are still confirmed, and [`RedLockGuard::lost_signal`] is told when more than
/// N/2 masters' holds have been found lost.
#[derive(Clone)]
pub struct RedLock {
    locks: Vec<Lock>,
}

impl RedLock {
    /// A Redlock over `locks`: one lock of the same name per independent master.
    pub fn new(locks: Vec<Lock>) -> Self {
        RedLock { locks }
    }

    /// The locks, one per master.
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// How many masters must grant the lock: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// Waits as long as it takes (retrying rounds) for a quorum, watchdog leases.
    /// Returns the error when more than N/2 masters fail with one in a round.
    pub fn lock(&self) -> Result<RedLockGuard> {
        self.acquire_by(None, Lease::Watchdog, None)
            .map(|guard| guard.expect("waits without limit"))
    }

    /// Waits as long as it takes (retrying rounds) for a quorum, with a fixed `lease` on every
    /// master, never renewed. Returns the error when more than N/2 masters fail with one in
    /// a round.
    pub fn lock_with_lease(&self, lease: Duration) -> Result<RedLockGuard> {
        self.acquire_by(None, Lease::Fixed(lease), None)
            .map(|guard| guard.expect("waits without limit"))
    }

    /// Tries for a quorum for up to `wait`, watchdog leases. `Ok(None)` when the wait passed
    /// without one; `Duration::ZERO` makes one round.
    pub fn try_lock(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        self.acquire_by(Some(wait), Lease::Watchdog, None)
    }

    /// Tries for a quorum for up to `wait`, with a fixed `lease` on every master, never
    /// renewed. The guard's [`validity`](RedLockGuard::validity) is how long of it is left
    /// for sure.
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<RedLockGuard>> {
        self.acquire_by(Some(wait), Lease::Fixed(lease), None)
    }

    /// Tries for a quorum as `options` say: its wait limit (none: as long as it takes), its
    /// lease on every master, and its [`CancelToken`](crate::CancelToken): a cancel, or the
    /// shutdown of any of the masters' managers, ends the wait within milliseconds with
    /// [`Error::Cancelled`] or [`Error::Shutdown`], with the holds of a round in flight
    /// released. Fencing tokens are refused ([`Error::InvalidArgument`]): a `RedLock` has
    /// none. `Ok(None)` when the wait passed.
    ///
    /// ```no_run
    /// use redis_rlock::{AcquireOptions, CancelToken, LockManager, RedLock};
    /// # let managers: Vec<LockManager> = Vec::new();
    /// let redlock = RedLock::new(managers.iter().map(|m| m.get_lock("orders:42")).collect());
    /// let token = CancelToken::new();
    /// // `token.cancel()` from another thread ends the wait.
    /// let guard = redlock.acquire(AcquireOptions::new().cancel_token(&token))?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<RedLockGuard>> {
        if options.get_fenced() {
            return Err(Error::invalid(
                "fenced",
                "a RedLock takes no fencing token (tokens of different masters are not \
                 comparable); fence a single lock instead",
            ));
        }
        self.acquire_by(
            options.get_wait(),
            options.get_lease(),
            options.get_cancel_token(),
        )
    }

    fn acquire_by(
        &self,
        wait: Option<Duration>,
        lease: Lease,
        token: Option<&CancelToken>,
    ) -> Result<Option<RedLockGuard>> {
        if let Some(wait) = wait {
            check_wait(wait)?;
        }
        self.check_locks()?;
        let stop = self.stop(token);
        stop.check()?; // nothing is sent
        let deadline = wait.map(|wait| Instant::now() + wait);
        let thread = current_thread_number();
        let mut round = 0u64;
        loop {
            // A round is one attempt per master, each bounded by a response timeout: the
            // stop is looked at between rounds, and a round won as it came is given back.
            if let Some(guard) = self.round(lease, thread)? {
                return keep_unless_stopped(guard, &stop).map(Some);
            }
            round += 1;
            if !pause_between_rounds(round, deadline, &stop)? {
                return Ok(None);
            }
        }
    }

    /// Refuses a set of locks on which `lock` would spin forever: none, or one lock twice.
    fn check_locks(&self) -> Result<()> {
        for lock in &self.locks {
            // A forked child is refused before anything of the parent's managers is touched.
            lock.engine()?;
        }
        if self.locks.is_empty() {
            // No round could ever reach a quorum: `lock` would spin forever.
            return Err(Error::invalid(
                "locks",
                "a RedLock needs at least one master",
            ));
        }
        if let Some(lock) = self.locks.iter().find(|lock| lock.is_other_format()) {
            return Err(not_a_hash_lock(lock));
        }
        for (i, lock) in self.locks.iter().enumerate() {
            let same = |other: &Lock| {
                other.name() == lock.name()
                    && other.engine_in_any_process().client_id()
                        == lock.engine_in_any_process().client_id()
            };
            if self.locks[..i].iter().any(same) {
                // One lock on one server, twice: each round would win it once and lose it
                // once, and `lock` would spin forever.
                return Err(Error::invalid(
                    "locks",
                    format!(
                        "the lock {:?} of one manager is given twice; a RedLock needs one lock \
                         per independent master",
                        crate::names::shown(lock.name())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What ends a wait: the caller's token and the shutdown of every master's manager.
    fn stop(&self, token: Option<&CancelToken>) -> Stop {
        let first = self.locks[0].engine_in_any_process();
        let mut stop = first.stop(self.locks[0].name(), token);
        for lock in &self.locks[1..] {
            stop = stop.and_shutdown(lock.engine_in_any_process().shutdown_token());
        }
        stop
    }

    /// One round for thread `thread` (the caller): every master tried at once; a guard if
    /// it won, `None` if it lost, the error if more than N/2 masters errored.
    fn round(&self, lease: Lease, thread: u64) -> Result<Option<RedLockGuard>> {
        // Asked before the round: a master the caller held already keeps its count.
        let held_before: Vec<bool> = self
            .locks
            .iter()
            .map(Lock::is_held_here_by_current_thread)
            .collect();
        let started = Instant::now();
        let attempts = fan_out::run_all(self.attempts(lease, thread));
        let elapsed = started.elapsed();
        let tally = self.tally(attempts, &held_before);
        let validity = validity(lease, elapsed, &tally.members);
        if tally.members.len() >= self.quorum() && !validity.is_zero() {
            return Ok(Some(self.won(tally.members, lease, validity)));
        }
        release_everywhere(tally.members, &tally.missed, thread);
        if tally.errors > self.locks.len() / 2 {
            return Err(tally.first_error.expect("errors were counted"));
        }
        Ok(None)
    }

    /// One attempt per master in the name of thread `thread`, none of them waiting.
    fn attempts(&self, lease: Lease, thread: u64) -> Vec<Call<'_, AttemptResult>> {
        let options = AcquireOptions::new().wait(Duration::ZERO).lease(lease);
        self.locks
            .iter()
            .map(|lock| -> Call<'_, AttemptResult> {
                let (options, attempting) = (options.clone(), lock.clone());
                (
                    lock.engine_in_any_process().workers(),
                    Box::new(move || attempting.acquire_for(options, &REENTRANT, thread)),
                )
            })
            .collect()
    }

    /// Sorts a round's attempts (in the order of `self.locks`) into holds won, masters
    /// missed, and errors.
    fn tally(&self, attempts: Vec<AttemptResult>, held_before: &[bool]) -> Tally<'_> {
        let mut tally = Tally {
            members: Vec::with_capacity(self.locks.len()),
            missed: Vec::new(),
            first_error: None,
            errors: 0,
        };
        for ((lock, attempt), &held_before) in self.locks.iter().zip(attempts).zip(held_before) {
            match attempt {
                Ok(Some(guard)) => tally.members.push(guard),
                // Refused: it took nothing.
                Ok(None) => {}
                Err(err) => {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(err);
                    tally.missed.push(Missed { lock, held_before });
                }
            }
        }
        tally
    }

    /// The guard of a round that won a quorum with `members`.
    fn won(&self, members: Vec<LockGuard>, lease: Lease, validity: Duration) -> RedLockGuard {
        RedLockGuard {
            members,
            watchers: Mutex::new(Vec::new()),
            quorum: self.quorum(),
            masters: self.locks.len(),
            validity: match lease {
                Lease::Fixed(_) => Some(validity),
                Lease::Watchdog => None,
            },
        }
    }
}

/// What one attempt came to.
type AttemptResult = Result<Option<LockGuard>>;

/// A round's attempts, sorted.
struct Tally<'a> {
    /// The holds won, one per master that granted the lock.
    members: Vec<LockGuard>,
    /// The masters whose attempt errored.
    missed: Vec<Missed<'a>>,
    first_error: Option<Error>,
    /// How many masters failed with an error.
    errors: usize,
}

/// A won round's guard, unless the wait was stopped as it came: then its holds are given
/// back and the stop's error returned.
fn keep_unless_stopped(guard: RedLockGuard, stop: &Stop) -> Result<RedLockGuard> {
    if let Err(err) = stop.check() {
        if let Err(release) = guard.unlock() {
            log::debug!("redlock: releasing a round won as the wait was stopped: {release}");
        }
        return Err(err);
    }
    Ok(guard)
}

/// Sleeps a short, varied pause before round number `round`, cut short by the `deadline`;
/// `false` when the deadline has passed (then there is no next round).
fn pause_between_rounds(round: u64, deadline: Option<Instant>, stop: &Stop) -> Result<bool> {
    let pause = Duration::from_millis(BACKOFF_MIN_MS + jitter(round) % BACKOFF_SPREAD_MS);
    match deadline {
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            stop.sleep(pause.min(left))?;
        }
        None => stop.sleep(pause)?,
    }
    Ok(true)
}

/// A master whose attempt in a round failed with an error: it may have taken the lock, its
/// reply lost.
struct Missed<'a> {
    lock: &'a Lock,
    /// Whether the caller held that master before the round (its attempt was a re-entry).
    held_before: bool,
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("locks", &self.locks)
            .finish()
    }
}

/// The validity of a round's holds; zero when none is left.
fn validity(lease: Lease, elapsed: Duration, members: &[LockGuard]) -> Duration {
    let (lease, elapsed) = match lease {
        Lease::Fixed(lease) => (lease, elapsed),
        // The confirmed leases left already count from when each request was sent.
        Lease::Watchdog => match members.iter().filter_map(LockGuard::remaining_lease).min() {
            Some(left) => (left, Duration::ZERO),
            None => return Duration::ZERO,
        },
    };
    let drift = lease / 100 + Duration::from_millis(2);
    lease.saturating_sub(elapsed).saturating_sub(drift)
}

/// Releases a lost round's holds, and the holds thread `thread`'s errored attempts may have
/// taken, on every master at once (a down master must not hold up the others). Failures are
/// only logged: the holds expire with their lease anyway.
fn release_everywhere(members: Vec<LockGuard>, missed: &[Missed<'_>], thread: u64) {
    let locks: Vec<Lock> = members.iter().map(|guard| guard.lock().clone()).collect();
    let mut calls: Vec<Call<'_, Result<()>>> = Vec::with_capacity(members.len() + missed.len());
    for (guard, lock) in members.into_iter().zip(&locks) {
        calls.push((
            workers_of(lock),
            Box::new(move || {
                guard.unlock().inspect_err(|err| {
                    log::debug!("redlock: releasing a losing round's hold failed: {err}");
                })
            }),
        ));
    }
    // A re-entry that errored may or may not have counted: the caller's hold there is left
    // as it is rather than lowered below what its guards account for.
    for missed in missed.iter().filter(|missed| !missed.held_before) {
        let lock = missed.lock.clone();
        calls.push((
            workers_of(missed.lock),
            Box::new(move || {
                lock.release_hold_of_thread(thread).inspect_err(|err| {
                    log::debug!("redlock: releasing on a master that errored failed: {err}");
                })
            }),
        ));
    }
    fan_out::run_all(calls);
}

/// The helper threads of `lock`'s manager, which run the calls on its master.
fn workers_of(lock: &Lock) -> &Workers {
    lock.engine_in_any_process().workers()
}

/// A cheap varying number for the backoff (no `rand` dependency): the clock's nanoseconds
/// mixed with the round number.
fn jitter(round: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::from(since.subsec_nanos()));
    (nanos ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 7
}

/// The holds of a [`RedLock`] on a quorum (or more) of its masters; dropping it releases
/// them all (failures are logged), [`unlock`](Self::unlock) releases them all and reports.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RedLockGuard {
    /// The holds won, one per master that granted the lock.
    members: Vec<LockGuard>,
    /// The threads following the lost signals handed out, stopped and joined at release.
    watchers: Mutex<Vec<Watcher>>,
    quorum: usize,
    masters: usize,
    /// The validity computed at acquisition, for a fixed lease.
    validity: Option<Duration>,
}

impl RedLockGuard {
    /// How long the lock is held for sure, as far as this client can tell.
    ///
    /// For a fixed lease: the validity computed at acquisition (lease − acquisition time −
    /// drift), a constant; it does not count down. For watchdog leases: the lease the quorum
    /// still has now, the `quorum`-th largest confirmed lease left among the holds (zero when
    /// the quorum is lost); it goes back up at every renewal.
    pub fn validity(&self) -> Duration {
        if let Some(validity) = self.validity {
            return validity;
        }
        let mut left: Vec<Duration> = self
            .members
            .iter()
            .filter_map(LockGuard::remaining_lease)
            .collect();
        left.sort_unstable_by(|a, b| b.cmp(a));
        left.get(self.quorum - 1).copied().unwrap_or(Duration::ZERO)
    }

    /// The holds, one per master that granted the lock (at least a quorum of them).
    pub fn guards(&self) -> &[LockGuard] {
        &self.members
    }

    /// Whether the quorum is lost: fewer than N/2 + 1 holds are still confirmed
    /// ([`LockGuard::is_lost`] of each). No I/O.
    pub fn is_lost(&self) -> bool {
        self.members.iter().filter(|guard| !guard.is_lost()).count() < self.quorum
    }

    /// A receiver that gets one message when more than N/2 masters' holds have been found
    /// lost (each hold's [`LockGuard::lost_signal`]); disconnected if the guard is released
    /// first. Each call registers a new receiver: take one and keep it.
    ///
    /// Each call starts one watcher thread, which waits on the members' signals with
    /// `crossbeam_channel::Select` until the quorum is lost or the guard is released; the
    /// release stops and joins it.
    pub fn lost_signal(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        // The quorum is lost once more than N - quorum masters are; masters that never
        // granted the lock count as lost already, so of the holds, this many must go.
        let lost_needed = self.members.len() + 1 - self.quorum;
        let signals = self.members.iter().map(LockGuard::lost_signal).collect();
        match Watcher::start(signals, lost_needed, tx) {
            Ok(watcher) => self.watchers.lock().push(watcher),
            Err((err, tell)) => {
                // Told now if already lost; else silent until the guard is released.
                log::warn!("redlock: cannot start a lost-quorum watcher: {err}");
                if self.is_lost() {
                    let _ = tell.try_send(());
                }
            }
        }
        rx
    }

    /// Releases every hold and reports the first error; every master is tried (at once)
    /// whatever the others answer.
    pub fn unlock(mut self) -> Result<()> {
        self.release()
    }

    /// Stops the watchers, then releases every hold (see [`unlock`](Self::unlock)).
    fn release(&mut self) -> Result<()> {
        for watcher in std::mem::take(&mut *self.watchers.lock()) {
            watcher.stop();
        }
        release_all(std::mem::take(&mut self.members))
    }
}

/// Releases `members` on their masters at once (a down master must not hold up the others)
/// and reports the first error.
fn release_all(members: Vec<LockGuard>) -> Result<()> {
    let locks: Vec<Lock> = members.iter().map(|guard| guard.lock().clone()).collect();
    let calls = members
        .into_iter()
        .zip(&locks)
        .map(|(guard, lock)| -> Call<'_, Result<()>> {
            (workers_of(lock), Box::new(move || guard.unlock()))
        })
        .collect();
    let mut first = None;
    for released in fan_out::run_all(calls) {
        if let Err(err) = released {
            first.get_or_insert(err);
        }
    }
    // Every release has run; report the first failure.
    first.map_or(Ok(()), Err)
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        if let Err(err) = self.release() {
            log::warn!("releasing a redlock on drop failed: {err}");
        }
    }
}

impl fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("holds", &self.members.len())
            .field("masters", &self.masters)
            .field("validity", &self.validity())
            .finish()
    }
}

/// The thread that follows one [`RedLockGuard::lost_signal`] receiver.
struct Watcher {
    /// Dropped to stop the thread.
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Watcher {
    /// Starts following `signals`, telling `tell` once `lost_needed` of them fired; the
    /// error of the spawn, and `tell` back, when no thread could be started.
    fn start(
        signals: Vec<Receiver<()>>,
        lost_needed: usize,
        tell: Sender<()>,
    ) -> std::result::Result<Self, (std::io::Error, Sender<()>)> {
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let watch = Watch {
            signals,
            lost_needed,
            tell,
        };
        // The spawn consumes the watch even when it fails: keep a sender to hand back.
        let tell = watch.tell.clone();
        thread::Builder::new()
            .name("redis-rlock-redlock-watch".into())
            .spawn(move || watch.run(&stopped))
            .map(|thread| Watcher { stop, thread })
            .map_err(|err| (err, tell))
    }

    /// Stops the thread and waits for it to end.
    fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            log::warn!("redlock: a lost-quorum watcher panicked");
        }
    }
}

/// One [`RedLockGuard::lost_signal`] receiver, as its watcher thread follows it.
struct Watch {
    /// The members' lost signals not yet fired nor disconnected.
    signals: Vec<Receiver<()>>,
    /// How many of them must fire before the quorum is lost.
    lost_needed: usize,
    tell: Sender<()>,
}

impl Watch {
    /// Waits on every signal and on `stopped` at once, until the quorum is lost, every
    /// signal is gone, or `stopped` disconnects (the guard is being released).
    fn run(mut self, stopped: &Receiver<()>) {
        while !self.signals.is_empty() {
            let mut select = Select::new();
            select.recv(stopped);
            for signal in &self.signals {
                select.recv(signal);
            }
            let op = select.select();
            if op.index() == 0 {
                let _ = op.recv(stopped);
                return;
            }
            let s = op.index() - 1;
            let fired = op.recv(&self.signals[s]).is_ok();
            drop(select); // it borrows the signals
            self.signals.remove(s);
            if fired {
                self.lost_needed -= 1;
                if self.lost_needed == 0 {
                    let _ = self.tell.try_send(());
                    return;
                }
            }
        }
        // Every hold ended without the quorum being lost: dropping `tell` disconnects the
        // receiver.
    }
}

/// The error for a lock of another format (a string lock's guard's `Lock`): a round takes
/// Redisson's hash lock on every master, which would not be that lock.
fn not_a_hash_lock(lock: &Lock) -> Error {
    Error::invalid(
        "locks",
        format!(
            "{:?} is a string lock's (redis-py's format); a RedLock takes Redisson's hash \
             lock, from LockManager::get_lock",
            crate::names::shown(lock.name())
        ),
    )
}
