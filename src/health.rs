//! [`Health`]: one manager-wide answer to "are my holds being renewed?", and its changes.
//!
//! Only the watchdog thread moves it, from what its renewal sweeps and the holds' lease ends
//! show; everyone else reads it. Telling subscribers never blocks that thread: each has a
//! bounded channel, and a change that does not fit is dropped and counted on the next one that
//! does ([`HealthChange::missed`]).

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::{Condvar, Mutex};

/// How many changes a [`health_changes`](crate::LockManager::health_changes) receiver keeps
/// before newer ones are dropped (and counted in [`HealthChange::missed`]).
pub const HEALTH_CHANGES_CAPACITY: usize = 64;

/// Whether a manager's watchdog-renewed holds are being renewed
/// ([`LockManager::health`](crate::LockManager::health)), as Curator's connection states and
/// etcd's `Session.Done()` tell it: one place to learn that renewals are failing, before any
/// single lease runs out, and that they work again.
///
/// The transitions, all made by the watchdog thread:
///
/// | from | to | when |
/// |---|---|---|
/// | `Healthy` | `Suspended` | a renewal sweep left a hold unanswered: an error, a timeout (the sweep's budget ran out), a short reply, a panic |
/// | `Suspended` | `Healthy` | a sweep answered for every hold it renewed |
/// | `Healthy` or `Suspended` | `Lost` | a watchdog-renewed hold was lost: its lease ran out without a confirmed renewal, or a sweep found it gone (expired, evicted, flushed, force-unlocked, taken over) |
/// | `Lost` | `Healthy` | a later sweep answered for every hold it renewed and found none gone |
///
/// Fixed-lease holds (never renewed) and holds past their `max_hold` do not count: their
/// leases are meant to end. Health is about renewals only: the pub/sub listener's connection
/// does not count (a waiter rides out an outage on its own, and has nothing to lose), and with
/// nothing held no sweep is sent, so the last state stays until the next sweep (a `Lost` or
/// `Suspended` with nothing held puts nothing more at risk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Health {
    /// Every renewal answered (the state of a new manager).
    #[default]
    Healthy,
    /// Renewals are failing; no hold was lost yet. Each hold's own lease tells how long it has
    /// ([`LockGuard::remaining_lease`](crate::LockGuard::remaining_lease)).
    Suspended {
        /// When the first failed sweep ended.
        since: SystemTime,
        /// Sweeps that failed in a row since then.
        failed_sweeps: u64,
    },
    /// At least one watchdog-renewed hold was lost; each of them got its lost signal.
    Lost {
        /// When the first of them was found lost.
        since: SystemTime,
        /// How many were lost since then.
        holds_lost: u64,
    },
}

impl Health {
    /// Whether it is [`Health::Healthy`].
    pub fn is_healthy(&self) -> bool {
        matches!(self, Health::Healthy)
    }

    /// Whether both are the same state, whatever their details (times, counts).
    pub fn same_state(&self, other: &Health) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// When this state began (`None` for `Healthy`).
    pub fn since(&self) -> Option<SystemTime> {
        match self {
            Health::Healthy => None,
            Health::Suspended { since, .. } | Health::Lost { since, .. } => Some(*since),
        }
    }
}

/// One change of a manager's [`Health`], as
/// [`health_changes`](crate::LockManager::health_changes) delivers it, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthChange {
    /// The state before.
    pub from: Health,
    /// The state now.
    pub to: Health,
    /// Changes dropped just before this one because the receiver was full (it keeps
    /// [`HEALTH_CHANGES_CAPACITY`]): `from` is then not the `to` of the change received last.
    pub missed: u64,
}

struct Subscriber {
    sender: Sender<HealthChange>,
    /// Changes that did not fit since the last one that did.
    missed: u64,
}

struct State {
    health: Health,
    /// The manager was shut down: waits end.
    closed: bool,
    /// Changes so far: waiters look for a new one.
    changes: u64,
    subscribers: Vec<Subscriber>,
}

/// The live health, moved by the watchdog thread.
pub(crate) struct HealthState {
    state: Mutex<State>,
    changed: Condvar,
}

impl Default for HealthState {
    fn default() -> Self {
        HealthState {
            state: Mutex::new(State {
                health: Health::Healthy,
                closed: false,
                changes: 0,
                subscribers: Vec::new(),
            }),
            changed: Condvar::new(),
        }
    }
}

impl HealthState {
    pub(crate) fn get(&self) -> Health {
        self.state.lock().health
    }

    /// A new receiver of every change from now on.
    pub(crate) fn subscribe(&self) -> Receiver<HealthChange> {
        let (sender, receiver) = crossbeam_channel::bounded(HEALTH_CHANGES_CAPACITY);
        self.state
            .lock()
            .subscribers
            .push(Subscriber { sender, missed: 0 });
        receiver
    }

