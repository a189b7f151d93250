//! [`CancelToken`]: a flag that ends the waits it was given to, from another thread.
//!
//! A waiting thread sleeps on a condvar (its place in the line, its channel's permits, a pause
//! between rounds). So that `cancel()` reaches it at once rather than at its next timeout, a
//! wait registers a *waker* with the token for as long as it sleeps: a closure that takes the
//! lock of the condvar the thread sleeps on and notifies it. `cancel()` sets the flag first
//! and then calls every registered waker; a waiter checks the flag under the same lock before
//! it sleeps, so a cancel is never lost between the check and the sleep. No waiter polls.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// What a wait registers to be woken by a cancel: it must not block for long (it takes a
/// mutex that a waiter holds only briefly) and must not call back into the token.
pub(crate) type Waker = Arc<dyn Fn() + Send + Sync>;

/// A cancellation flag shared by the thread that waits and the threads that may end the
/// wait. Cheap to clone: clones are the same token.
///
/// Give it to a blocking call ([`AcquireOptions::cancel_token`](crate::AcquireOptions::cancel_token),
/// [`WaitOptions::cancel_token`](crate::WaitOptions::cancel_token)); [`cancel`](Self::cancel)
/// then makes that call return [`Error::Cancelled`](crate::Error::Cancelled) within
/// milliseconds, leaving nothing behind: no hold, no place in a queue, no registration for a
/// grant. A call given a token that is already cancelled fails at once and sends nothing. A
/// cancel after the call returned changes nothing (a guard it returned stays valid). Once
/// cancelled, a token stays cancelled: use a new one for new calls.
///
/// ```no_run
/// use redis_rlock::{AcquireOptions, CancelToken, LockManager};
///
/// let manager = LockManager::new("redis://127.0.0.1/")?;
/// let token = CancelToken::new();
/// let waiter = {
///     let (manager, token) = (manager.clone(), token.clone());
///     std::thread::spawn(move || {
///         manager.acquire("jobs:nightly", AcquireOptions::new().cancel_token(&token))
///     })
/// };
/// // ... the job is no longer wanted:
/// token.cancel();
/// match waiter.join().unwrap() {
///     Err(err) if err.is_cancelled() => println!("stopped waiting"),
///     other => println!("{other:?}"),
/// }
/// # Ok::<(), redis_rlock::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    wakers: Mutex<Wakers>,
}

#[derive(Default)]
struct Wakers {
    next_id: u64,
    registered: Vec<(u64, Waker)>,
}

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait given this token, now and later. Idempotent; it never blocks for
    /// long (it wakes the waiting threads, which then clean up on their own).
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        // Called outside the token's lock: a waker takes its waiter's lock.
        let wakers: Vec<Waker> = {
            let wakers = self.inner.wakers.lock();
            wakers
                .registered
                .iter()
                .map(|(_, w)| Arc::clone(w))
                .collect()
        };
        for wake in wakers {
            wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Calls `waker` on a cancel, until the returned registration is dropped. A waiter must
    /// check [`is_cancelled`](Self::is_cancelled) after registering and before each sleep,
    /// under the lock the waker takes.
    pub(crate) fn register(&self, waker: Waker) -> Registration {
        let mut wakers = self.inner.wakers.lock();
        let id = wakers.next_id;
        wakers.next_id += 1;
        wakers.registered.push((id, waker));
        Registration {
            token: self.clone(),
            id,
        }
    }

    /// How many wakers are registered (for tests: a wait that ended leaves none).
    #[cfg(test)]
    fn registered_count(&self) -> usize {
        self.inner.wakers.lock().registered.len()
    }
}

impl PartialEq for CancelToken {
    /// The same token (a clone of it), not merely one in the same state.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for CancelToken {}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A waker's registration with a token; dropping it unregisters the waker.
pub(crate) struct Registration {
    token: CancelToken,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut wakers = self.token.inner.wakers.lock();
        wakers.registered.retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_cancel_calls_the_registered_wakers_once_and_only_while_registered() {
        let token = CancelToken::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = {
            let calls = Arc::clone(&calls);
            Arc::new(move || {
                calls.fetch_add(1, Ordering::SeqCst);
            }) as Waker
        };
        drop(token.register(Arc::clone(&counted)));
        let registration = token.register(counted);
        assert_eq!(token.registered_count(), 1, "the dropped one is gone");
        token.clone().cancel();
        token.cancel();
        assert!(token.is_cancelled());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        drop(registration);
        assert_eq!(token.registered_count(), 0);
    }

    #[test]
    fn clones_are_the_same_token() {
        let token = CancelToken::new();
        assert_eq!(token, token.clone());
        assert_ne!(token, CancelToken::new());
    }
}
