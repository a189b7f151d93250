//! In-process turn-taking: at most one thread of a manager contends for a given lock in Redis
//! at a time; the others queue here, and the releasing thread hands the lock to the next one.
//!
//! Without it, every local thread that wants a held lock sends its own attempts, and on each
//! release the holder (which often locks again at once) races the woken waiter, whose attempt
//! then fails: more requests per critical section, wake-ups that lose, and unfair waits.
//! With it, a contended lock costs the minimum of requests, one acquire and one release per
//! critical section, and one round trip fewer: the releasing thread pipelines its release with
//! the acquire for the next local thread (in that thread's name and with its lease), then wakes
//! it already holding the lock, without a trip through pub/sub.
//!
//! The gate never grants a lock: Redis does. It only delays local threads, and every delay is
//! bounded, so a turn holder that never comes back (a leaked guard, a lease that ran out, a hold
//! the watchdog lost, a force unlock from elsewhere) cannot stall the queue: the first queued
//! thread asks Redis itself once its patience runs out (the holder's fixed lease, or one
//! renewal period), and takes the turn if Redis gives it the lock.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::names::LockKeys;

/// The turns of all locks a manager's threads hold or want. An entry exists only while some
/// local thread holds, acquires or waits for that lock.
pub(crate) struct Gates {
    turns: Mutex<HashMap<Arc<LockKeys>, Turn>>,
    /// How long a queued thread trusts a turn holder that renews its lock before checking
    /// with Redis itself (the watchdog's renewal period).
    patience: Duration,
}

/// One lock's turn: who has it, and who queues for it.
struct Turn {
    /// The thread that holds the lock or is acquiring it in Redis.
    owner: u64,
    /// Holds `owner` has through this manager; the turn passes on when they reach zero.
    holds: u32,
    /// When `owner`'s fixed lease runs out; `None` while acquiring or when renewed.
    lease_end: Option<Instant>,
    /// Threads waiting for the turn, first come first served.
    queue: VecDeque<Arc<Queued>>,
}

/// One queued thread.
struct Queued {
    thread: u64,
    /// The lease it asks for, so that the releasing thread can acquire in its name.
    lease_ms: u64,
    state: Mutex<Handoff>,
    wake: Condvar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    Waiting,
    /// Taken off the queue; the releasing thread is acquiring in this thread's name.
    InFlight,
    /// The turn is this thread's; `acquired` when the lock was taken in its name too.
    Granted {
        acquired: bool,
    },
}

/// What [`Gates::enter`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The caller has the turn (it was free or handed over): it may contend in Redis.
    Turn,
    /// The caller already holds the lock: a reentrant acquire.
    Reentrant,
    /// The lock was acquired in the caller's name, by the releasing thread's handoff or by
    /// the caller's own probe after its patience ran out: it holds the lock and the turn.
    Acquired,
    /// The wait passed while another local thread had the turn.
    TimedOut,
    /// Another local thread has the turn but its fixed lease is over: the caller may attempt
    /// in Redis without the turn, and takes it over if Redis gives it the lock.
    Outside,
}

/// The next queued thread, to be acquired for in a releasing thread's pipeline.
pub(crate) struct Successor {
    queued: Arc<Queued>,
}

impl Successor {
    pub(crate) fn thread(&self) -> u64 {
        self.queued.thread
    }

    pub(crate) fn lease_ms(&self) -> u64 {
        self.queued.lease_ms
    }
}

impl Gates {
    pub(crate) fn new(patience: Duration) -> Self {
        Gates {
            turns: Mutex::new(HashMap::new()),
            patience,
        }
    }

