//! The check, when a manager starts, that the Redis user may use the channels of every kind.
//!
//! Redis 7 gives new ACL users no channel rights (`resetchannels` is the default unless
//! `acl-pubsub-default` says otherwise). Such a user can take locks, but every final release
//! fails at its PUBLISH, after the key was already deleted, and a waiter's SUBSCRIBE is
//! refused, so waiters are never woken by releases. Both rights are therefore probed once, up
//! front, on the channels of every kind, and a user without them is refused with an error that
//! says which right is missing and how to grant it.

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::names::{self, LockKeys};
use crate::store::LockStore;
use crate::topology::pool::Pool;

/// How to grant what the locks need, for the error message.
const GRANT: &str = "grant the rights with `ACL SETUSER <user> +publish +subscribe \
                     +unsubscribe &redisson_lock__channel:* &redisson_rwlock:* &redisson_sc:* \
                     &redisson_countdownlatch__channel__* &redis_rlock__control:*` (or \
                     `allchannels` for the channels; on a cluster with sharded pub/sub also \
                     +spublish +ssubscribe +sunsubscribe)";

/// Checks that the user of `store`'s connections may PUBLISH and SUBSCRIBE on the channels of
/// every kind the manager serves: the lock's (`redisson_lock__channel:{<name>}`) and a fair
/// lock waiter's (the same with `:<owner>` after it), the read-write lock's
/// (`redisson_rwlock:{<name>}`), the semaphore's (`redisson_sc:{<name>}`), the count-down
/// latch's (`redisson_countdownlatch__channel__{<name>}`), and the manager's control channel
/// (`redis_rlock__control:{<client_id>}`). Fails with [`Error::Connect`] naming the refused
/// right; other errors (Redis down, timeouts) are returned as they are. A manager serves every
/// kind through one handle, so a right missing for one kind is found here rather than as
/// waiters of that kind woken only by polling.
///
/// Channels are probed with a random name: rights granted for some names only
/// (`&redisson_lock__channel:{orders*}`) would pass a probe with a fixed name and still fail
/// for others, and no lock may be relied on to have a name the ACL happens to allow.
pub(crate) fn check_channel_rights(
    store: &LockStore,
    client_id: &str,
    response_timeout: Duration,
) -> Result<()> {
    let probe = LockKeys::new(&format!(
        "redis-rlock-rights-check-{}",
        uuid::Uuid::new_v4()
    ))?;
    let control_channel = format!("redis_rlock__control:{{{client_id}}}");
    let channels = [
        probe.channel(),
        // A fair lock's waiter hears on a channel of its own, past the lock's.
        probe.waiter_channel("rights-check"),
        probe.rwlock_channel(),
        names::semaphore_channel(&probe.name),
        names::count_down_latch_channel(&probe.name),
        control_channel,
    ];

    let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
    // Asked of the first master that answers: on a cluster one may be down (a failover under
    // way as the manager starts), and the user's rights are the same on every node.
    let masters = store.topology().map();
    let mut unreachable = Vec::new();
    for pool in masters.masters() {
        match check_on(store, pool, &channels, response_timeout) {
            Err(err) if store.topology().capabilities().several_masters && is_unreachable(&err) => {
                unreachable.push((pool.addr().to_owned(), err));
            }
            checked => return checked,
        }
    }
    Err(Error::Nodes {
        asked: "no master answered".into(),
        tried: unreachable,
    })
}

/// Both rights, at the master behind `pool`.
fn check_on(
    store: &LockStore,
    pool: &Pool,
    channels: &[&str],
    response_timeout: Duration,
) -> Result<()> {
    // The name is random, so nobody holds or waits for anything of that name, and the control
    // channel has no listener yet: no PUBLISH here disturbs anyone.
    for channel in channels {
        match store.publish_at(pool.addr(), channel, "0", response_timeout) {
            Ok(()) => {}
            Err(Error::Redis { source, .. }) if is_noperm(source.redis()) => {
                return Err(refused("PUBLISH", channel, source.redis()));
            }
            Err(err) if err.is_timeout() => return Err(unanswered(pool, channel, err)),
            Err(err) => return Err(err),
        }
    }
    match check_subscribe(pool, store, channels, response_timeout) {
        // The process was stopped and continued while the probe waited for a reply (EINTR,
        // see `pool::connect_by`): nothing is known about the rights yet, and the probe's
        // connection is thrown away either way, so it is made again, once.
        Err(Error::Redis { source, .. }) if crate::error::is_interrupted(source.redis()) => {
            log::debug!("checking the right to subscribe was interrupted ({source}); again");
            check_subscribe(pool, store, channels, response_timeout)
        }
        checked => checked,
    }
}

/// The probe's PUBLISH got no reply in time: say which check, where, and the likely cause
/// (a bare "publish timed out" tells a user nothing about starting a manager).
fn unanswered(pool: &Pool, channel: &str, err: Error) -> Error {
    Error::Nodes {
        asked: format!(
            "starting the manager: the check of the right to PUBLISH (on {channel:?}) got no \
             reply from the master at {} in time; the server may have paused writes (CLIENT \
             PAUSE, a failover in progress) or be stalled or overloaded",
            pool.addr()
        ),
        tried: vec![(pool.addr().to_owned(), err)],
    }
}

/// A master that does not answer at all (refused, unreachable, silent).
fn is_unreachable(err: &Error) -> bool {
    err.is_connection_error() || err.is_timeout()
}

/// Checks that the user may SUBSCRIBE to each of `channels`, on a connection of its own that
/// is closed afterwards (which ends the subscriptions). Fails with [`Error::Connect`] naming
/// the refused channel, or with the error that kept the check from finishing.
///
/// The replies are read raw: redis-rs' `PubSub::subscribe` discards them, error replies too.
pub(crate) fn check_subscribe(
    pool: &Pool,
    store: &LockStore,
    channels: &[&str],
    response_timeout: Duration,
) -> Result<()> {
    let mut listener = store.connect_listener_at(pool.addr())?;
    let conn = listener.raw();
    let probe_error = |source: RedisError| Error::redis("checking the right to subscribe", source);
    conn.set_read_timeout(Some(response_timeout))
        .map_err(probe_error)?;
    // Every SUBSCRIBE in one write; the replies come back in the same order.
    let mut commands = Vec::new();
    for channel in channels {
        commands.extend(redis::cmd("SUBSCRIBE").arg(channel).get_packed_command());
    }
    conn.send_packed_command(&commands).map_err(probe_error)?;
    store.counters.sent(channels.len() as u64);
    for channel in channels {
        match conn.recv_response().map_err(probe_error)? {
            Value::ServerError(err) => {
                let source = RedisError::from(err);
                if is_noperm(&source) {
                    return Err(refused("SUBSCRIBE", channel, &source));
                }
                return Err(probe_error(source));
            }
            // The confirmation: ["subscribe", channel, count] (a push in RESP3).
            Value::Array(_) | Value::Push { .. } => {}
            other => {
                return Err(probe_error(RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "unexpected reply to SUBSCRIBE",
                    format!("{other:?}"),
                ))))
            }
        }
    }
    Ok(())
}

fn is_noperm(err: &RedisError) -> bool {
    err.code() == Some("NOPERM")
}

/// The error for a refused right: the user's credentials do not allow what the locks need.
fn refused(right: &str, channel: &str, source: &RedisError) -> Error {
    Error::Connect {
        source: crate::error::RedisFailure::new((
            ErrorKind::Server(ServerErrorKind::NoPerm),
            "the Redis user lacks a channel right that the locks need",
            format!("{right} to {channel:?} was refused ({source}); {GRANT}"),
        )),
    }
}
