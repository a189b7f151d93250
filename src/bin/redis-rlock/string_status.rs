//! `redis-rlock status NAME --kind string`: a lock in redis-py's format, a string key holding
//! its holder's token (ours `<client id>:<thread>:<n>`, redis-py's 32 hex digits) with its TTL.

use redis_rlock::LockManager;

use crate::duration::show;
use crate::exit::Failure;
use crate::status::connect_for;

/// Prints who holds the string lock `name` and for how long yet.
pub fn string_lock_status(
    manager: &LockManager,
    url: &str,
    name: &str,
    json: bool,
) -> Result<u8, Failure> {
    let fail = |err| Failure::from_lock_error(err, url);
    let lock = manager.get_string_lock(name);
    // The library's calls first: they refuse a bad name and a key of another type.
    let ttl = lock.remaining_ttl().map_err(fail)?;
    let mut conn = connect_for(manager, url, name)?;
    let token: Option<String> = redis::cmd("GET")
        .arg(name)
        .query(&mut conn)
        .map_err(|err| Failure::from_redis_error(err, name, url))?;
    let ttl = ttl.filter(|_| token.is_some());
    if json {
        say!(
            "{}",
            serde_json::json!({
                "name": name,
                "kind": "string",
                "held": token.is_some(),
                "owner": token,
                "ttl_ms": ttl.map(|ttl| ttl.as_millis() as u64),
            })
        );
    } else {
        let text = match (&token, ttl) {
            (None, _) => "free".to_owned(),
            (Some(token), Some(ttl)) => format!("held by {token}, TTL {}", show(ttl)),
            (Some(token), None) => format!("held by {token}, no TTL"),
        };
        say!("string lock {name:?}: {text}");
    }
    Ok(0)
}
