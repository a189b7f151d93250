//! The watchdog: one thread per manager that keeps the leases of held locks alive, and the
//! manager's registry of which local thread holds which lock (fixed-lease holds included,
//! though only renewed ones are renewed).
//!
//! Held locks sit in a min-heap ordered by their next renewal time; the thread sleeps on a
//! condvar until the earliest one is due (r2d2's scheduled-thread-pool pattern). When it
//! wakes it takes every lock due within half a period, so locks taken at different moments
//! drift into shared sweeps, and renews them all with one pipelined round trip (100 keys per
//! script call). Cancelled entries stay in the heap and are skipped when popped.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
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
    /// When the next renewal is due; the heap entry with another time is stale, and `None`
    /// while no guard asks for renewal.
    due: Option<Instant>,
    status: Arc<HoldStatus>,
}

/// A heap entry; ordered so that `BinaryHeap` (a max-heap) pops the earliest first.
struct Due {
    at: Instant,
    hold: HoldKey,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.at.cmp(&self.at)
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Due>,
    renewals: HashMap<HoldKey, Renewal>,
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
        if renewal.due.is_some() {
            return status;
        }
        let due = Instant::now() + self.shared.period;
        renewal.due = Some(due);
        let earliest = state.heap.peek().is_none_or(|top| due < top.at);
        state.heap.push(Due { at: due, hold });
        if earliest {
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
                renewal.due = None; // its heap entry is stale now
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

fn run(shared: &Shared) {
    let mut state = shared.state.lock();
    loop {
        if state.shutdown {
            return;
        }
        let now = Instant::now();
        match state.heap.peek() {
            None => {
                shared.wake.wait(&mut state);
                continue;
            }
            Some(top) if top.at > now => {
                let at = top.at;
                shared.wake.wait_until(&mut state, at);
                continue;
            }
            Some(_) => {}
        }
        let batch = take_due(&mut state, now + shared.period / 2);
        if batch.is_empty() {
            continue;
        }
        let sent = Instant::now();
        let outcome = MutexGuard::unlocked(&mut state, || renew(shared, &batch));
        apply(shared, &mut state, batch, outcome, sent);
    }
}

/// Pops every live entry due before `horizon`.
fn take_due(state: &mut State, horizon: Instant) -> Vec<HoldKey> {
    let mut batch = Vec::new();
    while let Some(top) = state.heap.peek() {
        if top.at > horizon {
            break;
        }
        let Due { at, hold } = state.heap.pop().expect("peeked");
        let live = state.renewals.get(&hold).is_some_and(|r| r.due == Some(at));
        if live {
            batch.push(hold);
        }
    }
    batch
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

/// Reschedules renewed holds, drops lost ones, and retries all of a failed sweep soon.
fn apply(
    shared: &Shared,
    state: &mut State,
    batch: Vec<HoldKey>,
    outcome: Option<Vec<bool>>,
    sent: Instant,
) {
    // A failed sweep is retried well inside the lease, not a whole period later.
    let retry_at = Instant::now()
        + (shared.period / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
    for (i, hold) in batch.into_iter().enumerate() {
        let Some(renewal) = state.renewals.get_mut(&hold) else {
            continue; // released while the sweep was in flight
        };
        if renewal.due.is_none() {
            continue; // no renewed hold left while the sweep was in flight
        }
        let next = match &outcome {
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
        };
        renewal.due = Some(next);
        state.heap.push(Due { at: next, hold });
    }
}
