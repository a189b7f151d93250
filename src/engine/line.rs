//! The line: in-process turn-taking for one lock among the threads of one manager, and the
//! rule that keeps it fair to everyone else.
//!
//! Without a line, every local thread that wants a held lock sends its own attempts, and on
//! each release the holder (which often locks again at once) races the woken waiter: more
//! requests per critical section, wake-ups that lose, unfair waits. With it, only the thread
//! that has the *turn* contends in Redis; the others queue here, first come first served, and
//! send nothing. A releasing thread with a local successor releases and acquires in the
//! successor's name in one script call, then wakes it holding the lock: a contended lock costs
//! one acquire and one release per critical section. The successor is the first waiter here:
//! the first queued thread, or, when the releasing thread took the lock before anyone here
//! waited for it, the turn owner itself while it is *parked* (asleep between its attempts in
//! Redis), so one holder and one waiter hand over without a round trip either. (Not while replica sync waits for a
//! master's replicas: an acquire must then be acknowledged by one, so the successor gets the
//! turn and acquires itself.)
//!
//! That handoff must never shut other processes out (docs/design/engine.md, "Yields"). The release
//! script publishes the unlock message and counts who heard it: when anyone besides this
//! manager's own listener did (another process, a Redisson client), it leaves the lock free
//! for them instead of handing it to the local successor, and the line *yields*: whoever here
//! takes the turn next waits out a short *yield window* before attempting, so that the woken
//! remote waiter, which needs a pub/sub hop more, can win. The window adapts: it grows when a
//! thread that waited it out still found the lock free (the remote side was slower, or nobody
//! came) and shrinks when the remote side won.
//!
//! An entry exists only while a lock is contended locally or a yield is in force: a thread
//! that finds the lock free takes it without one, so holding many uncontended locks costs
//! nothing here. The line never takes a lock itself (Redis decides); every delay it imposes
//! is bounded, so a turn holder that never comes back (a leaked guard, a lease that ran out, a
//! hold the watchdog lost, a force unlock from elsewhere) cannot stall the queue: the first
//! queued thread asks Redis itself once its patience runs out (the holder's fixed lease, or
//! one renewal period), and takes the turn if Redis gives it the lock.
//!
//! The line decides; the engine ([`crate::engine`]) does the I/O and reports back.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cancel::Waker;
use crate::clock::BootInstant;
use crate::names::LockKeys;

/// The shortest, first and longest yield windows. A remote waiter needs a pub/sub message, a
/// thread wake-up and a round trip to take a freed lock: a few hundred µs on loopback, a few
/// ms on a loaded machine or a LAN.
const YIELD_MIN: Duration = Duration::from_micros(500);
const YIELD_FIRST: Duration = Duration::from_millis(2);
const YIELD_MAX: Duration = Duration::from_millis(50);

/// Yields in a row whose waiting thread finds the lock free at the longest window before yields
/// are suspended, and for how long.
const PHANTOM_STREAK: u32 = 8;
const YIELD_SUSPENSION: Duration = Duration::from_secs(1);

/// Above this many entries, yields that ended are swept out when a new one is recorded.
const SWEEP_ABOVE: usize = 64;

/// The turns of the locks that threads of a manager contend for.
pub(crate) struct Line {
    turns: Mutex<HashMap<Arc<LockKeys>, Turn>>,
    /// How long a queued thread trusts a turn holder that renews its lock before checking
    /// with Redis itself (the watchdog's renewal period).
    patience: Duration,
    /// The current yield window, in µs (see the module docs).
    yield_window_us: AtomicU64,
    /// Yields in a row whose waiting thread found the lock free at the longest window.
    free_streak: AtomicU32,
    /// Until when releases hand over locally although others heard (see
    /// [`yields_suspended`](Line::yields_suspended)).
    suspended_until: Mutex<Option<Instant>>,
}

/// One lock's turn: who has it, and who queues for it.
struct Turn {
    /// The thread that holds the lock or is acquiring it in Redis; `None` while nobody here
    /// has the turn and the entry only records a yield.
    owner: Option<u64>,
    /// When `owner`'s fixed lease runs out; `None` while acquiring or when renewed.
    lease_end: Option<Instant>,
    /// The yield to remote waiters the next thread to take the turn waits out.
    yielding: Option<Yield>,
    /// Threads waiting for the turn, first come first served.
    queue: VecDeque<Arc<Queued>>,
    /// `owner` while it sleeps between attempts in Redis (see [`Line::park`]): a release by
    /// another local thread may hand it the lock as it would a queued thread.
    parked: Option<Arc<Queued>>,
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
    /// What else wakes it when it is handed something: a parked turn owner sleeps on its
    /// subscription, not on `wake`.
    nudge: Option<Waker>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    Waiting,
    /// First in line, out of patience, and asking Redis itself: a releasing thread must not
    /// also acquire in its name (that would take a second hold), only hand it the turn.
    Probing,
    /// Taken off the queue; the releasing thread is releasing (and maybe acquiring in this
    /// thread's name).
    InFlight,
    /// Handed the turn: see [`Entry`].
    Handed(Entry),
}

