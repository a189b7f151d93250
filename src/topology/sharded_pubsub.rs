//! [`ShardedPubSubMode`]: whether a cluster manager announces and hears releases with sharded
//! pub/sub (Redisson's `shardedSubscriptionMode`).

use crate::error::{Error, Result};

/// Whether releases on a cluster are announced with `SPUBLISH` and heard with `SSUBSCRIBE` on
/// the slot's master (Redis 7 sharded pub/sub), or with plain `PUBLISH` and `SUBSCRIBE`, which
/// every node passes on to every other. Java clients and this crate must agree: a waiter that
/// listens one way does not hear a release announced the other way, and is then woken only by
/// its back-off. Redisson's `shardedSubscriptionMode` has the same three values and the same
/// default. Only clusters have the choice: one server and Sentinel always use plain pub/sub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardedPubSubMode {
    /// Sharded where the cluster supports it (it answers `PUBSUB SHARDNUMSUB`), plain
    /// elsewhere (Redis 6): what Redisson does by default.
    #[default]
    Auto,
    /// Sharded; a cluster without sharded pub/sub fails
    /// [`build`](crate::LockManagerBuilder::build).
    On,
    /// Plain, as Redisson clients configured with `shardedSubscriptionMode(OFF)` are.
    /// Releases are then never granted to a waiting client (the server cannot count a plain
    /// channel's subscribers across nodes).
    Off,
}

impl ShardedPubSubMode {
    /// Whether to use sharded pub/sub, given whether the cluster `supports` it.
    pub(crate) fn decide(self, supports: bool) -> Result<bool> {
        match (self, supports) {
            (ShardedPubSubMode::Auto, supports) => Ok(supports),
            (ShardedPubSubMode::On, true) => Ok(true),
            (ShardedPubSubMode::On, false) => Err(Error::invalid(
                "sharded pub/sub mode",
                "On, but the cluster does not support sharded pub/sub (PUBSUB SHARDNUMSUB is \
                 refused: Redis before 7): use Auto or Off",
            )),
            (ShardedPubSubMode::Off, _) => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_decides_with_what_the_cluster_supports() {
        assert!(ShardedPubSubMode::Auto.decide(true).unwrap());
        assert!(!ShardedPubSubMode::Auto.decide(false).unwrap());
        assert!(ShardedPubSubMode::On.decide(true).unwrap());
        assert!(ShardedPubSubMode::On
            .decide(false)
            .unwrap_err()
            .is_invalid_argument());
        assert!(!ShardedPubSubMode::Off.decide(true).unwrap());
        assert!(!ShardedPubSubMode::Off.decide(false).unwrap());
    }
}
