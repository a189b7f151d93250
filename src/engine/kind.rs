//! Lock kinds as the acquire engine ([`crate::engine`]) knows them: what every kind does
//! ([`LockKind`]: its attempt, release, channel and renewal), the abilities only some have
//! ([`TakesTurns`], [`HandsOver`], [`Grants`]), and the families whose
//! holds count together. The kinds themselves are in `crate::kinds`.

use std::time::Duration;

use crate::error::Result;
use crate::names::LockKeys;
use crate::store::{Attempt, LockStore, Release};

/// Which kind a [`LockKind`] is: tells kinds apart in the hold registry and the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KindId {
    Lock,
    FairLock,
    ReadLock,
    WriteLock,
    SpinLock,
    StringLock,
}

impl KindId {
    /// The owner field this kind counts its holds in (see [`Family`]).
    pub(crate) fn family(self) -> Family {
        match self {
            KindId::Lock | KindId::FairLock | KindId::SpinLock => Family::Reentrant,
            KindId::ReadLock => Family::Read,
            KindId::WriteLock => Family::Write,
            KindId::StringLock => Family::String,
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
    /// The owner's token as a string key's value (redis-py's lock): one value whatever the
    /// count, which is kept here.
    String,
}

impl Family {
    pub(crate) const ALL: [Family; 4] = [
        Family::Reentrant,
        Family::Read,
        Family::Write,
        Family::String,
    ];

    /// Whether a thread holding `held` on a name may not take this family on it, which the
    /// scripts would not refuse: a hash of hold counts and a read-write lock's hash are two
    /// formats of one key, and a lock taken by a reader would count on its read hold (the same
    /// field), one taken by the writer would wait for itself (Redisson does both). The other
    /// way round, a read or write lock on a lock's hash, is refused by the read-write scripts
    /// themselves (WRONGTYPE), whoever holds the lock. A string lock and any hash are two
    /// types of one key: the server refuses either on the other (WRONGTYPE), and the thread
    /// that holds one is told so before anything is sent.
    pub(crate) fn conflicts_with(self, held: Family) -> bool {
        let string = (self == Family::String) != (held == Family::String);
        string || (self == Family::Reentrant && held != Family::Reentrant)
    }

    /// What a hold of the family is, for error messages.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Family::Reentrant => "a lock (Lock, FairLock or SpinLock)",
            Family::Read => "the read lock",
            Family::Write => "the write lock",
            Family::String => "the string lock",
        }
    }
}

/// One kind of lock, as the engine needs to know it: what every kind does. What only some do
/// is an ability reached through [`takes_turns`](Self::takes_turns): [`TakesTurns`] (the
/// lock and the spin lock), and below it [`HandsOver`] and [`Grants`] (only the lock), as
/// lock_api splits `RawMutex` from `RawMutexFair`.
pub(crate) trait LockKind: Sync {
    fn id(&self) -> KindId;

    /// Whether its releases are silent (Redisson's spin lock): then a waiter subscribes to
    /// nothing and looks again after Redisson's spin back-off (`crate::backoff::SpinBackoff`)
    /// instead of waiting for a message.
    fn spins(&self) -> bool {
        false
    }

