//! Settings of a [`LockManager`](crate::LockManager) and their validation.

use std::time::Duration;

use crate::endpoints::Endpoints;
use crate::error::{Error, Result};
use crate::manager::LockManager;
use crate::pubsub_connection::PubSubProtocol;
use crate::sharded_pubsub::ShardedPubSubMode;

/// The longest lease or timeout accepted: 100 years (of 365 days), 3,153,600,000,000 ms.
///
/// Lease deadlines are kept in nanoseconds of the boot clock in a `u64` (see `clock.rs`),
/// which holds about 584 years. A longer lease made the deadline saturate, so every acquire
/// looked as if its reply had come too late to leave a useful lease, and was released and
/// retried forever. 100 years leaves the boot clock more than 480 years of uptime before a
/// deadline could saturate, and is far below the limits of Redis' millisecond expiry times
/// and of exact Lua numbers (2^53).
pub(crate) const MAX_LEASE_MILLIS: u64 = 100 * 365 * 24 * 60 * 60 * 1000;

/// The longest wait accepted: 2^52 ms (about 142,000 years). Waits end on
/// `std::time::Instant`, which holds them exactly, and are never sent to Redis; the limit only
/// keeps `Instant::now() + wait` from overflowing. `lock()` waits without limit.
pub(crate) const MAX_WAIT_MILLIS: u64 = 1 << 52;

/// The shortest watchdog timeout accepted, in ms.
///
/// Renewals go out every third of the timeout, and each must be sent, answered and seen before
/// the lease runs out, so every stall of the watchdog thread or of Redis eats into two thirds
/// of it. Measured on a shared 2-core VM (loopback Redis, debug build, 8 or 16 holds renewed
/// for 3 s per run, other developers building at the same time): with no added load, 3, 5, 10
/// and 30 ms timeouts lost every hold in a run; with 4 to 6 busy threads added, 50, 100, 150
/// and 200 ms each lost every hold in at least one of four runs, while 300 and 500 ms never
/// lost one (about a dozen runs each, 2 to 8 busy threads). The worst stall seen under that
/// load was a 173 ms PING round trip (and an 85 ms late wake-up from a 10 ms sleep). 500 ms
/// leaves about 330 ms for a renewal: about twice that stall, and 2.5 times the longest
/// timeout that lost holds. Real deployments should keep the 30 s default.
pub(crate) const MIN_WATCHDOG_TIMEOUT_MILLIS: u64 = 500;

/// Default lease of watchdog-renewed locks (Redisson's `lockWatchdogTimeout`).
pub(crate) const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default most connections in the command pool.
pub(crate) const DEFAULT_POOL_SIZE: usize = 8;
/// Default time to open one connection.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time Redis may take to answer one command.
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default time an acquire waits for a replica's acknowledgement (Redisson's
/// `slavesSyncTimeout`).
pub(crate) const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// Default time a fair-lock waiter without a wait limit keeps its place in the queue after the
/// place before it ran out (Redisson's `fairLockWaitTimeout`).
pub(crate) const DEFAULT_FAIR_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Converts a duration to whole milliseconds for Redis, refusing zero, sub-millisecond and
/// out-of-range values (above [`MAX_LEASE_MILLIS`]) with an error that names the argument.
pub(crate) fn to_millis(what: &'static str, d: Duration) -> Result<u64> {
    let ms = d.as_millis();
    if ms == 0 {
        return Err(Error::invalid(
            what,
            format!("{d:?} is shorter than Redis' resolution of 1 ms"),
        ));
    }
    if ms > u128::from(MAX_LEASE_MILLIS) {
        return Err(Error::invalid(
            what,
            format!("{d:?} is longer than the maximum of {MAX_LEASE_MILLIS} ms (100 years)"),
        ));
    }
    Ok(ms as u64)
}

/// Checks a wait: zero is allowed (one attempt), huge values are refused.
pub(crate) fn check_wait(wait: Duration) -> Result<()> {
    if wait.as_millis() > u128::from(MAX_WAIT_MILLIS) {
        return Err(Error::invalid(
            "wait",
            format!(
                "{wait:?} is longer than the maximum of {MAX_WAIT_MILLIS} ms; to wait without \
                 limit, use the call that takes no wait where there is one (`lock()`, \
                 `acquire()`), or wait again"
            ),
        ));
    }
    Ok(())
}

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

/// Builds a [`LockManager`] with settings other than the defaults.
///
/// Obtained from [`LockManager::builder`]. Setters never fail; [`build`](Self::build) checks
/// every value and reports the first bad one as an [`Error`], so settings that arrive from a
/// config file or through the C API cannot panic.
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
    /// replicas. Replicas are counted with `ROLE` when the manager starts, after a failover,
    /// and again by an acquire or release when the count is over 10 s old. A server that
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

    /// Checks the settings, connects to Redis, loads the lock scripts and starts the
    /// manager's background threads (the watchdog, and a pub/sub listener per master).
    ///
    /// Fails with [`Error::InvalidArgument`] or [`Error::InvalidUrl`] for bad settings and with
    /// [`Error::Connect`] when Redis cannot be reached or refuses the credentials, or when the
    /// Redis user may not PUBLISH and SUBSCRIBE on the channels of every kind
    /// (`redisson_lock__channel:*`, `redisson_rwlock:*`, `redisson_sc:*`,
    /// `redisson_countdownlatch__channel__*`) and the manager's control channel
    /// (`redis_rlock__control:*`): Redis 7 gives new ACL users no channel rights, and without
    /// them releases fail and waiters are never woken.
    pub fn build(self) -> Result<LockManager> {
        let config = self.validate()?;
        let endpoints = match &self.target {
            Target::Url(url) => Endpoints::parse(url)?,
            Target::Endpoints(endpoints) => endpoints.clone(),
        };
        endpoints.check()?;
        LockManager::start(&endpoints, config)
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
            .finish()
    }
}

/// The URL with any credentials replaced by `***`, for `Debug` and messages.
pub(crate) fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_refuses_zero_submillisecond_and_huge() {
        assert!(to_millis("lease", Duration::ZERO).is_err());
        assert!(to_millis("lease", Duration::from_micros(999)).is_err());
        assert!(to_millis("lease", Duration::MAX).is_err());
        assert_eq!(to_millis("lease", Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(
            to_millis("lease", Duration::from_millis(MAX_LEASE_MILLIS)).unwrap(),
            MAX_LEASE_MILLIS
        );
        let just_above = Duration::from_millis(MAX_LEASE_MILLIS + 1);
        let err = to_millis("lease", just_above).unwrap_err();
        assert!(err.to_string().contains("3153600000000 ms"), "{err}");
        assert!(check_wait(Duration::from_millis(MAX_WAIT_MILLIS)).is_ok());
        assert!(check_wait(Duration::from_millis(MAX_WAIT_MILLIS + 1)).is_err());
    }

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
