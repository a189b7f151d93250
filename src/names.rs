//! The Redis keys and channel that belong to one lock name (Redisson's layout).

use crate::error::{Error, Result};

/// The longest lock name accepted, in bytes. Redis would take more, but every operation sends
/// the name two or three times, and a name this long is almost certainly a mistake.
pub(crate) const MAX_NAME_LEN: usize = 64 * 1024;

/// Prefix of the channel on which releases are announced.
const CHANNEL_PREFIX: &str = "redisson_lock__channel";
/// Prefix of the fencing token counter (Redisson's fenced lock).
const TOKEN_PREFIX: &str = "redisson_lock_token";
/// Prefix of the per-unlock-call latch that makes a retried unlock idempotent.
const LATCH_PREFIX: &str = "redisson_unlock_latch";
/// Prefix of the key that remembers an owner's last acquire attempt, so that an attempt sent
/// again after its reply was lost counts once (this crate's own: Redisson has none).
const ATTEMPT_PREFIX: &str = "redis_rlock__attempt";
/// Where this crate's remote waiters of a lock wait to be granted it (not Redisson's).
const WAITERS_PREFIX: &str = "redis_rlock__waiters";
/// Prefix of a fair lock's queue of waiters (a list of owner fields).
const QUEUE_PREFIX: &str = "redisson_lock_queue";
/// Prefix of a fair lock's waiter timeouts (a sorted set: owner field → epoch ms).
const TIMEOUT_PREFIX: &str = "redisson_lock_timeout";
/// Prefix of a read-write lock's channel.
const RWLOCK_CHANNEL_PREFIX: &str = "redisson_rwlock";

/// Prefix of a semaphore's channel (Redisson's `RSemaphore`), joined by the brace rule.
const SEMAPHORE_CHANNEL_PREFIX: &str = "redisson_sc";
/// Prefix of a count-down latch's channel (Redisson's `RCountDownLatch`). Redisson always
/// wraps the name in braces here, without the brace rule: so does this crate.
const COUNT_DOWN_LATCH_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";

/// Whose messages a channel carries, which decides how they wake its waiters (see
/// `crate::pubsub::subscriber`). Told by the channel's prefix: each primitive's prefix is Redisson's,
/// and none is a prefix of another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChannelKind {
    /// A lock's unlock channel: `0` wakes one waiter, `1` all.
    Unlock,
    /// A semaphore's: every message is the number of permits available after a release.
    Permits,
    /// A count-down latch's: `0` means the count reached zero, `1` that a new count was set.
    Count,
}

impl ChannelKind {
    pub(crate) fn of(channel: &str) -> Self {
        let after = |prefix: &str| channel.strip_prefix(prefix);
        if after(SEMAPHORE_CHANNEL_PREFIX).is_some_and(|rest| rest.starts_with(':')) {
            ChannelKind::Permits
        } else if after(COUNT_DOWN_LATCH_CHANNEL_PREFIX).is_some() {
            ChannelKind::Count
        } else {
            ChannelKind::Unlock
        }
    }
}

/// `redisson_sc:{name}`, where a semaphore's releases are announced (brace rule applies).
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefixed(SEMAPHORE_CHANNEL_PREFIX, name)
}

/// `redisson_countdownlatch__channel__{name}`, always with braces, as Redisson builds it.
pub(crate) fn count_down_latch_channel(name: &str) -> String {
    format!("{COUNT_DOWN_LATCH_CHANNEL_PREFIX}{{{name}}}")
}

/// `redis_rlock__attempt:{name}:<owner>` (brace rule applies): where the acquire attempts of
/// `owner` on `name` (a lock's, or a semaphore's) are remembered (see `attempt_script!`).
pub(crate) fn attempt_marker(name: &str, owner: &str) -> String {
    let mut key = prefixed(ATTEMPT_PREFIX, name);
    key.push(':');
    key.push_str(owner);
    key
}

/// `{name}:timeout`, or `name:timeout` when the name already has a `{` (Redisson's
/// `suffixName`): a permit-expirable semaphore's acquired permits, scored by their expiry.
/// Same slot as the name and its channel wherever `check_cluster_name` accepts the name.
pub(crate) fn permit_timeout_key(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:timeout")
    } else {
        format!("{{{name}}}:timeout")
    }
}

/// A validated lock name, and the keys derived from it. Equal when the names are.
///
/// Only the name is stored: one is kept per held lock, and the channel is needed only to wait
/// or to release, where building it costs nothing next to the round trip.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    /// The lock key: the name itself.
    pub(crate) name: Box<str>,
}

impl LockKeys {
    pub(crate) fn new(name: &str) -> Result<Self> {
        check_name(name)?;
        Ok(LockKeys { name: name.into() })
    }

    /// `redisson_lock__channel:{name}`, where releases are announced.
    pub(crate) fn channel(&self) -> String {
        prefixed(CHANNEL_PREFIX, &self.name)
    }

    /// `redisson_lock_token:{name}`, the counter that fenced acquisitions increment.
    pub(crate) fn token_key(&self) -> String {
        prefixed(TOKEN_PREFIX, &self.name)
    }