    /// The token a fresh acquisition by `owner` (its owner field) sends and its hold keeps,
    /// for a kind whose key holds one token per acquisition (the string lock: a release sent
    /// late must not delete the owner's next hold); `None` for the kinds whose holds are
    /// counted in the owner field itself.
    fn fresh_token(&self, owner: &str) -> Option<String> {
        let _ = owner;
        None
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
    /// release on [`channel`](Self::channel) (or, for a spin lock, nowhere).
    fn release(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Release>;

    /// [`release`](Self::release), told whether the hold is the owner's `last` as this
    /// manager counts them: a kind whose key holds one token per owner whatever its count
    /// (the string lock) counts holds only here, and frees the key only on the last.
    fn release_counted(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        last: bool,
    ) -> Result<Release> {
        let _ = last;
        self.release(store, keys, owner, lease_ms)
    }

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

    /// The kind's threads take turns in the local line, if it has that ability.
    fn takes_turns(&self) -> Option<&dyn TakesTurns> {
        None
    }
}

/// The ability to take turns: threads of one manager wait for the kind in the local line
/// ([`crate::engine::line`]), only the turn holder contends in Redis (and parks between its
/// attempts), and a last release passes the turn on. The lock and the spin lock have it (a
/// spin lock's line carries the gaps of `crate::engine::runs` instead of yields); kinds with
/// their own order in Redis (a fair lock's queue) or with shared holds (read locks) do not.
pub(crate) trait TakesTurns: LockKind {
    /// The kind's release script passes the lock on, if it has that ability.
    fn hands_over(&self) -> Option<&dyn HandsOver> {
        None
    }
}

/// The ability of a release script to pass the lock on in the same call: to the next local
/// thread (the in-script handoff), to remote waiters who heard the unlock (a yield), or to a
/// registered waiter of another client ([`Grants`], where the kind has it). Only the lock has
/// it: a spin lock's release announces nothing, so it can neither yield nor grant, and its
/// script cannot acquire for anyone.
pub(crate) trait HandsOver: TakesTurns {
    /// [`LockKind::release`], which on the last hold, unless more than `listeners.ignored`
    /// of the channel's subscribers heard it (this manager's own listener, or all while
    /// yields are suspended), acquires for `next` (owner field and lease); or grants the lock
    /// to a registered waiter, for kinds with [`Grants`]. `left` is how many holds of `owner`
    /// this manager still counts after this one (0: the last): a release with holds left never
    /// frees the lock, even where the server had the owner's count at one ([`Release::Kept`]).
    #[allow(clippy::too_many_arguments)]
    fn release_handing_over(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
        listeners: Listeners,
        next: Option<(&str, u64)>,
        left: u32,
    ) -> Result<Release>;

    /// How many holds `owner` has on the server: read when a handoff's reply was lost.
    fn hold_count(&self, store: &LockStore, keys: &LockKeys, owner: &str) -> Result<u32>;

    /// The kind's releases grant the lock to registered waiters, if it has that ability.
    fn grants(&self) -> Option<&dyn Grants> {
        None
    }
}

/// The [`HandsOver`] ability of `kind`, if it has it.
pub(crate) fn hands_over(kind: &dyn LockKind) -> Option<&dyn HandsOver> {
    kind.takes_turns()?.hands_over()
}

/// The [`Grants`] ability of `kind`, if it has it.
pub(crate) fn grants(kind: &dyn LockKind) -> Option<&dyn Grants> {
    hands_over(kind)?.grants()
}

/// The ability to grant: a release of the last hold writes the lock in the name of the first
/// registered waiter of another client and publishes its wait number. Only the lock has it.
/// Declared here with the other abilities; the engine's side (registering, taking a grant,
/// leaving) and the deployments where grants are on are in `grants.rs`.
pub(crate) trait Grants: HandsOver {
    /// [`LockKind::attempt`] that, finding the lock
    /// held, registers the caller as `waiting` (or refreshes its registration).
    fn attempt_registered(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        args: &AttemptArgs<'_>,
        waiting: &Waiting,
    ) -> Result<Attempt>;

    /// Takes `owner`'s registration with `number` out of the lock's waiters: `true` when a
    /// release had granted it the lock meanwhile, which it then holds with a lease of
    /// `lease_ms` from now.
    fn stop_waiting(
        &self,
        store: &LockStore,
        keys: &LockKeys,
        owner: &str,
        number: u64,
        lease_ms: u64,
    ) -> Result<bool>;
}

/// A waiter's registration for [`Grants`], as an acquire attempt sends it.
pub(crate) struct Waiting {
    /// The wait's number, published when a release grants it the lock.
    pub(crate) number: u64,
    /// How long the waiter still waits at most, in ms (`None`: without limit).
    pub(crate) left_ms: Option<u64>,
    /// The control channel of the manager's listener on the lock's server, by which a
    /// release tells that the waiter's manager still listens.
    pub(crate) control: String,
}

/// Which of a lock channel's subscribers a release counts as nobody waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Listeners {
    /// How many subscribers to disregard before the lock is left free for the others
    /// (this client's own listener, or all of them while yields are suspended).
    pub(crate) ignored: u64,
    /// Whether this client's own listener is subscribed (never a waiter to grant to).
    pub(crate) own: bool,
}

/// What one attempt asks for.
pub(crate) struct AttemptArgs<'a> {
    /// The owner field, `<client id>:<thread number>`, or the acquisition's token for a kind
    /// that has one ([`LockKind::fresh_token`]).
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
    /// Whether the owner holds nothing of the lock as far as this manager knows: then the
    /// hold taken is the owner's only one (a count found on the server is one it no longer
    /// has), and a hold granted to it by a release (see [`Grants`]) is taken, not counted
    /// again.
    pub(crate) fresh: bool,
}

#[cfg(test)]
mod tests {
    use super::Family;

    #[test]
    fn a_string_lock_and_every_hash_family_refuse_each_other_to_one_thread() {
        for hash in [Family::Reentrant, Family::Read, Family::Write] {
            assert!(Family::String.conflicts_with(hash), "{hash:?} held");
            assert!(hash.conflicts_with(Family::String), "{hash:?} asked");
        }
        assert!(!Family::String.conflicts_with(Family::String), "a re-entry");
        // The read-write scripts refuse a lock's hash themselves.
        assert!(!Family::Read.conflicts_with(Family::Reentrant));
        assert!(Family::Reentrant.conflicts_with(Family::Write));
    }
}
