//! The watchdog: one thread per manager that keeps the leases of held locks alive, and the
//! manager's registry of which local thread holds which lock (fixed-lease holds included,
//! though only renewed ones are renewed).
//!
//! The thread ticks every half renewal period while anything is held (and for a few ticks
//! after, so that a lock taken and released in a loop never has to wake it), and at each tick
//! renews every hold due within the next half period, in one pipelined round trip (100 keys
//! per script call). Registering a hold is a map insert: no heap entry, no wake-up. A failed
//! sweep is retried after a quarter period (at most 1 s), well inside the lease.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender};

use crate::clock::{lease_deadline, BootInstant};
use crate::fork::Origin;
use crate::names::LockKeys;
use crate::owner::owner_field;
use crate::store::LockStore;
use crate::threads;

/// What the guards of one thread's hold on one lock can observe about it, without I/O.
#[derive(Debug, Default)]
pub(crate) struct HoldStatus {
    /// Found gone at a renewal, or its confirmed lease ran out without a renewal.
    lost: AtomicBool,
    /// The end of the lease as last confirmed by Redis (acquire or renewal), on the boot
    /// clock, measured from when that request was sent.
    deadline: AtomicU64,
    /// The guards' lost signals, told when the hold is found lost; dropped with the hold.
    signals: Mutex<Vec<Sender<()>>>,
}

impl HoldStatus {
    /// Lost: the watchdog found it gone, or its confirmed lease is over.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire) || BootInstant::now() >= self.deadline()
    }

    /// The confirmed lease left; `None` once lost.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        if self.lost.load(Ordering::Acquire) {
            return None;
        }
        let left = self.deadline().saturating_since(BootInstant::now());
        (!left.is_zero()).then_some(left)
    }

    /// A receiver that gets one message when the hold is found lost, and is disconnected when
    /// the hold ends without that.
    pub(crate) fn lost_signal(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.lost.load(Ordering::Acquire) {
            let _ = tx.send(());
        } else {
            self.signals.lock().push(tx);
        }
        rx
    }

    fn deadline(&self) -> BootInstant {
        BootInstant::from_nanos(self.deadline.load(Ordering::Acquire))
    }

    fn confirm(&self, deadline: BootInstant) {
        self.deadline.store(deadline.as_nanos(), Ordering::Release);
    }

    /// Marks the hold lost and tells every signal; only the first call does anything.
    fn mark_lost(&self) -> bool {
        if self.lost.swap(true, Ordering::AcqRel) {
            return false;
        }
        for signal in self.signals.lock().drain(..) {
            let _ = signal.try_send(());
        }
        true
    }
}

/// What a thread still holds of one lock after releasing a hold.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HoldsLeft {
    /// All its holds.
    pub(crate) total: u32,
    /// Those the watchdog renews.
    pub(crate) renewed: u32,
}

/// One thread's holds on one lock: the unit the watchdog renews.
#[derive(Clone)]
struct HoldKey {
    keys: Arc<LockKeys>,
    thread: u64,
}

impl PartialEq for HoldKey {
    fn eq(&self, other: &Self) -> bool {
        self.thread == other.thread && self.keys.name == other.keys.name
    }
}

impl Eq for HoldKey {}

impl Hash for HoldKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.keys.name.hash(state);
        self.thread.hash(state);
    }
}

struct Renewal {
    /// Guards of this thread on this lock that asked for renewal.
    holds: u32,
    /// Guards of this thread on this lock with a fixed lease (not renewed, only counted).
    fixed: u32,
    /// When the next renewal is due; `None` while no guard asks for renewal.
    due: Option<Instant>,
    status: Arc<HoldStatus>,
}

#[derive(Default)]
struct State {
    renewals: HashMap<HoldKey, Renewal>,
    /// Whether the thread sleeps until woken (nothing held for a while) rather than ticking.
    dormant: bool,
    /// When the sleeping thread means to wake; a hold whose lease ends earlier wakes it.
    wake_at: Option<Instant>,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    store: Arc<LockStore>,
    client_id: String,
    timeout_ms: u64,
    period: Duration,
}

/// Handle to the watchdog thread; dropping it stops and joins the thread.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process whose thread this is (see [`crate::fork`]).
    origin: Origin,
}

