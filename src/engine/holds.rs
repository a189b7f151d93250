//! The hold registry: which local thread holds which lock through this manager, with how many
//! holds, and what its guards can see of the lease without I/O.
//!
//! The registry answers reentrancy ("does this thread hold it already?"), decides when a
//! release is a thread's last (the line hands the lock on only then), and tells the watchdog
//! thread which leases are due for renewal. It counts holds per owner field, as the server
//! does: a thread's holds of a lock, a fair lock and a spin lock of one name are one count
//! (`Family`). It owns the watchdog's sleep: registering a hold is a map insert under the same
//! mutex the watchdog sleeps on, so a hold can never be registered while the watchdog decides,
//! on stale facts, to sleep past its due time.
//!
//! Renewal is due a renewal period (a third of the watchdog timeout, as in Redisson) after the
//! acquire or the last renewal. Holds due within a tenth of a period of each other go in one
//! sweep, so that the watchdog's wake-ups and round trips do not grow with the number of locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::clock::{lease_deadline, BootInstant};
use crate::engine::kind::{Family, LockKind};
use crate::health::HealthState;
use crate::names::LockKeys;
use crate::stats::Counters;

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
    /// The token the hold was taken with, for a kind with one per acquisition
    /// (`LockKind::fresh_token`): its renewals and releases send it instead of the owner field.
    token: Option<Arc<str>>,
}

impl HoldStatus {
    /// The hold's own token, if its kind has one per acquisition.
    pub(crate) fn token(&self) -> Option<&Arc<str>> {
        self.token.as_ref()
    }

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
        self.tell_when_lost(tx);
        rx
    }

    /// Sends on `tell` (without blocking: a full channel was told already) when the hold is
    /// found lost, at once if it is; drops `tell` when the hold ends without that.
    pub(crate) fn tell_when_lost(&self, tell: Sender<()>) {
        // Looked at under the signals' lock, which `mark_lost` takes after setting `lost`:
        // a loss in between finds `tell` in the list.
        let mut signals = self.signals.lock();
        if self.lost.load(Ordering::Acquire) {
            let _ = tell.try_send(());
        } else {
            signals.push(tell);
        }
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

/// What [`Holds::unregister`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unregistered {
    /// The hold was counted off; this is what the thread has left on the lock.
    Counted(HoldsLeft),
    /// The hold had been found lost (or its lease had run out) and was no longer counted.
    /// With `newer`, the thread holds the lock again by a newer hold, which a release in its
    /// name would take; without, what may be left of the lost one on Redis is its own.
    Lost { newer: bool },
}

/// What a thread still holds of one lock after releasing a hold.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HoldsLeft {
    /// All its holds.
    pub(crate) total: u32,
    /// Those the watchdog renews.
    pub(crate) renewed: u32,
}

/// One thread's holds on one lock, of one family: the unit the watchdog renews.
#[derive(Clone)]
pub(crate) struct HoldKey {
    /// The kind that renews them: any kind of the family, which all renew alike.
    pub(crate) kind: &'static dyn LockKind,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) thread: u64,
    /// The holds' token, if their kind has one per acquisition (see [`HoldStatus::token`]).
    pub(crate) token: Option<Arc<str>>,
}

impl HoldKey {
    fn slot(&self) -> Slot {
        Slot::new(self.kind.id().family(), &self.keys, self.thread)
    }
}

/// Where the registry counts a thread's holds on a lock: per owner field, so that the holds of
/// kinds that share one (a lock, a fair lock and a spin lock of one name) are counted together,
/// as the server counts them.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Slot {
    keys: Arc<LockKeys>,
    thread: u64,
    family: Family,
}

impl Slot {
    fn new(family: Family, keys: &Arc<LockKeys>, thread: u64) -> Self {
        Slot {
            keys: Arc::clone(keys),
            thread,
            family,
        }
    }

    fn of(kind: &'static dyn LockKind, keys: &Arc<LockKeys>, thread: u64) -> Self {
        Slot::new(kind.id().family(), keys, thread)
    }

    fn hold_key(&self, hold: &Hold) -> HoldKey {
        HoldKey {
            kind: hold.kind,
            keys: Arc::clone(&self.keys),
            thread: self.thread,
            token: hold.status.token.clone(),
        }
    }
}

