//! The string lock's scripts: redis-py's semantics, for servers without the newer
//! compare-and-set commands, and the ones no command replaces (the acquire that re-enters,
//! the watchdog's batch renewal, the force unlock that spares counts).

use crate::store::scripts::Script;

/// The string lock's acquire. `KEYS[1]` lock key; `ARGV[1]` the owner's token, `ARGV[2]` lease
/// ms. Takes a missing key as `SET KEYS[1] ARGV[1] NX PX ARGV[2]` does, and a key that holds
/// the token already (a re-entry, or a resend whose first reply was lost) gets the lease anew;
/// both reply nil. Otherwise replies the holder's PTTL (-1 for a key without TTL, as redis-py
/// writes with `timeout=None`). A key of another type fails with WRONGTYPE, untouched.
pub const STRING_ACQUIRE: &str = r#"
local token = redis.call('get', KEYS[1])
if token == false then
    redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])
    return nil
end
if token == ARGV[1] then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// The string lock's release where the server has neither `DELIFEQ` nor `DELEX`, redis-py's
/// `LUA_RELEASE_SCRIPT`: `KEYS[1]` lock key, `ARGV[1]` token. Deletes the key and replies 1
/// only while it holds the token, else replies 0 and changes nothing.
pub const STRING_RELEASE: &str = r#"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
return 1
"#;

/// The string lock's renewal of one key where the server has no `SET … IFEQ`, redis-py's
/// `LUA_REACQUIRE_SCRIPT` (its extend with `replace_ttl`): `KEYS[1]` lock key, `ARGV[1]` token,
/// `ARGV[2]` lease ms. Sets the TTL and replies 1 only while the key holds the token, else 0.
pub const STRING_EXTEND: &str = r#"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
"#;

/// The watchdog's renewal of many string locks: KEYS lock keys, `ARGV[1]` lease ms,
/// `ARGV[i + 1]` the token of `KEYS[i]`. Replies one integer per key: 1 renewed, 0 the token
/// is gone (lost). `pcall` keeps one key of another type from failing the whole batch.
pub const STRING_RENEW: &str = r#"
local out = {}
for i, key in ipairs(KEYS) do
    if redis.pcall('get', key) == ARGV[i + 1] then
        redis.call('pexpire', key, ARGV[1])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
"#;

/// The string lock's force unlock: `KEYS[1]` lock key. Deletes a string key, whoever's token
/// it holds, and replies 1, or 0 when there was none. A key of another type, or a string that
/// is a count rather than a token (a semaphore's permits, a latch's count: a decimal integer,
/// optionally negative, of at most 19 digits, as `INCRBY` keeps them), is refused with
/// WRONGTYPE and left alone. Neither library's own tokens are such counts (ours contain ':',
/// redis-py's are 32 hex digits, too long), but redis-py's `acquire(token=...)` takes any
/// token: a lock held under one like "42" is refused here as a count, and stays until its
/// holder releases it or its lease ends. Publishes nothing.
pub const STRING_FORCE_UNLOCK: &str = r#"
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'string' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local digits = string.match(redis.call('get', KEYS[1]), '^%-?(%d+)$')
if digits and #digits <= 19 then
    return redis.error_reply('WRONGTYPE the key holds a count (a semaphore or latch), not a lock')
end
return redis.call('del', KEYS[1])
"#;

pub(crate) static ACQUIRE_SCRIPT: Script = Script::new(STRING_ACQUIRE);
pub(crate) static RELEASE_SCRIPT: Script = Script::new(STRING_RELEASE);
pub(crate) static EXTEND_SCRIPT: Script = Script::new(STRING_EXTEND);
pub(crate) static RENEW_SCRIPT: Script = Script::new(STRING_RENEW);
pub(crate) static FORCE_UNLOCK_SCRIPT: Script = Script::new(STRING_FORCE_UNLOCK);