    /// Takes the turn for `thread`, waiting (until `deadline`) while another local thread has
    /// it. When the first queued thread's patience runs out it calls `probe`, one acquire
    /// attempt in Redis: `Ok(None)` means Redis gave it the lock (the turn is taken over),
    /// `Ok(Some(ttl))` that the lock is held for `ttl` more (keep waiting), and an error
    /// leaves the queue and is returned.
    pub(crate) fn enter<E>(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        lease_ms: u64,
        deadline: Option<Instant>,
        mut probe: impl FnMut() -> Result<Option<Duration>, E>,
    ) -> Result<Entry, E> {
        let queued = {
            let mut turns = self.turns.lock();
            match turns.get_mut(keys) {
                None => {
                    turns.insert(Arc::clone(keys), Turn::new(thread));
                    return Ok(Entry::Turn);
                }
                Some(turn) if turn.owner == thread => return Ok(Entry::Reentrant),
                Some(turn) => {
                    let queued = Arc::new(Queued {
                        thread,
                        lease_ms,
                        state: Mutex::new(Handoff::Waiting),
                        wake: Condvar::new(),
                    });
                    turn.queue.push_back(Arc::clone(&queued));
                    queued
                }
            }
        };
        let mut patience_end = self.patience_end(keys, Instant::now());
        loop {
            let until = deadline.map_or(patience_end, |d| d.min(patience_end));
            if let Some(entry) = queued.wait_until(until) {
                return Ok(entry);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(self.leave_queue(keys, &queued));
            }
            if now < patience_end {
                continue; // spurious wake-up
            }
            if !self.is_first(keys, &queued) {
                patience_end = now + self.patience;
                continue;
            }
            match probe() {
                Ok(None) => {
                    self.take_over(keys, thread);
                    return Ok(Entry::Acquired);
                }
                Ok(Some(ttl)) => patience_end = Instant::now() + ttl.min(self.patience),
                Err(err) => {
                    if self.leave_queue(keys, &queued) != Entry::TimedOut {
                        // Handed the turn just now: pass it on, since this thread is leaving.
                        self.leave(keys, thread, false);
                    }
                    return Err(err);
                }
            }
        }
    }

    /// Takes the turn if nobody local has it (or the caller has it already), without waiting;
    /// `None` when another local thread holds or is acquiring the lock.
    pub(crate) fn try_enter(&self, keys: &Arc<LockKeys>, thread: u64) -> Option<Entry> {
        let mut turns = self.turns.lock();
        match turns.get_mut(keys) {
            None => {
                turns.insert(Arc::clone(keys), Turn::new(thread));
                Some(Entry::Turn)
            }
            Some(turn) if turn.owner == thread => Some(Entry::Reentrant),
            Some(turn) if turn.lease_end.is_some_and(|end| end <= Instant::now()) => {
                Some(Entry::Outside)
            }
            Some(_) => None,
        }
    }

    /// Redis gave `thread` the lock without the turn (a probe, or an attempt past the
    /// holder's lease): the former holder's hold is gone, so the turn is `thread`'s now.
    pub(crate) fn take_over(&self, keys: &Arc<LockKeys>, thread: u64) {
        let mut turns = self.turns.lock();
        let turn = turns
            .entry(Arc::clone(keys))
            .or_insert_with(|| Turn::new(thread));
        turn.queue.retain(|q| q.thread != thread);
        turn.owner = thread;
        turn.holds = 0;
        turn.lease_end = None;
    }

    /// The turn holder got one more hold; `lease` is its fixed lease (`None`: renewed).
    pub(crate) fn acquired(&self, keys: &Arc<LockKeys>, thread: u64, lease: Option<Duration>) {
        let mut turns = self.turns.lock();
        if let Some(turn) = turns.get_mut(keys) {
            if turn.owner == thread {
                turn.holds += 1;
                turn.lease_end = lease.map(|lease| Instant::now() + lease);
            }
        }
    }

    /// Releases one of `thread`'s holds through `release`. When it is the thread's last hold
    /// and another local thread is queued, `release` gets that [`Successor`] and should acquire
    /// in its name in the same round trip, returning (besides its own result) whether that
    /// acquire succeeded; the successor is then woken with the turn, and the lock if it got it.
    pub(crate) fn release<R>(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        release: impl FnOnce(Option<&Successor>) -> (R, bool),
    ) -> R {
        let successor = {
            let mut turns = self.turns.lock();
            match turns.get_mut(keys) {
                Some(turn) if turn.owner == thread && turn.holds <= 1 => {
                    turn.queue.pop_front().map(|queued| {
                        turn.owner = queued.thread;
                        turn.holds = 0;
                        turn.lease_end = None;
                        *queued.state.lock() = Handoff::InFlight;
                        Successor { queued }
                    })
                }
                _ => None,
            }
        };
        let Some(successor) = successor else {
            let (result, _) = release(None);
            // After the reply, so that the next local thread's attempt finds the lock free.
            self.leave(keys, thread, true);
            return result;
        };
        // Whatever happens in `release`, even a panic, the successor must be woken.
        let mut handoff = HandoffOnDrop {
            queued: &successor.queued,
            acquired: false,
        };
        let (result, acquired) = release(Some(&successor));
        handoff.acquired = acquired;
        result
    }

