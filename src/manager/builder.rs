//! [`LockManagerBuilder`]: a manager's settings, their defaults, and their checks.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits::{to_millis, MIN_WATCHDOG_TIMEOUT_MILLIS};
use crate::topology::config::{Config, Pem};
use crate::topology::endpoints::{redact_url, Endpoints};
use crate::topology::pubsub_connection::PubSubProtocol;
use crate::topology::sharded_pubsub::ShardedPubSubMode;

/// Default lease of watchdog-renewed locks (Redisson's `lockWatchdogTimeout`).
const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default most connections in the command pool.
const DEFAULT_POOL_SIZE: usize = 8;
/// Default time to open one connection.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time Redis may take to answer one command.
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default time an acquire waits for a replica's acknowledgement (Redisson's
/// `slavesSyncTimeout`).
const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time a fair-lock waiter without a wait limit keeps its place in the queue after the
/// place before it ran out (Redisson's `fairLockWaitTimeout`).
const DEFAULT_FAIR_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Builds a [`LockManager`](crate::LockManager) with settings other than the defaults.
///
/// Obtained from [`LockManager::builder`](crate::LockManager::builder). Setters never fail;
/// [`build`](Self::build) checks every value and reports the first bad one as an [`Error`], so
/// settings that arrive from a config file or through the C API cannot panic.
///
/// ```no_run
/// use std::time::Duration;
/// let manager = redis_rlock::LockManager::builder("redis://127.0.0.1:6379/")
///     .watchdog_timeout(Duration::from_secs(10))
///     .pool_size(16)
///     .build()?;
/// # Ok::<(), redis_rlock::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct LockManagerBuilder {
    /// What to connect to: a URL of any form `Endpoints::parse` reads (checked by `build`),
    /// or the lists given to the Sentinel and Cluster builders.
    target: Target,
    replica_sync: bool,
    replica_sync_timeout: Duration,
    watchdog_timeout: Duration,
    pool_size: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    fair_lock_wait_timeout: Duration,
    tls_root_certificate: Option<Vec<u8>>,
    pubsub_protocol: PubSubProtocol,
    sharded_pubsub: ShardedPubSubMode,
    database: Option<u32>,
}

#[derive(Clone)]
enum Target {
    Url(String),
    Endpoints(Endpoints),
}

impl LockManagerBuilder {
    /// The default of [`watchdog_timeout`](Self::watchdog_timeout): 30 s.
    pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = DEFAULT_WATCHDOG_TIMEOUT;
    /// The default of [`pool_size`](Self::pool_size): 8.
    pub const DEFAULT_POOL_SIZE: usize = DEFAULT_POOL_SIZE;
    /// The default of [`connect_timeout`](Self::connect_timeout): 5 s.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = DEFAULT_CONNECT_TIMEOUT;
    /// The default of [`response_timeout`](Self::response_timeout): 3 s.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = DEFAULT_RESPONSE_TIMEOUT;

    pub(crate) fn new(url: &str) -> Self {
        Self::with_target(Target::Url(url.to_owned()))
    }

    pub(crate) fn with_endpoints(endpoints: Endpoints) -> Self {
        Self::with_target(Target::Endpoints(endpoints))
    }

    fn with_target(target: Target) -> Self {
        LockManagerBuilder {
            target,
            replica_sync: true,
            replica_sync_timeout: DEFAULT_REPLICA_SYNC_TIMEOUT,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            fair_lock_wait_timeout: DEFAULT_FAIR_LOCK_WAIT_TIMEOUT,
            tls_root_certificate: None,
            pubsub_protocol: PubSubProtocol::Auto,
            sharded_pubsub: ShardedPubSubMode::Auto,
            database: None,
        }
    }

