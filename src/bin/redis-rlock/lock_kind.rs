//! `--kind` of `run` and `unlock`: which of the library's lock kinds to take or delete, each
//! a `DistributedLock`.

use std::sync::Arc;

use redis_rlock::{DistributedLock, LockManager};

/// A lock kind, as Redisson names them (and redis-py's lock, `string`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LockKind {
    /// Redisson's RLock: reentrant, waiters woken over pub/sub.
    #[default]
    Lock,
    /// RFairLock: granted first come, first served across every client.
    Fair,
    /// RSpinLock: nothing is published; waiters are woken by client tracking (or poll).
    Spin,
    /// redis-py's Lock: a string key holding the owner's token; nothing is published.
    String,
    /// The read lock of an RReadWriteLock: shared with other readers.
    Read,
    /// The write lock of an RReadWriteLock: excludes readers and writers.
    Write,
}

impl LockKind {
    /// The handle on `name` of this kind.
    pub fn handle(self, manager: &LockManager, name: &str) -> Arc<dyn DistributedLock> {
        match self {
            LockKind::Lock => Arc::new(manager.get_lock(name)),
            LockKind::Fair => Arc::new(manager.get_fair_lock(name)),
            LockKind::Spin => Arc::new(manager.get_spin_lock(name)),
            LockKind::String => Arc::new(manager.get_string_lock(name)),
            LockKind::Read => Arc::new(manager.get_read_write_lock(name).read_lock()),
            LockKind::Write => Arc::new(manager.get_read_write_lock(name).write_lock()),
        }
    }

    /// How the kind is named in messages: "lock", "fair lock", ...
    pub fn noun(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Fair => "fair lock",
            LockKind::Spin => "spin lock",
            LockKind::String => "string lock",
            LockKind::Read => "read lock",
            LockKind::Write => "write lock",
        }
    }
}
