//! `redis-rlock unlock --force NAME [--kind KIND]`: deletes a lock whoever holds it
//! (`DistributedLock::force_unlock` of that kind).

use std::io::{BufRead, IsTerminal, Write};

use redis_rlock::{DistributedLock, LockManager};

use crate::exit::{self, Failure};
use crate::lock_kind::LockKind;
use crate::status::{self, Snapshot};

/// Exit code when the person at the terminal said no.
const DECLINED: u8 = 1;

pub fn unlock(
    url: &str,
    name: &str,
    kind: LockKind,
    force: bool,
    yes: bool,
) -> Result<u8, Failure> {
    // The command cannot release a lock it holds (that ends with `run`), so the only unlock
    // there is takes the lock away from someone: the flag makes that explicit.
    if !force {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "unlock deletes {name:?} whoever holds it; say so with --force \
                 (redis-rlock unlock --force {name})"
            ),
        ));
    }
    let confirm = !yes;
    if confirm && !std::io::stdin().is_terminal() {
        return Err(Failure::new(
            exit::USAGE,
            "refusing to force-unlock without a terminal to confirm on; add --yes",
        ));
    }
    let fail = |err| Failure::from_lock_error(err, url);
    let manager = LockManager::new(url).map_err(fail)?;
    let lock = kind.handle(&manager, name);
    if confirm {
        if let Some(code) = ask_to_delete(&manager, lock.as_ref(), url, name)? {
            return Ok(code);
        }
    }
    if lock.force_unlock().map_err(fail)? {
        let woken = match kind {
            LockKind::Spin | LockKind::String => "its waiters find it free at their next look",
            _ => "its waiters were woken",
        };
        say!("{} {name:?} deleted; {woken}", kind.noun());
    } else {
        say!("{} {name:?} was not held; nothing to unlock", kind.noun());
    }
    Ok(0)
}

/// Shows what would be deleted and asks at the terminal. `Some(exit code)` when the unlock
/// ends here: the lock is not held, or the answer was not yes.
fn ask_to_delete(
    manager: &LockManager,
    lock: &dyn DistributedLock,
    url: &str,
    name: &str,
) -> Result<Option<u8>, Failure> {
    // Show what would be deleted; also refuses a key that is not a lock (another type, or
    // a hash of data) before asking.
    if !lock
        .is_locked()
        .map_err(|err| Failure::from_lock_error(err, url))?
    {
        say!("lock {name:?} is not held; nothing to unlock");
        return Ok(Some(0));
    }
    let snapshot = read_lock(manager, url, name)?;
    let mut stderr = std::io::stderr();
    let _ = write!(
        stderr,
        "lock {name:?} is {}.\nDelete it? Its holder finds out only at its next renewal. [y/N] ",
        snapshot.describe()
    );
    let _ = stderr.flush();
    let mut answer = String::new();
    let read = std::io::stdin().lock().read_line(&mut answer);
    if read.is_err() || !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        note!("not unlocked");
        return Ok(Some(DECLINED));
    }
    Ok(None)
}

/// Who holds the lock `name`; refuses a hash of data.
fn read_lock(manager: &LockManager, url: &str, name: &str) -> Result<Snapshot, Failure> {
    let mut conn = status::connect_for(manager, url, name)?;
    let snapshot =
        Snapshot::read(&mut conn, name).map_err(|err| Failure::from_redis_error(err, name, url))?;
    if snapshot.is_data() {
        return Err(Failure::new(
            exit::DATA,
            format!("the key {name:?} holds a hash whose fields are not hold counts: not a lock"),
        ));
    }
    Ok(snapshot)
}
