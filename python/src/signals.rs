//! Ctrl-C during a wait on the main thread.
//!
//! Python runs signal handlers on the main thread only, between bytecodes: a main thread
//! blocked in Rust would not see a Ctrl-C until the wait ended. So, for the length of such a
//! wait, a [`SignalWatcher`] makes Python's C-level signal handler write to a socket of ours
//! (`signal.set_wakeup_fd`), and a short-lived thread reading it cancels the wait's token. The
//! caller then runs the handlers (`PyErr_CheckSignals`), which raises `KeyboardInterrupt`.
//! Bytes are passed on to the wakeup fd that was set before (an event loop's), which is set
//! back afterwards.

use std::io::{Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use pyo3::prelude::*;
use redis_rlock::CancelToken;

/// Whether the calling thread is Python's main thread (the one that runs signal handlers).
///
/// Asked of `threading` at each call, not remembered: after an `os.fork()` from another
/// thread, that thread is the child's main thread.
pub fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    let main: u64 = py
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()?;
    // SAFETY: pthread_self has no preconditions; Python's thread ident is this value.
    let current = unsafe { libc::pthread_self() } as u64;
    Ok(current == main)
}

/// Cancels a token when a signal arrives, while it lives; see the module's documentation.
pub struct SignalWatcher {
    previous_fd: i64,
    write_end: UnixStream,
    signalled: Arc<AtomicBool>,
    reader: JoinHandle<()>,
}

impl SignalWatcher {
    /// Starts watching for signals on behalf of `token`. Main thread only.
    pub fn start(py: Python<'_>, token: &CancelToken) -> PyResult<Self> {
        let (read_end, write_end) = UnixStream::pair()?;
        // Python's handler writes without blocking, and requires the fd to be non-blocking.
        write_end.set_nonblocking(true)?;
        let signal = py.import("signal")?;
        let previous_fd: i64 = signal
            .call_method1("set_wakeup_fd", (write_end.as_raw_fd(),))?
            .extract()?;
        let signalled = Arc::new(AtomicBool::new(false));
        let reader = {
            let (token, signalled) = (token.clone(), Arc::clone(&signalled));
            std::thread::Builder::new()
                .name("redis-rlock-signals".into())
                .spawn(move || forward(read_end, previous_fd, &token, &signalled))
        };
        match reader {
            Ok(reader) => Ok(SignalWatcher {
                previous_fd,
                write_end,
                signalled,
                reader,
            }),
            Err(err) => {
                signal.call_method1("set_wakeup_fd", (previous_fd,))?;
                Err(err.into())
            }
        }
    }

    /// Sets the previous wakeup fd back and ends the reader; whether a signal came meanwhile.
    pub fn stop(self, py: Python<'_>) -> PyResult<bool> {
        let restored = py
            .import("signal")
            .and_then(|s| s.call_method1("set_wakeup_fd", (self.previous_fd,)));
        // Closing our end is what ends the reader (it reads end of file).
        drop(self.write_end);
        let _ = py.detach(|| self.reader.join());
        restored?;
        Ok(self.signalled.load(Ordering::SeqCst))
    }
}

/// The reader: each byte is a signal's number; pass it on, and cancel the wait.
fn forward(
    mut read_end: UnixStream,
    previous_fd: i64,
    token: &CancelToken,
    signalled: &AtomicBool,
) {
    let mut buf = [0u8; 64];
    loop {
        match read_end.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                signalled.store(true, Ordering::SeqCst);
                token.cancel();
                pass_on(previous_fd, &buf[..n]);
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

/// Writes `bytes` to the wakeup fd that was set before ours, if any (not ours to close).
fn pass_on(previous_fd: i64, bytes: &[u8]) {
    let Ok(fd) = i32::try_from(previous_fd) else {
        return;
    };
    if fd < 0 {
        return;
    }
    // SAFETY: the fd stays open (its owner set it as the wakeup fd); ManuallyDrop never closes it.
    let mut file = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let _ = file.write_all(bytes);
}
