//! The check, when a manager starts, that the Redis user may use the lock channels.
//!
//! Redis 7 gives new ACL users no channel rights (`resetchannels` is the default unless
//! `acl-pubsub-default` says otherwise). Such a user can take locks, but every final release
//! fails at its PUBLISH, after the key was already deleted, and a waiter's SUBSCRIBE is
//! refused, so waiters are never woken by releases. Both rights are therefore probed once, up
//! front, and a user without them is refused with an error that says which right is missing
//! and how to grant it.

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::store::LockStore;

/// How to grant what the locks need, for the error message.
const GRANT: &str = "grant the rights with `ACL SETUSER <user> +publish +subscribe \
                     &redisson_lock__channel:* &redis_lock__control:*` (or `allchannels` for \
                     the channels)";

/// Checks that the user of `store`'s connections may PUBLISH and SUBSCRIBE on every lock
/// channel (`redisson_lock__channel:{<name>}`) and on the manager's control channel
/// (`redis_lock__control:{<client_id>}`). Fails with [`Error::Connect`] naming the refused
/// right; other errors (Redis down, timeouts) are returned as they are.
///
/// Lock channels are probed with a random lock name: rights granted for some lock names only
/// (`&redisson_lock__channel:{orders*}`) would pass a probe with a fixed name and still fail
/// for others, and no lock may be relied on to have a name the ACL happens to allow.
pub(crate) fn check_channel_rights(
    store: &LockStore,
    client_id: &str,
    response_timeout: Duration,
) -> Result<()> {
    let lock_channel = format!(
        "redisson_lock__channel:{{redis-lock-rights-check-{}}}",
        uuid::Uuid::new_v4()
    );
    let control_channel = format!("redis_lock__control:{{{client_id}}}");

    // "0" is the unlock message of a lock nobody holds or waits for (the name is random), and
    // the control channel has no listener yet: neither PUBLISH disturbs anyone.
    for (channel, message) in [(&lock_channel, "0"), (&control_channel, "wake")] {
        match store.publish(channel, message) {
            Ok(()) => {}
            Err(Error::Redis { source, .. }) if is_noperm(&source) => {
                return Err(refused("PUBLISH", channel, &source));
            }
            Err(err) => return Err(err),
        }
    }

    let channels = [lock_channel.as_str(), control_channel.as_str()];
    match check_subscribe(store, &channels, response_timeout) {
        // The process was stopped and continued while the probe waited for a reply (EINTR,
        // see `pool::connect_by`): nothing is known about the rights yet, and the probe's
        // connection is thrown away either way, so it is made again, once.
        Err(Error::Redis { source, .. }) if crate::pool::is_interrupted(&source) => {
            log::debug!("checking the right to subscribe was interrupted ({source}); again");
            check_subscribe(store, &channels, response_timeout)
        }
        checked => checked,
    }
}

/// Checks that the user may SUBSCRIBE to each of `channels`, on a connection of its own that
/// is closed afterwards (which ends the subscriptions). Fails with [`Error::Connect`] naming
/// the refused channel, or with the error that kept the check from finishing.
///
/// The replies are read raw: redis-rs' `PubSub::subscribe` discards them, error replies too.
pub(crate) fn check_subscribe(
    store: &LockStore,
    channels: &[&str],
    response_timeout: Duration,
) -> Result<()> {
    let mut conn = store.connect_listener("")?;
    let probe_error = |source: RedisError| Error::Redis {
        operation: "checking the right to subscribe",
        source,
    };
    conn.set_read_timeout(Some(response_timeout))
        .map_err(probe_error)?;
    for channel in channels {
        let command = redis::cmd("SUBSCRIBE").arg(channel).get_packed_command();
        conn.send_packed_command(&command).map_err(probe_error)?;
        store.counters.sent(1);
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
        source: RedisError::from((
            ErrorKind::Server(ServerErrorKind::NoPerm),
            "the Redis user lacks a channel right that the locks need",
            format!("{right} to {channel:?} was refused ({source}); {GRANT}"),
        )),
    }
}
