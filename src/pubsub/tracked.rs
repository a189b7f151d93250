//! The lock keys this manager's waiters want the server to watch, and whom a change of each
//! wakes: client tracking (`crate::pubsub::tracking`) reports a change of any watched key
//! (a release by any client, an expiry, an eviction, a `DEL`), including releases nobody
//! announces. Keys are compared exactly here: the server watches prefixes, which may cover
//! other keys, and a change of those wakes nobody. A key whose last waiter left stays known,
//! and watched, while it is idle: its next waiter finds it watched and asks the listener
//! nothing (in a busy lock, waits come and go all the time).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::pubsub::waiters::Waiters;

/// Whether the server watches a key for this manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrackState {
    /// Not asked for yet.
    Unasked,
    /// Asked for (or being set up again on a new connection) and not confirmed yet.
    Pending,
    /// Confirmed: every change from now on is reported.
    Live,
    /// Refused or lost: its waiters look by their back-off.
    Off,
}

struct TrackedKey {
    state: TrackState,
    /// One entry per registered waiter (the waiters of a channel share one [`Waiters`]).
    waiters: Vec<Arc<Waiters>>,
}

/// The watched keys, by name.
#[derive(Default)]
pub(crate) struct TrackedKeys {
    keys: Mutex<HashMap<String, TrackedKey>>,
}

impl TrackedKeys {
    /// Registers a waiter of `key`, woken through `waiters`; `true` when the listener must be
    /// asked to have the key watched: a new key, or one whose tracking failed and that nobody
    /// waited on since. A key that stayed watched after its last waiter left is watched
    /// still: its next waiter asks nothing.
    pub(crate) fn add(&self, key: &str, waiters: &Arc<Waiters>) -> bool {
        let mut keys = self.keys.lock();
        let entry = keys.entry(key.to_owned()).or_insert_with(|| TrackedKey {
            state: TrackState::Unasked,
            waiters: Vec::new(),
        });
        let ask = entry.state == TrackState::Unasked
            || (entry.waiters.is_empty() && entry.state == TrackState::Off);
        if ask {
            entry.state = TrackState::Pending;
        }
        entry.waiters.push(Arc::clone(waiters));
        ask
    }

    /// Removes one registration of `waiters` for `key`. The key stays (idle when that was
    /// its last waiter) until its listener drops it ([`drop_idle`](Self::drop_idle)).
    pub(crate) fn remove(&self, key: &str, waiters: &Arc<Waiters>) {
        let mut keys = self.keys.lock();
        if let Some(entry) = keys.get_mut(key) {
            if let Some(at) = entry.waiters.iter().position(|w| Arc::ptr_eq(w, waiters)) {
                entry.waiters.swap_remove(at);
            }
        }
    }

    /// How many keys have waiters, and how many are idle.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let keys = self.keys.lock();
        let idle = keys
            .values()
            .filter(|entry| entry.waiters.is_empty())
            .count();
        (keys.len() - idle, idle)
    }

    /// Forgets the idle keys `filter` accepts (their tracking is about to end); how many.
    pub(crate) fn drop_idle(&self, filter: impl Fn(&str) -> bool) -> usize {
        let mut keys = self.keys.lock();
        let before = keys.len();
        keys.retain(|key, entry| !entry.waiters.is_empty() || !filter(key));
        before - keys.len()
    }

    /// Whether `key` is known (waited on, or idle and still watched).
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.keys.lock().contains_key(key)
    }

    pub(crate) fn state(&self, key: &str) -> TrackState {
        self.keys
            .lock()
            .get(key)
            .map_or(TrackState::Off, |entry| entry.state)
    }

    /// Every known key `filter` accepts.
    pub(crate) fn keys(&self, filter: impl Fn(&str) -> bool) -> Vec<String> {
        self.keys
            .lock()
            .keys()
            .filter(|key| filter(key))
            .cloned()
            .collect()
    }

    /// Sets the state of `keys` and tells their waiters, who may be waiting for it; with
    /// `wake`, they also look again (changes may have gone unreported until now).
    pub(crate) fn set_state(&self, keys: &[String], state: TrackState, wake: bool) {
        let mut told = Vec::new();
        {
            let mut tracked = self.keys.lock();
            for key in keys {
                if let Some(entry) = tracked.get_mut(key) {
                    entry.state = state;
                    told.extend(entry.waiters.iter().cloned());
                }
            }
        }
        for waiters in distinct(told) {
            waiters.tracking_settled();
            if wake {
                waiters.release_all();
            }
        }
    }

    /// The server reported a change of `key`: its waiters look again. `false` when nobody
    /// here waits on it (an idle key, or another key under a watched prefix).
    pub(crate) fn changed(&self, key: &[u8]) -> bool {
        let Ok(key) = std::str::from_utf8(key) else {
            return false;
        };
        let waiters = match self.keys.lock().get(key) {
            Some(entry) if !entry.waiters.is_empty() => entry.waiters.clone(),
            _ => return false,
        };
        for waiters in distinct(waiters) {
            waiters.release_all();
        }
        true
    }
}

/// `waiters` without repeats (the waiters of one channel appear once per waiter).
fn distinct(mut waiters: Vec<Arc<Waiters>>) -> Vec<Arc<Waiters>> {
    waiters.sort_by_key(|w| Arc::as_ptr(w) as usize);
    waiters.dedup_by(|a, b| Arc::ptr_eq(a, b));
    waiters
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiters() -> Arc<Waiters> {
        let waiters = Arc::new(Waiters::new());
        waiters.state.lock().waiters = 1;
        waiters
    }

    #[test]
    fn only_a_new_key_or_one_whose_tracking_failed_is_asked_for() {
        let keys = TrackedKeys::default();
        let (a, b) = (waiters(), waiters());
        assert!(keys.add("k", &a), "a new key");
        assert!(!keys.add("k", &b), "asked for already");
        keys.set_state(&["k".to_owned()], TrackState::Live, false);
        keys.remove("k", &a);
        keys.remove("k", &b);
        assert_eq!(keys.counts(), (0, 1), "idle, still watched");
        assert!(!keys.add("k", &a), "an idle key is watched still");
        keys.set_state(&["k".to_owned()], TrackState::Off, false);
        keys.remove("k", &a);
        assert!(
            keys.add("k", &a),
            "its tracking failed, and nobody waited since"
        );
        assert_eq!(keys.state("k"), TrackState::Pending);
    }

    #[test]
    fn a_change_wakes_the_waiters_of_that_key_only() {
        let keys = TrackedKeys::default();
        let (a, ab) = (waiters(), waiters());
        keys.add("a", &a);
        keys.add("ab", &ab);
        assert!(keys.changed(b"ab"));
        assert_eq!(ab.state.lock().permits, 1);
        assert_eq!(a.state.lock().permits, 0, "a's waiter slept on");
        assert!(!keys.changed(b"abc"), "nobody waits on abc");
        keys.remove("a", &a);
        assert!(!keys.changed(b"a"), "an idle key wakes nobody");
        assert_eq!(keys.drop_idle(|_| true), 1);
        assert!(!keys.contains("a"));
    }
}
