//! `redis-rlock status`: who holds a lock, how many times, and for how long yet; and the
//! snapshot of a lock that the progress line and the unlock prompt show.

use std::time::{Duration, SystemTime};

use redis_rlock::LockManager;

use crate::duration::show;
use crate::exit::Failure;
use crate::string_status::string_lock_status;

/// How long opening the plain connection may take (the library's default connect timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One owner field of a lock hash: `<client-uuid>:<thread-number>` and its hold count, kept as
/// text when it is not a number (a foreign writer), so that nothing is hidden.
pub struct Owner {
    pub field: String,
    pub holds: String,
}

/// What a lock looks like at one moment.
pub struct Snapshot {
    pub owners: Vec<Owner>,
    /// The remaining TTL; `None` when the key is absent or has no expiry.
    pub ttl: Option<Duration>,
}

impl Snapshot {
    /// Reads the lock hash and its TTL in one MULTI, so both describe the same moment.
    pub fn read(conn: &mut redis::Connection, name: &str) -> redis::RedisResult<Snapshot> {
        let (fields, pttl): (Vec<(String, String)>, i64) = redis::pipe()
            .atomic()
            .cmd("HGETALL")
            .arg(name)
            .cmd("PTTL")
            .arg(name)
            .query(conn)?;
        Ok(Snapshot {
            owners: owners(fields),
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        })
    }

    /// `held by <owner> (1 hold), TTL 29.8s`, or `free`.
    pub fn describe(&self) -> String {
        let Some(first) = self.owners.first() else {
            return "free".into();
        };
        if self.is_data() {
            // Acquires wait for such a hash while it has a TTL, as for a holder.
            return "a hash whose fields are not hold counts (not a lock)".into();
        }
        let mut text = format!("held by {} ({})", first.field, holds(&first.holds));
        if self.owners.len() > 1 {
            text.push_str(&format!(" and {} more", self.owners.len() - 1));
        }
        match self.ttl {
            Some(ttl) => text.push_str(&format!(", TTL {}", show(ttl))),
            None => text.push_str(", no TTL"),
        }
        text
    }

    /// Whether the hash is somebody's data rather than a lock (see [`is_data`]).
    pub fn is_data(&self) -> bool {
        is_data(&self.owners)
    }
}

/// The owner fields of a lock hash; a read-write lock's `mode` is no owner.
fn owners(fields: Vec<(String, String)>) -> Vec<Owner> {
    fields
        .into_iter()
        .filter(|(field, _)| field != "mode")
        .map(|(field, holds)| Owner { field, holds })
        .collect()
}

/// Whether the hash whose owner fields these are is somebody's data rather than a lock: a
/// lock's owner fields all hold hold counts. The library's `force_unlock` refuses such a hash
/// too, and its acquires when the hash has no TTL (with one, they wait for it as for a holder).
fn is_data(owners: &[Owner]) -> bool {
    owners
        .iter()
        .any(|owner| owner.holds.is_empty() || !owner.holds.bytes().all(|b| b.is_ascii_digit()))
}

/// `1 hold`, `3 holds`.
pub fn holds(count: &str) -> String {
    match count {
        "1" => "1 hold".into(),
        n => format!("{n} holds"),
    }
}

/// A plain redis-rs connection to `url`, for what the library has no call for (the owner
/// fields). Opened separately so that it never competes with the library's own connections.
pub fn connect(url: &str, name: &str) -> Result<redis::Connection, Failure> {
    redis::Client::open(url)
        .and_then(|client| client.get_connection_with_timeout(CONNECT_TIMEOUT))
        .map_err(|err| Failure::from_redis_error(err, name, url))
}

/// A plain connection to the master that serves `name`, as `manager` found it (any URL form:
/// with Sentinel the current master, on a cluster the slot's), for what the library has no
/// call for.
pub fn connect_for(
    manager: &LockManager,
    url: &str,
    name: &str,
) -> Result<redis::Connection, Failure> {
    manager
        .master_client(name)
        .map_err(|err| Failure::from_lock_error(err, url))?
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .map_err(|err| Failure::from_redis_error(err, name, url))
}

/// What `status` reads the key as (`--kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A lock when the key is a hash or absent; a semaphore or a count-down latch (which of
    /// the two the key does not say) when it is a number.
    Auto,
    /// A lock of any kind: plain, fair, read-write.
    Lock,
    /// A semaphore: the number of free permits.
    Semaphore,
    /// A count-down latch: its count.
    Latch,
    /// A permit-expirable semaphore: free permits, acquired permit ids and their expiry.
    PermitExpirableSemaphore,
    /// redis-py's lock format: the token the string key holds and its TTL.
    String,
}

