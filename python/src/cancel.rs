//! `redis_rlock.CancelToken`: cancels the waits it is given to, from any thread.
//!
//! A call does not wait on the user's token itself but on a token of its own, linked to the
//! user's for the length of the call: a Ctrl-C must be able to end one wait (through the call's
//! token) without cancelling the user's token for good.

use parking_lot::Mutex;
use pyo3::prelude::*;

use crate::repr;
use redis_rlock::CancelToken;

/// A cancellation flag: `cancel()` ends every wait given this token, now and later, within
/// milliseconds; the waits leave nothing behind and raise `Cancelled`.
#[pyclass(name = "CancelToken", module = "redis_rlock", frozen)]
#[derive(Default)]
pub struct PyCancelToken {
    cancelled: Mutex<bool>,
    /// The tokens of the calls waiting with this one.
    linked: Mutex<Vec<CancelToken>>,
}

#[pymethods]
impl PyCancelToken {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait given this token, now and later. Idempotent.
    fn cancel(&self) {
        *self.cancelled.lock() = true;
        let linked: Vec<CancelToken> = self.linked.lock().clone();
        for token in linked {
            token.cancel();
        }
    }

    /// Whether `cancel()` was called.
    pub fn is_cancelled(&self) -> bool {
        *self.cancelled.lock()
    }

    fn __repr__(&self) -> String {
        format!("CancelToken(cancelled={})", repr::flag(self.is_cancelled()))
    }
}

impl PyCancelToken {
    /// Links `call` to this token until the returned link is dropped: a cancel of this token
    /// then cancels `call`'s. Cancelled at once if this token already is.
    pub fn link(&self, call: &CancelToken) -> Link<'_> {
        self.linked.lock().push(call.clone());
        // After the push: a cancel() in between reaches `call` either way.
        if self.is_cancelled() {
            call.cancel();
        }
        Link {
            owner: self,
            call: call.clone(),
        }
    }
}

/// A call's token linked to a user's; unlinked on drop.
pub struct Link<'a> {
    owner: &'a PyCancelToken,
    call: CancelToken,
}

impl Drop for Link<'_> {
    fn drop(&mut self) {
        self.owner.linked.lock().retain(|t| *t != self.call);
    }
}
