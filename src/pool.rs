//! A small blocking pool of Redis connections.
//!
//! Why not r2d2: it runs a scheduled thread pool of its own per pool (more threads per
//! manager, which the design rules out), and its checkout health checks cost a round trip
//! that the hot acquire/release path cannot afford. What a lock client needs is small: hand out
//! an idle connection or open one up to a limit, wait (bounded) when all are busy, and throw
//! away a connection whose state is unknown after an I/O error or a timeout.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{Client, Connection};

use crate::error::{Error, Result};

pub(crate) struct Pool {
    client: Client,
    state: Mutex<PoolState>,
    freed: Condvar,
    max_size: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
}

struct PoolState {
    /// Idle connections; the most recently used is at the end and is handed out first, so the
    /// connections in use stay warm and the rest can be closed by the server if idle too long.
    idle: Vec<Connection>,
    /// Connections open now, idle or checked out (or being opened).
    open: usize,
}

/// A connection checked out of the pool; it goes back when dropped unless it was discarded.
pub(crate) struct PooledConnection<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
    /// The connection was idle in the pool before, so it may have died unnoticed (for example
    /// when the server restarted). A fresh connection that fails has no such excuse.
    pub(crate) reused: bool,
}

impl Pool {
    pub(crate) fn new(
        client: Client,
        max_size: usize,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Pool {
            client,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            max_size,
            connect_timeout,
            response_timeout,
        }
    }

    /// Opens a connection that is not counted against the pool: for the pub/sub listener.
    pub(crate) fn connect_dedicated(&self) -> Result<Connection> {
        self.connect(self.connect_timeout)
    }

    fn connect(&self, timeout: Duration) -> Result<Connection> {
        self.client
            .get_connection_with_timeout(timeout)
            .map_err(|source| Error::Connect { source })
    }

    /// Takes an idle connection, opens a new one if the pool is below its size, or waits for
    /// one to be returned: waiting and connecting take at most `budget` or the configured
    /// timeouts, whichever is shorter (the watchdog's renewals must not outlast the leases they
    /// are meant to save).
    pub(crate) fn get_within(&self, budget: Duration) -> Result<PooledConnection<'_>> {
        let wait = budget.min(self.response_timeout);
        let deadline = Instant::now() + wait;
        let mut state = self.state.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(PooledConnection {
                    pool: self,
                    conn: Some(conn),
                    reused: true,
                });
            }
            if state.open < self.max_size {
                state.open += 1;
                drop(state);
                return match self.open_connection(budget) {
                    Ok(conn) => Ok(PooledConnection {
                        pool: self,
                        conn: Some(conn),
                        reused: false,
                    }),
                    Err(err) => {
                        self.forget_one();
                        Err(err)
                    }
                };
            }
            if self.freed.wait_until(&mut state, deadline).timed_out() {
                return Err(Error::Timeout {
                    operation: "waiting for a pooled connection",
                    after: wait,
                });
            }
        }
    }

    /// Opens a fresh connection outside the idle list, for a retry after a reused connection
    /// turned out dead. It counts against the pool like any other.
    pub(crate) fn get_fresh(&self, budget: Duration) -> Result<PooledConnection<'_>> {
        // Drop every idle connection: if one died (server restart), its siblings almost
        // certainly did too, and each would otherwise cost a failed round trip.
        let stale = {
            let mut state = self.state.lock();
            let stale = std::mem::take(&mut state.idle);
            state.open -= stale.len();
            state.open += 1;
            stale
        };
        drop(stale);
        self.freed.notify_all();
        match self.open_connection(budget) {
            Ok(conn) => Ok(PooledConnection {
                pool: self,
                conn: Some(conn),
                reused: false,
            }),
            Err(err) => {
                self.forget_one();
                Err(err)
            }
        }
    }

    fn open_connection(&self, budget: Duration) -> Result<Connection> {
        let conn = self.connect(self.connect_timeout.min(budget))?;
        let timeout = Some(self.response_timeout);
        conn.set_read_timeout(timeout)
            .and_then(|()| conn.set_write_timeout(timeout))
            .map_err(|source| Error::Connect { source })?;
        Ok(conn)
    }

    fn forget_one(&self) {
        self.state.lock().open -= 1;
        self.freed.notify_one();
    }

    fn put_back(&self, conn: Connection) {
        self.state.lock().idle.push(conn);
        self.freed.notify_one();
    }
}

impl PooledConnection<'_> {
    /// Closes the connection instead of returning it: after an I/O error or a timeout a late
    /// reply may still be on its way, and the next user would read it as its own.
    pub(crate) fn discard(mut self) {
        if self.conn.take().is_some() {
            self.pool.forget_one();
        }
    }
}

impl std::ops::Deref for PooledConnection<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl std::ops::DerefMut for PooledConnection<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for PooledConnection<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if redis::ConnectionLike::is_open(&conn) {
                self.pool.put_back(conn);
            } else {
                self.pool.forget_one();
            }
        }
    }
}