/// A yield to remote waiters, as the local thread that waits it out sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Yield {
    /// Not before then.
    pub(crate) until: Instant,
    /// How many unlock messages this manager's listener will have heard on the lock's
    /// channel (see `Subscriber::message_count`) if nobody else releases the lock meanwhile:
    /// more means a remote waiter took the lock and let it go within the window.
    pub(crate) messages_expected: u64,
}

/// How a thread comes to have the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// It may contend in Redis, but not before `yielding` (a yield to remote waiters).
    Turn { yielding: Option<Yield> },
    /// The lock was acquired in its name: by the releasing thread's handoff (`sent` says when
    /// that request went out, and its lease counts from then) or by its own probe after its
    /// patience ran out (`sent: None`). It holds the lock and the turn.
    Acquired { sent: Option<BootInstant> },
    /// The releasing thread asked for the lock in its name by a request sent at `sent`, but
    /// never learned whether that ran (replies lost): it may hold the lock. A queued thread
    /// reads its hold count (its hold then counts from `sent`); a parked one just attempts,
    /// which, as a fresh attempt, finds the hold without counting a second one.
    Unconfirmed { sent: BootInstant },
}

/// What [`Line::join`] decided.
pub(crate) enum Join {
    /// The caller has the turn.
    Entered(Entry),
    /// Another local thread has it: wait with [`Line::wait`].
    Queued(Ticket),
}

/// A queued thread's place in line.
pub(crate) struct Ticket {
    keys: Arc<LockKeys>,
    queued: Arc<Queued>,
    /// When trust in the turn holder runs out and the first in line asks Redis itself.
    trusted_until: Instant,
}

/// A turn owner asleep between its attempts in Redis (see [`Line::park`]).
pub(crate) struct Parked {
    keys: Arc<LockKeys>,
    queued: Arc<Queued>,
}

/// What [`Line::wait`] decided.
pub(crate) enum Wait {
    /// The caller has the turn.
    Entered(Entry),
    /// First in line and out of patience: make one attempt and report it with
    /// [`Line::probed`].
    Probe,
    /// The deadline passed; the caller left the line.
    TimedOut,
    /// The wait was cancelled or its manager shut down; the caller left the line.
    Stopped,
}

/// What a probe found.
pub(crate) enum Probed {
    Acquired,
    /// Held, for this much more.
    Held(Duration),
    /// The attempt failed; the caller leaves the line and reports the error.
    Failed,
}

impl Ticket {
    /// Wakes this ticket's thread to look at its stop condition (see [`Line::wait`]).
    pub(crate) fn waker(&self) -> Waker {
        let queued = Arc::clone(&self.queued);
        Arc::new(move || {
            let _state = queued.state.lock();
            queued.wake.notify_all();
        })
    }
}

/// The next queued thread, taken off the line by a releasing thread. Dropping it without
/// [`Line::hand_over`] hands it the turn without the lock, so that it is woken even if the
/// release panics.
pub(crate) struct Successor {
    queued: Option<Arc<Queued>>,
    /// False when it acquires itself: it wants a fencing token (only its own attempt returns
    /// it), or it is asking Redis right now.
    may_acquire: bool,
}

/// What the release did, for [`Line::hand_over`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// The lock was acquired in the successor's name by a request sent then.
    Lock(BootInstant),
    /// The lock was left free for remote waiters: yield (see [`Yield`] for the count).
    Yield { messages_expected: u64 },
    /// Only the turn (the successor attempts at once).
    Turn,
    /// Only the turn, and no attempt before then: a spin lock's gap for other clients'
    /// pollers (see `crate::engine::runs`).
    Gap(Instant),
    /// The release asked for the lock in the successor's name at that time, but its outcome
    /// is unknown.
    Unknown(BootInstant),
}

impl Successor {
    pub(crate) fn thread(&self) -> u64 {
        self.queued().thread
    }

    pub(crate) fn lease_ms(&self) -> u64 {
        self.queued().lease_ms
    }

    /// Whether the releasing thread may acquire in its name (see the field).
    pub(crate) fn may_acquire(&self) -> bool {
        self.may_acquire
    }

    fn queued(&self) -> &Queued {
        self.queued.as_ref().expect("present until handed over")
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        if let Some(queued) = self.queued.take() {
            queued.hand_turn(Entry::Turn { yielding: None });
        }
    }
}

impl Line {
    pub(crate) fn new(patience: Duration) -> Self {
        Line {
            turns: Mutex::new(HashMap::new()),
            patience,
            yield_window_us: AtomicU64::new(YIELD_FIRST.as_micros() as u64),
            free_streak: AtomicU32::new(0),
            suspended_until: Mutex::new(None),
        }
    }

    /// Whether `thread` may make a single attempt now, without queueing: no local thread has
    /// the turn, or the caller has it, or the turn holder's fixed lease is over.
    pub(crate) fn may_attempt(&self, keys: &Arc<LockKeys>, thread: u64) -> bool {
        let turns = self.turns.lock();
        match turns.get(keys) {
            None => true,
            Some(turn) => match turn.owner {
                None => true,
                Some(owner) => {
                    owner == thread || turn.lease_end.is_some_and(|end| end <= Instant::now())
                }
            },
        }
    }

