//! Client tracking for one listener: a connection of its own to the listener's master that
//! has `CLIENT TRACKING on REDIRECT <listener's client id> BCAST PREFIX <key> ...`, so that the
//! server reports every change of a waited lock key (a release by any client, announced or
//! not, an expiry, an eviction, a `DEL`) on the listener's connection: as an `invalidate` push
//! in RESP3, as a message on `__redis__:invalidate` in RESP2.
//!
//! Tracking state lives on the connection that asked for it, so it is a connection outside the
//! pool, owned by the listener thread alone, replaced with the listener's connection (the
//! redirect names that connection's client id).
//!
//! Prefixes: the server refuses prefixes of one connection that are prefixes of each other
//! (`a` and `ab`), so the connection holds a *cover* of the waited keys: `a` covers `ab`, and
//! the listener compares the reported keys exactly (`crate::pubsub::tracked`). Adding a key no
//! prefix covers sends one `CLIENT TRACKING on ... PREFIX <key>` (the server adds it to the
//! others); a key that is itself a prefix of a registered one needs the set rebuilt, and so
//! does removing prefixes: both open a new connection with the new cover first and close the
//! old one after, so no change goes unreported in between. Keys whose waiters left stay
//! registered (their reports wake nobody, and their next waiter asks nothing) until the listener
//! drops them: bounded work per waiter, one command per new key at most.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis::{Connection, PushKind, RedisError, RedisResult};

use crate::topology::pool::Pool;
use crate::topology::pubsub_connection::{Heard, PubSubConnection};

/// The channel invalidations arrive on in RESP2.
pub(crate) const INVALIDATE_CHANNEL: &str = "__redis__:invalidate";

/// What asking the server to watch keys came to.
pub(crate) enum Outcome {
    /// The keys asked for are watched.
    Live,
    /// The whole set was registered again on a new connection: every waited key of this
    /// master is watched. `true` when there was no tracking connection before (a new
    /// listener connection, or the last one failed): changes before may have gone
    /// unreported.
    Rebuilt(bool),
    /// The server refused tracking (an ACL without `CLIENT`, an old server, a proxy): not
    /// asked again on this connection. Nothing is watched.
    Refused(RedisError),
    /// The tracking connection failed: nothing is watched until the next key asks again.
    Failed(RedisError),
}

/// Client tracking on one listener connection's master.
pub(crate) struct Tracker {
    /// The listener connection's client id; `None` where tracking was refused.
    redirect: Option<i64>,
    conn: Option<Connection>,
    /// The registered prefixes, none a prefix of another.
    prefixes: BTreeSet<String>,
    response_timeout: Duration,
    /// When the prefixes were last registered afresh.
    built: Instant,
}

impl Tracker {
    /// A tracker that watches nothing, until [`start`](Self::start) made one for a
    /// connection.
    pub(crate) fn unavailable(response_timeout: Duration) -> Self {
        Tracker {
            redirect: None,
            conn: None,
            prefixes: BTreeSet::new(),
            response_timeout,
            built: Instant::now(),
        }
    }

    /// Prepares tracking for the listener's new connection `conn`, before it subscribes to
    /// anything: asks its client id and, in RESP2, subscribes it to the invalidation channel.
    /// `Err` only when the connection failed; a refusal is `Ok` with the refusal's error, and
    /// a tracker that watches nothing.
    pub(crate) fn start(
        conn: &mut PubSubConnection,
        response_timeout: Duration,
    ) -> RedisResult<(Self, Option<RedisError>)> {
        let mut tracker = Tracker::unavailable(response_timeout);
        conn.raw().set_read_timeout(Some(response_timeout))?;
        let id = match redis::cmd("CLIENT").arg("ID").query::<i64>(conn.raw()) {
            Ok(id) => id,
            Err(err) if is_refusal(&err) => return Ok((tracker, Some(err))),
            Err(err) => return Err(err),
        };
        if conn.is_resp2() {
            conn.send("SUBSCRIBE", INVALIDATE_CHANNEL)?;
            // Nothing else is subscribed yet: the first value answers this one.
            match conn.recv()? {
                Heard::Push(PushKind::Subscribe, _) => {}
                Heard::Error(err) => return Ok((tracker, Some(err.into()))),
                other => {
                    let err = (redis::ErrorKind::Client, "unexpected reply");
                    let err = RedisError::from((err.0, err.1, format!("{other:?}")));
                    return Ok((tracker, Some(err)));
                }
            }
        }
        tracker.redirect = Some(id);
        Ok((tracker, None))
    }

    /// Has the server watch `keys`; `wanted` gives every waited key of this master, for a
    /// rebuild (it includes `keys`).
    pub(crate) fn cover(
        &mut self,
        pool: &Pool,
        keys: &[String],
        wanted: &dyn Fn() -> Vec<String>,
    ) -> Outcome {
        let Some(redirect) = self.redirect else {
            return Outcome::Refused(refused_here());
        };
        if keys.is_empty() {
            return Outcome::Live;
        }
        if self.conn.is_none() {
            return self.rebuild(pool, &wanted());
        }
        let uncovered: Vec<String> = keys
            .iter()
            .filter(|key| !self.covers(key))
            .cloned()
            .collect();
        if uncovered.is_empty() {
            return Outcome::Live;
        }
        if uncovered.iter().any(|key| self.prefixes_under(key)) {
            return self.rebuild(pool, &wanted());
        }
        let added = minimal_cover(uncovered);
        let Some(conn) = self.conn.as_mut() else {
            return Outcome::Live;
        };
        match enable(conn, redirect, &added) {
            Ok(()) => {
                self.prefixes.extend(added);
                Outcome::Live
            }
            Err(err) => self.failed(err),
        }
    }