struct Hold {
    /// The kind of the first of these holds, which renews them all.
    kind: &'static dyn LockKind,
    /// Guards of this thread on this lock that asked for renewal.
    renewed: u32,
    /// Guards of this thread on this lock with a fixed lease (not renewed, only counted).
    fixed: u32,
    /// When the next renewal is due; `None` while no guard asks for renewal.
    due: Option<Instant>,
    /// When renewals stop (the earliest `AcquireOptions::max_hold` of its guards); `None`:
    /// renewed while a guard asks for it.
    renew_until: Option<Instant>,
    status: Arc<HoldStatus>,
}

#[derive(Default)]
struct State {
    holds: HashMap<Slot, Hold>,
    /// When the sleeping watchdog means to wake; `None` while it sleeps with nothing to wait
    /// for (or is awake). A hold due, or a lease ending, earlier wakes it.
    wake_at: Option<Instant>,
    /// The watchdog sleeps until woken: nothing is held.
    dormant: bool,
    shutdown: bool,
}

/// One renewal sweep for the watchdog to send.
pub(crate) struct Sweep {
    /// The holds to renew.
    pub(crate) batch: Vec<HoldKey>,
    /// Their status records, to tell a hold from a newer one of the same thread and lock
    /// (released and taken again while the sweep was in flight), which the sweep's answer
    /// is not about.
    statuses: Vec<Arc<HoldStatus>>,
    /// How long the sweep may take: the shortest confirmed lease left among them (past that
    /// they are lost anyway, and their owners must be told).
    pub(crate) budget: Duration,
    /// When it was taken, on both clocks: the renewed leases count from then.
    pub(crate) sent: (Instant, BootInstant),
}

/// Told of every hold found lost (under the registry's lock, which it must not take).
pub(crate) type OnLost = Box<dyn Fn(&HoldKey) + Send + Sync>;

/// The registry (see the module docs).
pub(crate) struct Holds {
    state: Mutex<State>,
    wake: Condvar,
    /// How often a renewed hold is renewed: a third of the watchdog timeout.
    period: Duration,
    /// The lease a renewal sets.
    timeout: Duration,
    counters: Arc<Counters>,
    /// The manager's health, which the sweeps and the lease ends move.
    health: Arc<HealthState>,
    /// The line passes a lost hold's turn on (a thread whose hold is gone must not keep the
    /// other local threads from asking Redis).
    on_lost: OnLost,
}

impl Holds {
    pub(crate) fn new(
        timeout: Duration,
        counters: Arc<Counters>,
        health: Arc<HealthState>,
        on_lost: OnLost,
    ) -> Self {
        Holds {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            period: timeout / 3,
            timeout,
            counters,
            health,
            on_lost,
        }
    }