    /// Whether the caller should join the line rather than attempt at once: threads of this
    /// manager contend for the lock, or a yield is in force.
    pub(crate) fn is_busy(&self, keys: &Arc<LockKeys>) -> bool {
        self.turns.lock().contains_key(keys)
    }

    /// Takes the turn for `thread`, or queues it behind the local thread that has it.
    pub(crate) fn join(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        lease_ms: u64,
        fenced: bool,
    ) -> Join {
        let mut turns = self.turns.lock();
        let turn = turns.entry(Arc::clone(keys)).or_insert_with(|| Turn {
            owner: None,
            lease_end: None,
            yielding: None,
            queue: VecDeque::new(),
            parked: None,
        });
        match turn.owner {
            Some(owner) if owner != thread => {
                let queued = Arc::new(Queued {
                    thread,
                    lease_ms,
                    fenced,
                    state: Mutex::new(Handoff::Waiting),
                    wake: Condvar::new(),
                    nudge: None,
                });
                turn.queue.push_back(Arc::clone(&queued));
                Join::Queued(Ticket {
                    keys: Arc::clone(keys),
                    queued,
                    trusted_until: Instant::now() + self.patience,
                })
            }
            _ => {
                turn.owner = Some(thread);
                Join::Entered(Entry::Turn {
                    yielding: turn.yielding.take().filter(|y| y.until > Instant::now()),
                })
            }
        }
    }

    /// Waits in line until handed the turn, the `deadline`, the end of patience, or
    /// `stopped()` (a cancel or a shutdown: the caller registered [`Ticket::waker`] with it).
    pub(crate) fn wait(
        &self,
        ticket: &mut Ticket,
        deadline: Option<Instant>,
        stopped: &dyn Fn() -> bool,
    ) -> Wait {
        loop {
            // Trust in the turn holder also ends with its fixed lease (it may take the lock,
            // and so set a lease, while this thread waits).
            let patience_end = self.patience_end(ticket);
            let until = deadline.map_or(patience_end, |d| d.min(patience_end));
            if let Some(entry) = ticket.queued.wait_until(until, stopped) {
                return Wait::Entered(entry);
            }
            if stopped() {
                // Out of the queue, so no handoff comes to it later; one already under way
                // is waited for and reported (the caller gives back what it got).
                return match self.leave_queue(ticket) {
                    Some(entry) => Wait::Entered(entry),
                    None => Wait::Stopped,
                };
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return match self.leave_queue(ticket) {
                    Some(entry) => Wait::Entered(entry),
                    None => Wait::TimedOut,
                };
            }
            if now < patience_end {
                continue; // spurious wake-up, or a nudge to look at the lease again
            }
            if !self.is_first(ticket) {
                ticket.trusted_until = now + self.patience;
                continue;
            }
            let mut state = ticket.queued.state.lock();
            if *state == Handoff::Waiting {
                *state = Handoff::Probing;
                return Wait::Probe;
            }
            // Handed over meanwhile: the next wait_until reports it.
        }
    }

    /// Reports a probe that [`wait`](Self::wait) asked for. `Some` when the caller now has the
    /// turn (and maybe the lock), `None` to keep waiting.
    ///
    /// While the ticket still says `Probing`, a releasing thread that takes it off the line
    /// hands it the turn only, never the lock in its name: so it stays `Probing` until the
    /// probe's outcome is settled. (Set back to `Waiting` first, a release in that gap could
    /// take the lock in the name of a thread that then leaves, or that took it itself: a hold
    /// nobody releases.)
    pub(crate) fn probed(&self, ticket: &mut Ticket, thread: u64, probed: Probed) -> Option<Entry> {
        match probed {
            Probed::Acquired => {
                self.take_over(&ticket.keys, thread);
                Some(Entry::Acquired { sent: None })
            }
            Probed::Failed => {
                if self.leave_queue(ticket).is_some() {
                    // It has the turn: pass it on, since this thread is leaving.
                    self.leave(&ticket.keys, thread);
                }
                None
            }
            Probed::Held(ttl) => {
                // Staying in line: a handoff may acquire in its name again, unless it was
                // handed the turn (never with an acquire) while probing.
                let handed = {
                    let mut state = ticket.queued.state.lock();
                    if *state == Handoff::Probing {
                        *state = Handoff::Waiting;
                    }
                    match *state {
                        Handoff::Handed(entry) => Some(entry),
                        _ => None,
                    }
                };
                if handed.is_some() {
                    return handed;
                }
                // Held after all (by the turn holder or someone else): look again when that
                // hold's lease says, and no later than one period.
                self.forget_lease(&ticket.keys);
                ticket.trusted_until = Instant::now() + ttl.min(self.patience);
                None
            }
        }
    }

