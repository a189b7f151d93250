//! Releasing one hold: counted off the registry first (whether it was the thread's last
//! decides the rest), planned ([`plan_release`]), sent as one script call that may also
//! acquire for the local successor, and then the lock or the turn passed on to whoever here
//! waits for it (see [`crate::engine::line`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::plan::{plan_release, ReleaseFacts, ReleasePlan};
use super::{Engine, Held};
use crate::clock::BootInstant;
use crate::engine::holds::{HoldsLeft, Unregistered};
use crate::engine::kind::hands_over;
use crate::engine::line::{Handed, Successor, Yield};
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::owner::owner_field;
use crate::store::Release;

/// One release as sent, for what follows its reply.
struct Sent<'a> {
    keys: &'a Arc<LockKeys>,
    held: &'a Held,
    channel: &'a str,
    plan: ReleasePlan,
    /// The script was asked to acquire for the successor.
    for_successor: bool,
    /// When the request went out: a successor's lease counts from no later.
    at: BootInstant,
}

impl Engine {
    /// Releases one hold. When it is the owner's last and another local thread waits, the
    /// same script call acquires for that thread, unless remote waiters heard the unlock:
    /// then the lock is left to them and the line yields.
    pub(crate) fn release(&self, keys: &Arc<LockKeys>, held: &Held) -> Result<()> {
        self.check_process()?;
        let left = self.count_off(keys, held)?;
        let kind = held.kind;
        // A kind with a token per acquisition releases by the hold's token.
        let owner = held.status.token().map_or_else(
            || owner_field(&self.client_id, held.thread),
            |token| token.to_string(),
        );
        let channel = kind.channel(keys, &owner);
        let last = left.total == 0;
        let takes_turns = kind.takes_turns().is_some();
        let hands_over = hands_over(kind);
        let successor = takes_turns
            .then(|| self.line.successor(keys, held.thread, last))
            .flatten();
        // Asked only where the plan reads them: a release is on the hot path.
        let plan = plan_release(&ReleaseFacts {
            hands_over: hands_over.is_some(),
            renewed: held.renewed,
            lease_ms: held.lease_ms,
            watchdog_ms: self.config.watchdog_timeout_ms,
            left,
            successor_may_acquire: successor.as_ref().map(Successor::may_acquire),
            waits_for_replicas: successor.is_some() && self.store.waits_for_replicas(&keys.name),
            listening: last && self.subscriber.is_listening(&channel),
            // Only a release that hands over yields (a spin lock's announces nothing).
            yields_suspended: hands_over.is_some() && self.line.yields_suspended(),
            heard_so_far: if last && hands_over.is_some() {
                self.subscriber.message_count(&channel)
            } else {
                0
            },
        });
        let next = successor
            .as_ref()
            .filter(|_| plan.acquire_for_successor)
            .map(|next| (owner_field(&self.client_id, next.thread()), next.lease_ms()));
        let sent = Sent {
            keys,
            held,
            channel: &channel,
            plan,
            for_successor: next.is_some(),
            at: BootInstant::now(),
        };
        let next = next.as_ref().map(|(owner, lease)| (owner.as_str(), *lease));
        let outcome = match hands_over {
            Some(kind) => kind.release_handing_over(
                &self.store,
                keys,
                &owner,
                plan.lease_ms,
                plan.listeners,
                next,
                left.total,
            ),
            None => kind.release_counted(&self.store, keys, &owner, plan.lease_ms, last),
        };
        self.record(&sent, &outcome);
        self.pass_on(&sent, successor, &outcome);
        match outcome? {
            Release::NotHeld => Err(Error::NotHeld {
                name: keys.name.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Counts the hold off the registry: what the thread still holds of the lock.
    fn count_off(&self, keys: &Arc<LockKeys>, held: &Held) -> Result<HoldsLeft> {
        let unregistered =
            self.holds
                .unregister(held.kind, keys, held.thread, held.renewed, &held.status);
        match unregistered {
            Unregistered::Counted(left) => Ok(left),
            // Lost, and the thread holds the lock again by a newer hold, which a release in
            // its name would take: nothing is sent (docs/design/engine.md, "The watchdog and
            // holds").
            Unregistered::Lost { newer: true } => Err(Error::NotHeld {
                name: keys.name.to_string(),
            }),
            // Lost as far as this side knows (a renewal's reply too late, say): whatever is
            // left of it on Redis is released as any last hold is.
            Unregistered::Lost { newer: false } => Ok(HoldsLeft::default()),
        }
    }

    /// Counts what the release did, and confirms the lease of holds that remain.
    fn record(&self, sent: &Sent<'_>, outcome: &Result<Release>) {
        let (held, keys) = (sent.held, sent.keys);
        if !sent.plan.last && outcome.as_ref().is_ok_and(Release::freed) {
            // The server had fewer holds of the owner than the registry (a late send of a
            // fresh acquire set its count to one) and a kind without `Release::Kept` deleted
            // the key: the holds that remain are gone, and their guards are told now rather
            // than at the next renewal.
            log::warn!(
                "lock {:?} was lost: a release that was not the last freed it",
                keys.name
            );
            self.holds.lose(held.kind, keys, held.thread);
            return;
        }
        match outcome {
            Ok(Release::HandedOver) => self.store.counters.local_handoff(),
            Ok(Release::LeftForOthers) => self.store.counters.yielded(),
            Ok(Release::Granted) => self.store.counters.grant_given(),
            // The release set the lease of the holds that remain: the guards' deadline follows.
            Ok(Release::StillHeld | Release::Kept) => {
                let lease = Duration::from_millis(sent.plan.lease_ms);
                self.holds
                    .confirm(held.kind, keys, held.thread, sent.at, lease);
            }
            _ => {}
        }
    }

    /// Passes the lock, or the turn, on to whoever here waits for it.
    fn pass_on(&self, sent: &Sent<'_>, successor: Option<Successor>, outcome: &Result<Release>) {
        let (keys, thread) = (sent.keys, sent.held.thread);
        let gap = self.spin_gap(sent, outcome);
        if let Some(successor) = successor {
            let handed = match outcome {
                Ok(Release::HandedOver) => Handed::Lock(sent.at),
                Ok(Release::LeftForOthers) => Handed::Yield {
                    messages_expected: sent.plan.messages_expected,
                },
                // The script may have run, handoff included, with its replies lost.
                Err(err)
                    if sent.for_successor && (err.is_timeout() || err.is_connection_error()) =>
                {
                    Handed::Unknown(sent.at)
                }
                _ => gap.map_or(Handed::Turn, Handed::Gap),
            };
            self.line.hand_over(successor, handed);
            return;
        }
        if !sent.plan.last {
            return;
        }
        let released = matches!(outcome, Ok(Release::Released));
        if sent.held.kind.takes_turns().is_some() {
            if matches!(outcome, Ok(Release::LeftForOthers)) {
                self.line
                    .yield_to_others(keys, thread, sent.plan.messages_expected);
                return;
            }
            if let Some(until) = gap {
                let gap = Yield {
                    until,
                    messages_expected: 0,
                };
                self.line.record_yield(keys, thread, gap);
                return;
            }
        }
        // After the reply, so that the next local thread's attempt finds it free. A kind
        // without the line has the turn only when the thread took the lock through it and
        // re-entered by this kind: its last hold passes the turn on all the same.
        self.line.leave(keys, thread);
        if released {
            // Nobody else heard: a local waiter goes first, without the pub/sub hop.
            self.subscriber.wake_one(sent.channel);
        }
    }

    /// The end of a spin lock's run, if this last release ends it: nobody here attempts
    /// before then, so that other clients' pollers get in (see `crate::engine::runs`).
    fn spin_gap(&self, sent: &Sent<'_>, outcome: &Result<Release>) -> Option<Instant> {
        if !(sent.plan.last && sent.held.kind.spins()) {
            return None;
        }
        let freed = matches!(outcome, Ok(Release::Released));
        self.runs.released(sent.keys, freed)
    }
}
