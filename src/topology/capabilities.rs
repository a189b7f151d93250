//! What the deployment found at connect time allows and requires, as named facts: every part
//! of the crate that behaves differently on one server, Sentinel or a cluster asks the fact it
//! means here, never which deployment it is.

/// The deployment a manager connected to, as far as its capabilities go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One server (with or without replicas nobody promotes).
    Server,
    /// A master named by sentinels.
    Sentinel,
    /// A Redis Cluster; `sharded_pubsub`: releases go by `SPUBLISH` (decided at connect from
    /// the cluster's answer and the builder's `ShardedPubSubMode`).
    Cluster {
        /// Whether releases are announced with `SPUBLISH` and heard with `SSUBSCRIBE`.
        sharded_pubsub: bool,
    },
}

/// The named facts of one deployment, fixed for a manager's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// A master can be replaced under the same name (a failover, a resharding): a refused
    /// connection, a silent master or a READONLY/MOVED reply means "ask where it is now".
    pub(crate) masters_move: bool,
    /// Keys are spread over masters by hash slot: a name's keys must share one slot.
    pub(crate) routes_by_slot: bool,
    /// Several masters each serve part of the keys: one out of reach leaves the others'
    /// keys working, so it is passed over at connect rather than failing it.
    pub(crate) several_masters: bool,
    /// Sentinels say which master is current and whether a failover of it is under way.
    pub(crate) sentinels_vouch: bool,
    /// Each master has its own pub/sub listener, which hears the channels of its slots.
    pub(crate) listener_per_master: bool,
    /// Listeners subscribe with `SSUBSCRIBE` (sharded pub/sub) rather than `SUBSCRIBE`.
    pub(crate) sharded_pubsub: bool,
    /// The command that announces a release: `publish` or `spublish`.
    pub(crate) publish_command: &'static str,
    /// The `PUBSUB` subcommand that counts a channel's subscribers where releases are
    /// published (`numsub` or `shardnumsub`), or empty where no one node can count them all
    /// (a cluster without sharded pub/sub: plain messages reach every node).
    pub(crate) numsub_command: &'static str,
}

impl Capabilities {
    /// The facts of `deployment`.
    pub(crate) fn of(deployment: Deployment) -> Self {
        let cluster = matches!(deployment, Deployment::Cluster { .. });
        let sharded = matches!(
            deployment,
            Deployment::Cluster {
                sharded_pubsub: true
            }
        );
        Capabilities {
            masters_move: deployment != Deployment::Server,
            routes_by_slot: cluster,
            several_masters: cluster,
            sentinels_vouch: deployment == Deployment::Sentinel,
            listener_per_master: cluster,
            sharded_pubsub: sharded,
            publish_command: if sharded { "spublish" } else { "publish" },
            numsub_command: match (cluster, sharded) {
                (_, true) => "shardnumsub",
                (true, false) => "",
                (false, false) => "numsub",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_server_keeps_its_master_and_publishes_plainly() {
        let caps = Capabilities::of(Deployment::Server);
        assert!(!caps.masters_move);
        assert!(!caps.routes_by_slot);
        assert!(!caps.several_masters);
        assert!(!caps.sentinels_vouch);
        assert!(!caps.listener_per_master);
        assert!(!caps.sharded_pubsub);
        assert_eq!(
            (caps.publish_command, caps.numsub_command),
            ("publish", "numsub")
        );
    }

    #[test]
    fn sentinel_masters_move_and_sentinels_vouch() {
        let caps = Capabilities::of(Deployment::Sentinel);
        assert!(caps.masters_move);
        assert!(caps.sentinels_vouch);
        assert!(!caps.routes_by_slot);
        assert!(!caps.several_masters);
        assert!(!caps.listener_per_master);
        assert!(!caps.sharded_pubsub);
        assert_eq!(
            (caps.publish_command, caps.numsub_command),
            ("publish", "numsub")
        );
    }

    #[test]
    fn a_cluster_routes_by_slot_with_a_listener_per_master() {
        for sharded_pubsub in [false, true] {
            let caps = Capabilities::of(Deployment::Cluster { sharded_pubsub });
            assert!(caps.masters_move);
            assert!(caps.routes_by_slot);
            assert!(caps.several_masters);
            assert!(caps.listener_per_master);
            assert!(!caps.sentinels_vouch);
            assert_eq!(caps.sharded_pubsub, sharded_pubsub);
        }
    }

    #[test]
    fn a_cluster_counts_subscribers_only_with_sharded_pubsub() {
        let plain = Capabilities::of(Deployment::Cluster {
            sharded_pubsub: false,
        });
        assert_eq!(
            (plain.publish_command, plain.numsub_command),
            ("publish", "")
        );
        let sharded = Capabilities::of(Deployment::Cluster {
            sharded_pubsub: true,
        });
        assert_eq!(
            (sharded.publish_command, sharded.numsub_command),
            ("spublish", "shardnumsub")
        );
    }
}