/// `redis-rlock status NAME [--kind KIND] [--json]`. Exit 0 whether the lock is held or free,
/// the latch open or not: the answer is in the output.
pub fn status(url: &str, name: &str, kind: Kind, json: bool) -> Result<u8, Failure> {
    let fail = |err| Failure::from_lock_error(err, url);
    let manager = LockManager::new(url).map_err(fail)?;
    warn_of_eviction(&manager);
    match kind {
        Kind::Lock => lock_status(&manager, url, name, json),
        Kind::Semaphore => semaphore_status(&manager, url, name, json),
        Kind::Latch => latch_status(&manager, url, name, json),
        Kind::PermitExpirableSemaphore => permit_semaphore_status(&manager, url, name, json),
        Kind::String => string_lock_status(&manager, url, name, json),
        Kind::Auto => match lock_status(&manager, url, name, json) {
            // A string: Redisson keeps a semaphore's permits and a latch's count alike, as a
            // number at the key, so this is all that can be said without being told.
            Err(failure)
                if failure.code == crate::exit::DATA && is_string(&manager, url, name)? =>
            {
                number_status(&manager, url, name, json)
            }
            outcome => outcome,
        },
    }
}

/// A line on stderr per master whose eviction policy may evict lock keys (stdout keeps its
/// form for scripts).
fn warn_of_eviction(manager: &LockManager) {
    for policy in manager.eviction_policies() {
        if policy.evicts_locks() {
            note!(
                "warning: {policy}: Redis may evict lock keys when memory runs short, and an \
                 evicted lock is free for anyone; set maxmemory-policy noeviction, or keep the \
                 locks on a Redis of their own"
            );
        }
    }
}

/// Whether the key holds a string (what `TYPE` says), for telling a number from a lock.
fn is_string(manager: &LockManager, url: &str, name: &str) -> Result<bool, Failure> {
    let mut conn = connect_for(manager, url, name)?;
    let kind: String = redis::cmd("TYPE")
        .arg(name)
        .query(&mut conn)
        .map_err(|err| Failure::from_redis_error(err, name, url))?;
    Ok(kind == "string")
}

/// A number at the key, with no word on whether it is a semaphore's or a latch's.
fn number_status(manager: &LockManager, url: &str, name: &str, json: bool) -> Result<u8, Failure> {
    // The semaphore's reading of it: the latch's is the same GET and parse.
    let value = manager
        .get_semaphore(name)
        .available_permits()
        .map_err(|err| Failure::from_lock_error(err, url))?;
    if json {
        say!(
            "{}",
            serde_json::json!({ "name": name, "kind": "semaphore-or-latch", "value": value })
        );
    } else {
        say!(
            "{name:?}: {value}, a semaphore's free permits or a count-down latch's count \
             (both are a number at the key; --kind semaphore or --kind latch reads it as one)"
        );
    }
    Ok(0)
}

/// A semaphore's free permits, and whether it was set at all (acquires wait on one that was
/// not, until someone sets or releases permits).
fn semaphore_status(
    manager: &LockManager,
    url: &str,
    name: &str,
    json: bool,
) -> Result<u8, Failure> {
    // The library's call first: it refuses a bad name and a key that is not a number.
    let permits = manager
        .get_semaphore(name)
        .available_permits()
        .map_err(|err| Failure::from_lock_error(err, url))?;
    let exists: bool = redis::cmd("EXISTS")
        .arg(name)
        .query(&mut connect_for(manager, url, name)?)
        .map_err(|err| Failure::from_redis_error(err, name, url))?;
    if json {
        say!(
            "{}",
            serde_json::json!({
                "name": name, "kind": "semaphore", "exists": exists, "permits": permits,
            })
        );
    } else if exists {
        let permits = match permits {
            1 => "1 free permit".to_string(),
            n => format!("{n} free permits"),
        };
        say!("semaphore {name:?}: {permits}");
    } else {
        say!("semaphore {name:?}: not set (no key: 0 permits until set or released)");
    }
    Ok(0)
}

/// A count-down latch's count; at zero its key is gone and it is open.
fn latch_status(manager: &LockManager, url: &str, name: &str, json: bool) -> Result<u8, Failure> {
    let count = manager
        .get_count_down_latch(name)
        .count()
        .map_err(|err| Failure::from_lock_error(err, url))?;
    if json {
        say!(
            "{}",
            serde_json::json!({ "name": name, "kind": "latch", "count": count, "open": count == 0 })
        );
    } else if count == 0 {
        say!("count-down latch {name:?}: count 0, open");
    } else {
        say!("count-down latch {name:?}: count {count}, closed (waiters wait for 0)");
    }
    Ok(0)
}