    /// How long ago the prefixes were last registered afresh.
    pub(crate) fn age(&self) -> Duration {
        self.built.elapsed()
    }

    /// Checks the tracking connection (when there is one): `false` when it failed, and every
    /// waited key must be registered again.
    pub(crate) fn check(&mut self) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return true;
        };
        match redis::cmd("PING").query::<String>(conn) {
            Ok(_) => true,
            Err(err) => {
                log::debug!("client tracking connection lost: {err}");
                self.conn = None;
                self.prefixes.clear();
                false
            }
        }
    }

    /// Whether a registered prefix covers `key`.
    fn covers(&self, key: &str) -> bool {
        (1..=key.len())
            .filter(|&end| key.is_char_boundary(end))
            .any(|end| self.prefixes.contains(&key[..end]))
    }

    /// Whether `key` is a prefix of a registered prefix (which the server would refuse).
    fn prefixes_under(&self, key: &str) -> bool {
        self.prefixes
            .range(key.to_owned()..)
            .next()
            .is_some_and(|prefix| prefix.starts_with(key))
    }

    /// Registers a cover of `wanted` (every key to watch on this master) on a new connection,
    /// then drops the old one; with nothing wanted, drops it (closing it ends its tracking).
    pub(crate) fn rebuild(&mut self, pool: &Pool, wanted: &[String]) -> Outcome {
        let Some(redirect) = self.redirect else {
            return Outcome::Refused(refused_here());
        };
        self.built = Instant::now();
        let missed = self.conn.is_none();
        let cover = minimal_cover(wanted.to_vec());
        if cover.is_empty() {
            // Tracking with no prefix would report every key: none at all instead.
            self.conn = None;
            self.prefixes.clear();
            return Outcome::Rebuilt(missed);
        }
        let mut conn = match pool.connect_detached() {
            Ok(conn) => conn,
            Err(err) => return self.failed(RedisError::from(std::io::Error::other(err))),
        };
        if let Err(err) = conn.set_read_timeout(Some(self.response_timeout)) {
            return self.failed(err);
        }
        match enable(&mut conn, redirect, &cover) {
            Ok(()) => {
                // The old connection, closed only now, reported changes until the new one did.
                self.conn = Some(conn);
                self.prefixes = cover.into_iter().collect();
                Outcome::Rebuilt(missed)
            }
            Err(err) => self.failed(err),
        }
    }

    fn failed(&mut self, err: RedisError) -> Outcome {
        self.conn = None;
        self.prefixes.clear();
        if is_refusal(&err) {
            self.redirect = None;
            Outcome::Refused(err)
        } else {
            Outcome::Failed(err)
        }
    }
}

/// `CLIENT TRACKING on REDIRECT <redirect> BCAST PREFIX <p> ...` (on a connection that
/// tracks already, the prefixes are added).
fn enable(conn: &mut Connection, redirect: i64, prefixes: &[String]) -> RedisResult<()> {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING")
        .arg("on")
        .arg("REDIRECT")
        .arg(redirect)
        .arg("BCAST");
    for prefix in prefixes {
        cmd.arg("PREFIX").arg(prefix);
    }
    cmd.query(conn)
}

/// What asking a tracker whose connection refused tracking comes to.
fn refused_here() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "client tracking was refused on this connection",
    ))
}

/// An error reply (no permission, an unknown command or option), not a failed connection.
fn is_refusal(err: &RedisError) -> bool {
    err.code().is_some() && !err.is_io_error()
}

/// The shortest prefixes that cover `keys`: none of them a prefix of another.
fn minimal_cover(mut keys: Vec<String>) -> Vec<String> {
    keys.sort_unstable();
    keys.dedup();
    let mut cover: Vec<String> = Vec::with_capacity(keys.len());
    for key in keys {
        // Sorted, a key's covering prefix (if any) is the last one kept.
        if !cover
            .last()
            .is_some_and(|last| key.starts_with(last.as_str()))
        {
            cover.push(key);
        }
    }
    cover
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn a_cover_keeps_the_shortest_of_keys_that_are_prefixes_of_each_other() {
        let cover = minimal_cover(strings(&["ab", "b", "a", "abc", "ba", "c", "a"]));
        assert_eq!(cover, strings(&["a", "b", "c"]));
        assert_eq!(
            minimal_cover(strings(&["x:1", "x:10", "x:2"])),
            strings(&["x:1", "x:2"])
        );
    }

    #[test]
    fn a_key_is_covered_by_a_shorter_prefix_and_blocked_by_a_longer_one() {
        let tracker = Tracker {
            redirect: Some(1),
            conn: None,
            prefixes: strings(&["lock:ab", "é"]).into_iter().collect(),
            response_timeout: Duration::from_secs(1),
            built: Instant::now(),
        };
        assert!(tracker.covers("lock:abc"));
        assert!(tracker.covers("lock:ab"));
        assert!(tracker.covers("éa"));
        assert!(!tracker.covers("lock:a"));
        assert!(tracker.prefixes_under("lock:a"));
        assert!(!tracker.prefixes_under("lock:b"));
        assert!(!tracker.prefixes_under("lock:abc"));
    }
}
