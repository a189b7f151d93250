//! Managers and `fork()`: a manager works only in the process that created it.
//!
//! A child made by `fork()` inherits a copy of the manager but not what makes it work:
//! - its connections are the parent's sockets, so the child's commands and replies mix with
//!   the parent's (a reply read by the wrong process);
//! - its client id and thread numbers are the parent's, so parent and child are the same owner
//!   to Redis and both "hold" a lock at once;
//! - its background threads (watchdog, pub/sub listener) do not exist in the child: `fork()`
//!   copies only the calling thread, and joining the others fails.
//!
//! So the pool refuses connections in a child ([`Origin::check`], the last line of defence:
//! entry points are to check before they take any lock), and the parts that clean up on drop
//! ask [`Origin::is_forked`] and, in a child, leave the parent's resources alone.

use crate::error::{Error, Result};

/// The process that created a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    pid: u32,
}

impl Origin {
    /// The calling process.
    pub(crate) fn current() -> Self {
        Origin {
            pid: std::process::id(),
        }
    }

    /// Whether this is not the creating process any more: a child made by `fork()`.
    pub(crate) fn is_forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// `Err(Error::Forked)` in a child made by `fork()`: nothing may be sent on the parent's
    /// connections or under the parent's owner ids.
    pub(crate) fn check(&self) -> Result<()> {
        let current = std::process::id();
        if current == self.pid {
            return Ok(());
        }
        Err(Error::Forked {
            created_in: self.pid,
            used_in: current,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_creating_process_passes() {
        let origin = Origin::current();
        assert!(!origin.is_forked());
        origin.check().expect("the creating process may use it");
    }

    /// A real fork: the child checks and reports through its exit code only (it must not
    /// return into the test harness, whose other threads it does not have).
    #[test]
    #[allow(unsafe_code)]
    fn a_forked_child_is_refused_with_a_clear_error() {
        let origin = Origin::current();
        let parent = std::process::id();
        // SAFETY: the child only calls getpid, formats a string and exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = match origin.check() {
                Err(
                    err @ Error::Forked {
                        created_in,
                        used_in,
                    },
                ) if created_in == parent
                    && used_in == std::process::id()
                    && origin.is_forked()
                    && err.to_string().contains("create the manager in the child") =>
                {
                    0
                }
                Err(_) => 2,
                Ok(()) => 3,
            };
            // SAFETY: ends the child at once, running no atexit handler or destructor of the
            // parent's state.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
        assert!(
            libc::WIFEXITED(status),
            "the child exited normally: {status}"
        );
        assert_eq!(libc::WEXITSTATUS(status), 0, "2: wrong error, 3: no error");
        assert!(!origin.is_forked(), "the parent is still the origin");
    }
}
