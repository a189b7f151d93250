//! [`Stats`]: counters of what a manager has sent and found, for metrics and benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of a manager's counters since it started ([`LockManager::stats`]).
///
/// They count what this client sends and sees, not what Redis executes: a script call is one
/// command however many commands it runs inside Redis.
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
    /// Successful acquisitions (re-entries included).
    pub acquisitions: u64,
    /// Acquisitions that had to wait: the lock was held when first tried.
    pub waits: u64,
    /// The time those waits took, added up.
    pub wait_time: Duration,
    /// Renewal sweeps the watchdog sent (each one round trip for all locks due).
    pub renewal_sweeps: u64,
    /// Holds renewed (one per hold per sweep).
    pub renewals: u64,
    /// Renewal sweeps that failed (Redis unreachable or too slow); they are retried.
    pub renewal_failures: u64,
    /// Holds found lost: gone at a renewal (expired, force-unlocked or taken over), or whose
    /// confirmed lease ran out without a renewal.
    pub holds_lost: u64,
    /// Messages that woke local waiters: unlock messages for locks, and release, permit and
    /// count-reached-zero messages for semaphores and count-down latches; and reports of a
    /// change of a waited lock key (client tracking), one per key reported.
    pub wakeups: u64,
    /// Connections opened again after one was found dead (the pub/sub listener's and pooled
    /// ones).
    pub reconnects: u64,
    /// Releases that acquired the lock for the next local thread in the same script call.
    pub local_handoffs: u64,
    /// Releases that left the lock free because other clients were waiting for it (see the
    /// crate docs on fairness).
    pub yields: u64,
    /// Releases that granted the lock to a waiting client of this crate elsewhere, in the same
    /// script call (see the crate docs on fairness).
    pub grants_given: u64,
    /// Acquisitions granted by another client's release: taken when the grant's message came,
    /// without a request of their own.
    pub grants_taken: u64,
}

/// The live counters behind [`Stats`], shared by the engine, the store, the listener and the
/// watchdog.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    commands: AtomicU64,
    round_trips: AtomicU64,
    acquisitions: AtomicU64,
    waits: AtomicU64,
    wait_nanos: AtomicU64,
    renewal_sweeps: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    holds_lost: AtomicU64,
    wakeups: AtomicU64,
    reconnects: AtomicU64,
    local_handoffs: AtomicU64,
    yields: AtomicU64,
    grants_given: AtomicU64,
    grants_taken: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    /// One round trip carrying `commands` commands.
    pub(crate) fn sent(&self, commands: u64) {
        bump(&self.commands, commands);
        bump(&self.round_trips, 1);
    }

    /// An acquisition; `waited` when the lock was held at first.
    pub(crate) fn acquired(&self, waited: Option<Duration>) {
        bump(&self.acquisitions, 1);
        if let Some(waited) = waited {
            bump(&self.waits, 1);
            bump(
                &self.wait_nanos,
                waited.as_nanos().min(u128::from(u64::MAX)) as u64,
            );
        }
    }

    pub(crate) fn renewal_sweep(&self) {
        bump(&self.renewal_sweeps, 1);
    }

    pub(crate) fn renewed(&self, holds: u64) {
        bump(&self.renewals, holds);
    }

    pub(crate) fn renewal_failed(&self) {
        bump(&self.renewal_failures, 1);
    }

    pub(crate) fn hold_lost(&self) {
        bump(&self.holds_lost, 1);
    }

    pub(crate) fn wakeup(&self) {
        bump(&self.wakeups, 1);
    }

    pub(crate) fn reconnect(&self) {
        bump(&self.reconnects, 1);
    }

    pub(crate) fn local_handoff(&self) {
        bump(&self.local_handoffs, 1);
    }

    pub(crate) fn yielded(&self) {
        bump(&self.yields, 1);
    }

    pub(crate) fn grant_given(&self) {
        bump(&self.grants_given, 1);
    }

    pub(crate) fn grant_taken(&self) {
        bump(&self.grants_taken, 1);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            commands: load(&self.commands),
            round_trips: load(&self.round_trips),
            acquisitions: load(&self.acquisitions),
            waits: load(&self.waits),
            wait_time: Duration::from_nanos(load(&self.wait_nanos)),
            renewal_sweeps: load(&self.renewal_sweeps),
            renewals: load(&self.renewals),
            renewal_failures: load(&self.renewal_failures),
            holds_lost: load(&self.holds_lost),
            wakeups: load(&self.wakeups),
            reconnects: load(&self.reconnects),
            local_handoffs: load(&self.local_handoffs),
            yields: load(&self.yields),
            grants_given: load(&self.grants_given),
            grants_taken: load(&self.grants_taken),
        }
    }
}
