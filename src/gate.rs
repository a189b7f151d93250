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
//! An entry exists only while a lock is contended locally: a thread that finds the lock free
//! takes it without one, so holding many uncontended locks costs nothing here. A thread that
//! finds it held creates the entry (it is then the one that contends in Redis) or queues in
//! it, and the entry goes when the last queued thread has had its turn. Whether a thread
//! already holds a lock (a reentrant acquire skips the gate) is the watchdog's registry's to
//! say.
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

use crate::clock::BootInstant;
use crate::names::LockKeys;

/// The turns of the locks that threads of a manager contend for.
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
    /// Whether it wants a fencing token: then it acquires itself.
    fenced: bool,
    state: Mutex<Handoff>,
    wake: Condvar,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    Waiting,
    /// First in line, out of patience, and asking Redis itself: a releasing thread must not
    /// also acquire in its name (that would take a second hold), only hand it the turn.
    Probing,
    /// Taken off the queue; the releasing thread is acquiring in this thread's name.
    InFlight,
    /// The turn is this thread's; with `acquired`, the lock was taken in its name too, by a
    /// request sent at that time (its lease counts from then).
    Granted {
        acquired: Option<BootInstant>,
    },
}

/// What [`Gates::enter`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The caller has the turn (it was free or handed over): it may contend in Redis.
    Turn,
    /// The lock was acquired in the caller's name, by the releasing thread's handoff (`sent`
    /// says when that request went out) or by the caller's own probe after its patience ran
    /// out (`sent: None`): it holds the lock and the turn.
    Acquired { sent: Option<BootInstant> },
    /// The wait passed while another local thread had the turn.
    TimedOut,
}

/// The next queued thread, to be acquired for in a releasing thread's pipeline.
pub(crate) struct Successor {
    queued: Arc<Queued>,
    /// False when it acquires itself: it wants a fencing token (only its own attempt returns
    /// it), or it is asking Redis right now.
    may_acquire: bool,
}

impl Successor {
    pub(crate) fn thread(&self) -> u64 {
        self.queued.thread
    }

    pub(crate) fn lease_ms(&self) -> u64 {
        self.queued.lease_ms
    }

