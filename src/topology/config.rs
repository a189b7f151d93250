//! [`Config`]: a manager's settings once checked, which its parts (topology, store, engine)
//! are made with. `LockManagerBuilder` (`crate::manager::builder`) collects and checks them.

use std::time::Duration;

use crate::topology::pubsub_connection::PubSubProtocol;
use crate::topology::sharded_pubsub::ShardedPubSubMode;

/// Validated settings shared by everything a manager owns.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) watchdog_timeout_ms: u64,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How long a fair-lock waiter without a wait limit keeps its place, in ms.
    pub(crate) fair_lock_wait_timeout_ms: u64,
    /// PEM root certificates to trust for `rediss://` instead of the system's.
    pub(crate) tls_root_certificate: Option<Pem>,
    /// Whether acquires and releases wait for a replica's acknowledgement.
    pub(crate) replica_sync: bool,
    pub(crate) replica_sync_timeout: Duration,
    /// What the pub/sub listeners speak.
    pub(crate) pubsub_protocol: PubSubProtocol,
    pub(crate) sharded_pubsub: ShardedPubSubMode,
    /// The database every connection selects, in place of the URLs' own.
    pub(crate) database: Option<i64>,
}

/// PEM bytes, shown by `Debug` as their size only.
#[derive(Clone)]
pub(crate) struct Pem(pub(crate) Vec<u8>);

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes of PEM>", self.0.len())
    }
}

impl Config {
    /// How often the watchdog renews a held lock: a third of the timeout, like Redisson.
    pub(crate) fn renewal_period(&self) -> Duration {
        Duration::from_millis(self.watchdog_timeout_ms) / 3
    }

    /// How long an unlock latch lives: long enough to cover one retry of the unlock after its
    /// reply was lost (a response timeout, a reconnect, and a second response timeout).
    pub(crate) fn latch_ttl_ms(&self) -> u64 {
        let span = self.response_timeout * 2 + self.connect_timeout;
        (span.as_millis() as u64).max(1_000)
    }
}
