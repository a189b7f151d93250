//! The string lock as the engine knows it: [`StringKind`], a kind that polls and takes
//! turns, whose token is chosen per acquisition.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::protocol;
use crate::engine::kind::{AttemptArgs, KindId, LockKind, TakesTurns};
use crate::error::Result;
use crate::names::LockKeys;
use crate::store::{Attempt, LockStore, Release};

/// Fresh acquisitions by this process so far: the last part of their tokens, which the
/// client id (one per manager) makes unique across managers and processes.
static ACQUISITIONS: AtomicU64 = AtomicU64::new(0);

/// The string lock's kind, shared by every [`StringLock`](super::StringLock).
pub(crate) static STRING: StringKind = StringKind;

/// redis-py's lock: a string holding the owner's token, released silently, waited for by
/// polling.
pub(crate) struct StringKind;

impl LockKind for StringKind {
    fn id(&self) -> KindId {
        KindId::StringLock
    }

    fn spins(&self) -> bool {
        true
    }

    fn fresh_token(&self, owner: &str) -> Option<String> {
        let n = ACQUISITIONS.fetch_add(1, Ordering::Relaxed) + 1;
        Some(format!("{owner}:{n}"))
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        protocol::acquire(store, keys, args)
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Release> {
        self.release_counted(store, keys, owner, lease_ms, true)
    }

    fn release_counted(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        last: bool,
    ) -> Result<Release> {
        if last {
            protocol::delete_if_ours(store, keys, owner)
        } else {
            // The key holds the token until the last release: the holds that remain get their
            // lease, as a counting kind's release gives them.
            protocol::extend_if_ours(store, keys, owner, lease_ms)
        }
    }

    fn channel(&self, keys: &LockKeys, _owner: &str) -> String {
        // Never subscribed to nor published on; the engine asks it only for bookkeeping.
        keys.channel()
    }

    fn renew(
        &self,
        store: &LockStore,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>> {
        protocol::renew(store, batch, timeout_ms, budget)
    }

    fn takes_turns(&self) -> Option<&dyn TakesTurns> {
        Some(self)
    }
}

/// Threads of one manager take turns, as on a spin lock (whose runs leave gaps for other
/// clients' pollers); the release script acquires for nobody.
impl TakesTurns for StringKind {}
