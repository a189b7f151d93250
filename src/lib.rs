//! A synchronous, Redisson-compatible distributed lock for threaded Rust programs.
//!
//! `redis-rlock` gives plain threaded programs the lock that Java programs get from Redisson's
//! `RLock`: **reentrant** per thread, **owner-checked** on release, kept alive by a
//! **watchdog** while the holder works, released at once on unlock, and with waiters **woken
//! by pub/sub** instead of polling. It stores locks exactly as Redisson does, so a Java service
//! and a Rust service can share one lock; [`LockManager::get_string_lock`] takes redis-py's
//! lock format, to share one with Python's `redis.lock.Lock`.
//!
//! There is no async runtime: every call blocks the calling thread, and a [`LockManager`] runs
//! a few background threads whatever the number of locks (`docs/design/threads.md`).
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
//! fencing token, a cap on the watchdog's renewals ([`max_hold`](AcquireOptions::max_hold))
//! and a [`CancelToken`], in any combination. `acquire` returns `None` when the wait passed.
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
//! The owner of a hold is the *thread* that acquired it through one manager: the same thread
//! locking again re-enters, other threads, managers and processes wait. Each acquire returns a
//! [`LockGuard`] that releases exactly one hold. The same methods exist on [`Lock`], a cheap
//! handle on one name ([`LockManager::get_lock`]), which also has the inspection calls
//! ([`is_locked`](Lock::is_locked), [`is_held_by_current_thread`](Lock::is_held_by_current_thread),
//! [`hold_count`](Lock::hold_count), [`remaining_ttl`](Lock::remaining_ttl)) and
//! [`force_unlock`](Lock::force_unlock).
//!
//! # The kinds
//!
//! Every lock kind shares the same machinery (the engine, the watchdog, guards with the lost
//! signal), is stored as Redisson stores it, and answers the same calls, as every Redisson
//! lock is an `RLock`: the six acquiring shorthands (`lock`, `try_lock`, `lock_with_lease`,
//! `try_lock_with_lease`, `lock_fenced`, `try_lock_fenced`) and `acquire`, each returning a
//! [`LockGuard`], and `is_locked`, `is_held_by_current_thread`, `hold_count`, `remaining_ttl`
//! and `force_unlock`. They are each kind's own methods (no import needed) and the trait
//! [`DistributedLock`], for code that takes any kind, also as `&dyn DistributedLock`. A
//! [`ReadLock`] or [`WriteLock`] answers for the read-write lock's one hash, as in Redisson:
//! `is_locked` while it is held in that mode, `hold_count` of that half, `force_unlock` only in
//! that mode.
//!
//! | Redisson | here | waiters | fencing |
//! |---|---|---|---|
//! | `getLock(name)` | [`LockManager::get_lock`] → [`Lock`] | woken by the unlock message | yes |
//! | `getFairLock(name)` | [`LockManager::get_fair_lock`] → [`FairLock`] | queued in Redis, the head woken | yes |
//! | `getSpinLock(name)` | [`LockManager::get_spin_lock`] → [`SpinLock`] | poll, 1 ms doubling to 128 ms; no message | yes |
//! | redis-py's `Lock` (not Redisson) | [`LockManager::get_string_lock`] → [`StringLock`]: a string holding the owner's token | poll, as the spin lock | no |
//! | `getReadWriteLock(name)` | [`LockManager::get_read_write_lock`] → [`ReadWriteLock`] ([`ReadLock`], [`WriteLock`]) | woken by the unlock message | write lock only |
//! | `RedissonMultiLock` | [`MultiLock`]: several locks, all or nothing | | |
//! | `RedissonRedLock` | [`RedLock`]: one name on N independent masters, held by a majority | | |
//! | `getSemaphore(name)` | [`LockManager::get_semaphore`] → [`Semaphore`] | woken by the release message | |
//! | `getPermitExpirableSemaphore(name)` | [`LockManager::get_permit_expirable_semaphore`] → [`PermitExpirableSemaphore`] | woken by the release message | |
//! | `getCountDownLatch(name)` | [`LockManager::get_count_down_latch`] → [`CountDownLatch`] | woken when the count reaches zero | |
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
//! # Cargo features
//!
//! - `tls` (default): `rediss://` URLs and `LockManagerBuilder::tls_root_certificate`.
//! - `metrics`: `metrics::MetricsExporter`, which publishes [`LockManager::stats`] through the
//!   [`metrics`](https://docs.rs/metrics) facade.
//! - `cli`: the `redis-rlock` command, a distributed flock(1) (`redis-rlock run NAME -- CMD`,
//!   `redis-rlock status NAME`): `cargo install --path . --features cli`, see `docs/CLI.md`.
//!   Programs using only the library build none of its crates.
//!
//! # Where to read on
//!
//! - The README: "Usage" (every kind in one example, cancelling, statistics and health),
//!   "What it promises, and under which failures" (leases, lost locks, fencing, failovers),
//!   "Operating it", "From the shell", "From C and C++" and "Performance".
//! - [`LockManager::builder`], [`LockManager::sentinel_builder`] and
//!   [`LockManager::cluster_builder`]: every setting and its default, Sentinel and Cluster;
//!   [`LockManager`]: the threads and connections a manager owns; [`Error`]: what each error
//!   means and its predicates.
//! - `docs/design/`: the glossary and the dependencies (`README.md`), the threads
//!   (`threads.md`), every key, channel and script (`wire-format.md`), the engine, the line,
//!   yields and grants (`engine.md`), routing, resends and replica sync (`deployments.md`), and
//!   the guarantees (`guarantees.md`).
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
mod workers;

/// The Lua scripts this crate sends, each documented with its KEYS and ARGV, for tools that
/// replay the protocol raw (the benchmarks measure the lock against them) or audit it.
pub mod lua {
    pub use crate::kinds::fair_lock::{FAIR_ABANDON, FAIR_ACQUIRE, FAIR_RELEASE};
    pub use crate::kinds::lock::scripts::{
        ACQUIRE, FENCED_ACQUIRE, FORCE_UNLOCK, INSPECT, RELEASE, RENEW, STOP_WAITING,
    };
    pub use crate::kinds::read_write_lock::{
        READ_ACQUIRE, READ_RELEASE, READ_RENEW, RW_FORCE_UNLOCK, RW_INSPECT, WRITE_ACQUIRE,
        WRITE_RELEASE,
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
    // The string lock's (redis-py's format) fall-backs for servers without the newer commands.
    pub use crate::kinds::string_lock::{
        STRING_ACQUIRE, STRING_EXTEND, STRING_FORCE_UNLOCK, STRING_RELEASE, STRING_RENEW,
    };
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
pub use kinds::string_lock::StringLock;
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
    assert_send_sync::<StringLock>();
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
