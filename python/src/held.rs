//! The holds taken through `acquire()` (the `threading.RLock` side of a lock), per thread, so
//! that `release()` releases the calling thread's latest one.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::ThreadId;

use parking_lot::Mutex;
use redis_rlock::LockGuard;

/// A thread's holds of one lock (kind and name), oldest first.
type Stacks = HashMap<(String, ThreadId), Vec<LockGuard>>;

/// Per manager: any handle on the same lock, in the same thread, releases what another took.
#[derive(Clone, Default)]
pub struct Holds {
    by_lock_and_thread: Arc<Mutex<Stacks>>,
}

impl Holds {
    /// Keeps `guard`, the latest hold of `lock` (its kind and name) by the calling thread.
    pub fn push(&self, lock: &str, guard: LockGuard) {
        self.by_lock_and_thread
            .lock()
            .entry(key(lock))
            .or_default()
            .push(guard);
    }

    /// The calling thread's latest hold of `lock`, taken out; `None` when it has none.
    pub fn pop(&self, lock: &str) -> Option<LockGuard> {
        let mut holds = self.by_lock_and_thread.lock();
        let key = key(lock);
        let stack = holds.get_mut(&key)?;
        let guard = stack.pop();
        if stack.is_empty() {
            holds.remove(&key);
        }
        guard
    }

    /// Every hold of `lock` by the calling thread, taken out, oldest first.
    pub fn take(&self, lock: &str) -> Vec<LockGuard> {
        self.by_lock_and_thread
            .lock()
            .remove(&key(lock))
            .unwrap_or_default()
    }

    /// How many holds of `lock` the calling thread took through `acquire()`.
    pub fn count(&self, lock: &str) -> usize {
        self.by_lock_and_thread
            .lock()
            .get(&key(lock))
            .map_or(0, Vec::len)
    }

    /// Every hold, taken out (the manager is shutting down).
    pub fn take_all(&self) -> Vec<LockGuard> {
        let mut holds = self.by_lock_and_thread.lock();
        holds.drain().flat_map(|(_, stack)| stack).collect()
    }
}

fn key(lock: &str) -> (String, ThreadId) {
    (lock.to_owned(), std::thread::current().id())
}