/// A permit-expirable semaphore's free permits and acquired permits, read only: a permit whose
/// lease ended is counted as free (the next operation of any client takes it back) and listed
/// as expired.
fn permit_semaphore_status(
    manager: &LockManager,
    url: &str,
    name: &str,
    json: bool,
) -> Result<u8, Failure> {
    let fail = |err| Failure::from_lock_error(err, url);
    // The count is a plain semaphore's (a GET that refuses a key that is not a number).
    let stored = manager
        .get_semaphore(name)
        .available_permits()
        .map_err(fail)?;
    let leases = manager
        .get_permit_expirable_semaphore(name)
        .acquired_permit_leases()
        .map_err(fail)?;
    let now = SystemTime::now();
    // Remaining lease per permit: None without a lease, Some(ZERO) when it ended.
    let left: Vec<Option<Duration>> = leases
        .iter()
        .map(|p| {
            p.expires_at
                .map(|at| at.duration_since(now).unwrap_or_default())
        })
        .collect();
    let expired = left.iter().filter(|l| **l == Some(Duration::ZERO)).count() as u64;
    let free = stored + expired;
    if json {
        let acquired: Vec<_> = leases
            .iter()
            .zip(&left)
            .map(|(p, l)| {
                let ms = l.map(|l| l.as_millis() as u64);
                serde_json::json!({ "id": p.id, "lease_left_ms": ms, "expired": ms == Some(0) })
            })
            .collect();
        say!(
            "{}",
            serde_json::json!({
                "name": name, "kind": "permit-expirable-semaphore", "permits": free,
                "acquired": acquired,
            })
        );
        return Ok(0);
    }
    say!(
        "permit-expirable semaphore {name:?}: {free} free, {} acquired",
        leases.len() as u64 - expired
    );
    for (permit, left) in leases.iter().zip(&left) {
        match left {
            None => say!("  {}  no lease", permit.id),
            Some(Duration::ZERO) => say!("  {}  expired (free at the next operation)", permit.id),
            Some(left) => say!("  {}  expires in {}", permit.id, show(*left)),
        }
    }
    Ok(0)
}

/// A lock's holders, TTL, read-write mode and fair queue.
fn lock_status(manager: &LockManager, url: &str, name: &str, json: bool) -> Result<u8, Failure> {
    let fail = |err| Failure::from_lock_error(err, url);
    let lock = manager.get_lock(name);
    // The library's calls first: they refuse a bad name and a key that is not a lock.
    let held = lock.is_locked().map_err(fail)?;
    let ttl = lock.remaining_ttl().map_err(fail)?;
    let mut conn = connect_for(manager, url, name)?;
    let redis_error = |err| Failure::from_redis_error(err, name, url);
    let (mut owners, mut mode) = (Vec::new(), None);
    if held {
        let fields: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(name)
            .query(&mut conn)
            .map_err(redis_error)?;
        // A read-write lock's hash also has its `mode` (read or write), which is no owner.
        let (modes, holders): (Vec<_>, Vec<_>) =
            fields.into_iter().partition(|(field, _)| field == "mode");
        mode = modes.into_iter().next().map(|(_, mode)| mode);
        owners = self::owners(holders);
        if is_data(&owners) {
            return Err(Failure::new(
                crate::exit::DATA,
                format!(
                    "the key {name:?} holds a hash whose fields are not hold counts: not a lock"
                ),
            ));
        }
    }
    // A fair lock's waiters, first in line first (empty for the other kinds).
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg(queue_key(name))
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .map_err(redis_error)?;
    // The three reads are not one moment: a lock released in between shows as free.
    let held = held && !owners.is_empty();
    let snapshot = Snapshot {
        owners,
        ttl: ttl.filter(|_| held),
    };
    if json {
        let mut value = to_json(name, held, &snapshot);
        value["kind"] = "lock".into();
        value["mode"] = mode.clone().into();
        value["queue"] = queue.clone().into();
        say!("{value}");
    } else {
        let mut text = snapshot.describe();
        if let Some(mode) = &mode {
            text.push_str(&format!(", {mode} mode"));
        }
        if !queue.is_empty() {
            text.push_str(&format!(", {} queued (fair lock)", queue.len()));
        }
        say!("lock {name:?}: {text}");
    }
    Ok(0)
}

/// The fair lock's queue of waiting owners, `redisson_lock_queue:{name}` (Redisson's brace
/// rule: no braces added when the name has some).
fn queue_key(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock_queue:{name}")
    } else {
        format!("redisson_lock_queue:{{{name}}}")
    }
}

fn to_json(name: &str, held: bool, snapshot: &Snapshot) -> serde_json::Value {
    let owners: Vec<serde_json::Value> = snapshot
        .owners
        .iter()
        .map(|owner| {
            let holds = match owner.holds.parse::<u64>() {
                Ok(n) => serde_json::Value::from(n),
                Err(_) => serde_json::Value::from(owner.holds.as_str()),
            };
            serde_json::json!({ "owner": owner.field, "holds": holds })
        })
        .collect();
    serde_json::json!({
        "name": name,
        "held": held,
        "owners": owners,
        "ttl_ms": snapshot.ttl.map(|ttl| ttl.as_millis() as u64),
    })
}
