//! A synchronous, Redisson-compatible distributed lock for threaded Rust programs.
//!
//! `redis-rlock` gives plain threaded programs the lock that Java programs get from Redisson's
//! `RLock`: **reentrant** per thread, **owner-checked** on release, kept alive by a
//! **watchdog** while the holder works, released at once on unlock, and with waiters **woken
//! by pub/sub** instead of polling. It stores locks exactly as Redisson does, so a Java service
//! and a Rust service can share one lock.
//!
//! There is no async runtime: every call blocks the calling thread, and the crate runs two
//! background threads per [`LockManager`] on one server or Sentinel (on a cluster, a listener
//! per master) whatever the number of locks ([`RedLock`] adds a process-wide set of at most
//! 16 worker threads, started on first use, and one thread per process once a
//! [`RedLockGuard::lost_signal`] is asked for).
//!
//! # Usage
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_rlock::LockManager;
//!
//! let manager = LockManager::new("redis://127.0.0.1:6379/")?;
//!
//! // Wait as long as it takes; the watchdog keeps the lock while the guard lives.
//! let guard = manager.lock("orders:42")?;
//! // ... critical section ...
//! guard.unlock()?; // or just drop it
//!
//! // Wait at most 2 s.
//! if let Some(_guard) = manager.try_lock("orders:42", Duration::from_secs(2))? {
//!     // ... critical section; released when `_guard` goes out of scope ...
//! }
//!
//! // A fixed lease, never renewed: the lock expires after 10 s even if the holder hangs.
//! let guard = manager.lock_with_lease("orders:42", Duration::from_secs(10))?;
//! drop(guard);
//! # Ok::<(), redis_rlock::Error>(())
//! ```
//!
//! The four ways to acquire mirror Redisson's overloads:
//!
//! | Redisson | here | waits | lease |
//! |---|---|---|---|
//! | `lock()` | [`LockManager::lock`] | until acquired | watchdog |
//! | `tryLock(wait, unit)` | [`LockManager::try_lock`] | up to `wait` | watchdog |
//! | `lock(lease, unit)` | [`LockManager::lock_with_lease`] | until acquired | fixed |
//! | `tryLock(wait, lease, unit)` | [`LockManager::try_lock_with_lease`] | up to `wait` | fixed |
//!
//! Each of them is a shorthand for [`Lock::acquire`] / [`LockManager::acquire`], which take
//! an [`AcquireOptions`]: a wait limit, a [`Lease`] (watchdog or fixed), whether to take a
//! fencing token, and a cap on the watchdog's renewals
//! ([`max_hold`](AcquireOptions::max_hold): a thread stuck with the lock keeps it no longer),
//! in any combination. `acquire` returns `None` when the wait passed.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_rlock::{AcquireOptions, Lease, LockManager};
//!
//! let manager = LockManager::new("redis://127.0.0.1:6379/")?;
//! let options = AcquireOptions::new()
//!     .wait(Duration::from_secs(2))
//!     .lease(Lease::Fixed(Duration::from_secs(30)))
//!     .fenced(true);
//! if let Some(guard) = manager.acquire("reports:daily", options)? {
//!     println!("token {:?}", guard.fencing_token());
//! }
//! # Ok::<(), redis_rlock::Error>(())
//! ```
//!
//! The same methods exist on [`Lock`], a cheap handle on one name
//! ([`LockManager::get_lock`]), which also has the inspection calls
//! ([`is_locked`](Lock::is_locked), [`is_held_by_current_thread`](Lock::is_held_by_current_thread),
//! [`hold_count`](Lock::hold_count), [`remaining_ttl`](Lock::remaining_ttl)) and
//! [`force_unlock`](Lock::force_unlock).
//!
//! # Other lock kinds
//!
//! Three more of Redisson's locks share the same machinery (the engine, the watchdog, guards
//! with the lost signal) and wire format:
//!
//! - [`FairLock`] ([`LockManager::get_fair_lock`]), Redisson's `RFairLock`: waiters of every
//!   client get the lock first come, first served, through a queue kept in Redis.
//! - [`SpinLock`] ([`LockManager::get_spin_lock`]), Redisson's `RSpinLock`: stored as the lock
//!   is, but nothing is published: a release announces nothing and waiters poll, after
//!   Redisson's back-off (1 ms doubling to 128 ms), instead of subscribing. For deployments
//!   where pub/sub is unwelcome, or to share a lock with Java's `getSpinLock`.
//! - [`ReadWriteLock`] ([`LockManager::get_read_write_lock`]), Redisson's `RReadWriteLock`:
//!   a [`ReadLock`] shared by any number of readers and an exclusive [`WriteLock`]. As in
//!   Redisson, readers that keep overlapping keep a writer waiting.
//!
//! Every lock kind answers the same calls, as every Redisson lock is an `RLock`: the six
//! acquiring shorthands (`lock`, `try_lock`, `lock_with_lease`, `try_lock_with_lease`,
//! `lock_fenced`, `try_lock_fenced`) and `acquire`, each returning a [`LockGuard`], and
//! `is_locked`, `is_held_by_current_thread`, `hold_count`, `remaining_ttl` and `force_unlock`.
//! They are each kind's own methods (no import needed) and the trait [`DistributedLock`], for
//! code that takes any kind, also as `&dyn DistributedLock`. A [`ReadLock`] or [`WriteLock`]
//! answers for the read-write lock's one hash, as in Redisson: `is_locked` while it is held in
//! that mode, `hold_count` of that half, `force_unlock` only in that mode. From Redisson to
//! here:
//!
//! | Redisson | here | waiters | fencing |
//! |---|---|---|---|
//! | `getLock(name)` | [`LockManager::get_lock`] → [`Lock`] | woken by the unlock message | yes |
//! | `getFairLock(name)` | [`LockManager::get_fair_lock`] → [`FairLock`] | queued in Redis, the head woken | yes |
//! | `getSpinLock(name)` | [`LockManager::get_spin_lock`] → [`SpinLock`] | poll, 1 ms doubling to 128 ms; no message | yes |
//! | `getReadWriteLock(name)` | [`LockManager::get_read_write_lock`] → [`ReadWriteLock`] | woken by the unlock message | write lock only |
//!
//! A [`SpinLock`]'s `force_unlock` publishes nothing either.
//!
//! ```no_run
//! use std::time::Duration;
//! # let manager = redis_rlock::LockManager::new("redis://127.0.0.1:6379/")?;
//! let guard = manager.get_fair_lock("reports").lock()?;
//! drop(guard);
//! let spin = manager.get_spin_lock("nightly");
//! if let Some(guard) = spin.try_lock(Duration::from_secs(1))? {
//!     guard.unlock()?; // publishes nothing: waiters find it free when they look
//! }
//! let config = manager.get_read_write_lock("config");
//! if let Some(_read) = config.read_lock().try_lock(Duration::from_secs(1))? {
//!     // ... shared with other readers ...
//! }
//! # Ok::<(), redis_rlock::Error>(())
//! ```
//!
//! The fair lock and the read-write lock have no local line (described below): the fair lock's
//! queue orders local threads too, and shared holds cannot take turns; each handoff between
//! threads of one manager is a pub/sub hop. The spin lock has the line without the handoff in
//! the release (Redisson's script cannot acquire for anyone): threads of one manager take
//! turns, only the first polls, and a release hands it the turn. Since nothing tells other
//! processes' pollers of a release, a manager that has kept a spin lock for 0.2-2 s (adapting)
//! leaves it free for 160 ms, longer than their back-off, so that they get in.
//! `docs/design/wire-format.md` ("Fair lock", "Spin lock" and "Read-write lock") has their
//! keys, scripts and what differs from Redisson.
//!
//! # Ownership and reentrancy
//!
//! The owner of a hold is the *thread* that acquired it (through one manager): the same thread
//! locking again re-enters and the hold count goes up; other threads, managers and processes
//! wait. Each acquire returns a [`LockGuard`] that releases exactly one hold. Unlike Java, a
//! guard may be moved to another thread and released there: it remembers its owner.
//!
//! # Contention and fairness
//!
//! Threads of one manager that want the same lock take turns locally: only one of them
//! contends in Redis, the others wait in line in-process (first come, first served) and send
//! nothing. When the lock's holder releases it, the same script call acquires it for the next
//! thread in line, which is woken holding the lock: a contended lock costs one acquire and one
//! release per critical section.
//!
//! That handoff never shuts other processes out. The release counts who heard its unlock
//! message; when anyone besides this manager did (a thread of another process, a Redisson
//! client), the lock is left free for them, and this manager's threads hold back for a short
//! adaptive window before trying again, so that the woken remote waiter wins. Processes thus
//! share a busy lock, and a remote waiter sends a few requests per acquisition, not one per
//! local handoff. The line never outlasts its holder: a holder whose lease ran out or whose
//! hold was lost is overtaken. When yields keep finding the lock free at the longest window
//! (someone hears the unlocks but never takes the lock, such as a monitoring subscriber), they
//! are suspended for a second, which can keep out a remote waiter slower than 50 ms for that
//! long.
//!
//! When every other listener on the lock's channel is a waiting thread of this crate (no
//! Redisson client, nobody else), the release instead *grants* the lock to the one that
//! registered first, in the same script call, and tells it by its wait's number: it wakes
//! holding the lock, without a request of its own, and busy processes take the lock in turns.
//! Fenced acquires do not wait for grants, nor do acquires with replica sync on a master
//! that has replicas (the default there), nor any on a cluster without sharded pub/sub.
//! `docs/design/engine.md` has the rules ("Yields", "Grants"), `BENCHMARKS.md` the figures (W2, W3
//! and W6), and [`LockManager::stats`] counts what a manager sends and sees.
//!
//! # Leases and the watchdog
//!
//! `lock` and `try_lock` give the lock a lease of the watchdog timeout (30 s by default) and the
//! manager's watchdog thread renews it every third of that while the guard lives. If the
//! process dies, renewal stops and the lock expires within the timeout. `*_with_lease` sets the
//! lease once and never renews it: when the work outlasts the lease, the lock is gone and the
//! guard's [`unlock`](LockGuard::unlock) reports [`Error::NotHeld`].
//!
//! # Configuration
//!
//! [`LockManager::builder`] sets the watchdog timeout (at least 500 ms), pool size, connect
//! and response timeouts and the fair lock's wait timeout; every setter documents its default,
//! and [`build`](LockManagerBuilder::build) reports bad values as errors. Leases and timeouts
//! are at most 100 years, waits at most 2^52 ms. `build` also checks that the Redis user may
//! PUBLISH and SUBSCRIBE on the channels of every kind (Redis 7 ACL users get no channel
//! rights by default) and fails with [`Error::Connect`] naming the missing right. See
//! [`LockManager`] for the threads and connections a manager owns, how clones share them, and
//! why a manager must not be used after `fork()` ([`Error::Forked`]).
//!
//! # Sentinel and Cluster
//!
//! The same locks work on a master watched by Redis Sentinel and on a Redis Cluster, every
//! kind and feature included. [`LockManager::sentinel_builder`] and
//! [`LockManager::cluster_builder`] start from the sentinels' or some nodes' URLs; the URL
//! forms `redis-sentinel://host1:26379,host2:26379/0#mymaster` (Lettuce's) and
//! `redis-cluster://host1:7000,host2:7001` reach them from [`LockManager::new`], the C API and
//! the command line.
//!
//! ```no_run
//! let cluster = redis_rlock::LockManager::new("redis-cluster://10.0.0.1:7000,10.0.0.2:7000")?;
//! let guard = cluster.lock("orders:42")?; // on the master of the name's slot
//! # Ok::<(), redis_rlock::Error>(())
//! ```
//!
//! Commands follow MOVED and ASK redirections and failovers, and one that may have run (a
//! timeout) is never sent again. On a Redis 7 cluster releases are announced with sharded
//! pub/sub (`SPUBLISH`), as Redisson does, and heard by one listener per master. Acquires and
//! releases wait for a replica's acknowledgement where the master has replicas
//! ([`LockManagerBuilder::replica_sync`]), so that holds survive a failover; an acquire no
//! replica acknowledged is rolled back and fails with [`Error::NotReplicated`].
//!
//! # Errors
//!
//! Every fallible call returns [`Result`]. Bad input (an empty or oversized name, a zero or
//! out-of-range duration, an unparseable URL) is refused before anything is sent
//! ([`Error::is_invalid_argument`]). Redis being down is an error, not a hang
//! ([`Error::is_connection_error`], [`Error::is_timeout`]); a thread already waiting for a
//! lock rides out an outage of up to one connect timeout (a restart) before reporting it, and on
//! Sentinel or a cluster a failover within its own wait (60 s at most without a limit). A
//! key of the lock's name that is not a lock (another type, or a hash of somebody's data) is
//! reported as [`Error::WrongType`] and left untouched. Releasing a lock that is no longer yours is [`Error::NotHeld`] and changes
//! nothing on Redis. What Redis or the connection reported is a [`RedisFailure`]
//! ([`Error::redis_failure`]): its [`FailureKind`], and the server's error code and words.
//!
//! # Cancelling waits and shutting down
//!
//! Every blocking call can be ended from another thread. Give it a [`CancelToken`]
//! ([`AcquireOptions::cancel_token`] for the lock kinds, [`MultiLock::acquire`] and
//! [`RedLock::acquire`]; [`WaitOptions::cancel_token`] for [`Semaphore::acquire_with`],
//! [`PermitExpirableSemaphore::acquire_with`] and [`CountDownLatch::wait_with`]) and
//! [`cancel`](CancelToken::cancel) it: the call returns [`Error::Cancelled`] within
//! milliseconds, not at its next timeout, and leaves nothing behind (no hold, no permit, no
//! place in a queue, no registration for a grant). A token cancelled
//! before the call fails it at once without I/O. [`LockManager::shutdown`] does the same for
//! every call of a manager and its clones ([`Error::Shutdown`]), and refuses later acquires;
//! guards taken before keep working until dropped.
//!
//! ```no_run
//! use redis_rlock::{AcquireOptions, CancelToken, LockManager};
//!
//! let manager = LockManager::new("redis://127.0.0.1:6379/")?;
//! let token = CancelToken::new();
//! let waiter = {
//!     let (manager, token) = (manager.clone(), token.clone());
//!     std::thread::spawn(move || manager.acquire("jobs:nightly", AcquireOptions::new().cancel_token(&token)))
//! };
//! token.cancel(); // or manager.shutdown(), which ends every wait of the manager
//! match waiter.join().unwrap() {
//!     Err(err) if err.is_cancelled() => println!("stopped waiting"),
//!     other => println!("{other:?}"), // it got the lock first
//! }
//! # Ok::<(), redis_rlock::Error>(())
//! ```
//!
//! A token is an ordinary value, usable without a server:
//!
//! ```
//! let token = redis_rlock::CancelToken::new();
//! let for_the_waiter = token.clone();
//! assert!(!for_the_waiter.is_cancelled());
//! token.cancel();
//! assert!(for_the_waiter.is_cancelled(), "clones are the same token");
//! ```
//!
//! # On the wire
//!
//! A lock named `n` is a Redis hash at key `n` with one field `<client-uuid>:<thread-number>`
//! holding the hold count, and a millisecond TTL (the lease). Releases are announced on
//! `redisson_lock__channel:{n}` with the message `0`. Unlock calls are made idempotent by a
//! short-lived latch key `redisson_unlock_latch:{n}:<request-id>`, which expires by itself.
//!
//! # When things go wrong
//!
//! Every guard knows the end of its lease as last confirmed by Redis and says without I/O
//! whether the lock is lost ([`LockGuard::is_lost`], [`LockGuard::remaining_lease`]); a
//! [`LockGuard::lost_signal`] receiver is told the moment the watchdog finds the lock gone or
//! the lease runs out unconfirmed. Fenced acquisitions ([`Lock::lock_fenced`]) return
//! strictly increasing [tokens](LockGuard::fencing_token) that a resource can use to refuse a
//! stale holder's writes. The README lists what the crate promises under which failures.
//!
//! # Several locks at once
//!
//! - [`MultiLock`] (Redisson's `RedissonMultiLock`): several locks, of one or several
//!   managers, taken all or nothing, in the order given.
//! - [`RedLock`] (Redisson's `RedissonRedLock`): the Redlock algorithm, one lock of the same
//!   name on each of N independent masters, held by a majority. Its docs say what it does
//!   and does not promise (process pauses, clock jumps; no fencing token across masters).
//!
//! Both have the four shorthands (`lock`, `try_lock`, `lock_with_lease`,
//! `try_lock_with_lease`) and `acquire`, and their guards a lost signal.
//!
//! # Semaphores and count-down latches
//!
//! A manager also hands out Redisson's other two waiting primitives, stored and announced
//! exactly as Redisson does, so Java and Rust share them too:
//!
//! - [`Semaphore`] ([`LockManager::get_semaphore`], Redisson's `RSemaphore`): a count of
//!   permits under the name's key. Permits have no owner (any thread may release them) and no
//!   lease; [`Semaphore::acquire_guard`] returns [`SemaphorePermits`] that go back on drop.
//! - [`CountDownLatch`] ([`LockManager::get_count_down_latch`], Redisson's `RCountDownLatch`):
//!   a count that [`wait`](CountDownLatch::wait) blocks on until it reaches zero (as a
//!   `Condvar`: [`wait_timeout`](CountDownLatch::wait_timeout) is the bounded wait).
//! - [`PermitExpirableSemaphore`] ([`LockManager::get_permit_expirable_semaphore`],
//!   Redisson's `RPermitExpirableSemaphore`): a semaphore whose permits have ids (what
//!   [`acquire`](PermitExpirableSemaphore::acquire) returns and
//!   [`release`](PermitExpirableSemaphore::release) takes) and, if asked, leases: a permit
//!   whose lease ended is free again without a release, so a dead process's permits come back.
//!
//! Their waiters sleep on the manager's one pub/sub connection like a lock's, woken by the
//! release (or reached-zero) message, and look again at least once a second. A key lost to a
//! restart without persistence reads as a semaphore without permits and an open latch, as in
//! Redisson. `docs/design/wire-format.md` describes the wire format.
//!
//! # Statistics and metrics
//!
//! [`LockManager::stats`] returns a [`Stats`] snapshot of a manager's counters, kept as
//! atomics at no I/O cost: commands and round trips sent, acquisitions, waits and their total
//! time, renewal sweeps, renewals and their failures, holds lost, wake-ups, reconnects, local
//! handoffs and yields to other processes. With the `metrics` feature,
//! `metrics::MetricsExporter` publishes them through the
//! [`metrics`](https://docs.rs/metrics) facade each time the program calls its `export()`.
//!
//! # Cargo features
//!
//! - `tls` (default): `rediss://` URLs and `LockManagerBuilder::tls_root_certificate`.
//! - `metrics`: the `metrics` module above.
//! - `cli`: the `redis-rlock` command, a distributed flock(1) (`redis-rlock run NAME -- CMD`,
//!   `redis-rlock status NAME`): `cargo install --path . --features cli`, see `docs/CLI.md`.
//!   Programs using only the library build none of its crates.
//!
//! # From C and C++
//!
//! The workspace member `redis-rlock-ffi` (directory `ffi/`) builds the shared and static C
//! libraries (installed as `libredis_rlock.so` and `libredis_rlock.a`), whose functions are declared in `include/redis_rlock.h` (generated by
//! cbindgen from `ffi/src/`); `scripts/install-c` builds and installs them with pkg-config and
//! CMake files. A crate of its own, so that Rust programs depending on this one build no C
//! libraries. They wrap this API one to one: opaque manager and guard
//! handles, a `redis_rlock_result` code from every call, and `redis_rlock_last_error()` for the
//! message. Fair and read-write locks return ordinary guards; semaphores, count-down latches and
//! permit-expirable semaphores are used by manager and name (`redis_rlock_semaphore_*`,
//! `redis_rlock_count_down_latch_*`, `redis_rlock_permit_expirable_semaphore_*`). The README shows
//! how to build and link; `docs/C.md` has the details and `examples/c/` has programs.
//!
//! # Dependencies and why
//!
//! - `redis` (redis-rs, sync API): connections, scripts, pipelines and pub/sub.
//! - `parking_lot`: mutexes and condvars without poisoning, so a panic in one thread cannot
//!   wedge the state that other waiters share.
//! - `crossbeam-channel`: the pub/sub listener's mailbox of subscribe/unsubscribe requests.
//! - `uuid`: the random client id in every owner field, and unlock request ids.
//! - `log`: failed renewals and failed releases on drop are logged, never silently dropped.
//! - `rustix` (Linux): reads `CLOCK_BOOTTIME` without `unsafe`, for lease deadlines that keep
//!   counting while the machine is suspended (`std::time::Instant` does not).
//! - `rustls` (feature `tls`, on by default): the crypto provider (ring) for `rediss://`,
//!   which redis-rs implements with rustls.
//! - `metrics` (feature `metrics`, off by default): `redis_rlock::metrics::MetricsExporter`
//!   publishes a manager's [`Stats`] through this facade, for programs that already export
//!   through it.
//! - `clap` (feature `cli`): the `redis-rlock` command's arguments, help and usage errors.
//! - `signal-hook` (feature `cli`): the command forwards SIGINT, SIGTERM and SIGHUP to its
//!   child and learns from SIGCHLD that it exited.
//! - `serde_json` (feature `cli`): `redis-rlock status --json`.
//!
//! With `cli`, `rustix` also gains `process` and `termios` (signalling the child, the
//! terminal's width), which adds no crate.
//!
//! The connection pool is a small one of our own (`src/topology/pool.rs` says why not r2d2).
#![deny(missing_docs)]
// No unsafe code: the C API's is in the crate redis-rlock-ffi (ffi/). Only a unit test that
// calls fork() allows it.
#![deny(unsafe_code)]

