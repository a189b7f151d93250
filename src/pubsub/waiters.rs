//! The local waiters of one channel (or of one lock key, for a waiter woken by client
//! tracking alone): how many, their wake permits, and the condvars they sleep on. The registry,
//! the listener and client tracking wake them; `crate::pubsub::subscriber` registers them.

use parking_lot::{Condvar, Mutex};

/// The local waiters of one channel.
pub(crate) struct Waiters {
    pub(super) state: Mutex<WaitState>,
    /// Signalled when a permit is added.
    pub(super) permit: Condvar,
    /// Signalled when the subscription is confirmed.
    pub(super) ready: Condvar,
}

#[derive(Default)]
pub(super) struct WaitState {
    pub(super) waiters: usize,
    pub(super) permits: usize,
    pub(super) subscribed: bool,
    /// The wait numbers the local waiters registered with for grants (see `super::grants`):
    /// a grant to any other number is another client's business, and wakes nobody here.
    pub(super) expected: Vec<u64>,
    /// Those of them that a release has granted the lock to, until their waiter takes it.
    pub(super) grants: Vec<u64>,
}

impl Waiters {
    pub(super) fn new() -> Self {
        Waiters {
            state: Mutex::new(WaitState::default()),
            permit: Condvar::new(),
            ready: Condvar::new(),
        }
    }

    /// The server confirmed a subscription for these waiters. When they were subscribed
    /// before (this is a resubscription: after a reconnect, a failover, a resharding),
    /// releases announced in between were missed: every waiter looks again now that the new
    /// subscription would hear the next one. (Letting them look when the resubscription was
    /// sent is too early: a release between their look and the confirmation goes unheard.)
    pub(crate) fn mark_subscribed(&self) {
        let mut state = self.state.lock();
        let again = std::mem::replace(&mut state.subscribed, true);
        if again {
            state.permits = state.waiters;
        }
        drop(state);
        self.ready.notify_all();
        if again {
            self.permit.notify_all();
        }
    }

    /// Client tracking of a key of these waiters was confirmed or given up: a waiter waiting
    /// for that may go on.
    pub(crate) fn tracking_settled(&self) {
        let _state = self.state.lock();
        self.ready.notify_all();
    }

    /// A `0` message: one waiter may try again.
    pub(super) fn release_one(&self) {
        let mut state = self.state.lock();
        // Permits beyond the number of waiters would only cause useless attempts later.
        state.permits = (state.permits + 1).min(state.waiters);
        drop(state);
        self.permit.notify_one();
    }

    /// A semaphore's message: `available` permits are free now, so up to that many waiters
    /// may try again (more could not all succeed; fewer would leave permits idle).
    pub(super) fn release_up_to(&self, available: usize) {
        let mut state = self.state.lock();
        let before = state.permits;
        state.permits = state.permits.saturating_add(available).min(state.waiters);
        let added = state.permits - before;
        drop(state);
        for _ in 0..added {
            self.permit.notify_one();
        }
    }

    /// A `1` message, or a reconnect after which messages may have been missed: all try again.
    pub(crate) fn release_all(&self) {
        let mut state = self.state.lock();
        state.permits = state.waiters;
        drop(state);
        self.permit.notify_all();
    }
}
