//! The string lock's protocol (redis-py's `Lock`): its acquire, releases and renewal, each a
//! newer compare-and-set command where the server knows it (`Newer`), else a script of
//! `scripts.rs`, through the store, which routes, resends and waits for replicas as for
//! every kind.

use std::time::Duration;

use redis::Connection;

use super::scripts::{ACQUIRE_SCRIPT, EXTEND_SCRIPT, RELEASE_SCRIPT, RENEW_SCRIPT};
use crate::engine::kind::AttemptArgs;
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::store::{is_lost_reply, send_again_if_lost, Attempt, LockStore, Op, Release};
use crate::topology::newer_commands::{Newer, NewerCommands};

/// One acquire attempt: the `STRING_ACQUIRE` script with the attempt's token.
pub(super) fn acquire(
    store: &LockStore,
    keys: &LockKeys,
    args: &AttemptArgs<'_>,
) -> Result<Attempt> {
    if args.fenced {
        return Err(no_fencing(&keys.name));
    }
    let mut call = ACQUIRE_SCRIPT.key(&*keys.name);
    call.arg(args.owner).arg(args.lease_ms);
    let pttl: Result<Option<i64>> =
        store.run_attempt(&keys.name, |conn| call.invoke(conn), Option::is_none);
    match pttl {
        // A fresh acquisition's token is sent by no later acquire: what it may have
        // taken would stay until its lease ends. A re-entry's token is its hold's.
        Err(err) if args.fresh && is_lost_reply(&err) => {
            take_back(store, keys, args.owner);
            Err(err)
        }
        pttl => Ok(Attempt::from_reply(pttl?)),
    }
}

/// The last release: deletes the key while it holds `owner`'s token (`DELIFEQ`,
/// `DELEX … IFEQ` or the script).
///
/// No latch key is written. A release sent again because its first reply was lost (a
/// timeout, a broken connection) that finds the token gone reports the release done: the
/// first send may have deleted it. Only then: a send that never ran (refused with READONLY
/// or MOVED, or on a pooled connection found dead) and was sent again by the store is no
/// such send, and a token gone means the hold was lost (a failover, a restart without
/// persistence). When that send did run after all (a connection killed after the command),
/// the hold is reported lost although it was released: the safe mistake.
pub(super) fn delete_if_ours(store: &LockStore, keys: &LockKeys, owner: &str) -> Result<Release> {
    let sent = send_again_if_lost(&keys.name, || {
        store.run_knowing(Op::Release, &keys.name, |conn, newer| {
            delete_call(newer, conn, &keys.name, owner)
        })
    });
    Ok(if sent.reply? == 1 || sent.again {
        Release::Released
    } else {
        Release::NotHeld
    })
}

/// A release that leaves holds: sets the key's lease to `lease_ms` while it holds `owner`'s
/// token. Sent again when its reply was lost: a second run changes nothing more.
pub(super) fn extend_if_ours(
    store: &LockStore,
    keys: &LockKeys,
    owner: &str,
    lease_ms: u64,
) -> Result<Release> {
    let sent = send_again_if_lost(&keys.name, || {
        store.run_knowing(Op::Release, &keys.name, |conn, newer| {
            extend_call(newer, conn, &keys.name, owner, lease_ms)
        })
    });
    Ok(if sent.reply? {
        Release::StillHeld
    } else {
        Release::NotHeld
    })
}

/// The watchdog's renewal: one `STRING_RENEW` call per 100 holds on every server, as the
/// other kinds renew (fewer commands than a `SET … IFEQ` per hold).
pub(super) fn renew(
    store: &LockStore,
    batch: &[(&str, &str)],
    timeout_ms: u64,
    budget: Duration,
) -> Vec<Option<bool>> {
    store.renew_owned(batch, timeout_ms, budget, &RENEW_SCRIPT)
}

/// After a fresh acquisition's attempt whose reply was lost (it may have set the key with a
/// token no later acquire sends): deletes the key while it holds `token`, once, at best. An
/// attempt of the same acquire sent again later (riding out a failover) sets it anew.
fn take_back(store: &LockStore, keys: &LockKeys, token: &str) {
    let deleted = store.run_knowing(Op::Release, &keys.name, |conn, newer| {
        delete_call(newer, conn, &keys.name, token)
    });
    if let Err(err) = deleted {
        log::debug!(
            "string lock {:?}: an acquire's reply was lost, and taking back what it may have \
             taken failed ({err}); it expires with its lease",
            keys.name
        );
    }
}

/// One send of the token-checked delete: 1 deleted, 0 not ours.
fn delete_call(
    newer: &NewerCommands,
    conn: &mut Connection,
    name: &str,
    owner: &str,
) -> redis::RedisResult<i64> {
    if let Some(reply) = newer.send(Newer::DelIfEq, conn, |conn| {
        redis::cmd("DELIFEQ").arg(name).arg(owner).query(conn)
    }) {
        return reply;
    }
    if let Some(reply) = newer.send(Newer::DelEx, conn, |conn| {
        redis::cmd("DELEX")
            .arg(name)
            .arg("IFEQ")
            .arg(owner)
            .query(conn)
    }) {
        return reply;
    }
    RELEASE_SCRIPT.key(name).arg(owner).invoke(conn)
}

/// Sets the key's TTL to `lease_ms` while it holds `owner`'s token: `SET … IFEQ` or the
/// script. Whether it did.
fn extend_call(
    newer: &NewerCommands,
    conn: &mut Connection,
    name: &str,
    owner: &str,
    lease_ms: u64,
) -> redis::RedisResult<bool> {
    let set = newer.send(Newer::Set, conn, |conn| {
        redis::cmd("SET")
            .arg(name)
            .arg(owner)
            .arg("IFEQ")
            .arg(owner)
            .arg("PX")
            .arg(lease_ms)
            .query::<Option<String>>(conn)
    });
    match set {
        Some(reply) => Ok(reply?.is_some()),
        None => {
            let renewed: i64 = EXTEND_SCRIPT
                .key(name)
                .arg(owner)
                .arg(lease_ms)
                .invoke(conn)?;
            Ok(renewed == 1)
        }
    }
}

/// The string lock has no fencing counter.
pub(super) fn no_fencing(name: &str) -> Error {
    Error::InvalidArgument {
        what: "fenced",
        reason: format!(
            "string lock {name:?}: redis-py's lock format has no fencing counter; use a Lock \
             for fencing tokens"
        ),
    }
}