    /// `thread` released one hold (or gave up acquiring, with `released_hold` false): when it
    /// has none left, the turn passes to the first queued thread, which then contends itself.
    pub(crate) fn leave(&self, keys: &Arc<LockKeys>, thread: u64, released_hold: bool) {
        let mut turns = self.turns.lock();
        let Some(turn) = turns.get_mut(keys) else {
            return;
        };
        if turn.owner != thread {
            return; // the turn was taken over after this thread's hold was found gone
        }
        if released_hold {
            turn.holds = turn.holds.saturating_sub(1);
        }
        if turn.holds > 0 {
            return;
        }
        match turn.queue.pop_front() {
            Some(next) => {
                turn.owner = next.thread;
                turn.lease_end = None;
                next.grant(false);
            }
            None => {
                turns.remove(keys);
            }
        }
    }

    /// A force unlock through this manager: whoever had the turn lost its hold, so the turn
    /// passes on at once.
    pub(crate) fn reset(&self, keys: &Arc<LockKeys>) {
        let owner = {
            let mut turns = self.turns.lock();
            match turns.get_mut(keys) {
                Some(turn) => {
                    turn.holds = 0;
                    turn.owner
                }
                None => return,
            }
        };
        self.leave(keys, owner, false);
    }

    /// How many threads wait in line behind another local thread (for tests and diagnostics).
    pub(crate) fn queued_count(&self) -> usize {
        self.turns
            .lock()
            .values()
            .map(|turn| turn.queue.len())
            .sum()
    }

    /// When a queued thread stops trusting the current turn holder.
    fn patience_end(&self, keys: &Arc<LockKeys>, now: Instant) -> Instant {
        let turns = self.turns.lock();
        let lease_end = turns.get(keys).and_then(|turn| turn.lease_end);
        let renewed = now + self.patience;
        lease_end.map_or(renewed, |end| end.min(renewed))
    }

    fn is_first(&self, keys: &Arc<LockKeys>, queued: &Arc<Queued>) -> bool {
        let turns = self.turns.lock();
        turns
            .get(keys)
            .and_then(|turn| turn.queue.front())
            .is_some_and(|front| Arc::ptr_eq(front, queued))
    }

    /// Gives up waiting: leaves the queue, unless it was taken off it meanwhile, in which case
    /// the handoff is waited for (it takes at most one round trip) and reported.
    fn leave_queue(&self, keys: &Arc<LockKeys>, queued: &Arc<Queued>) -> Entry {
        {
            let mut turns = self.turns.lock();
            if *queued.state.lock() == Handoff::Waiting {
                if let Some(turn) = turns.get_mut(keys) {
                    turn.queue.retain(|q| !Arc::ptr_eq(q, queued));
                }
                return Entry::TimedOut;
            }
        }
        // In flight or granted: wait_until returns only once granted.
        loop {
            if let Some(entry) = queued.wait_until(Instant::now() + Duration::from_secs(60)) {
                return entry;
            }
        }
    }
}

/// Grants the turn to a successor taken off the queue when dropped, so that it is woken even
/// if the releasing thread panics mid-handoff.
struct HandoffOnDrop<'a> {
    queued: &'a Queued,
    acquired: bool,
}

impl Drop for HandoffOnDrop<'_> {
    fn drop(&mut self) {
        self.queued.grant(self.acquired);
    }
}

impl Turn {
    fn new(owner: u64) -> Self {
        Turn {
            owner,
            holds: 0,
            lease_end: None,
            queue: VecDeque::new(),
        }
    }
}

impl Queued {
    /// Sleeps until handed the turn or `until`; `None` when still waiting.
    fn wait_until(&self, until: Instant) -> Option<Entry> {
        let mut state = self.state.lock();
        loop {
            match *state {
                Handoff::Granted { acquired: true } => return Some(Entry::Acquired),
                Handoff::Granted { acquired: false } => return Some(Entry::Turn),
                // A handoff in flight ends within one round trip: wait for it whatever `until`.
                Handoff::InFlight => {
                    self.wake.wait(&mut state);
                }
                Handoff::Waiting => {
                    if self.wake.wait_until(&mut state, until).timed_out() {
                        return match *state {
                            Handoff::Waiting => None,
                            _ => continue,
                        };
                    }
                }
            }
        }
    }

    fn grant(&self, acquired: bool) {
        *self.state.lock() = Handoff::Granted { acquired };
        self.wake.notify_one();
    }
}