impl Watchdog {
    pub(crate) fn start(
        store: Arc<LockStore>,
        client_id: String,
        timeout_ms: u64,
        period: Duration,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            store,
            client_id,
            timeout_ms,
            period,
        });
        let thread = std::thread::Builder::new()
            .name("redis-lock-watchdog".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared)
            })?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
            origin: Origin::current(),
        })
    }

    /// Records one more hold of `thread` on `keys`, whose lease of `lease` was confirmed by a
    /// request sent at `sent`; `renewed` ones are renewed from now on.
    pub(crate) fn register(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        renewed: bool,
        sent: BootInstant,
        lease: Duration,
    ) -> Arc<HoldStatus> {
        let hold = HoldKey {
            keys: Arc::clone(keys),
            thread,
        };
        let mut state = self.shared.state.lock();
        let renewal = state.renewals.entry(hold).or_insert_with(|| Renewal {
            holds: 0,
            fixed: 0,
            due: None,
            status: Arc::new(HoldStatus::default()),
        });
        // Every acquire (a re-entry too) sets the key's TTL afresh.
        let deadline = lease_deadline(sent, lease);
        renewal.status.confirm(deadline);
        let status = Arc::clone(&renewal.status);
        if renewed {
            renewal.holds += 1;
            if renewal.due.is_none() {
                renewal.due = Some(Instant::now() + self.shared.period);
            }
        } else {
            renewal.fixed += 1;
        }
        // Awake while anything is held: it renews, and it reports leases that ran out as soon
        // as they do.
        let ends_sooner =
            |at: Instant| Instant::now() + deadline.saturating_since(BootInstant::now()) < at;
        if state.dormant || state.wake_at.is_some_and(ends_sooner) {
            state.dormant = false;
            self.shared.wake.notify_one();
        }
        status
    }

    /// One hold fewer of `thread` on `keys`; the last renewed one stops the renewal. Returns
    /// what the thread has left on the lock.
    pub(crate) fn unregister(&self, keys: &Arc<LockKeys>, thread: u64, renewed: bool) -> HoldsLeft {
        let hold = HoldKey {
            keys: Arc::clone(keys),
            thread,
        };
        let mut state = self.shared.state.lock();
        let Some(renewal) = state.renewals.get_mut(&hold) else {
            return HoldsLeft::default();
        };
        if renewed {
            renewal.holds = renewal.holds.saturating_sub(1);
            if renewal.holds == 0 {
                renewal.due = None;
            }
        } else {
            renewal.fixed = renewal.fixed.saturating_sub(1);
        }
        let left = HoldsLeft {
            total: renewal.holds + renewal.fixed,
            renewed: renewal.holds,
        };
        if left.total == 0 {
            state.renewals.remove(&hold);
        }
        left
    }

    /// How many holds `thread` has on `keys` through this manager.
    pub(crate) fn holds(&self, keys: &Arc<LockKeys>, thread: u64) -> u32 {
        let hold = HoldKey {
            keys: Arc::clone(keys),
            thread,
        };
        let state = self.shared.state.lock();
        state
            .renewals
            .get(&hold)
            .map_or(0, |renewal| renewal.holds + renewal.fixed)
    }

    /// How many holds are being renewed (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        let state = self.shared.state.lock();
        state.renewals.values().filter(|r| r.holds > 0).count()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if self.origin.is_forked() {
            // A child made by fork(): the thread does not exist here (joining it fails), and
            // the state lock may have been held by it at the fork, never to be released. Touch
            // nothing; the parent's copy is untouched either way.
            std::mem::forget(thread);
            return;
        }
        self.shared.state.lock().shutdown = true;
        self.shared.wake.notify_all();
        threads::join_stopping(thread, "watchdog");
    }
}

/// Ticks a dormant-free watchdog stays awake for after the last hold is gone.
const IDLE_TICKS: u32 = 4;

fn run(shared: &Shared) {
    let tick = (shared.period / 2).max(Duration::from_millis(1));
    let mut next = Instant::now() + tick;
    let mut idle_ticks = 0;
    let mut state = shared.state.lock();
    loop {
        if state.shutdown {
            return;
        }
        if state.dormant {
            shared.wake.wait(&mut state);
            next = Instant::now() + tick;
            continue;
        }
        // Leases that ran out are reported at once, not at the next tick.
        expire_overdue(shared, &mut state);
        if Instant::now() < next {
            let until = earliest_deadline(&state).map_or(next, |end| end.min(next));
            state.wake_at = Some(until);
            shared.wake.wait_until(&mut state, until);
            state.wake_at = None;
            continue;
        }
        let now = Instant::now();
        next = now + tick;
        if state.renewals.is_empty() {
            idle_ticks += 1;
            if idle_ticks >= IDLE_TICKS {
                state.dormant = true;
            }
            continue;
        }
        idle_ticks = 0;
        let batch = take_due(&state, now + tick);
        if batch.is_empty() {
            continue;
        }
        let deadlines: Vec<BootInstant> = batch
            .iter()
            .filter_map(|hold| state.renewals.get(hold))
            .map(|renewal| renewal.status.deadline())
            .collect();
        let sent = (Instant::now(), BootInstant::now());
        let outcome = MutexGuard::unlocked(&mut state, || renew(shared, &batch, &deadlines));
        if let Some(retry_at) = apply(shared, &mut state, batch, outcome, sent) {
            next = next.min(retry_at);
        }
    }
}