    /// The lease given to locks taken without an explicit lease, renewed by the watchdog every
    /// third of it while the lock is held. A holder that dies stops renewing, so its lock
    /// expires at most this long after its last renewal.
    ///
    /// Defaults to 30 s (Redisson's `lockWatchdogTimeout`). Must be at least 500 ms and at most
    /// 100 years. Shorter timeouts were measured to lose holds still in use on a loaded machine:
    /// each renewal must make its round trip within two thirds of the timeout, and a busy host
    /// can stall a thread or Redis for well over 100 ms.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// The most connections the command pool opens. Each blocking call uses one connection for
    /// the length of one round trip, and waiting threads hold none, so a few connections serve
    /// many threads. The pub/sub listener has its own connection on top of these.
    ///
    /// Defaults to 8. Must be at least 1.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How long opening one connection (TCP, TLS, authentication) may take.
    ///
    /// It is also how long a thread already waiting for a lock rides out Redis refusing
    /// connections (a restart) before it reports the outage: a waiter on a single server is
    /// woken when the pub/sub connection drops, and fails after this long if Redis is not back.
    ///
    /// Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one command; also how long a call waits for a free
    /// pooled connection. A `try_lock(wait)` returns at most this much after `wait`.
    ///
    /// Defaults to 3 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a [fair lock](crate::FairLock) waiter that waits without limit keeps its place
    /// in the queue after the place before it ran out; past that it counts as gone (a crashed
    /// client must not block the queue for ever) and goes to the end of the queue at its next
    /// attempt. A waiter with a wait limit keeps its place for that limit instead.
    ///
    /// Defaults to 5 minutes (Redisson's `fairLockWaitTimeout`); set it to the Java side's
    /// value when both share fair locks. At least 1 ms.
    pub fn fair_lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.fair_lock_wait_timeout = timeout;
        self
    }

    /// For `rediss://` URLs: trust the root certificate(s) in `pem` (PEM text) instead of the
    /// system's, as for a server with a certificate from a private or self-signed CA. Without
    /// it, `rediss://` checks the server against the system's root certificates.
    ///
    /// ```no_run
    /// let ca = std::fs::read("ca.crt").expect("the CA certificate");
    /// let manager = redis_rlock::LockManager::builder("rediss://redis.internal:6380/")
    ///     .tls_root_certificate(ca)
    ///     .build()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// Whether each acquire and release waits until a replica has it: after the script, the
    /// same connection sends `WAIT <connected replicas> <timeout>`. When no replica
    /// acknowledged although the master has some, an acquire is rolled back and fails with
    /// [`Error::NotReplicated`] (a release is only logged: the lock is free either way). This
    /// is Redisson's `checkLockSyncedSlaves`: it keeps a lock from being lost by a failover
    /// that promotes a replica the acquire never reached.
    ///
    /// On by default. It costs one more round trip per acquire and release, and only where
    /// the master has replicas: on Sentinel and Cluster, and on a single server with
    /// replicas. Replicas are counted when the manager starts, after a failover, and again by
    /// an acquire or release when the count is over 10 s old: every replica the master lists
    /// (`INFO replication`), also one in its full sync, which a failover may promote once
    /// synced; until then an acquire is not acknowledged, and is rolled back. A server that
    /// answers `WAIT` as an unknown command (a managed service or proxy without it) gets no
    /// replica sync: the write stands, a warning is logged once, and `WAIT` is not sent there
    /// again.
    pub fn replica_sync(mut self, on: bool) -> Self {
        self.replica_sync = on;
        self
    }

    /// How long an acquire or release waits for a replica's acknowledgement.
    ///
    /// Defaults to 1 s (Redisson's `slavesSyncTimeout`). At least 1 ms.
    pub fn replica_sync_timeout(mut self, timeout: Duration) -> Self {
        self.replica_sync_timeout = timeout;
        self
    }

    /// Which protocol the pub/sub listeners speak on their own connections.
    ///
    /// [`PubSubProtocol::Auto`] (the default) speaks RESP3 (`HELLO 3`, Redis 6 and later)
    /// and falls back to RESP2 on a server that refuses `HELLO`, as ElastiCache's
    /// configuration endpoint, Redis Enterprise databases with RESP3 off, Envoy and kvrocks
    /// do. [`Resp3`](PubSubProtocol::Resp3) makes such a server fail
    /// [`build`](Self::build) instead; [`Resp2`](PubSubProtocol::Resp2) never asks for RESP3.
    /// Both protocols hear the same messages, sharded ones (`smessage`) included; a RESP2
    /// listener sends a `PING` per idle half second that RESP3 does without. The command
    /// connections speak RESP2 either way.
    ///
    /// ```no_run
    /// use redis_rlock::{LockManager, PubSubProtocol};
    /// let manager = LockManager::builder("redis://envoy.internal:6379/")
    ///     .pubsub_protocol(PubSubProtocol::Resp2)
    ///     .build()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn pubsub_protocol(mut self, protocol: PubSubProtocol) -> Self {
        self.pubsub_protocol = protocol;
        self
    }

    /// On a cluster, whether releases are announced with sharded pub/sub (`SPUBLISH`) or plain
    /// (`PUBLISH`): [`ShardedPubSubMode::Auto`] (the default) uses sharded pub/sub where the
    /// cluster supports it, as Redisson does; set it to what the Java services sharing the
    /// locks use (Redisson's `shardedSubscriptionMode`). Ignored elsewhere.
    ///
    /// ```no_run
    /// use redis_rlock::{LockManager, ShardedPubSubMode};
    /// let manager = LockManager::cluster_builder(&["redis://10.0.0.1:7000/"])
    ///     .sharded_pubsub_mode(ShardedPubSubMode::Off)
    ///     .build()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn sharded_pubsub_mode(mut self, mode: ShardedPubSubMode) -> Self {
        self.sharded_pubsub = mode;
        self
    }

    /// The database number every connection selects, in place of the URLs' `/db` (Redisson's
    /// `database`). A lock lives in one database: every client sharing it must select the same.
    ///
    /// On a cluster (where the URLs' `/db` is read the same way), only Valkey 9.0 and later
    /// with `cluster-databases` above `db` has more than database 0 (Redisson's
    /// `ClusterServersConfig.database`, 4.0); [`build`](Self::build) asks a node to `SELECT`
    /// it and fails with [`Error::InvalidArgument`] when refused, rather than use database 0.
    /// At most 2^31 − 1.
    ///
    /// ```no_run
    /// let manager = redis_rlock::LockManager::cluster_builder(&["redis://10.0.0.1:7000/"])
    ///     .database(2)
    ///     .build()?;
    /// # Ok::<(), redis_rlock::Error>(())
    /// ```
    pub fn database(mut self, db: u32) -> Self {
        self.database = Some(db);
        self
    }

    /// The endpoints and checked settings a manager starts with; the first bad one is the
    /// error. [`build`](Self::build) (in `crate::manager`) starts the manager from them.
    pub(crate) fn settings(&self) -> Result<(Endpoints, Config)> {
        let config = self.validate()?;
        let endpoints = match &self.target {
            Target::Url(url) => Endpoints::parse(url)?,
            Target::Endpoints(endpoints) => endpoints.clone(),
        };
        endpoints.check()?;
        Ok((endpoints, config))
    }

    fn validate(&self) -> Result<Config> {
        // Checked first, so that zero gets the minimum's message too, not Redis' 1 ms.
        if self.watchdog_timeout < Duration::from_millis(MIN_WATCHDOG_TIMEOUT_MILLIS) {
            return Err(Error::invalid(
                "watchdog timeout",
                format!(
                    "{:?} is shorter than the minimum of {MIN_WATCHDOG_TIMEOUT_MILLIS} ms: a \
                     renewal every third of it could not be relied on to reach Redis before the \
                     lease runs out on a busy machine",
                    self.watchdog_timeout
                ),
            ));
        }
        let watchdog_timeout_ms = to_millis("watchdog timeout", self.watchdog_timeout)?;
        if self.pool_size == 0 {
            return Err(Error::invalid("pool size", "must be at least 1"));
        }
        to_millis("connect timeout", self.connect_timeout)?;
        to_millis("response timeout", self.response_timeout)?;
        let fair_lock_wait_timeout_ms =
            to_millis("fair lock wait timeout", self.fair_lock_wait_timeout)?;
        to_millis("replica sync timeout", self.replica_sync_timeout)?;
        if let Some(db) = self.database.filter(|&db| i32::try_from(db).is_err()) {
            return Err(Error::invalid(
                "database",
                format!("{db} is above the largest database number, 2^31 - 1"),
            ));
        }
        Ok(Config {
            watchdog_timeout_ms,
            pool_size: self.pool_size,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            fair_lock_wait_timeout_ms,
            tls_root_certificate: self.tls_root_certificate.clone().map(Pem),
            replica_sync: self.replica_sync,
            replica_sync_timeout: self.replica_sync_timeout,
            pubsub_protocol: self.pubsub_protocol,
            sharded_pubsub: self.sharded_pubsub,
            database: self.database.map(i64::from),
        })
    }
}

