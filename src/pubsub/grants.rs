//! Grants, as the waiters hear them: a registered wait's number (see `crate::engine::grants`,
//! which has the protocol), the message with which a release that granted a lock publishes
//! it, and the waiter that takes it. Everything grant-specific in the pub/sub layer is here.
//!
//! Grants are on only where a release can count the lock channel's listeners and no replica
//! must acknowledge an acquire: with the defaults, on a single server (or a Sentinel master)
//! without replicas; with `replica_sync(false)`, also with replicas and on a cluster with
//! sharded pub/sub (`crate::engine::grants` has the rule). Elsewhere no wait registers, no
//! release publishes a number, and none of this runs.

use super::registry::Waiters;
use super::subscriber::{Subscriber, Subscription};
use crate::names::ChannelKind;

impl Subscriber {
    /// The control channel of the listener that serves `channel` (see
    /// `Shared::master_of`), if it runs: a registered waiter names it, so that a release can
    /// tell that the waiter's manager still listens.
    pub(crate) fn control_channel_of(&self, channel: &str) -> Option<String> {
        let addr = self.shared.master_of(channel)?;
        let listeners = self.shared.listeners.lock();
        listeners.get(&addr).map(|h| h.control_channel.clone())
    }
}

impl Waiters {
    /// When `payload` on `channel` is a grant (the wait number of a release that granted the
    /// lock, see [`grant_number`]), whether it was to a local waiter: then all look and that
    /// one takes it ([`Subscription::take_grant`]); a grant to another client's waiter wakes
    /// nobody (the lock is held again, by that waiter). `None` for any other message.
    pub(crate) fn granted(&self, channel: &str, payload: &[u8]) -> Option<bool> {
        let number = grant_number(channel, payload)?;
        let mut state = self.state.lock();
        if !state.expected.contains(&number) {
            return Some(false);
        }
        if !state.grants.contains(&number) {
            state.grants.push(number);
        }
        state.permits = state.waiters;
        drop(state);
        self.permit.notify_all();
        Some(true)
    }
}

impl Subscription {
    /// From now on a grant to the wait numbered `number` wakes this waiter: called before
    /// the wait's first registration is sent.
    pub(crate) fn expect_grant(&self, number: u64) {
        let mut state = self.waiters.state.lock();
        state.expected.push(number);
        drop(state);
        if let Some(old) = self.expecting.replace(Some(number)) {
            self.forget_grant(old);
        }
    }

    /// Whether a release granted the lock to the wait numbered `number` (its message came);
    /// the grant is taken, so it counts once.
    pub(crate) fn take_grant(&self, number: u64) -> bool {
        let mut state = self.waiters.state.lock();
        match state.grants.iter().position(|&n| n == number) {
            Some(at) => {
                state.grants.remove(at);
                true
            }
            None => false,
        }
    }

    /// Forgets the wait this subscription registered for grants, if it did (as it ends).
    pub(super) fn forget_expected_grant(&self) {
        if let Some(number) = self.expecting.take() {
            self.forget_grant(number);
        }
    }

    fn forget_grant(&self, number: u64) {
        let mut state = self.waiters.state.lock();
        state.expected.retain(|&n| n != number);
        state.grants.retain(|&n| n != number);
    }
}

/// The wait number that a release which granted a lock published on its unlock channel: a
/// number of 2 or more, where Redisson's messages are `0` and `1` (and Redisson ignores other
/// numbers).
fn grant_number(channel: &str, payload: &[u8]) -> Option<u64> {
    if ChannelKind::of(channel) != ChannelKind::Unlock {
        return None;
    }
    let number: u64 = std::str::from_utf8(payload).ok()?.parse().ok()?;
    (number >= 2).then_some(number)
}