/// Holds whose confirmed lease ran out without a confirmed renewal (Redis unreachable or too
/// slow, or a fixed lease that was not released in time) are lost: their owners are told,
/// and they are not renewed any more.
fn expire_overdue(shared: &Shared, state: &mut State) {
    let now = BootInstant::now();
    state.renewals.retain(|hold, renewal| {
        if renewal.status.deadline() > now {
            return true;
        }
        if renewal.status.mark_lost() {
            shared.store.counters.hold_lost();
            log::warn!(
                "lock {:?} is lost: its lease ran out without a confirmed renewal",
                hold.keys.name
            );
        }
        false
    });
}

/// When the first confirmed lease of a hold ends, on the clock the thread sleeps by.
fn earliest_deadline(state: &State) -> Option<Instant> {
    let first = state.renewals.values().map(|r| r.status.deadline()).min()?;
    Some(Instant::now() + first.saturating_since(BootInstant::now()))
}

/// Every renewed hold due before `horizon`.
fn take_due(state: &State, horizon: Instant) -> Vec<HoldKey> {
    state
        .renewals
        .iter()
        .filter(|(_, r)| r.due.is_some_and(|due| due <= horizon))
        .map(|(hold, _)| hold.clone())
        .collect()
}

/// Sends one renewal sweep. `None` means it failed (error or panic) and should be retried.
fn renew(shared: &Shared, batch: &[HoldKey], deadlines: &[BootInstant]) -> Option<Vec<bool>> {
    let owners: Vec<String> = batch
        .iter()
        .map(|h| owner_field(&shared.client_id, h.thread))
        .collect();
    let pairs: Vec<(&str, &str)> = batch
        .iter()
        .zip(&owners)
        .map(|(h, o)| (&*h.keys.name, o.as_str()))
        .collect();
    // No longer than the first of these leases has left: past that, they are lost anyway and
    // their owners must be told, which this thread does between sweeps.
    let now = BootInstant::now();
    let budget = deadlines
        .iter()
        .map(|deadline| deadline.saturating_since(now))
        .min()
        .unwrap_or_default();
    shared.store.counters.renewal_sweep();
    match catch_unwind(AssertUnwindSafe(|| {
        shared.store.renew(&pairs, shared.timeout_ms, budget)
    })) {
        Ok(Ok(renewed)) if renewed.len() == batch.len() => Some(renewed),
        Ok(Ok(renewed)) => {
            log::warn!(
                "lock renewal: {} replies for {} locks; retrying",
                renewed.len(),
                batch.len()
            );
            None
        }
        Ok(Err(err)) => {
            log::warn!(
                "lock renewal of {} locks failed: {err}; retrying",
                batch.len()
            );
            None
        }
        Err(_) => {
            log::error!("lock renewal panicked; retrying");
            None
        }
    }
}

/// Reschedules renewed holds and drops lost ones; after a failed sweep, returns when to retry
/// it (soon: well inside the lease, not a whole period later).
fn apply(
    shared: &Shared,
    state: &mut State,
    batch: Vec<HoldKey>,
    outcome: Option<Vec<bool>>,
    sent: (Instant, BootInstant),
) -> Option<Instant> {
    let retry_at = Instant::now()
        + (shared.period / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
    for (i, hold) in batch.into_iter().enumerate() {
        let Some(renewal) = state.renewals.get_mut(&hold) else {
            continue; // released while the sweep was in flight
        };
        if renewal.due.is_none() {
            continue; // no renewed hold left while the sweep was in flight
        }
        renewal.due = Some(match &outcome {
            Some(renewed) if renewed[i] => {
                let timeout = Duration::from_millis(shared.timeout_ms);
                renewal.status.confirm(lease_deadline(sent.1, timeout));
                sent.0 + shared.period
            }
            Some(_) => {
                renewal.status.mark_lost();
                shared.store.counters.hold_lost();
                log::warn!(
                    "lock {:?} was lost: the watchdog found no hold of its owner",
                    hold.keys.name
                );
                state.renewals.remove(&hold);
                continue;
            }
            None => retry_at,
        });
    }
    outcome.is_none().then_some(retry_at)
}