impl std::fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            Target::Url(url) => redact_url(url),
            Target::Endpoints(Endpoints::Server(url)) => redact_url(url),
            Target::Endpoints(Endpoints::Sentinel {
                sentinels,
                master_name,
            }) => format!(
                "sentinels {:?} of {master_name:?}",
                sentinels.iter().map(|u| redact_url(u)).collect::<Vec<_>>()
            ),
            Target::Endpoints(Endpoints::Cluster { seeds }) => format!(
                "cluster {:?}",
                seeds.iter().map(|u| redact_url(u)).collect::<Vec<_>>()
            ),
        };
        f.debug_struct("LockManagerBuilder")
            .field("target", &target)
            .field("replica_sync", &self.replica_sync)
            .field("replica_sync_timeout", &self.replica_sync_timeout)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("fair_lock_wait_timeout", &self.fair_lock_wait_timeout)
            .field("tls_root_certificate", &self.tls_root_certificate.is_some())
            .field("pubsub_protocol", &self.pubsub_protocol)
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("database", &self.database)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_credentials() {
        let builder = LockManagerBuilder::new("redis://user:hunter2@127.0.0.1:6379/0");
        let text = format!("{builder:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("user"), "{text}");
        assert!(text.contains("redis://***@127.0.0.1:6379/0"), "{text}");
    }

    #[test]
    fn bad_settings_are_reported_by_validate() {
        let base = LockManagerBuilder::new("redis://127.0.0.1/");
        let cases = [
            base.clone().watchdog_timeout(Duration::ZERO),
            base.clone().watchdog_timeout(Duration::from_millis(2)),
            base.clone().watchdog_timeout(Duration::from_millis(499)),
            base.clone().watchdog_timeout(Duration::MAX),
            base.clone().pool_size(0),
            base.clone().connect_timeout(Duration::ZERO),
            base.clone().response_timeout(Duration::from_nanos(5)),
            base.clone().fair_lock_wait_timeout(Duration::ZERO),
            base.clone().database(1 << 31),
        ];
        for case in cases {
            let err = case.validate().unwrap_err();
            assert!(err.is_invalid_argument(), "{err}");
        }
        assert!(base.validate().is_ok());
        let shortest = base.watchdog_timeout(Duration::from_millis(MIN_WATCHDOG_TIMEOUT_MILLIS));
        assert_eq!(shortest.validate().unwrap().watchdog_timeout_ms, 500);
    }
}
