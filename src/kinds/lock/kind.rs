//! The reentrant lock as the engine knows it: [`Reentrant`], the one kind with every ability
//! (it takes turns in the line, its release hands the lock over, yields and grants).

use std::time::Duration;

use super::protocol;
use crate::engine::kind::{
    AttemptArgs, Grants, HandsOver, KindId, Listeners, LockKind, TakesTurns, Waiting,
};
use crate::error::Result;
use crate::names::LockKeys;
use crate::store::{Attempt, LockStore, Release};

/// The reentrant lock's kind, shared by every `Lock`.
pub(crate) static REENTRANT: Reentrant = Reentrant;

/// Redisson's reentrant lock (`RLock`): a hash of owner fields and hold counts.
pub(crate) struct Reentrant;

impl LockKind for Reentrant {
    fn id(&self) -> KindId {
        KindId::Lock
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        if args.fenced {
            protocol::try_acquire_fenced(
                store,
                keys,
                args.lease_ms,
                args.owner,
                args.attempt_id,
                args.fresh,
            )
        } else {
            protocol::try_acquire(
                store,
                keys,
                args.lease_ms,
                args.owner,
                args.attempt_id,
                args.fresh,
                None,
            )
        }
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Release> {
        protocol::release(store, keys, lease_ms, owner, Listeners::default(), None, 0)
    }

    fn channel(&self, keys: &LockKeys, _owner: &str) -> String {
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

impl TakesTurns for Reentrant {
    fn hands_over(&self) -> Option<&dyn HandsOver> {
        Some(self)
    }
}

impl HandsOver for Reentrant {
    fn release_handing_over(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        listeners: Listeners,
        next: Option<(&str, u64)>,
        left: u32,
    ) -> Result<Release> {
        protocol::release(store, keys, lease_ms, owner, listeners, next, left)
    }

    fn hold_count(&self, store: &LockStore, keys: &LockKeys, owner: &str) -> Result<u32> {
        protocol::hold_count(store, keys, owner)
    }

    fn grants(&self) -> Option<&dyn Grants> {
        Some(self)
    }
}

impl Grants for Reentrant {
    fn attempt_registered(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
        waiting: &Waiting,
    ) -> Result<Attempt> {
        protocol::try_acquire(
            store,
            keys,
            args.lease_ms,
            args.owner,
            args.attempt_id,
            args.fresh,
            Some(waiting),
        )
    }

    fn stop_waiting(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        number: u64,
        lease_ms: u64,
    ) -> Result<bool> {
        protocol::stop_waiting(store, keys, owner, number, lease_ms)
    }
}
