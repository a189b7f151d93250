//! The string lock as an [`OtherFormat`]: what the `Lock` its guards hand out answers with.

use std::time::Duration;

use super::StringLock;
use crate::engine::options::AcquireOptions;
use crate::error::Result;
use crate::kinds::lock::{Lock, LockGuard, OtherFormat};

/// What the `Lock` of a string lock's guard ([`LockGuard::lock`]) answers with: the string
/// lock's own calls.
pub(super) static STRING_FORMAT: StringFormat = StringFormat;

/// The string lock as an [`OtherFormat`] of [`Lock`].
pub(super) struct StringFormat;

impl StringFormat {
    /// The string lock handle that `lock` is the inner `Lock` of.
    fn handle(lock: &Lock) -> StringLock {
        StringLock { lock: lock.clone() }
    }
}

impl OtherFormat for StringFormat {
    fn acquire(&self, lock: &Lock, options: AcquireOptions) -> Result<Option<LockGuard>> {
        Self::handle(lock).acquire(options)
    }

    fn is_locked(&self, lock: &Lock) -> Result<bool> {
        Self::handle(lock).is_locked()
    }

    fn is_held_by_current_thread(&self, lock: &Lock) -> Result<bool> {
        Self::handle(lock).is_held_by_current_thread()
    }

    fn hold_count(&self, lock: &Lock) -> Result<u32> {
        Self::handle(lock).hold_count()
    }

    fn remaining_ttl(&self, lock: &Lock) -> Result<Option<Duration>> {
        Self::handle(lock).remaining_ttl()
    }

    fn force_unlock(&self, lock: &Lock) -> Result<bool> {
        Self::handle(lock).force_unlock()
    }
}