mod attempt_id;
mod backoff;
mod cancel;
mod clock;
mod engine;
mod error;
mod fork;
mod health;
mod kinds;
mod limits;
mod manager;
#[cfg(feature = "metrics")]
pub mod metrics;
mod multi;
mod names;
mod owner;
mod pubsub;
mod slot;
mod stats;
mod stop;
mod store;
mod threads;
mod topology;

/// The Lua scripts this crate sends, each documented with its KEYS and ARGV, for tools that
/// replay the protocol raw (the benchmarks measure the lock against them) or audit it.
pub mod lua {
    pub use crate::kinds::fair_lock::{FAIR_ABANDON, FAIR_ACQUIRE, FAIR_RELEASE};
    pub use crate::kinds::read_write_lock::{
        READ_ACQUIRE, READ_RELEASE, READ_RENEW, RW_FORCE_UNLOCK, RW_INSPECT, WRITE_ACQUIRE,
        WRITE_RELEASE,
    };
    pub use crate::store::scripts::{
        ACQUIRE, FENCED_ACQUIRE, FORCE_UNLOCK, INSPECT, RELEASE, RENEW, STOP_WAITING,
    };
    // Semaphores and count-down latches keep their scripts next to them.
    pub use crate::kinds::count_down_latch::{
        COUNT_DOWN_LATCH_COUNT_DOWN, COUNT_DOWN_LATCH_TRY_SET_COUNT,
    };
    pub use crate::kinds::permit_expirable_semaphore::{
        PERMIT_SEMAPHORE_ACQUIRE, PERMIT_SEMAPHORE_ADD_PERMITS, PERMIT_SEMAPHORE_COUNTS,
        PERMIT_SEMAPHORE_RELEASE, PERMIT_SEMAPHORE_SET_PERMITS, PERMIT_SEMAPHORE_UPDATE_LEASE,
    };
    pub use crate::kinds::semaphore::{
        SEMAPHORE_ADD_PERMITS, SEMAPHORE_DRAIN_PERMITS, SEMAPHORE_RELEASE, SEMAPHORE_TRY_ACQUIRE,
        SEMAPHORE_TRY_SET_PERMITS,
    };
    pub use crate::kinds::spin_lock::{SPIN_FORCE_UNLOCK, SPIN_RELEASE};
}

