//! Grants: a waiter registers in the lock's waiters hash (through its attempts), so that a
//! release by another client writes the hold in its name and publishes its wait number: the
//! waiter takes the lock without a request of its own, a round trip sooner than after an
//! unlock message (loadgen's W3 across managers; BENCHMARKS.md). Everything grant-specific
//! in the engine is here: registering, taking a grant and leaving the waiters, all through
//! the ability [`Grants`] (which only the plain lock has; declared with the other abilities in
//! `kind.rs`, which may not depend on this file). The listener's side is
//! `crate::pubsub::grants`.
//!
//! Grants are on where a release can count who listens on the lock's channel and no replica
//! must acknowledge an acquire ([`AcquirePlan::registers_for_grants`](super::plan::AcquirePlan)):
//! a single server or a Sentinel master without replicas or with `replica_sync(false)`, and a
//! cluster with sharded pub/sub and `replica_sync(false)`. With the defaults (replica sync on)
//! that is **a single server, or a master, without replicas**. They are off on a cluster
//! without sharded pub/sub (a plain PUBLISH reaches every node, so none can count all the
//! listeners), for the other kinds, and for fenced acquires (which need their own token).
//! docs/design/engine.md, "Grants", has the protocol.

use std::time::{Duration, Instant};

use super::attempter::Attempter;
use super::Engine;
use crate::clock::BootInstant;
#[cfg(doc)]
use crate::engine::kind::Grants;
use crate::engine::kind::Waiting;
use crate::error::Result;
use crate::pubsub::subscriber::Subscription;

impl Engine {
    /// Registers the wait (its attempts from now on carry the registration), if the listener
    /// that serves `channel` runs: a release checks that the waiter's manager still listens.
    pub(super) fn register_for_grants(
        &self,
        channel: &str,
        subscription: &Subscription,
        attempter: &mut Attempter<'_>,
    ) {
        if let Some(control) = self.subscriber.control_channel_of(channel) {
            let number = wait_number();
            subscription.expect_grant(number);
            attempter.waiting = Some((number, control));
        }
    }

    /// The registration names the listener where `channel` is served now (after a failover
    /// or a resharding, another master's).
    pub(super) fn follow_listener(&self, channel: &str, attempter: &mut Attempter<'_>) {
        if let Some((_, control)) = &mut attempter.waiting {
            if let Some(now) = self.subscriber.control_channel_of(channel) {
                *control = now;
            }
        }
    }

    /// Whether a release granted the lock to this wait, and it is taken without asking: only
    /// while most of its lease is surely left (counted from `registered_from`); otherwise the
    /// next attempt finds the grant and counts the lease from its own send.
    pub(super) fn take_grant(
        &self,
        subscription: &Subscription,
        registered_from: BootInstant,
        attempter: &mut Attempter<'_>,
    ) -> bool {
        let Some((number, _)) = attempter.waiting else {
            return false;
        };
        let lease = Duration::from_millis(attempter.request.lease_ms);
        if subscription.take_grant(number)
            && BootInstant::now().saturating_since(registered_from) < lease / 2
        {
            attempter.given(registered_from);
            self.store.counters.grant_taken();
            return true;
        }
        false
    }

    /// Ends a registered wait that did not get the lock (`outcome`): out of the waiters, unless
    /// a release granted the lock meanwhile, which is then this wait's, with its lease counted
    /// from this call.
    pub(super) fn end_registration(
        &self,
        outcome: Result<bool>,
        attempter: &mut Attempter<'_>,
    ) -> Result<bool> {
        let Some((number, _)) = attempter.waiting else {
            return outcome;
        };
        let Some(grants) = crate::engine::kind::grants(attempter.kind) else {
            return outcome;
        };
        if matches!(outcome, Ok(true)) {
            return outcome;
        }
        let sent = BootInstant::now();
        let request = attempter.request;
        let keys = attempter.keys;
        match grants.stop_waiting(
            &self.store,
            keys,
            &attempter.owner,
            number,
            request.lease_ms,
        ) {
            Ok(true) => {
                attempter.given(sent);
                Ok(true)
            }
            Ok(false) => outcome,
            Err(err) => {
                log::warn!(
                    "lock {:?}: leaving the waiters failed ({err}); the registration expires by \
                     itself",
                    attempter.keys.name
                );
                // A grant may have come that this thread never learns of: its next acquire
                // of the lock, holding nothing of it, takes it rather than counting a second
                // hold on top (see ACQUIRE).
                outcome
            }
        }
    }
}

impl Attempter<'_> {
    /// The wait's registration for grants, if it registered.
    pub(super) fn registration(&self) -> Option<Waiting> {
        let (number, control) = self.waiting.as_ref()?;
        Some(Waiting {
            number: *number,
            left_ms: self.request.deadline.map(|deadline| {
                let left = deadline.saturating_duration_since(Instant::now());
                u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
            }),
            control: control.clone(),
        })
    }
}

/// A new wait's number: published by the release that grants the lock to it, so it must not
/// be another wait's (random, 2^62 of them) nor look like Redisson's messages (`0`, `1`).
fn wait_number() -> u64 {
    (uuid::Uuid::new_v4().as_u128() as u64 >> 2) + 2
}
