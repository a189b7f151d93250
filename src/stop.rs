//! [`Stop`]: what ends one blocking call early: the caller's [`CancelToken`], if it gave one,
//! and the shutdown of the manager(s) the call runs on ([`crate::LockManager::shutdown`] is a
//! token of the engine's own).
//!
//! Every sleep of a waiting call registers a waker with all of them for as long as it sleeps
//! (see [`crate::cancel`]) and checks [`Stop::is_stopped`] under its lock before sleeping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cancel::{CancelToken, Registration, Waker};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Shutdown,
    Cancelled,
}

/// The tokens that end one call, and the name it waits for (for the error).
#[derive(Clone)]
pub(crate) struct Stop {
    /// Shutdowns first: a call stopped both ways reports the shutdown.
    tokens: Vec<(CancelToken, Reason)>,
    name: Arc<str>,
}

/// A waker's registrations with every token of a [`Stop`]; dropping it unregisters.
pub(crate) struct Wakes {
    _registrations: Vec<Registration>,
}

impl Stop {
    /// A call on `name`, ended by the manager's `shutdown` or by the caller's `token`.
    pub(crate) fn new(name: &str, shutdown: &CancelToken, token: Option<&CancelToken>) -> Self {
        let mut tokens = vec![(shutdown.clone(), Reason::Shutdown)];
        tokens.extend(token.map(|t| (t.clone(), Reason::Cancelled)));
        Stop {
            tokens,
            name: Arc::from(name),
        }
    }

    /// Also ended by the shutdown of another manager (a call that spans several).
    pub(crate) fn and_shutdown(mut self, shutdown: &CancelToken) -> Self {
        if !self.tokens.iter().any(|(t, _)| t == shutdown) {
            self.tokens.insert(0, (shutdown.clone(), Reason::Shutdown));
        }
        self
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.tokens.iter().any(|(t, _)| t.is_cancelled())
    }

    /// `Err` (shutdown or cancelled) once the call must end; no I/O.
    pub(crate) fn check(&self) -> Result<()> {
        let name = || self.name.to_string();
        match self.tokens.iter().find(|(t, _)| t.is_cancelled()) {
            None => Ok(()),
            Some((_, Reason::Shutdown)) => Err(Error::Shutdown { name: name() }),
            Some((_, Reason::Cancelled)) => Err(Error::Cancelled { name: name() }),
        }
    }

    /// Calls `waker` when the call is stopped, until the result is dropped.
    pub(crate) fn wake_with(&self, waker: Waker) -> Wakes {
        Wakes {
            _registrations: self
                .tokens
                .iter()
                .map(|(t, _)| t.register(Arc::clone(&waker)))
                .collect(),
        }
    }

    /// Sleeps for `pause` unless stopped first: `Err` then (or already).
    pub(crate) fn sleep(&self, pause: Duration) -> Result<()> {
        let bell = Arc::new((Mutex::new(()), Condvar::new()));
        let _wakes = self.wake_with({
            let bell = Arc::clone(&bell);
            Arc::new(move || {
                let _held = bell.0.lock();
                bell.1.notify_all();
            })
        });
        let until = Instant::now() + pause;
        let mut held = bell.0.lock();
        while !self.is_stopped() {
            if bell.1.wait_until(&mut held, until).timed_out() {
                break;
            }
        }
        drop(held);
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shutdown_is_reported_before_a_cancel() {
        let (shutdown, token) = (CancelToken::new(), CancelToken::new());
        let stop = Stop::new("a", &shutdown, Some(&token));
        assert!(stop.check().is_ok());
        token.cancel();
        assert!(stop.check().unwrap_err().is_cancelled());
        shutdown.cancel();
        assert!(stop.check().unwrap_err().is_shutdown());
    }

    #[test]
    fn a_sleep_ends_at_the_cancel() {
        let token = CancelToken::new();
        let stop = Stop::new("a", &CancelToken::new(), Some(&token));
        let started = Instant::now();
        std::thread::scope(|s| {
            // Before or during the sleep: either way it ends at once.
            s.spawn(|| token.cancel());
            assert!(stop.sleep(Duration::from_secs(60)).is_err());
        });
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