pub use cancel::CancelToken;
pub use engine::options::{AcquireOptions, Lease, WaitOptions};
pub use error::{Error, FailureKind, RedisFailure, Result};
pub use health::{Health, HealthChange, HEALTH_CHANGES_CAPACITY};
pub use kinds::count_down_latch::CountDownLatch;
pub use kinds::distributed_lock::DistributedLock;
pub use kinds::fair_lock::FairLock;
pub use kinds::lock::{Lock, LockGuard};
pub use kinds::permit_expirable_semaphore::{AcquiredPermit, PermitExpirableSemaphore};
pub use kinds::read_write_lock::{ReadLock, ReadWriteLock, WriteLock};
pub use kinds::semaphore::{Semaphore, SemaphorePermits};
pub use kinds::spin_lock::SpinLock;
pub use manager::builder::LockManagerBuilder;
pub use manager::LockManager;
pub use multi::multi_lock::{MultiLock, MultiLockGuard};
pub use multi::red_lock::{RedLock, RedLockGuard};
pub use stats::Stats;
pub use store::eviction::{EvictionPolicy, PolicySource};
pub use topology::pubsub_connection::PubSubProtocol;
pub use topology::sharded_pubsub::ShardedPubSubMode;

// The handles are made to be shared and moved between threads: keep it that way at compile time.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LockManager>();
    assert_send_sync::<Lock>();
    assert_send_sync::<LockGuard>();
    assert_send_sync::<FairLock>();
    assert_send_sync::<SpinLock>();
    assert_send_sync::<ReadWriteLock>();
    assert_send_sync::<ReadLock>();
    assert_send_sync::<WriteLock>();
    assert_send_sync::<Error>();
    assert_send_sync::<Stats>();
    assert_send_sync::<Semaphore>();
    assert_send_sync::<SemaphorePermits>();
    assert_send_sync::<CountDownLatch>();
    assert_send_sync::<PermitExpirableSemaphore>();
    assert_send_sync::<MultiLock>();
    assert_send_sync::<MultiLockGuard>();
    assert_send_sync::<RedLock>();
    assert_send_sync::<RedLockGuard>();
};

/// The README's Rust examples, compiled (not run: they need a server) as doctests, so that
/// the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
