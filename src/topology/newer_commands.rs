//! Which of the newer compare-and-set commands one server knows, learnt by trying:
//! `SET … IFEQ` (Valkey 8.1+, Redis 8.4+), `DELIFEQ` (Valkey 9.0+) and `DELEX … IFEQ`
//! (Redis 8.4+). Each server's pool (`super::pool::Pool`) keeps its own. A command is tried
//! at its first use there; a server that does not know it (or an ACL that forbids it) refuses
//! it without running anything, and from then on the script that does the same is sent to
//! that server instead. A refusal is kept for the pool's life: a newer command is a saving,
//! never needed. A master found anew after a failover has a pool of its own, and is tried
//! afresh.

use std::sync::atomic::{AtomicU8, Ordering};

use redis::{Connection, RedisError, RedisResult};

/// One of the newer commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Newer {
    /// `SET key value IFEQ expected PX ms`: replaces the value (and the TTL) only while it is
    /// `expected`.
    Set,
    /// `DELIFEQ key expected` (Valkey): deletes the key only while its value is `expected`.
    DelIfEq,
    /// `DELEX key IFEQ expected` (Redis): the same.
    DelEx,
}

const UNTRIED: u8 = 0;
const KNOWN: u8 = 1;
const REFUSED: u8 = 2;

/// What was learnt of each [`Newer`] command on one server.
#[derive(Debug, Default)]
pub(crate) struct NewerCommands {
    learnt: [AtomicU8; 3],
}

impl NewerCommands {
    fn state(&self, command: Newer) -> &AtomicU8 {
        &self.learnt[command as usize]
    }

    /// Whether `command` is worth sending: known, or not tried yet.
    pub(crate) fn may_try(&self, command: Newer) -> bool {
        self.state(command).load(Ordering::Relaxed) != REFUSED
    }

    /// Sends `command` with `send` on `conn` if it may be tried: `None` when it is refused
    /// (now or before), for the caller to send its script instead; any other reply or error
    /// is the command's.
    pub(crate) fn send<T>(
        &self,
        command: Newer,
        conn: &mut Connection,
        send: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> Option<RedisResult<T>> {
        if !self.may_try(command) {
            return None;
        }
        match send(conn) {
            Err(err) if is_not_known(&err) => {
                if self.state(command).swap(REFUSED, Ordering::Relaxed) != REFUSED {
                    log::debug!("{command:?} refused ({err}); sending the script instead");
                }
                None
            }
            reply => {
                if reply.is_ok() {
                    let _ = self.state(command).compare_exchange(
                        UNTRIED,
                        KNOWN,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                Some(reply)
            }
        }
    }
}

/// Whether the server refused a command without running it because it does not know it or
/// its option (`ERR unknown command`, `ERR syntax error` for an option it lacks), or because
/// an ACL forbids the command (NOPERM): the script that does the same may still be allowed.
pub(crate) fn is_not_known(err: &RedisError) -> bool {
    match err.code() {
        Some("NOPERM") => true,
        Some("ERR") => err.detail().is_some_and(|detail| {
            let detail = detail.to_ascii_lowercase();
            detail.starts_with("unknown command") || detail.starts_with("syntax error")
        }),
        _ => false,
    }
}
