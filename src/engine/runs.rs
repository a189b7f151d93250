//! Runs on a spin lock: how long the threads of one manager have kept a spin lock among
//! themselves, and the *gap* that ends a run so that other clients' pollers get in.
//!
//! A spin lock's release announces nothing, and its waiters in other processes (ours or
//! Redisson's) look again only after their back-off, up to 128 ms apart. A local thread that
//! takes the lock right after another one released it (the line's next thread, or the
//! releasing thread coming back) therefore almost always wins, and a busy manager would keep
//! the lock from every other process for as long as its threads want it. So once a run has
//! lasted its budget, the release leaves the lock free for [`GAP`], longer than the longest
//! back-off: nobody here attempts before the gap ends, and every remote poller looks at least
//! once meanwhile. The budget adapts, one value per manager: back to [`RUN_MIN`] when a gap's
//! end finds the lock taken (someone else got in: keep the runs short), doubled up to
//! [`RUN_MAX`] when it finds the lock free (nobody came: a gap is only idle time).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::names::LockKeys;

/// How long a manager keeps a spin lock in a row at least and at most before a gap.
const RUN_MIN: Duration = Duration::from_millis(200);
const RUN_MAX: Duration = Duration::from_secs(2);

/// How long a gap leaves the lock to others: Redisson's longest spin back-off (128 ms, ours
/// the same) plus its jitter and room for a late wake-up on a loaded machine.
pub(crate) const GAP: Duration = Duration::from_millis(160);

/// Above this many runs, those of locks released longer than a gap ago are swept out.
const SWEEP_ABOVE: usize = 64;

/// The runs of the spin locks a manager's threads hold or held a moment ago.
pub(crate) struct Runs {
    runs: Mutex<HashMap<Arc<LockKeys>, Run>>,
    /// The current budget, in ms (see the module docs).
    budget_ms: AtomicU64,
}

/// One lock's run.
struct Run {
    since: Instant,
    /// When its last hold was released; `None` while held.
    released: Option<Instant>,
}

impl Run {
    /// Whether the run still goes on at `now`: the lock is held here, or was let go less than
    /// a gap ago (a remote poller need not have looked since).
    fn goes_on(&self, now: Instant) -> bool {
        self.released.is_none_or(|at| now.duration_since(at) < GAP)
    }
}

impl Runs {
    pub(crate) fn new() -> Self {
        Runs {
            runs: Mutex::new(HashMap::new()),
            budget_ms: AtomicU64::new(RUN_MIN.as_millis() as u64),
        }
    }

    /// A thread of this manager took a hold of the spin lock `keys`.
    pub(crate) fn acquired(&self, keys: &Arc<LockKeys>) {
        let now = Instant::now();
        let mut runs = self.runs.lock();
        if runs.len() > SWEEP_ABOVE {
            runs.retain(|_, run| run.goes_on(now));
        }
        match runs.get_mut(keys) {
            Some(run) if run.goes_on(now) => run.released = None,
            _ => {
                runs.insert(
                    Arc::clone(keys),
                    Run {
                        since: now,
                        released: None,
                    },
                );
            }
        }
    }

    /// This manager's last hold of `keys` was released (`freed`: the lock is free now, else
    /// the release failed or found it lost). `Some(end)` when the run had lasted its budget:
    /// nobody here may attempt before `end`.
    pub(crate) fn released(&self, keys: &Arc<LockKeys>, freed: bool) -> Option<Instant> {
        let now = Instant::now();
        let mut runs = self.runs.lock();
        let run = runs.get_mut(keys)?;
        let budget = Duration::from_millis(self.budget_ms.load(Ordering::Relaxed));
        if !freed || now.duration_since(run.since) < budget {
            run.released = Some(now);
            return None;
        }
        runs.remove(keys);
        Some(now + GAP)
    }

    /// A thread that waited out a gap found the lock free (`true`: nobody else took it) or
    /// taken.
    pub(crate) fn gap_outcome(&self, found_free: bool) {
        let budget = self.budget_ms.load(Ordering::Relaxed);
        let next = if found_free {
            (budget * 2).min(RUN_MAX.as_millis() as u64)
        } else {
            RUN_MIN.as_millis() as u64
        };
        self.budget_ms.store(next, Ordering::Relaxed);
    }

    /// How many locks have a run (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.runs.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(name: &str) -> Arc<LockKeys> {
        Arc::new(LockKeys::new(name).unwrap())
    }

    #[test]
    fn a_run_ends_with_a_gap_once_it_has_lasted_its_budget() {
        let runs = Runs::new();
        let lock = keys("runs:budget");
        runs.acquired(&lock);
        assert_eq!(runs.released(&lock, true), None, "a short run goes on");
        runs.acquired(&lock);
        std::thread::sleep(RUN_MIN);
        let end = runs.released(&lock, true).expect("a gap");
        assert!(end > Instant::now() + GAP / 2, "{end:?}");
        assert_eq!(runs.len(), 0, "the run is over");
        // Taken again after the gap: a new run, which is short.
        runs.acquired(&lock);
        assert_eq!(runs.released(&lock, true), None);
    }

    #[test]
    fn a_lock_let_go_for_a_gap_starts_a_new_run() {
        let runs = Runs::new();
        let lock = keys("runs:idle");
        runs.acquired(&lock);
        std::thread::sleep(RUN_MIN);
        // Held past the budget but not freed: no gap yet, and the run goes on.
        assert_eq!(runs.released(&lock, false), None);
        std::thread::sleep(GAP);
        runs.acquired(&lock);
        assert_eq!(runs.released(&lock, true), None, "idle for a gap: new run");
    }

    #[test]
    fn the_budget_grows_while_nobody_comes_and_drops_when_someone_does() {
        let runs = Runs::new();
        for _ in 0..10 {
            runs.gap_outcome(true);
        }
        let max = RUN_MAX.as_millis() as u64;
        assert_eq!(runs.budget_ms.load(Ordering::Relaxed), max);
        runs.gap_outcome(false);
        let min = RUN_MIN.as_millis() as u64;
        assert_eq!(runs.budget_ms.load(Ordering::Relaxed), min);
    }

    #[test]
    fn runs_of_locks_let_go_are_swept_out() {
        let runs = Runs::new();
        let all: Vec<_> = (0..=SWEEP_ABOVE)
            .map(|i| keys(&format!("runs:sweep:{i}")))
            .collect();
        for lock in &all {
            runs.acquired(lock);
            runs.released(lock, true);
        }
        std::thread::sleep(GAP);
        runs.acquired(&keys("runs:sweep:new"));
        assert_eq!(runs.len(), 1);
    }
}