    /// The latch key for one unlock call, identified by `request_id`.
    pub(crate) fn latch(&self, request_id: &str) -> String {
        let mut key = prefixed(LATCH_PREFIX, &self.name);
        key.push(':');
        key.push_str(request_id);
        key
    }

    /// `redis_rlock__attempt:{name}:<owner>`: the id and outcome of the last acquire attempt of
    /// `owner` (a thread of one client) that took something, kept for an unlock latch's TTL.
    pub(crate) fn attempt_marker(&self, owner: &str) -> String {
        attempt_marker(&self.name, owner)
    }

    /// `redis_rlock__waiters:{name}`: the waiters of other clients of this crate that a
    /// release may grant the lock to, first come first (docs/design/engine.md, "Grants").
    pub(crate) fn waiters_key(&self) -> String {
        prefixed(WAITERS_PREFIX, &self.name)
    }
}

/// The keys of Redisson's other lock kinds on the same name (fair lock, read-write lock).
impl LockKeys {
    /// `redisson_lock_queue:{name}`: a fair lock's waiters, first come first.
    pub(crate) fn queue_key(&self) -> String {
        prefixed(QUEUE_PREFIX, &self.name)
    }

    /// `redisson_lock_timeout:{name}`: when each of a fair lock's waiters counts as gone.
    pub(crate) fn queue_timeout_key(&self) -> String {
        prefixed(TIMEOUT_PREFIX, &self.name)
    }

    /// `redisson_lock__channel:{name}:<owner>`: where a fair lock tells the waiter `owner`
    /// that its turn may have come.
    pub(crate) fn waiter_channel(&self, owner: &str) -> String {
        let mut channel = self.channel();
        channel.push(':');
        channel.push_str(owner);
        channel
    }

    /// `redisson_rwlock:{name}`: where a read-write lock's releases are announced.
    pub(crate) fn rwlock_channel(&self) -> String {
        prefixed(RWLOCK_CHANNEL_PREFIX, &self.name)
    }

    /// `{name}`, or the name itself when it has a `{`: what a read hold's timeout keys start
    /// with (Redisson's "key prefix", which its read unlock joins to every field).
    pub(crate) fn read_key_prefix(&self) -> String {
        if self.name.contains('{') {
            self.name.to_string()
        } else {
            format!("{{{}}}", self.name)
        }
    }

    /// `{name}:<owner>:rwlock_timeout`: the read holds of `owner` each have a key
    /// `<this>:<n>` (n = 1, 2, ... the hold count when it was taken) that lives as long as
    /// that hold's lease.
    pub(crate) fn read_timeout_prefix(&self, owner: &str) -> String {
        format!("{}:{owner}:rwlock_timeout", self.read_key_prefix())
    }
}

/// Refuses an empty or oversized name (of a lock, semaphore or latch alike).
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidName {
            reason: "the name is empty".into(),
        });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidName {
            reason: format!(
                "the name is {} bytes long; at most {MAX_NAME_LEN} bytes are accepted",
                name.len()
            ),
        });
    }
    Ok(())
}

/// On a cluster, refuses a name whose keys would hash to different slots (every script of a
/// lock touches several keys, which must share one slot). By the brace rule every prefixed
/// key hashes by what lies between its first `{` and the first `}` after it. With a `{` in
/// the name, that is the name's own hash tag, so the name must have one (non-empty): `a{b`
/// and `x{}y` have none, and each of their keys is hashed whole, to its own slot. Without a
/// `{`, the prefixed keys wrap the name in braces and hash by it up to its first `}`, so the
/// name must have no `}` either (`a}b`). Checked on the name's structure, not by comparing
/// slots: two different keys hashed whole can fall in the same slot by chance. Redisson's
/// layout, so Redisson cannot use such names on a cluster either.
pub(crate) fn check_cluster_name(name: &str) -> Result<()> {
    let one_slot = if name.contains('{') {
        crate::slot::hash_tag(name.as_bytes()).is_some()
    } else {
        !name.contains('}')
    };
    if !one_slot {
        return Err(Error::InvalidName {
            reason: format!(
                "{:?}: on a cluster its keys would hash to different slots (its braces do \
                 not make a hash tag); use a name with a tag (`{{orders}}:42`) or without \
                 braces",
                shown(name)
            ),
        });
    }
    Ok(())
}