    /// Whether the releasing thread may acquire in its name (see the field).
    pub(crate) fn may_acquire(&self) -> bool {
        self.may_acquire
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
        fenced: bool,
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
                Some(turn) if turn.owner == thread => return Ok(Entry::Turn),
                Some(turn) => {
                    let queued = Arc::new(Queued {
                        thread,
                        lease_ms,
                        fenced,
                        state: Mutex::new(Handoff::Waiting),
                        wake: Condvar::new(),
                    });
                    turn.queue.push_back(Arc::clone(&queued));
                    queued
                }
            }
        };
        // Trust in the turn holder runs out one period after the last look, or when its fixed
        // lease does (the holder may take the lock, and so set a lease, while this one waits).
        let mut trusted_until = Instant::now() + self.patience;
        loop {
            let patience_end = self
                .lease_end(keys)
                .map_or(trusted_until, |end| end.min(trusted_until));
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
                trusted_until = now + self.patience;
                continue;
            }
            {
                let mut state = queued.state.lock();
                if *state != Handoff::Waiting {
                    continue; // handed over meanwhile: wait_until reports it
                }
                *state = Handoff::Probing;
            }
            let probed = probe();
            // Whether the turn was handed over (without an acquire) while probing.
            let handed = {
                let mut state = queued.state.lock();
                let handed = matches!(*state, Handoff::Granted { .. });
                if *state == Handoff::Probing {
                    *state = Handoff::Waiting;
                }
                handed
            };
            match probed {
                Ok(None) => {
                    self.take_over(keys, thread);
                    return Ok(Entry::Acquired { sent: None });
                }
                Ok(Some(_)) if handed => return Ok(Entry::Turn),
                Ok(Some(ttl)) => {
                    // Held after all (by the turn holder or someone else): look again when that
                    // hold's lease says, and no later than one period.
                    self.forget_lease(keys);
                    trusted_until = Instant::now() + ttl.min(self.patience);
                }
                Err(err) => {
                    if handed || self.leave_queue(keys, &queued) != Entry::TimedOut {
                        // It has the turn: pass it on, since this thread is leaving.
                        self.leave(keys, thread);
                    }
                    return Err(err);
                }
            }
        }
    }

    /// Whether `thread` may make a single attempt now, without queueing: no local thread
    /// contends for the lock, or the caller has the turn, or the turn holder's fixed lease is
    /// over.
    pub(crate) fn may_attempt(&self, keys: &Arc<LockKeys>, thread: u64) -> bool {
        let turns = self.turns.lock();
        match turns.get(keys) {
            None => true,
            Some(turn) => {
                turn.owner == thread || turn.lease_end.is_some_and(|end| end <= Instant::now())
            }
        }
    }

    /// Whether threads of this manager contend for the lock (a thread that wants it should
    /// queue rather than attempt).
    pub(crate) fn is_contended(&self, keys: &Arc<LockKeys>) -> bool {
        self.turns.lock().contains_key(keys)
    }

    /// Redis gave `thread` the lock without the turn (a probe, or an attempt past the
    /// holder's lease): the former holder's hold is gone, so the turn, if the lock is
    /// contended, is `thread`'s now.
    pub(crate) fn take_over(&self, keys: &Arc<LockKeys>, thread: u64) {
        let mut turns = self.turns.lock();
        if let Some(turn) = turns.get_mut(keys) {
            turn.queue.retain(|q| q.thread != thread);
            turn.owner = thread;
            turn.lease_end = None;
        }
    }

    /// `thread` acquired the lock; `lease` is its fixed lease (`None`: renewed), which bounds
    /// how long queued threads trust it.
    pub(crate) fn acquired(&self, keys: &Arc<LockKeys>, thread: u64, lease: Option<Duration>) {
        let mut turns = self.turns.lock();
        if let Some(turn) = turns.get_mut(keys) {
            if turn.owner == thread {
                turn.lease_end = lease.map(|lease| Instant::now() + lease);
                if turn.lease_end.is_some() {
                    // The first in line may be sleeping longer than this lease: let it look.
                    if let Some(first) = turn.queue.front() {
                        first.wake.notify_one();
                    }
                }
            }
        }
    }

    /// Releases one of `thread`'s holds through `release`. When it is the thread's `last`
    /// hold, it has the turn and another local thread is queued, `release` gets that
    /// [`Successor`] and should acquire in its name in the same round trip, returning (besides
    /// its own result) whether that acquire succeeded; the successor is then woken with the
    /// turn, and the lock if it got it.
    pub(crate) fn release<R>(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        last: bool,
        release: impl FnOnce(Option<&Successor>) -> (R, bool),
    ) -> R {
        let successor = if last {
            let mut turns = self.turns.lock();
            match turns.get_mut(keys) {
                Some(turn) if turn.owner == thread => turn.queue.pop_front().map(|queued| {
                    turn.owner = queued.thread;
                    turn.lease_end = None;
                    let mut state = queued.state.lock();
                    let may_acquire = *state == Handoff::Waiting && !queued.fenced;
                    if *state == Handoff::Waiting {
                        *state = Handoff::InFlight;
                    }
                    drop(state);
                    Successor {
                        queued,
                        may_acquire,
                    }
                }),
                _ => None,
            }
        } else {
            None
        };
        let Some(successor) = successor else {
            let (result, _) = release(None);
            if last {
                // After the reply, so that the next local thread's attempt finds the lock free.
                self.leave(keys, thread);
            }
            return result;
        };
        // Whatever happens in `release`, even a panic, the successor must be woken.
        let mut handoff = HandoffOnDrop {
            queued: &successor.queued,
            acquired: None,
        };
        // Taken before the request goes out: the successor's lease counts from no later.
        let sent = BootInstant::now();
        let (result, acquired) = release(Some(&successor));
        handoff.acquired = acquired.then_some(sent);
        result
    }

    /// `thread` is done with the lock (released its last hold, or gave up acquiring): if it
    /// had the turn, the turn passes to the first queued thread, which then contends itself.
    pub(crate) fn leave(&self, keys: &Arc<LockKeys>, thread: u64) {
        let mut turns = self.turns.lock();
        let Some(turn) = turns.get_mut(keys) else {
            return;
        };
        if turn.owner != thread {
            return; // not its turn: it held the lock before contention, or was taken over
        }
        match turn.queue.pop_front() {
            Some(next) => {
                turn.owner = next.thread;
                turn.lease_end = None;
                next.grant(None);
            }
            None => {
                turns.remove(keys);
            }
        }
    }

    /// A force unlock through this manager: whoever had the turn lost its hold, so the turn
    /// passes on at once.
    pub(crate) fn reset(&self, keys: &Arc<LockKeys>) {
        let owner = match self.turns.lock().get(keys) {
            Some(turn) => turn.owner,
            None => return,
        };
        self.leave(keys, owner);
    }

    /// How many threads wait in line behind another local thread (for tests and diagnostics).
    pub(crate) fn queued_count(&self) -> usize {
        self.turns
            .lock()
            .values()
            .map(|turn| turn.queue.len())
            .sum()
    }

    /// When the turn holder's fixed lease runs out, if it holds the lock with one.
    fn lease_end(&self, keys: &Arc<LockKeys>) -> Option<Instant> {
        self.turns.lock().get(keys).and_then(|turn| turn.lease_end)
    }

    /// A probe found the lock still held past the turn holder's lease (it was re-entered or
    /// is someone else's): the lease no longer bounds the wait.
    fn forget_lease(&self, keys: &Arc<LockKeys>) {
        if let Some(turn) = self.turns.lock().get_mut(keys) {
            turn.lease_end = None;
        }
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
    acquired: Option<BootInstant>,
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
            lease_end: None,
            queue: VecDeque::new(),
        }
    }
}