    /// Records one more hold of `thread` on `keys`, whose lease of `lease` was confirmed by a
    /// request sent at `sent`; `renewed` ones are renewed from now on, for at most
    /// `renew_for` when it is given. A first hold keeps `token` (see [`HoldStatus::token`]);
    /// a re-entry was taken with the hold's own.
    pub(crate) fn register(
        &self,
        (kind, token): (&'static dyn LockKind, Option<&str>),
        keys: &Arc<LockKeys>,
        thread: u64,
        (renewed, renew_for): (bool, Option<Duration>),
        sent: BootInstant,
        lease: Duration,
    ) -> Arc<HoldStatus> {
        let mut state = self.state.lock();
        let hold = state
            .holds
            .entry(Slot::of(kind, keys, thread))
            .or_insert_with(|| Hold {
                kind,
                renewed: 0,
                fixed: 0,
                due: None,
                renew_until: None,
                status: Arc::new(HoldStatus {
                    token: token.map(Arc::from),
                    ..HoldStatus::default()
                }),
            });
        // Every acquire (a re-entry too) sets the key's TTL afresh.
        let deadline = lease_deadline(sent, lease);
        hold.status.confirm(deadline);
        let status = Arc::clone(&hold.status);
        if renewed {
            hold.renewed += 1;
            if hold.due.is_none() {
                hold.due = Some(Instant::now() + self.period);
            }
            if let Some(until) = renew_for.and_then(|d| Instant::now().checked_add(d)) {
                hold.renew_until = Some(hold.renew_until.map_or(until, |u| u.min(until)));
            }
        } else {
            hold.fixed += 1;
        }
        // The watchdog must be awake for the earlier of the renewal and the lease's end: it
        // renews, and it reports leases that ran out as soon as they do. Usually it already
        // is (a hold registered now is due after every hold registered before it).
        let wake_by = hold
            .due
            .filter(|_| renewed)
            .unwrap_or_else(|| boot_to_instant(deadline));
        if state.dormant || state.wake_at.is_some_and(|at| wake_by < at) {
            state.dormant = false;
            self.wake.notify_one();
        }
        status
    }

    /// One hold fewer of `thread` on `keys`, the one whose guard has `status`; the last
    /// renewed one stops the renewal. See [`Unregistered`] for what it found.
    pub(crate) fn unregister(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        thread: u64,
        renewed: bool,
        status: &Arc<HoldStatus>,
    ) -> Unregistered {
        let key = Slot::of(kind, keys, thread);
        let mut state = self.state.lock();
        let hold = match state.holds.get_mut(&key) {
            Some(hold) if Arc::ptr_eq(&hold.status, status) => hold,
            other => {
                return Unregistered::Lost {
                    newer: other.is_some(),
                }
            }
        };
        if renewed {
            hold.renewed = hold.renewed.saturating_sub(1);
            if hold.renewed == 0 {
                hold.due = None;
            }
        } else {
            hold.fixed = hold.fixed.saturating_sub(1);
        }
        let left = HoldsLeft {
            total: hold.renewed + hold.fixed,
            renewed: hold.renewed,
        };
        if left.total == 0 {
            state.holds.remove(&key);
        }
        Unregistered::Counted(left)
    }

    /// A force unlock through this manager deleted the lock `name`: every hold of it here is
    /// lost, so that a thread that locks it again gets a new hold, which its older guards'
    /// releases leave alone (instead of counting the new one off).
    pub(crate) fn forget(&self, name: &str) {
        let mut state = self.state.lock();
        state.holds.retain(|key, hold| {
            if *key.keys.name != *name {
                return true;
            }
            if hold.status.mark_lost() {
                self.counters.hold_lost();
            }
            (self.on_lost)(&key.hold_key(hold));
            false
        });
    }

    /// The holds of `thread` on `keys` in the family of `kind` are gone from the server (a
    /// release that was not the last freed the lock): lost, as a renewal that found them gone
    /// would find them.
    pub(crate) fn lose(&self, kind: &'static dyn LockKind, keys: &Arc<LockKeys>, thread: u64) {
        let slot = Slot::of(kind, keys, thread);
        let mut state = self.state.lock();
        let Some(hold) = state.holds.remove(&slot) else {
            return;
        };
        if hold.status.mark_lost() {
            self.counters.hold_lost();
        }
        (self.on_lost)(&slot.hold_key(&hold));
    }

    /// A release left `thread` holding `keys` and set its lease to `lease` by a request sent
    /// at `sent` (a re-entry with a shorter fixed lease may have cut it before).
    pub(crate) fn confirm(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        thread: u64,
        sent: BootInstant,
        lease: Duration,
    ) {
        let key = Slot::of(kind, keys, thread);
        if let Some(hold) = self.state.lock().holds.get(&key) {
            hold.status.confirm(lease_deadline(sent, lease));
        }
    }

    /// How many holds `thread` has on `keys` through this manager in the owner field that
    /// `kind` counts in: its own and those of the kinds that share the field.
    pub(crate) fn count(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        thread: u64,
    ) -> u32 {
        let key = Slot::of(kind, keys, thread);
        let state = self.state.lock();
        state
            .holds
            .get(&key)
            .map_or(0, |hold| hold.renewed + hold.fixed)
    }

    /// The token of the hold `thread` has on `keys` in the family of `kind`, if it has one
    /// and its kind has a token per acquisition.
    pub(crate) fn token(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        thread: u64,
    ) -> Option<Arc<str>> {
        let key = Slot::of(kind, keys, thread);
        let state = self.state.lock();
        state.holds.get(&key)?.status.token.clone()
    }

    /// The family of a hold that `thread` has on `keys` and that forbids it a hold of `kind`
    /// (see [`Family::conflicts_with`]), if any.
    pub(crate) fn conflicting(
        &self,
        kind: &'static dyn LockKind,
        keys: &Arc<LockKeys>,
        thread: u64,
    ) -> Option<Family> {
        let family = kind.id().family();
        let state = self.state.lock();
        Family::ALL.into_iter().find(|&held| {
            family.conflicts_with(held) && state.holds.contains_key(&Slot::new(held, keys, thread))
        })
    }

    /// How many holds are being renewed (for tests and diagnostics).
    pub(crate) fn renewing_count(&self) -> usize {
        let state = self.state.lock();
        state.holds.values().filter(|hold| hold.renewed > 0).count()
    }

    /// Tells the watchdog thread to stop.
    pub(crate) fn shut_down(&self) {
        self.state.lock().shutdown = true;
        self.wake.notify_all();
    }

    /// For the watchdog thread: sleeps until renewals are due and returns them, reporting
    /// leases that ran out meanwhile as they do; `None` at shutdown.
    pub(crate) fn next_sweep(&self) -> Option<Sweep> {
        let mut state = self.state.lock();
        loop {
            if state.shutdown {
                return None;
            }
            self.expire_overdue(&mut state);
            let now = Instant::now();
            stop_capped_renewals(&mut state, now);
            let next_due = state.holds.values().filter_map(|hold| hold.due).min();
            if next_due.is_some_and(|due| due <= now) {
                // Holds due soon go along: one round trip instead of several.
                let horizon = now + self.period / 10;
                let boot_now = BootInstant::now();
                let mut budget = self.timeout;
                let (batch, statuses) = state
                    .holds
                    .iter()
                    .filter(|(_, hold)| hold.due.is_some_and(|due| due <= horizon))
                    .map(|(key, hold)| {
                        budget = budget.min(hold.status.deadline().saturating_since(boot_now));
                        (key.hold_key(hold), Arc::clone(&hold.status))
                    })
                    .unzip();
                return Some(Sweep {
                    batch,
                    statuses,
                    budget,
                    sent: (now, boot_now),
                });
            }
            let lease_end = state
                .holds
                .values()
                .map(|hold| hold.status.deadline())
                .min()
                .map(boot_to_instant);
            let wake_at = match (next_due, lease_end) {
                (Some(due), Some(end)) => Some(due.min(end)),
                (due, end) => due.or(end),
            };
            match wake_at {
                Some(at) => {
                    state.wake_at = Some(at);
                    self.wake.wait_until(&mut state, at);
                    state.wake_at = None;
                }
                None => {
                    state.dormant = true;
                    while state.dormant && !state.shutdown {
                        self.wake.wait(&mut state);
                    }
                }
            }
        }
    }

    /// Records what a sweep found: renewed holds are due again a period after it was sent,
    /// holds found gone are lost, and after a failed sweep (`None`) its holds are retried soon,
    /// well inside their leases rather than a whole period later.
    pub(crate) fn finish_sweep(&self, sweep: Sweep, renewed: Vec<Option<bool>>) {
        let retry_at = Instant::now()
            + (self.period / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        let found = renewed.iter().filter(|r| **r == Some(true)).count();
        self.counters.renewed(found as u64);
        let answered = renewed.len() >= sweep.batch.len() && !renewed.contains(&None);
        if !answered {
            self.counters.renewal_failed();
        }
        let mut found_gone = 0;
        let mut state = self.state.lock();
        for (i, key) in sweep.batch.into_iter().enumerate() {
            let slot = key.slot();
            let Some(hold) = state.holds.get_mut(&slot) else {
                continue; // released while the sweep was in flight
            };
            if !Arc::ptr_eq(&hold.status, &sweep.statuses[i]) {
                continue; // released and taken again meanwhile: the answer is not about it
            }
            if hold.due.is_none() {
                continue; // no renewed hold left while the sweep was in flight
            }
            match renewed.get(i).copied().flatten() {
                Some(true) => {
                    hold.status
                        .confirm(lease_deadline(sweep.sent.1, self.timeout));
                    hold.due = Some(sweep.sent.0 + self.period);
                }
                Some(false) => {
                    hold.status.mark_lost();
                    self.counters.hold_lost();
                    found_gone += 1;
                    log::warn!(
                        "lock {:?} was lost: the watchdog found no hold of its owner",
                        key.keys.name
                    );
                    state.holds.remove(&slot);
                    (self.on_lost)(&key);
                }
                None => hold.due = Some(retry_at),
            }
        }
        drop(state);
        self.health.sweep_done(answered, found_gone);
    }

    /// Holds whose confirmed lease ran out without a confirmed renewal (Redis unreachable or
    /// too slow, or a fixed lease that was not released in time) are lost: their owners are
    /// told, and they are not renewed any more.
    fn expire_overdue(&self, state: &mut State) {
        let now = BootInstant::now();
        let mut renewals_failed = 0;
        state.holds.retain(|key, hold| {
            if hold.status.deadline() > now {
                return true;
            }
            if hold.status.mark_lost() {
                self.counters.hold_lost();
                // A renewed hold (not past its `max_hold`) whose lease ran out: its renewals
                // failed. A fixed lease ending is no failure.
                renewals_failed += u64::from(hold.due.is_some());
                log::warn!(
                    "lock {:?} is lost: its lease ran out without a confirmed renewal",
                    key.keys.name
                );
            }
            (self.on_lost)(&key.hold_key(hold));
            false
        });
        if renewals_failed > 0 {
            self.health.holds_lost(renewals_failed);
        }
    }
}

/// Holds whose renewals are capped (`AcquireOptions::max_hold`) and old enough are renewed no
/// more: they end with the lease they have, and `expire_overdue` then reports them lost.
fn stop_capped_renewals(state: &mut State, now: Instant) {
    for hold in state.holds.values_mut() {
        if hold.renew_until.is_some_and(|until| until <= now) && hold.due.is_some() {
            hold.due = None;
        }
    }
}

/// The instant (on the clock threads sleep by) at which `deadline` (boot clock) comes.
fn boot_to_instant(deadline: BootInstant) -> Instant {
    Instant::now() + deadline.saturating_since(BootInstant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::lock::REENTRANT;

    #[test]
    fn a_sweep_answer_is_not_applied_to_a_newer_hold_of_the_same_thread() {
        let holds = Holds::new(
            Duration::from_millis(30),
            Arc::new(Counters::default()),
            Arc::default(),
            Box::new(|_| {}),
        );
        let keys = Arc::new(LockKeys::new("holds:test").unwrap());
        let lease = Duration::from_secs(30);
        let older = holds.register(
            (&REENTRANT, None),
            &keys,
            1,
            (true, None),
            BootInstant::now(),
            lease,
        );
        let sweep = holds.next_sweep().expect("a renewal is due after 10 ms");
        // Released and taken again while the sweep was in flight; the sweep ran in between
        // and found no hold.
        holds.unregister(&REENTRANT, &keys, 1, true, &older);
        let newer = holds.register(
            (&REENTRANT, None),
            &keys,
            1,
            (true, None),
            BootInstant::now(),
            lease,
        );
        holds.finish_sweep(sweep, vec![Some(false)]);
        assert!(!newer.is_lost(), "the newer hold is not the one found gone");
        assert_eq!(holds.renewing_count(), 1);
    }

    #[test]
    fn a_lost_holds_release_tells_whether_the_thread_holds_the_lock_again() {
        let holds = Holds::new(
            Duration::from_secs(30),
            Arc::new(Counters::default()),
            Arc::default(),
            Box::new(|_| {}),
        );
        let keys = Arc::new(LockKeys::new("holds:test").unwrap());
        let lease = Duration::from_secs(30);
        let older = holds.register(
            (&REENTRANT, None),
            &keys,
            1,
            (true, None),
            BootInstant::now(),
            lease,
        );
        holds.forget("holds:test");
        assert!(older.is_lost());
        let unregistered = holds.unregister(&REENTRANT, &keys, 1, true, &older);
        assert!(matches!(unregistered, Unregistered::Lost { newer: false }));
        // Taken again by the same thread: a hold of its own.
        let newer = holds.register(
            (&REENTRANT, None),
            &keys,
            1,
            (true, None),
            BootInstant::now(),
            lease,
        );
        assert!(!Arc::ptr_eq(&older, &newer) && !newer.is_lost());
        let unregistered = holds.unregister(&REENTRANT, &keys, 1, true, &older);
        assert!(matches!(unregistered, Unregistered::Lost { newer: true }));
        assert_eq!(holds.count(&REENTRANT, &keys, 1), 1, "the newer one stays");
        let unregistered = holds.unregister(&REENTRANT, &keys, 1, true, &newer);
        assert!(matches!(unregistered, Unregistered::Counted(left) if left.total == 0));
    }
}