/// At most 100 bytes of `name`, for messages.
pub(crate) fn shown(name: &str) -> &str {
    let mut end = name.len().min(100);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// `prefix:{name}`, or `prefix:name` when the name already has a `{` (Redisson's rule: the
/// name's own hash tag then decides the cluster slot).
fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_follows_the_brace_rule() {
        let plain = LockKeys::new("orders:42").unwrap();
        assert_eq!(plain.channel(), "redisson_lock__channel:{orders:42}");
        let tagged = LockKeys::new("{orders}:42").unwrap();
        assert_eq!(tagged.channel(), "redisson_lock__channel:{orders}:42");
    }

    #[test]
    fn token_key_follows_the_brace_rule() {
        let plain = LockKeys::new("orders:42").unwrap();
        assert_eq!(plain.token_key(), "redisson_lock_token:{orders:42}");
        let tagged = LockKeys::new("{orders}:42").unwrap();
        assert_eq!(tagged.token_key(), "redisson_lock_token:{orders}:42");
    }

    #[test]
    fn latch_key_has_the_request_id() {
        let keys = LockKeys::new("orders:42").unwrap();
        assert_eq!(keys.latch("ab12"), "redisson_unlock_latch:{orders:42}:ab12");
    }

    #[test]
    fn attempt_marker_follows_the_brace_rule() {
        let plain = LockKeys::new("orders:42").unwrap();
        assert_eq!(
            plain.attempt_marker("u:7"),
            "redis_rlock__attempt:{orders:42}:u:7"
        );
        let tagged = LockKeys::new("{orders}:42").unwrap();
        assert_eq!(
            tagged.attempt_marker("u:7"),
            "redis_rlock__attempt:{orders}:42:u:7"
        );
    }

    #[test]
    fn fair_and_read_write_keys_follow_the_brace_rule() {
        let plain = LockKeys::new("orders:42").unwrap();
        assert_eq!(plain.queue_key(), "redisson_lock_queue:{orders:42}");
        assert_eq!(
            plain.queue_timeout_key(),
            "redisson_lock_timeout:{orders:42}"
        );
        assert_eq!(
            plain.waiter_channel("u:7"),
            "redisson_lock__channel:{orders:42}:u:7"
        );
        assert_eq!(plain.rwlock_channel(), "redisson_rwlock:{orders:42}");
        assert_eq!(
            plain.read_timeout_prefix("u:7"),
            "{orders:42}:u:7:rwlock_timeout"
        );
        let tagged = LockKeys::new("{orders}:42").unwrap();
        assert_eq!(tagged.queue_key(), "redisson_lock_queue:{orders}:42");
        assert_eq!(tagged.rwlock_channel(), "redisson_rwlock:{orders}:42");
        assert_eq!(
            tagged.read_timeout_prefix("u:7"),
            "{orders}:42:u:7:rwlock_timeout"
        );
    }

    #[test]
    fn semaphore_and_latch_channels_are_redissons() {
        assert_eq!(semaphore_channel("pool"), "redisson_sc:{pool}");
        assert_eq!(semaphore_channel("{pool}:a"), "redisson_sc:{pool}:a");
        // Redisson's latch channel ignores the brace rule: braces even around a tagged name.
        assert_eq!(
            count_down_latch_channel("{job}:7"),
            "redisson_countdownlatch__channel__{{job}:7}"
        );
    }

    #[test]
    fn permit_timeout_key_is_redissons_suffix_name() {
        assert_eq!(permit_timeout_key("pool"), "{pool}:timeout");
        assert_eq!(permit_timeout_key("{pool}:a"), "{pool}:a:timeout");
        for name in ["pool", "{pool}:a"] {
            let slot = crate::slot::of(name.as_bytes());
            let timeout = permit_timeout_key(name);
            assert_eq!(crate::slot::of(timeout.as_bytes()), slot, "{name}");
            let channel = semaphore_channel(name);
            assert_eq!(crate::slot::of(channel.as_bytes()), slot, "{name}");
        }
    }

    #[test]
    fn a_cluster_refuses_names_whose_keys_split_across_slots() {
        // The last: its channel key falls in the name's slot by chance (CRC16 is linear),
        // its other keys do not.
        let collides = format!("a{{{}", "x".repeat(2478));
        for name in ["a{b", "x{}y", "}{", "{", "a}b", &collides] {
            let err = check_cluster_name(name).unwrap_err();
            assert!(err.is_invalid_argument(), "{name}: {err}");
        }
        let collided = LockKeys::new(&collides).unwrap();
        assert_eq!(
            crate::slot::of(collided.channel().as_bytes()),
            crate::slot::of(collides.as_bytes()),
            "the name a slot comparison would have let through"
        );
        for name in ["orders:42", "{orders}:42", "x{y}{}", "{a}}"] {
            check_cluster_name(name).unwrap();
            let keys = LockKeys::new(name).unwrap();
            let slot = crate::slot::of(name.as_bytes());
            assert_eq!(crate::slot::of(keys.channel().as_bytes()), slot, "{name}");
            assert_eq!(crate::slot::of(keys.token_key().as_bytes()), slot, "{name}");
            assert_eq!(crate::slot::of(keys.latch("r").as_bytes()), slot, "{name}");
            assert_eq!(
                crate::slot::of(keys.attempt_marker("o").as_bytes()),
                slot,
                "{name}"
            );
        }
    }

    #[test]
    fn empty_and_oversized_names_are_refused() {
        assert!(LockKeys::new("").unwrap_err().is_invalid_argument());
        let huge = "x".repeat(MAX_NAME_LEN + 1);
        let err = LockKeys::new(&huge).unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
        assert!(LockKeys::new(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }
}
