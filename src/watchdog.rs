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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::names::LockKeys;
use crate::owner::owner_field;
use crate::store::LockStore;

/// What the holders of one renewed hold can observe about it.
#[derive(Debug, Default)]
pub(crate) struct HoldStatus {
    lost: AtomicBool,
}

impl HoldStatus {
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }
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
        })
    }

    /// Records one more hold of `thread` on `keys`; `renewed` ones are renewed from now on.
    pub(crate) fn register(
        &self,
        keys: &Arc<LockKeys>,
        thread: u64,
        renewed: bool,
    ) -> Arc<HoldStatus> {
        let hold = HoldKey {
            keys: Arc::clone(keys),
            thread,
        };
        let mut state = self.shared.state.lock();
        let renewal = state
            .renewals
            .entry(hold.clone())
            .or_insert_with(|| Renewal {
                holds: 0,
                fixed: 0,
                due: None,
                status: Arc::new(HoldStatus::default()),
            });
        let status = Arc::clone(&renewal.status);
        if !renewed {
            renewal.fixed += 1;
            return status;
        }
        renewal.holds += 1;
        if renewal.due.is_none() {
            renewal.due = Some(Instant::now() + self.shared.period);
        }
        if state.dormant {
            state.dormant = false;
            self.shared.wake.notify_one();
        }
        status
    }

    /// One hold fewer of `thread` on `keys`; the last renewed one stops the renewal. Returns
    /// how many holds the thread has left on the lock.
    pub(crate) fn unregister(&self, keys: &Arc<LockKeys>, thread: u64, renewed: bool) -> u32 {
        let hold = HoldKey {
            keys: Arc::clone(keys),
            thread,
        };
        let mut state = self.shared.state.lock();
        let Some(renewal) = state.renewals.get_mut(&hold) else {
            return 0;
        };
        if renewed {
            renewal.holds = renewal.holds.saturating_sub(1);
            if renewal.holds == 0 {
                renewal.due = None;
            }
        } else {
            renewal.fixed = renewal.fixed.saturating_sub(1);
        }
        let left = renewal.holds + renewal.fixed;
        if left == 0 {
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

    /// Whether `thread`'s hold on `keys` is being renewed.
    pub(crate) fn is_renewing(&self, keys: &Arc<LockKeys>, thread: u64) -> bool {
        let hold = HoldKey {
            keys: Arc::clone(keys),
            thread,
        };
        let state = self.shared.state.lock();
        state.renewals.get(&hold).is_some_and(|r| r.holds > 0)
    }

    /// How many holds are being renewed (for tests and diagnostics).
    pub(crate) fn len(&self) -> usize {
        let state = self.shared.state.lock();
        state.renewals.values().filter(|r| r.holds > 0).count()
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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
        if Instant::now() < next {
            shared.wake.wait_until(&mut state, next);
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
        let sent = Instant::now();
        let outcome = MutexGuard::unlocked(&mut state, || renew(shared, &batch));
        if let Some(retry_at) = apply(shared, &mut state, batch, outcome, sent) {
            next = next.min(retry_at);
        }
    }
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
fn renew(shared: &Shared, batch: &[HoldKey]) -> Option<Vec<bool>> {
    let owners: Vec<String> = batch
        .iter()
        .map(|h| owner_field(&shared.client_id, h.thread))
        .collect();
    let pairs: Vec<(&str, &str)> = batch
        .iter()
        .zip(&owners)
        .map(|(h, o)| (&*h.keys.name, o.as_str()))
        .collect();
    shared.store.counters.renewal_sweep();
    match catch_unwind(AssertUnwindSafe(|| {
        shared.store.renew(&pairs, shared.timeout_ms)
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
    sent: Instant,
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
            Some(renewed) if renewed[i] => sent + shared.period,
            Some(_) => {
                renewal.status.lost.store(true, Ordering::Release);
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