impl Queued {
    /// Sleeps until handed the turn, `until`, or a nudge to look again; `None` when still
    /// waiting.
    fn wait_until(&self, until: Instant) -> Option<Entry> {
        let mut state = self.state.lock();
        loop {
            match *state {
                Handoff::Granted {
                    acquired: Some(sent),
                } => {
                    return Some(Entry::Acquired { sent: Some(sent) });
                }
                Handoff::Granted { acquired: None } => return Some(Entry::Turn),
                // A handoff in flight ends within one round trip: wait for it whatever `until`.
                Handoff::InFlight => {
                    self.wake.wait(&mut state);
                }
                Handoff::Waiting | Handoff::Probing => {
                    self.wake.wait_until(&mut state, until);
                    if matches!(*state, Handoff::Waiting | Handoff::Probing) {
                        return None; // timed out, or woken to look at the turn again
                    }
                }
            }
        }
    }

    fn grant(&self, acquired: Option<BootInstant>) {
        *self.state.lock() = Handoff::Granted { acquired };
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn keys() -> Arc<LockKeys> {
        Arc::new(LockKeys::new("gate:test").unwrap())
    }

    #[test]
    fn a_handoff_during_a_probe_hands_the_turn_but_never_acquires_twice() {
        let gates = Gates::new(Duration::from_millis(1));
        let keys = keys();
        assert_eq!(
            gates.enter(&keys, 1, 1_000, false, None, || Ok::<_, ()>(None)),
            Ok(Entry::Turn)
        );
        let may_acquire = Cell::new(None);
        // Thread 2 queues, runs out of patience and probes; thread 1 releases meanwhile.
        let entry = gates.enter(&keys, 2, 1_000, false, None, || {
            gates.release(&keys, 1, true, |successor| {
                may_acquire.set(successor.map(Successor::may_acquire));
                ((), false)
            });
            Ok::<_, ()>(Some(Duration::from_millis(10))) // the probe found it held
        });
        assert_eq!(
            may_acquire.get(),
            Some(false),
            "no acquire in a probing thread's name"
        );
        assert_eq!(entry, Ok(Entry::Turn), "the turn was handed over");
        gates.leave(&keys, 2);
        assert_eq!(gates.queued_count(), 0);
        assert!(!gates.is_contended(&keys));
    }

    #[test]
    fn a_waiting_thread_leaves_the_line_at_its_deadline() {
        let gates = Gates::new(Duration::from_secs(60));
        let keys = keys();
        let never = || -> Result<Option<Duration>, ()> { panic!("no probe before patience") };
        assert_eq!(
            gates.enter(&keys, 1, 1_000, false, None, never),
            Ok(Entry::Turn)
        );
        let deadline = Some(Instant::now() + Duration::from_millis(20));
        assert_eq!(
            gates.enter(&keys, 2, 1_000, false, deadline, never),
            Ok(Entry::TimedOut)
        );
        assert_eq!(gates.queued_count(), 0);
        gates.leave(&keys, 1);
        assert!(
            !gates.is_contended(&keys),
            "the entry goes with the last thread"
        );
    }

    #[test]
    fn a_fenced_successor_acquires_itself() {
        let gates = Gates::new(Duration::from_secs(60));
        let keys = keys();
        let never = || -> Result<Option<Duration>, ()> { panic!("no probe") };
        assert_eq!(
            gates.enter(&keys, 1, 1_000, false, None, never),
            Ok(Entry::Turn)
        );
        std::thread::scope(|s| {
            let waiter = s.spawn(|| gates.enter(&keys, 2, 1_000, true, None, never));
            while gates.queued_count() == 0 {
                std::thread::yield_now();
            }
            let may_acquire = gates.release(&keys, 1, true, |successor| {
                (successor.map(Successor::may_acquire), false)
            });
            assert_eq!(may_acquire, Some(false));
            assert_eq!(waiter.join().unwrap(), Ok(Entry::Turn));
        });
    }
}