    /// Ends every wait for a change, now and later (the manager was shut down).
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for a change, or returns at once when the state is not `seen`'s
    /// (or the manager was shut down).
    pub(crate) fn wait_change(&self, seen: &Health, timeout: Duration) -> Health {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.state.lock();
        let start = state.changes;
        while state.health.same_state(seen) && state.changes == start && !state.closed {
            match deadline {
                Some(deadline) => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        break;
                    }
                }
                None => self.changed.wait(&mut state),
            }
        }
        state.health
    }

    /// A sweep ended: `answered` whether every hold in it got an answer, `found_gone` how
    /// many it found gone.
    pub(crate) fn sweep_done(&self, answered: bool, found_gone: u64) {
        if found_gone > 0 {
            self.holds_lost(found_gone);
        }
        let mut state = self.state.lock();
        let next = match (state.health, answered) {
            (Health::Lost { .. }, true) if found_gone > 0 => return,
            (_, true) => Health::Healthy,
            (Health::Healthy, false) => Health::Suspended {
                since: SystemTime::now(),
                failed_sweeps: 1,
            },
            (
                Health::Suspended {
                    since,
                    failed_sweeps,
                },
                false,
            ) => Health::Suspended {
                since,
                failed_sweeps: failed_sweeps + 1,
            },
            (lost @ Health::Lost { .. }, false) => lost,
        };
        self.set(&mut state, next);
    }

    /// `count` watchdog-renewed holds were lost.
    pub(crate) fn holds_lost(&self, count: u64) {
        let mut state = self.state.lock();
        let next = match state.health {
            Health::Lost { since, holds_lost } => Health::Lost {
                since,
                holds_lost: holds_lost + count,
            },
            _ => Health::Lost {
                since: SystemTime::now(),
                holds_lost: count,
            },
        };
        self.set(&mut state, next);
    }

    /// Stores `next`; a change of state is told to every subscriber that has room.
    fn set(&self, state: &mut State, next: Health) {
        let from = std::mem::replace(&mut state.health, next);
        if from.same_state(&next) {
            return;
        }
        state.changes += 1;
        self.changed.notify_all();
        log::warn!("lock manager health: {from:?} -> {next:?}");
        state.subscribers.retain_mut(|subscriber| {
            let change = HealthChange {
                from,
                to: next,
                missed: subscriber.missed,
            };
            match subscriber.sender.try_send(change) {
                Ok(()) => {
                    subscriber.missed = 0;
                    true
                }
                Err(TrySendError::Full(_)) => {
                    subscriber.missed += 1;
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_sweep_suspends_and_a_full_one_heals_in_order() {
        let health = HealthState::default();
        let changes = health.subscribe();
        health.sweep_done(false, 0);
        health.sweep_done(false, 0);
        assert!(matches!(
            health.get(),
            Health::Suspended {
                failed_sweeps: 2,
                ..
            }
        ));
        health.sweep_done(true, 0);
        let got: Vec<_> = changes.try_iter().collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(matches!(got[0].to, Health::Suspended { .. }));
        assert!(got[1].from.same_state(&got[0].to) && got[1].to.is_healthy());
    }

    #[test]
    fn lost_stays_until_a_sweep_finds_nothing_gone() {
        let health = HealthState::default();
        health.sweep_done(true, 1);
        assert!(matches!(health.get(), Health::Lost { holds_lost: 1, .. }));
        health.sweep_done(true, 1);
        assert!(matches!(health.get(), Health::Lost { holds_lost: 2, .. }));
        health.sweep_done(false, 0);
        assert!(matches!(health.get(), Health::Lost { .. }));
        health.sweep_done(true, 0);
        assert!(health.get().is_healthy());
    }

    #[test]
    fn a_full_receiver_counts_what_it_missed_and_never_blocks() {
        let health = HealthState::default();
        let changes = health.subscribe();
        for _ in 0..HEALTH_CHANGES_CAPACITY + 5 {
            health.sweep_done(false, 0);
            health.sweep_done(true, 0);
        }
        let got: Vec<_> = changes.try_iter().collect();
        assert_eq!(got.len(), HEALTH_CHANGES_CAPACITY);
        health.sweep_done(false, 0);
        let next = changes.try_recv().expect("room again");
        // Every change made while it was full: 2 per round, less those it kept.
        let made = 2 * (HEALTH_CHANGES_CAPACITY + 5);
        assert_eq!(next.missed, (made - got.len()) as u64);
    }

    #[test]
    fn a_wait_returns_on_a_change_or_at_its_timeout() {
        let health = std::sync::Arc::new(HealthState::default());
        let seen = health.get();
        let waited = health.wait_change(&seen, Duration::from_millis(20));
        assert!(waited.is_healthy());
        let mover = {
            let health = std::sync::Arc::clone(&health);
            std::thread::spawn(move || health.sweep_done(false, 0))
        };
        let got = health.wait_change(&seen, Duration::from_secs(60));
        mover.join().unwrap();
        assert!(matches!(got, Health::Suspended { .. }));
    }
}