    /// Redis gave `thread` the lock without the turn (a probe, or an attempt past the
    /// holder's lease): the former holder's hold is gone, so the turn, if the lock is
    /// contended, is `thread`'s now.
    pub(crate) fn take_over(&self, keys: &Arc<LockKeys>, thread: u64) {
        let mut turns = self.turns.lock();
        if let Some(turn) = turns.get_mut(keys) {
            turn.queue.retain(|q| q.thread != thread);
            turn.owner = Some(thread);
            turn.lease_end = None;
            turn.parked = None;
        }
    }

    /// `thread` acquired the lock; `lease` is its fixed lease (`None`: renewed), which bounds
    /// how long queued threads trust it.
    pub(crate) fn acquired(&self, keys: &Arc<LockKeys>, thread: u64, lease: Option<Duration>) {
        let mut turns = self.turns.lock();
        if let Some(turn) = turns.get_mut(keys) {
            if turn.owner == Some(thread) {
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

    /// `thread` is about to release its `last` hold: the first local thread that waits for
    /// the lock is taken off the line to be handed the lock or the turn. That is the first
    /// queued thread when `thread` has the turn, and otherwise the turn owner if it is
    /// parked (asleep between its attempts in Redis; see [`park`](Self::park)).
    pub(crate) fn successor(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        last: bool,
    ) -> Option<Successor> {
        if !last {
            return None;
        }
        let mut turns = self.turns.lock();
        let turn = turns.get_mut(keys)?;
        let queued = if turn.owner == Some(thread) {
            let queued = turn.queue.pop_front()?;
            turn.owner = Some(queued.thread);
            turn.lease_end = None;
            queued
        } else {
            // The releasing thread took the lock before anyone here waited for it: the first
            // waiter is the turn owner, in Redis, if it is asleep between attempts.
            turn.parked.take()?
        };
        let mut state = queued.state.lock();
        let may_acquire = *state == Handoff::Waiting && !queued.fenced;
        // In flight even when probing: the thread then waits for the handoff whatever its probe
        // or its deadline says, so the turn never passes to a thread that has left.
        *state = Handoff::InFlight;
        drop(state);
        Some(Successor {
            queued: Some(queued),
            may_acquire,
        })
    }

    /// The turn owner `thread` is about to sleep between its attempts in Redis: until
    /// [`unpark`](Self::unpark), a release by another local thread may take it as its
    /// successor (see [`successor`](Self::successor)) and hand it the lock in the same script
    /// call, waking it with `nudge`. `None` when `thread` does not have the turn.
    pub(crate) fn park(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        lease_ms: u64,
        fenced: bool,
        nudge: Waker,
    ) -> Option<Parked> {
        let mut turns = self.turns.lock();
        let turn = turns.get_mut(keys)?;
        if turn.owner != Some(thread) {
            return None;
        }
        let queued = Arc::new(Queued {
            thread,
            lease_ms,
            fenced,
            state: Mutex::new(Handoff::Waiting),
            wake: Condvar::new(),
            nudge: Some(nudge),
        });
        turn.parked = Some(Arc::clone(&queued));
        Some(Parked {
            keys: Arc::clone(keys),
            queued,
        })
    }

    /// The parked thread woke up: `None` when nothing was handed to it (it attempts again
    /// itself), or what a release handed it. A handoff under way is waited for (one round
    /// trip), so that the thread never attempts while a release acquires in its name.
    pub(crate) fn unpark(&self, parked: Parked) -> Option<Entry> {
        {
            let mut turns = self.turns.lock();
            if *parked.queued.state.lock() == Handoff::Waiting {
                if let Some(turn) = turns.get_mut(&parked.keys) {
                    if turn
                        .parked
                        .as_ref()
                        .is_some_and(|p| Arc::ptr_eq(p, &parked.queued))
                    {
                        turn.parked = None;
                    }
                }
                return None;
            }
        }
        Some(parked.queued.handed())
    }

    /// Wakes a successor with what the release did for it.
    pub(crate) fn hand_over(&self, mut successor: Successor, handed: Handed) {
        let queued = successor.queued.take().expect("handed over once");
        let entry = match handed {
            Handed::Lock(sent) => Entry::Acquired { sent: Some(sent) },
            Handed::Yield { messages_expected } => Entry::Turn {
                yielding: Some(Yield {
                    until: self.yield_deadline(),
                    messages_expected,
                }),
            },
            Handed::Turn => Entry::Turn { yielding: None },
            Handed::Gap(until) => Entry::Turn {
                yielding: Some(Yield {
                    until,
                    messages_expected: 0,
                }),
            },
            Handed::Unknown(sent) => Entry::Unconfirmed { sent },
        };
        queued.hand_turn(entry);
        drop(successor);
    }

    /// `thread` released its last hold without a local successor, and others were told: the
    /// next local thread to take the turn (the releasing one included) waits out the yield.
    pub(crate) fn yield_to_others(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        messages_expected: u64,
    ) {
        let until = Yield {
            until: self.yield_deadline(),
            messages_expected,
        };
        self.record_yield(keys, thread, until);
    }

    /// `thread` released its last hold without a local successor: the next local thread to
    /// take the turn (the releasing one included) waits out `until` before attempting (a
    /// yield, or a spin lock's gap, carried as a yield).
    pub(crate) fn record_yield(&self, keys: &Arc<LockKeys>, thread: u64, until: Yield) {
        let mut turns = self.turns.lock();
        if turns.len() > SWEEP_ABOVE {
            let now = Instant::now();
            turns.retain(|_, turn| {
                turn.owner.is_some()
                    || !turn.queue.is_empty()
                    || turn.yielding.is_some_and(|y| y.until > now)
            });
        }
        let turn = turns.entry(Arc::clone(keys)).or_insert_with(|| Turn {
            owner: None,
            lease_end: None,
            yielding: None,
            queue: VecDeque::new(),
            parked: None,
        });
        match turn.owner {
            // A thread queued after the release took no successor: it goes next, after the yield.
            Some(owner) if owner == thread => match turn.queue.pop_front() {
                Some(next) => {
                    turn.owner = Some(next.thread);
                    turn.lease_end = None;
                    next.hand_turn(Entry::Turn {
                        yielding: Some(until),
                    });
                }
                None => {
                    turn.owner = None;
                    turn.lease_end = None;
                    turn.yielding = Some(until);
                }
            },
            None => turn.yielding = Some(until),
            Some(_) => {} // another local thread has the turn (taken over meanwhile)
        }
    }

    /// A thread that waited out a yield found the lock free after all (`true`: the remote side was
    /// slower than the window, or nobody came), or held by someone else (`false`: it won).
    pub(crate) fn yield_outcome(&self, found_free: bool) {
        let window = self.yield_window_us.load(Ordering::Relaxed);
        let max = YIELD_MAX.as_micros() as u64;
        if !found_free {
            self.free_streak.store(0, Ordering::Relaxed);
        } else if window >= max
            && self.free_streak.fetch_add(1, Ordering::Relaxed) + 1 >= PHANTOM_STREAK
        {
            // Whoever "heard" the unlocks never takes the lock: a subscriber that does not
            // wait (a monitor, a pattern subscription, a connection the server has not yet
            // dropped). Yielding to it only idles the lock; stop for a while.
            log::debug!("unlock listeners that never take the lock: local handoffs for a while");
            self.free_streak.store(0, Ordering::Relaxed);
            *self.suspended_until.lock() = Some(Instant::now() + YIELD_SUSPENSION);
            self.yield_window_us
                .store(YIELD_FIRST.as_micros() as u64, Ordering::Relaxed);
            return;
        }
        let next = if found_free {
            (window * 2).min(YIELD_MAX.as_micros() as u64)
        } else {
            (window - window / 8).max(YIELD_MIN.as_micros() as u64)
        };
        self.yield_window_us.store(next, Ordering::Relaxed);
    }

    /// Whether releases should hand over locally whoever else heard: yields kept finding the
    /// lock free (see [`yield_outcome`](Self::yield_outcome)).
    pub(crate) fn yields_suspended(&self) -> bool {
        let mut until = self.suspended_until.lock();
        match *until {
            Some(at) if Instant::now() < at => true,
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    fn yield_deadline(&self) -> Instant {
        Instant::now() + Duration::from_micros(self.yield_window_us.load(Ordering::Relaxed))
    }

    /// `thread` is done with the lock (released its last hold, or gave up acquiring): if it
    /// had the turn, the turn passes to the first queued thread, which then contends itself.
    pub(crate) fn leave(&self, keys: &Arc<LockKeys>, thread: u64) {
        let mut turns = self.turns.lock();
        let Some(turn) = turns.get_mut(keys) else {
            return;
        };
        if turn.owner != Some(thread) {
            return; // not its turn: it held the lock before contention, or was taken over
        }
        match turn.queue.pop_front() {
            Some(next) => {
                turn.owner = Some(next.thread);
                turn.lease_end = None;
                next.hand_turn(Entry::Turn {
                    yielding: turn.yielding.take().filter(|y| y.until > Instant::now()),
                });
            }
            None if turn.yielding.is_some_and(|y| y.until > Instant::now()) => {
                turn.owner = None;
                turn.lease_end = None;
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
        if let Some(owner) = owner {
            self.leave(keys, owner);
        }
    }

    /// How many threads wait in line behind another local thread (for tests and diagnostics).
    pub(crate) fn queued_count(&self) -> usize {
        self.turns
            .lock()
            .values()
            .map(|turn| turn.queue.len())
            .sum()
    }

    /// When `ticket`'s patience ends: its trust in the turn holder, and for the first in line
    /// also the holder's fixed lease (the others wait for the first one's probe).
    fn patience_end(&self, ticket: &Ticket) -> Instant {
        let turns = self.turns.lock();
        let Some(turn) = turns.get(&ticket.keys) else {
            return ticket.trusted_until;
        };
        let first = turn
            .queue
            .front()
            .is_some_and(|front| Arc::ptr_eq(front, &ticket.queued));
        match turn.lease_end {
            Some(end) if first => end.min(ticket.trusted_until),
            _ => ticket.trusted_until,
        }
    }

    /// A probe found the lock still held past the turn holder's lease (it was re-entered or
    /// is someone else's): the lease no longer bounds the wait.
    fn forget_lease(&self, keys: &Arc<LockKeys>) {
        if let Some(turn) = self.turns.lock().get_mut(keys) {
            turn.lease_end = None;
        }
    }

    fn is_first(&self, ticket: &Ticket) -> bool {
        let turns = self.turns.lock();
        turns
            .get(&ticket.keys)
            .and_then(|turn| turn.queue.front())
            .is_some_and(|front| Arc::ptr_eq(front, &ticket.queued))
    }

    /// Gives up waiting: leaves the queue (`None`), unless it was taken off it meanwhile, in
    /// which case the handoff is waited for (it takes at most one round trip) and reported.
    fn leave_queue(&self, ticket: &Ticket) -> Option<Entry> {
        {
            let mut turns = self.turns.lock();
            let state = *ticket.queued.state.lock();
            if matches!(state, Handoff::Waiting | Handoff::Probing) {
                if let Some(turn) = turns.get_mut(&ticket.keys) {
                    turn.queue.retain(|q| !Arc::ptr_eq(q, &ticket.queued));
                }
                return None;
            }
        }
        Some(ticket.queued.handed())
    }
}

impl Queued {
    /// Sleeps until handed the turn, `until`, `stopped()`, or a nudge to look at the turn
    /// again; `None` when still waiting.
    fn wait_until(&self, until: Instant, stopped: &dyn Fn() -> bool) -> Option<Entry> {
        let mut state = self.state.lock();
        loop {
            match *state {
                Handoff::Handed(entry) => return Some(entry),
                // A handoff in flight ends within one round trip: wait for it whatever `until`.
                Handoff::InFlight => {
                    self.wake.wait(&mut state);
                }
                // Looked at under the lock the stop's waker takes: no wake-up is lost.
                Handoff::Waiting | Handoff::Probing if stopped() => return None,
                Handoff::Waiting | Handoff::Probing => {
                    self.wake.wait_until(&mut state, until);
                    if matches!(*state, Handoff::Waiting | Handoff::Probing) {
                        return None; // timed out, or woken to look at the turn again
                    }
                }
            }
        }
    }

    /// Waits for a handoff in flight (it ends within one round trip) or done.
    fn handed(&self) -> Entry {
        loop {
            if let Some(entry) =
                self.wait_until(Instant::now() + Duration::from_secs(60), &|| false)
            {
                return entry;
            }
        }
    }

    fn hand_turn(&self, entry: Entry) {
        *self.state.lock() = Handoff::Handed(entry);
        self.wake.notify_one();
        if let Some(nudge) = &self.nudge {
            nudge();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Arc<LockKeys> {
        Arc::new(LockKeys::new("line:test").unwrap())
    }

    fn entered(join: Join) -> Entry {
        match join {
            Join::Entered(entry) => entry,
            Join::Queued(_) => panic!("queued"),
        }
    }

    fn queued(join: Join) -> Ticket {
        match join {
            Join::Queued(ticket) => ticket,
            Join::Entered(entry) => panic!("entered: {entry:?}"),
        }
    }

    const TURN: Entry = Entry::Turn { yielding: None };

    #[test]
    fn a_handoff_during_a_probe_hands_the_turn_but_never_acquires_twice() {
        let line = Line::new(Duration::from_millis(1));
        let keys = keys();
        assert_eq!(entered(line.join(&keys, 1, 1_000, false)), TURN);
        let mut ticket = queued(line.join(&keys, 2, 1_000, false));
        // Thread 2 runs out of patience and probes; thread 1 releases meanwhile.
        assert!(matches!(
            line.wait(&mut ticket, None, &|| false),
            Wait::Probe
        ));
        let successor = line.successor(&keys, 1, true).expect("thread 2 is next");
        assert!(
            !successor.may_acquire(),
            "no acquire in a probing thread's name"
        );
        line.hand_over(successor, Handed::Turn);
        let probed = Probed::Held(Duration::from_millis(10));
        assert_eq!(line.probed(&mut ticket, 2, probed), Some(TURN));
        line.leave(&keys, 2);
        assert_eq!(line.queued_count(), 0);
        assert!(!line.is_busy(&keys));
    }

    #[test]
    fn a_waiting_thread_leaves_the_line_at_its_deadline() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        entered(line.join(&keys, 1, 1_000, false));
        let mut ticket = queued(line.join(&keys, 2, 1_000, false));
        let deadline = Some(Instant::now() + Duration::from_millis(20));
        assert!(matches!(
            line.wait(&mut ticket, deadline, &|| false),
            Wait::TimedOut
        ));
        assert_eq!(line.queued_count(), 0);
        line.leave(&keys, 1);
        assert!(!line.is_busy(&keys), "the entry goes with the last thread");
    }

    #[test]
    fn a_stopped_thread_leaves_the_line_unless_a_handoff_is_under_way() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        entered(line.join(&keys, 1, 1_000, false));
        let mut ticket = queued(line.join(&keys, 2, 1_000, false));
        assert!(matches!(
            line.wait(&mut ticket, None, &|| true),
            Wait::Stopped
        ));
        assert_eq!(line.queued_count(), 0);
        assert!(line.successor(&keys, 1, true).is_none(), "no handoff to it");
        // Taken off the line by a release before it saw the stop: the handoff is reported,
        // and the caller gives back what it got.
        let mut ticket = queued(line.join(&keys, 3, 1_000, false));
        let successor = line.successor(&keys, 1, true).expect("thread 3 is next");
        line.hand_over(successor, Handed::Lock(BootInstant::now()));
        assert!(matches!(
            line.wait(&mut ticket, None, &|| true),
            Wait::Entered(Entry::Acquired { .. })
        ));
    }

    #[test]
    fn a_fenced_successor_acquires_itself() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        entered(line.join(&keys, 1, 1_000, false));
        let mut ticket = queued(line.join(&keys, 2, 1_000, true));
        let successor = line.successor(&keys, 1, true).expect("thread 2 is next");
        assert!(!successor.may_acquire());
        drop(successor); // a release that panicked: the successor still gets the turn
        assert!(matches!(
            line.wait(&mut ticket, None, &|| false),
            Wait::Entered(TURN)
        ));
    }

    #[test]
    fn after_a_yield_the_next_local_thread_holds_back() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        // Released with remote listeners and nobody queued: even the releasing thread, coming
        // back at once, waits for the window.
        entered(line.join(&keys, 1, 1_000, false));
        line.yield_to_others(&keys, 1, 0);
        assert!(line.is_busy(&keys), "the yield is recorded");
        let Entry::Turn {
            yielding: Some(yielded),
        } = entered(line.join(&keys, 1, 1_000, false))
        else {
            panic!("no yield");
        };
        assert!(yielded.until > Instant::now());
        // Handed over with a yield: the successor waits it out too.
        let mut ticket = queued(line.join(&keys, 2, 1_000, false));
        let successor = line.successor(&keys, 1, true).expect("thread 2 is next");
        line.hand_over(
            successor,
            Handed::Yield {
                messages_expected: 0,
            },
        );
        assert!(matches!(
            line.wait(&mut ticket, None, &|| false),
            Wait::Entered(Entry::Turn { yielding: Some(_) })
        ));
    }

    #[test]
    fn a_thread_that_queued_during_a_yielding_release_is_handed_the_turn() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        entered(line.join(&keys, 1, 1_000, false));
        // Thread 1 releases with nobody queued, so no successor; thread 2 queues before the
        // release's reply says others heard it.
        assert!(line.successor(&keys, 1, true).is_none());
        let mut ticket = queued(line.join(&keys, 2, 1_000, false));
        line.yield_to_others(&keys, 1, 0);
        assert!(matches!(
            line.wait(
                &mut ticket,
                Some(Instant::now() + Duration::from_secs(5)),
                &|| false
            ),
            Wait::Entered(Entry::Turn { yielding: Some(_) })
        ));
    }

    #[test]
    fn a_probing_thread_chosen_as_successor_gets_the_turn_even_past_its_deadline() {
        let line = Line::new(Duration::from_millis(1));
        let keys = keys();
        entered(line.join(&keys, 1, 1_000, false));
        let mut ticket = queued(line.join(&keys, 2, 1_000, false));
        let waiting = queued(line.join(&keys, 3, 1_000, false));
        assert!(matches!(
            line.wait(&mut ticket, None, &|| false),
            Wait::Probe
        ));
        // Thread 1 releases and picks thread 2 while it probes; the probe finds the lock held,
        // and thread 2's deadline passes before the handoff is done.
        let successor = line.successor(&keys, 1, true).expect("thread 2 is next");
        assert!(!successor.may_acquire());
        assert_eq!(
            line.probed(&mut ticket, 2, Probed::Held(Duration::from_millis(5))),
            None
        );
        std::thread::scope(|s| {
            let handoff = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                line.hand_over(successor, Handed::Turn);
            });
            let past = Some(Instant::now());
            assert!(
                matches!(line.wait(&mut ticket, past, &|| false), Wait::Entered(TURN)),
                "the turn is not left to a thread that has gone"
            );
            handoff.join().unwrap();
        });
        line.leave(&keys, 2);
        drop(waiting);
        assert_eq!(line.queued_count(), 0, "thread 3 had the turn passed on");
    }

    #[test]
    fn yields_that_keep_finding_the_lock_free_are_suspended() {
        let line = Line::new(Duration::from_secs(60));
        assert!(!line.yields_suspended());
        // Five doublings from 2 ms reach 50 ms; then the streak at the longest window.
        for _ in 0..(5 + PHANTOM_STREAK) {
            line.yield_outcome(true);
        }
        assert!(
            line.yields_suspended(),
            "a subscriber that never takes the lock"
        );
        let first = YIELD_FIRST.as_micros() as u64;
        assert_eq!(line.yield_window_us.load(Ordering::Relaxed), first);
    }

    #[test]
    fn the_yield_window_adapts_within_its_bounds() {
        let line = Line::new(Duration::from_secs(60));
        for _ in 0..20 {
            line.yield_outcome(true);
        }
        let max = YIELD_MAX.as_micros() as u64;
        assert_eq!(line.yield_window_us.load(Ordering::Relaxed), max);
        for _ in 0..100 {
            line.yield_outcome(false);
        }
        let min = YIELD_MIN.as_micros() as u64;
        assert_eq!(line.yield_window_us.load(Ordering::Relaxed), min);
    }

    /// A release racing a probe's report (it takes the prober off the line while the prober
    /// settles what its own attempt found) must never acquire in the prober's name: the
    /// prober either took the lock itself, or is leaving with an error, and a hold taken for
    /// it then would be released by nobody.
    #[test]
    fn a_release_racing_a_probe_report_never_acquires_for_the_prober() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Barrier;
        const ROUNDS: usize = 20_000;
        let line = Line::new(Duration::ZERO);
        let keys = keys();
        let barrier = Barrier::new(2);
        let acquired_for_prober = AtomicBool::new(false);
        for outcome_acquired in [false, true] {
            std::thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        barrier.wait(); // the prober is probing
                        if let Some(successor) = line.successor(&keys, 1, true) {
                            if successor.may_acquire() {
                                acquired_for_prober.store(true, Ordering::SeqCst);
                            }
                            line.hand_over(successor, Handed::Turn);
                        }
                        barrier.wait(); // round done
                    }
                });
                for _ in 0..ROUNDS {
                    entered(line.join(&keys, 1, 1_000, false));
                    let mut ticket = queued(line.join(&keys, 2, 1_000, false));
                    assert!(matches!(
                        line.wait(&mut ticket, None, &|| false),
                        Wait::Probe
                    ));
                    barrier.wait();
                    let probed = if outcome_acquired {
                        Probed::Acquired
                    } else {
                        Probed::Failed
                    };
                    line.probed(&mut ticket, 2, probed);
                    barrier.wait();
                    line.turns.lock().clear();
                }
            });
            assert!(
                !acquired_for_prober.load(Ordering::SeqCst),
                "a release acquired in the name of a prober (its attempt acquired: \
                 {outcome_acquired})"
            );
        }
    }

    fn nudge_counter() -> (Arc<AtomicU32>, Waker) {
        let count = Arc::new(AtomicU32::new(0));
        let waker: Waker = {
            let count = Arc::clone(&count);
            Arc::new(move || {
                count.fetch_add(1, Ordering::Relaxed);
            })
        };
        (count, waker)
    }

    #[test]
    fn a_release_by_a_thread_without_the_turn_hands_the_lock_to_the_parked_turn_owner() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        // Thread 1 took the lock uncontended (no entry); thread 2 waits for it in Redis.
        assert_eq!(entered(line.join(&keys, 2, 1_000, false)), TURN);
        let (nudges, nudge) = nudge_counter();
        let parked = line
            .park(&keys, 2, 1_000, false, nudge)
            .expect("has the turn");
        let successor = line.successor(&keys, 1, true).expect("the parked owner");
        assert_eq!((successor.thread(), successor.may_acquire()), (2, true));
        assert!(line.successor(&keys, 1, true).is_none(), "taken once");
        let sent = BootInstant::now();
        line.hand_over(successor, Handed::Lock(sent));
        assert_eq!(nudges.load(Ordering::Relaxed), 1, "woken from its sleep");
        assert_eq!(
            line.unpark(parked),
            Some(Entry::Acquired { sent: Some(sent) })
        );
        line.leave(&keys, 2);
        assert!(!line.is_busy(&keys));
    }

    #[test]
    fn an_unparked_owner_is_no_successor_and_a_fenced_one_only_gets_the_turn() {
        let line = Line::new(Duration::from_secs(60));
        let keys = keys();
        entered(line.join(&keys, 2, 1_000, false));
        let (_, nudge) = nudge_counter();
        let parked = line
            .park(&keys, 2, 1_000, false, nudge)
            .expect("has the turn");
        assert_eq!(
            line.unpark(parked),
            None,
            "nothing handed: it attempts itself"
        );
        assert!(
            line.successor(&keys, 1, true).is_none(),
            "an owner that is attempting is not acquired for"
        );
        let (_, nudge) = nudge_counter();
        assert!(
            line.park(&keys, 3, 1_000, false, nudge).is_none(),
            "no turn, no park"
        );
        let (_, nudge) = nudge_counter();
        let parked = line
            .park(&keys, 2, 1_000, true, nudge)
            .expect("has the turn");
        let successor = line.successor(&keys, 1, true).expect("the parked owner");
        assert!(!successor.may_acquire(), "a fenced waiter acquires itself");
        drop(successor); // a release that failed: the owner is woken with the turn
        assert_eq!(line.unpark(parked), Some(TURN));
    }
}
