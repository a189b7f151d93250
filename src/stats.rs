//! [`Stats`]: counters of what a manager has sent and found, for metrics and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a manager's counters since it started ([`LockManager::stats`]).
///
/// They count what this client sends, not what Redis executes: a script call is one command
/// however many commands it runs inside Redis.
///
/// [`LockManager::stats`]: crate::LockManager::stats
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Commands sent to Redis, on pooled and pub/sub connections alike; each command of a
    /// pipeline counts.
    pub commands: u64,
    /// Round trips to Redis: a pipeline of many commands counts once.
    pub round_trips: u64,
    /// Renewal sweeps the watchdog sent (each one round trip for all locks due).
    pub renewal_sweeps: u64,
    /// Holds the watchdog found gone at a renewal (expired, force-unlocked or taken over).
    pub holds_lost: u64,
}

/// The live counters behind [`Stats`], shared by the store, the listener and the watchdog.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    commands: AtomicU64,
    round_trips: AtomicU64,
    renewal_sweeps: AtomicU64,
    holds_lost: AtomicU64,
}

impl Counters {
    /// One round trip carrying `commands` commands.
    pub(crate) fn sent(&self, commands: u64) {
        self.commands.fetch_add(commands, Ordering::Relaxed);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn renewal_sweep(&self) {
        self.renewal_sweeps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hold_lost(&self) {
        self.holds_lost.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            commands: self.commands.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
            renewal_sweeps: self.renewal_sweeps.load(Ordering::Relaxed),
            holds_lost: self.holds_lost.load(Ordering::Relaxed),
        }
    }
}
