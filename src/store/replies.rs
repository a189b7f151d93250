//! The replies every lock kind's scripts share: what an attempt found ([`Attempt`]) and what
//! a release did ([`Release`]), and the unlock message.

use redis::{ErrorKind, RedisError, RedisResult};

/// The message published when a lock is released: Java parses it as a number, and `0` is
/// Redisson's "unlocked" (wakes one waiter).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours (new, or one more hold), with its fencing token if fenced.
    Acquired { token: Option<u64> },
    /// Someone else holds it; their remaining lease in ms, or `None` when the key has no TTL
    /// (only a foreign writer can leave it like that).
    HeldByOther(Option<u64>),
}

impl Attempt {
    pub(crate) fn is_acquired(self) -> bool {
        matches!(self, Attempt::Acquired { .. })
    }

    /// The acquire script's reply: nil when acquired, else the holder's PTTL.
    pub(crate) fn from_reply(pttl: Option<i64>) -> Self {
        match pttl {
            None => Attempt::Acquired { token: None },
            Some(ms) => Attempt::HeldByOther(u64::try_from(ms).ok()),
        }
    }

    /// The fenced acquire script's reply: `[token]` when acquired, else the holder's PTTL.
    pub(crate) fn from_fenced_reply(reply: redis::Value) -> RedisResult<Self> {
        use redis::Value;
        match reply {
            Value::Int(ms) => Ok(Attempt::HeldByOther(u64::try_from(ms).ok())),
            Value::Array(items) => {
                let token: String = match items.as_slice() {
                    [item] => redis::from_redis_value_ref(item)?,
                    _ => String::new(),
                };
                let token = token.parse::<u64>().map_err(|_| {
                    RedisError::from((
                        ErrorKind::Parse,
                        "the fencing token counter does not hold a non-negative integer",
                    ))
                })?;
                Ok(Attempt::Acquired { token: Some(token) })
            }
            other => Err(RedisError::from((
                ErrorKind::Parse,
                "unexpected reply to the fenced acquire",
                format!("{other:?}"),
            ))),
        }
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The last hold was released; nobody else was told, and no handoff was asked for.
    Released,
    /// The last hold was released and the lock acquired for the next local owner.
    HandedOver,
    /// The last hold was released and someone besides this client heard the unlock: the lock
    /// was left free for them.
    LeftForOthers,
    /// The last hold was released and the lock granted to a registered waiter of another
    /// client (docs/design/engine.md, "Grants").
    Granted,
    /// One hold fewer; the owner still holds the lock.
    StillHeld,
    /// Not the owner's last hold as this manager counts them, but the server had the owner's
    /// count at one (a late send of a fresh acquire set it there): the key was kept, with the
    /// count of the holds that remain, instead of freed under them.
    Kept,
    /// The owner held no hold: expired, force-unlocked, or someone else's.
    NotHeld,
}

impl Release {
    /// Whether the release deleted the key: the owner holds nothing of the lock any more.
    pub(crate) fn freed(&self) -> bool {
        matches!(
            self,
            Release::Released | Release::HandedOver | Release::LeftForOthers | Release::Granted
        )
    }

    /// The release script's reply (see `RELEASE` in scripts.rs); other kinds' release
    /// scripts reply in the same codes.
    pub(crate) fn from_reply(reply: Option<i64>) -> Self {
        match reply {
            None => Release::NotHeld,
            Some(0) => Release::StillHeld,
            Some(2) => Release::HandedOver,
            Some(3) => Release::LeftForOthers,
            Some(4) => Release::Granted,
            Some(5) => Release::Kept,
            Some(_) => Release::Released,
        }
    }
}
