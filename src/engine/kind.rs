//! Lock kinds: what the acquire engine ([`crate::engine`]) needs to know about one kind of
//! lock (its scripts, keys and channel), and the reentrant lock, Redisson's `RLock`.

use std::time::Duration;

use crate::error::Result;
use crate::names::LockKeys;
use crate::store::{Attempt, Listeners, LockStore, Release, Waiting};

/// Which kind a [`LockKind`] is: tells kinds apart in the hold registry and the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KindId {
    Lock,
    FairLock,
    ReadLock,
    WriteLock,
    SpinLock,
}

impl KindId {
    /// The owner field this kind counts its holds in (see [`Family`]).
    pub(crate) fn family(self) -> Family {
        match self {
            KindId::Lock | KindId::FairLock | KindId::SpinLock => Family::Reentrant,
            KindId::ReadLock => Family::Read,
            KindId::WriteLock => Family::Write,
        }
    }
}

/// Where, in the hash at the lock's name, a kind counts an owner's holds. Kinds of one family
/// share the owner's count: a thread that holds one of them and takes another re-enters (the
/// count goes up, as in Redisson), and their holds are one entry of the hold registry, renewed
/// alike. Families stored in one format may be held together by one thread; the two formats
/// may not (see [`conflicts_with`](Family::conflicts_with)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// `<owner>` in a hash of hold counts: the lock, the fair lock and the spin lock.
    Reentrant,
    /// `<owner>` in a read-write lock's hash (which has a `mode` field).
    Read,
    /// `<owner>:write` in a read-write lock's hash.
    Write,
}

impl Family {
    pub(crate) const ALL: [Family; 3] = [Family::Reentrant, Family::Read, Family::Write];

    /// Whether a thread holding `held` on a name may not take this family on it, which the
    /// scripts would not refuse: a hash of hold counts and a read-write lock's hash are two
    /// formats of one key, and a lock taken by a reader would count on its read hold (the same
    /// field), one taken by the writer would wait for itself (Redisson does both). The other
    /// way round, a read or write lock on a lock's hash, is refused by the read-write scripts
    /// themselves (WRONGTYPE), whoever holds the lock.
    pub(crate) fn conflicts_with(self, held: Family) -> bool {
        self == Family::Reentrant && held != Family::Reentrant
    }

    /// What a hold of the family is, for error messages.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Family::Reentrant => "a lock (Lock, FairLock or SpinLock)",
            Family::Read => "the read lock",
            Family::Write => "the write lock",
        }
    }
}

/// One kind of lock, as the engine needs to know it.
pub(crate) trait LockKind: Sync {
    fn id(&self) -> KindId;

    /// Whether threads of one manager take turns for it in the local line and hand it over in
    /// the release ([`crate::engine::line`]). Kinds with their own order in Redis (a fair lock's
    /// queue) or with shared holds (read locks) do not.
    fn uses_line(&self) -> bool {
        true
    }

    /// Whether a waiter may register so that a release of another client grants it the lock
    /// (docs/design/engine.md, "Grants"): an attempt with `AttemptArgs::waiting` registers, and
    /// [`LockStore::stop_waiting`] ends the registration.
    fn grants(&self) -> bool {
        false
    }

    /// Whether its releases are silent (Redisson's spin lock): then a waiter subscribes to
    /// nothing and looks again after Redisson's spin back-off (`crate::backoff::SpinBackoff`)
    /// instead of waiting for a message.
    fn spins(&self) -> bool {
        false
    }

    /// One attempt to take a hold as `args` say; reports the holder's TTL when it is held
    /// (for a queue: how long until this owner's turn may come).
    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt>;

    /// The caller stopped waiting without the lock (its wait passed, or an error): kinds that
    /// keep waiters in Redis (a fair lock's queue) take `args.owner` out there.
    fn abandon(&self, store: &LockStore, keys: &LockKeys, args: &AttemptArgs<'_>) -> Result<()> {
        let _ = (store, keys, args);
        Ok(())
    }

    /// Releases one hold of `owner` (holds that remain get `lease_ms`), announcing a final
    /// release on [`channel`](Self::channel) (or granting the lock to a registered waiter,
    /// for kinds with [`grants`](Self::grants)); then, unless more than `listeners.ignored`
    /// of its subscribers heard it (this manager's own listener, or all while yields are
    /// suspended), acquires for `next` (owner field and lease).
    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        listeners: Listeners,
        next: Option<(&str, u64)>,
    ) -> Result<Release>;

    /// Where `owner`, waiting, hears that it may try again (for most kinds one channel per
    /// lock; Redisson's fair lock has one per waiter).
    fn channel(&self, keys: &LockKeys, owner: &str) -> String;

    /// Renews each `(lock name, owner field)` of `batch` to `timeout_ms` in one round trip
    /// per master that all take at most `budget`; per entry, whether the hold was still there
    /// (`None` where its master did not answer).
    fn renew(
        &self,
        store: &LockStore,
        batch: &[(&str, &str)],
        timeout_ms: u64,
        budget: Duration,
    ) -> Vec<Option<bool>>;
}

/// What one attempt asks for.
pub(crate) struct AttemptArgs<'a> {
    /// The owner field: `<client id>:<thread number>`.
    pub(crate) owner: &'a str,
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
    /// Take a fencing token too.
    pub(crate) fenced: bool,
    /// How long the caller waits at most, in ms (`None`: without limit); a fair lock's queue
    /// keeps a waiter this long.
    pub(crate) wait_ms: Option<u64>,
    /// The attempt's id, the same in every send of one attempt (see `AttemptId`).
    pub(crate) attempt_id: &'a str,
    /// Whether the owner holds nothing of the lock as far as this manager knows: then, for
    /// kinds with [`LockKind::grants`], a hold granted to it by a release is taken, not
    /// counted again (docs/design/engine.md, "Grants").
    pub(crate) fresh: bool,
    /// The caller's registration as a waiter, for kinds with [`LockKind::grants`].
    pub(crate) waiting: Option<Waiting>,
}

/// The reentrant lock's kind, shared by every `Lock`.
pub(crate) static REENTRANT: Reentrant = Reentrant;

/// Redisson's reentrant lock (`RLock`): a hash of owner fields and hold counts.
pub(crate) struct Reentrant;

impl LockKind for Reentrant {
    fn id(&self) -> KindId {
        KindId::Lock
    }

    fn grants(&self) -> bool {
        true
    }

    fn attempt(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
    ) -> Result<Attempt> {
        if args.fenced {
            store.try_acquire_fenced(keys, args.lease_ms, args.owner, args.attempt_id, args.fresh)
        } else {
            store.try_acquire(
                keys,
                args.lease_ms,
                args.owner,
                args.attempt_id,
                args.fresh,
                args.waiting.as_ref(),
            )
        }
    }

    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        listeners: Listeners,
        next: Option<(&str, u64)>,
    ) -> Result<Release> {
        store.release(keys, lease_ms, owner, listeners, next)
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
        store.renew(batch, timeout_ms, budget)
    }
}
