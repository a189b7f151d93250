//! The status line on stderr while `run` waits: who holds the lock, its TTL, the time waited.
//!
//! It runs in its own thread with its own connection, polling every 250 ms, so that the wait
//! itself stays one blocking acquire woken by the holder's unlock message (pub/sub), not a
//! polling loop. Written by hand: one line rewritten with `\r` needs no progress crate.

use std::io::{IsTerminal, Write};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::duration::show;
use crate::status::{self, Snapshot};

/// Waits shorter than this show nothing: most locks are free or freed quickly.
const QUIET_FOR: Duration = Duration::from_secs(1);
/// How often the line is refreshed (and the lock looked at).
const REFRESH: Duration = Duration::from_millis(250);
/// Carriage return and "erase the whole line": the line is rewritten in place.
const CLEAR: &str = "\r\x1b[2K";

/// The running status line; [`finish`](Self::finish) stops it and clears the line.
pub struct Progress {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Progress {
    /// Starts the line for lock `name`, or nothing when stderr is not a terminal (a log file
    /// or a pipe would fill up with rewritten lines).
    pub fn start(url: &str, name: &str) -> Option<Progress> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let (stop, stopped) = crossbeam_channel::bounded(1);
        let (url, name) = (url.to_owned(), name.to_owned());
        let thread = std::thread::Builder::new()
            .name("redis-rlock-progress".into())
            .spawn(move || show_until(&url, &name, &stopped))
            // Without a thread there is no line; the wait itself is not affected.
            .ok()?;
        Some(Progress { stop, thread })
    }

    /// Stops the line and clears it, so that the command's own output starts on a clean line.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

fn show_until(url: &str, name: &str, stopped: &Receiver<()>) {
    let started = Instant::now();
    let mut conn = None;
    let mut shown = false;
    // Until told to stop (or the sender is gone), once every REFRESH.
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(REFRESH) {
        let waited = started.elapsed();
        if waited < QUIET_FOR {
            continue;
        }
        let state = look(url, name, &mut conn);
        let line = format!(
            "redis-rlock: waiting for {name:?} {}; {state}",
            show(waited)
        );
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "{CLEAR}{}", fit(&line));
        let _ = stderr.flush();
        shown = true;
    }
    if shown {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "{CLEAR}");
        let _ = stderr.flush();
    }
}

/// The lock's state for the line; the connection is (re)opened when needed, and a failure is
/// shown rather than ending the line: the acquire reports real errors.
fn look(url: &str, name: &str, conn: &mut Option<redis::Connection>) -> String {
    if conn.is_none() {
        match status::connect(url, name) {
            Ok(c) => *conn = Some(c),
            Err(failure) => return format!("(cannot look: {failure})"),
        }
    }
    let c = conn.as_mut().expect("connected above");
    match Snapshot::read(c, name) {
        Ok(snapshot) => match snapshot.owners.first() {
            None => "free, acquiring".into(),
            // The TTL before the owner: when the line is cut to the terminal's width, the
            // tail of the 36-character owner id is what goes.
            Some(owner) => {
                let ttl = snapshot.ttl.map_or_else(|| "none".into(), show);
                let others = match snapshot.owners.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                };
                format!(
                    "TTL {ttl}, held by {}{others} ({})",
                    owner.field,
                    status::holds(&owner.holds)
                )
            }
        },
        Err(err) => {
            *conn = None;
            format!("(cannot look: {err})")
        }
    }
}

/// Cuts the line to the terminal's width: a line that wraps cannot be rewritten by `\r`.
fn fit(line: &str) -> String {
    let columns = rustix::termios::tcgetwinsize(std::io::stderr())
        .map(|size| usize::from(size.ws_col))
        .unwrap_or(80);
    // One column spare: writing the last column makes some terminals wrap at once.
    let max = columns.saturating_sub(1).max(20);
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(max - 1).collect();
    cut.push('…');
    cut
}
