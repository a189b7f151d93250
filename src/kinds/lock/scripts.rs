//! The reentrant lock's Lua scripts (Redisson's `RLock`, plus what this crate adds: attempt
//! ids, the in-script handoff to the next local thread, yields and grants), with their KEYS
//! and ARGV. docs/design/wire-format.md describes their effect; `protocol.rs` calls them.

use crate::store::scripts::{
    attempt_script, holder_pttl, latched_script, not_a_lock_fn, refuse_data_hash,
    refuse_non_lock_key, replay_lock_reply, Script,
};

/// Lua: `server_ms()`, the server's clock in ms (a registered waiter's deadline is the
/// server's, so that clients' clocks never need to agree).
macro_rules! server_ms_fn {
    () => {
        r#"
local function server_ms()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#
    };
}

/// Lua: `waiters_tidy(key)` deletes the waiters hash `key` when only its ticket counter (`#`)
/// is left, so that no key outlives the last waiter.
macro_rules! waiters_tidy_fn {
    () => {
        r#"
local function waiters_tidy(key)
    if redis.call('hlen', key) == 1 and redis.call('hexists', key, '#') == 1 then
        redis.call('del', key)
    end
end
"#
    };
}

/// Lua: `fresh_hold(lock, owner, waiters)` counts one more hold of `owner`, or, when the
/// caller named the waiters hash (`waiters` is not nil: only an owner that holds nothing of
/// the lock as far as it knows names it), makes it the owner's only hold. A count found then
/// is one the owner no longer has: a release that a failover lost (the new master got the
/// acquire from its replica but not the release), or an acquire whose reply was lost.
/// Counted on, it would keep the lock held after the owner's last unlock, for as long as the
/// owner kept coming back (each acquire renews its TTL), and everyone else out.
macro_rules! fresh_hold_fn {
    () => {
        r#"
local function fresh_hold(lock, owner, waiters)
    if waiters then
        redis.call('hset', lock, owner, 1)
    else
        redis.call('hincrby', lock, owner, 1)
    end
end
"#
    };
}

/// `KEYS[1]` lock key, `KEYS[2]` the owner's attempt marker, `KEYS[3]` the lock's waiters
/// hash (`redis_rlock__waiters:{name}`), named only by an owner that holds nothing of the lock
/// as far as it knows (a fresh attempt). A fresh attempt with an empty attempt id (`ARGV[3]`)
/// neither reads nor writes the marker: sent again, it makes its hold the owner's only one
/// (`fresh_hold`), so its repeat takes nothing more without one (docs/design/guarantees.md,
/// "What the attempt marker and the unlock latch repair"). `ARGV[1]` lease ms, `ARGV[2]`
/// owner field, `ARGV[3]` attempt id (empty: no marker, only with `KEYS[3]`), `ARGV[4]`
/// marker TTL ms (see `attempt_script!`), `ARGV[5]` the caller's wait number, `ARGV[6]` how
/// long the caller still waits at most, in ms (empty: without limit), `ARGV[7]` how long past
/// its next look a registration stays, in ms, `ARGV[8]` the control channel its manager's
/// listener is subscribed to on this server (empty: do not register).
/// `KEYS[3]` and `ARGV[5..]` may be left out (no registration, no grant taken). Replies nil
/// when acquired (new, re-entered, or granted to the owner by a release: then without a
/// second hold), else the holder's PTTL, after registering the caller (with a wait number) in
/// the waiters hash, or refreshing its registration. A hash without TTL whose fields are not
/// hold counts is somebody's data, not a lock held forever: refused with WRONGTYPE (a waiter
/// would wait for it without end). docs/design/engine.md ("Grants") describes the waiters hash.
pub const ACQUIRE: &str = attempt_script!(
    unmarked_when = "KEYS[3] ~= nil and ARGV[3] == ''",
    marker = 2,
    id = 3,
    ttl = 4,
    held = "redis.call('hexists', KEYS[1], ARGV[2]) == 1",
    replay = "return nil",
    concat!(
        not_a_lock_fn!(),
        server_ms_fn!(),
        waiters_tidy_fn!(),
        fresh_hold_fn!(),
        r#"
local wait = ARGV[5] or ''
local mine = KEYS[3] and redis.call('hget', KEYS[3], ARGV[2])
if mine and string.sub(mine, 1, 2) == 'g ' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- A release granted the lock to this owner, which holds nothing of it as far as it
    -- knows (only then is KEYS[3] named): this wait's grant, or one an earlier wait never
    -- learned of. The hold is there, and is taken, not counted again; its lease counts from
    -- now.
    redis.call('hdel', KEYS[3], ARGV[2])
    waiters_tidy(KEYS[3])
    redis.call('pexpire', KEYS[1], ARGV[1])
    taken()
    return nil
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    fresh_hold(KEYS[1], ARGV[2], KEYS[3])
    redis.call('pexpire', KEYS[1], ARGV[1])
    if mine then
        -- A wait that ends here, or the marker of a grant taken earlier.
        redis.call('hdel', KEYS[3], ARGV[2])
        waiters_tidy(KEYS[3])
    end
    taken()
    return nil
end"#,
        holder_pttl!(),
        r#"
if KEYS[3] and wait ~= '' and (ARGV[8] or '') ~= '' then
    -- Until the caller looks again (the holder's TTL, or its wait's end), and a margin.
    local life = pttl
    if life < 0 then
        life = 100
    end
    if ARGV[6] ~= '' and tonumber(ARGV[6]) < life then
        life = tonumber(ARGV[6])
    end
    life = life + tonumber(ARGV[7])
    local ticket
    if mine then
        local kind, old, _, _, number = string.match(mine, '^(%a) (%d+) (%d+) (%d+) (%d+) ')
        if kind == 'w' and number == wait then
            ticket = old
        end
    end
    if not ticket then
        ticket = redis.call('hincrby', KEYS[3], '#', 1)
    end
    redis.call('hset', KEYS[3], ARGV[2], 'w ' .. ticket .. ' ' .. (server_ms() + life) .. ' '
        .. ARGV[1] .. ' ' .. wait .. ' ' .. ARGV[8])
    if redis.call('pttl', KEYS[3]) < life then
        redis.call('pexpire', KEYS[3], life)
    end
end
return pttl
"#
    )
);

/// A registered waiter stops waiting: `KEYS[1]` lock key, `KEYS[2]` the lock's waiters hash.
/// `ARGV[1]` owner field, `ARGV[2]` its wait number, `ARGV[3]` lease ms. Replies 1 when a
/// release had granted the lock to this wait (the hold is there, its lease now counts from
/// this call, and the caller has the lock), else 0 after taking the registration out. A
/// repeated call (its reply lost) answers the same: a grant's marker stays until the holder's
/// next acquire or release.
pub const STOP_WAITING: &str = concat!(
    waiters_tidy_fn!(),
    r#"
local mine = redis.call('hget', KEYS[2], ARGV[1])
if not mine then
    return 0
end
local kind, wait = string.match(mine, '^(%a) (%d+)')
if kind == 'g' and wait == ARGV[2] and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[3])
    return 1
end
if kind == 'w' then
    redis.call('hdel', KEYS[2], ARGV[1])
    waiters_tidy(KEYS[2])
end
return 0
"#
);

/// The fenced acquire: `KEYS[1]` lock key, `KEYS[2]` fencing token counter, `KEYS[3]` the
/// owner's attempt marker, `KEYS[4]` (optional) the waiters hash, named only by an owner that
/// holds nothing of the lock as far as it knows. `ARGV[1]` lease ms, `ARGV[2]` owner field,
/// `ARGV[3]` attempt id, `ARGV[4]` marker TTL ms. Like [`ACQUIRE`] (a grant to the owner that
/// it never learned of is taken, not counted again; it never registers), and every
/// acquisition (re-entries too) also increments the counter. Replies a one-element array with
/// the new token as a string when acquired (Lua numbers are doubles: a string keeps tokens
/// above 2^53 exact), else the holder's PTTL. A repeated send of one attempt gets the first
/// send's token.
///
/// The counter is checked first, before anything is written: it must be missing or a string
/// holding a non-negative integer in Redis' canonical form (no sign, no leading zero) below
/// 2^63 - 1, so that INCR succeeds and the new token is a valid `u64`. Anything else (another
/// type, a negative or fractional number, text, a full counter) fails the call with an error
/// naming the counter, and leaves both the counter and the lock as they were. Checking only
/// after the lock was taken would leave it held with no guard to release it. The check is on
/// the string, not on `tonumber` of the whole: Lua numbers are doubles and cannot tell 2^63 - 1
/// from 2^63.
pub const FENCED_ACQUIRE: &str = attempt_script!(
    marker = 3,
    id = 3,
    ttl = 4,
    held = "redis.call('hexists', KEYS[1], ARGV[2]) == 1",
    replay = replay_lock_reply!(),
    concat!(
        not_a_lock_fn!(),
        waiters_tidy_fn!(),
        fresh_hold_fn!(),
        r#"
local kind = redis.call('type', KEYS[2])['ok']
if kind ~= 'none' then
    -- Names and values go into the message printable and cut short: they may hold any bytes.
    local function shown(text)
        local cut = string.gsub(string.sub(text, 1, 200), '[^%w%p ]', '?')
        if #text > 200 then
            cut = cut .. '...'
        end
        return cut
    end
    local what = 'ERR fencing token counter ' .. shown(KEYS[2]) .. ' holds '
    local untouched = '; the counter and the lock were left untouched'
    if kind ~= 'string' then
        return redis.error_reply(what .. 'a ' .. kind .. ', not an integer' .. untouched)
    end
    local counter = redis.call('get', KEYS[2])
    -- 19 digits are compared in two parts that doubles hold exactly (10 and 9 digits).
    local high = tonumber(string.sub(counter, 1, 10))
    local valid = counter == '0' or (string.find(counter, '^[1-9]%d*$') ~= nil and
        (#counter < 19 or (#counter == 19 and (high < 9223372036 or
            (high == 9223372036 and tonumber(string.sub(counter, 11)) < 854775807)))))
    if not valid then
        return redis.error_reply(what .. '"' .. shown(counter) ..
            '", not a non-negative integer below 2^63 - 1' .. untouched)
    end
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('incr', KEYS[2])
    local mine = KEYS[4] and redis.call('hget', KEYS[4], ARGV[2])
    if mine and string.sub(mine, 1, 2) == 'g ' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        -- Granted to this owner by a release it never learned of (see ACQUIRE): taken.
        redis.call('hdel', KEYS[4], ARGV[2])
        waiters_tidy(KEYS[4])
    else
        fresh_hold(KEYS[1], ARGV[2], KEYS[4])
    end
    redis.call('pexpire', KEYS[1], ARGV[1])
    local token = redis.call('get', KEYS[2])
    taken(token)
    return {token}
end"#,
        holder_pttl!(),
        "return pttl\n"
    )
);

/// The release, and the handoff to the next owner. `KEYS[1]` lock key, `KEYS[2]` unlock
/// channel, `KEYS[3]` this call's latch key, `KEYS[4]` the lock's waiters hash, and `KEYS[5..]`
/// (optional) latches of this client's earlier releases of the lock whose replies are in hand
/// (so they are deleted now, rather than left to expire). `ARGV[1]` message, `ARGV[2]` lease ms
/// for holds that remain, `ARGV[3]` owner field, `ARGV[4]` publish command, `ARGV[5]` latch TTL
/// ms, `ARGV[6]` how many of the channel's subscribers to disregard (the releasing client's own
/// listener), `ARGV[7]` the next local owner field (empty: no handoff), `ARGV[8]` its lease ms,
/// `ARGV[9]` how many of the channel's subscribers are the releasing client's own listener (0
/// or 1), `ARGV[10]` the `PUBSUB` subcommand that counts them (`numsub`, `shardnumsub`; empty
/// or left out: no grants), `ARGV[11]` how many holds the caller counts for the owner after
/// this release (0, empty or left out: this is its last).
///
/// On the last hold, the lock goes to the first registered waiter of another client when
/// every other subscriber of the channel is such a waiter (no Redisson client, nobody else
/// listens): the hold is written in its name, and its wait number published (docs/design/engine.md,
/// "Grants"). Otherwise the unlock message is published, and the lock is acquired for the next
/// local owner unless anyone besides the client's own listener heard it; that owner's
/// registration as a waiter, if it has one, goes. When there is a next local owner and the
/// channel has no subscriber besides those disregarded (`PUBSUB NUMSUB`, `SHARDNUMSUB`), the
/// message is not published at all: nobody could take the lock on it.
///
/// A release that is not the caller's last (`ARGV[11]` > 0) but finds the owner's count at one
/// does not delete the key: it sets the count to `ARGV[11]`, the holds whose guards are still
/// out, and their lease (docs/design/guarantees.md, "What the attempt marker and the unlock
/// latch repair").
///
/// Replies nil when the owner holds no hold, 0 when one hold fewer remains, 5 when the count
/// was set to `ARGV[11]` as above, and on the last hold (the key deleted): 4 when granted to a
/// registered waiter, 3 when anyone besides the client's own listener heard the unlock message
/// (the lock is left free for them), 2 when it was acquired for the next local owner, 1 when
/// left free. A repeated call (same latch) gets
/// the first call's reply and changes nothing. A publish the server refuses (an ACL without
/// channel rights) does not undo the release: the release is reported, and nobody heard it.
pub const RELEASE: &str = latched_script!(
    latch = 3,
    earlier = 5,
    concat!(
        server_ms_fn!(),
        waiters_tidy_fn!(),
        r#"
local holds = redis.call('hget', KEYS[1], ARGV[3])
if not holds then
    return nil
end
local result = 1
local left = tonumber(ARGV[11] or '') or 0
if holds == '1' and left > 0 then
    -- The caller still counts holds that the hash lost (a late send of a fresh acquire set the
    -- count to one): deleting would free the lock under them. Kept, with the count they need.
    redis.call('hset', KEYS[1], ARGV[3], left)
    redis.call('pexpire', KEYS[1], ARGV[2])
    result = 5
-- The last hold ('1') needs no count written: the key goes.
elseif holds ~= '1' and redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    result = 0
else
    redis.call('del', KEYS[1])
    if (ARGV[10] or '') ~= '' and redis.call('exists', KEYS[4]) == 1 then
        redis.call('hdel', KEYS[4], ARGV[3])
        local now = server_ms()
        local entries = redis.call('hgetall', KEYS[4])
        local live, first, first_ticket = 0, nil, nil
        for i = 1, #entries, 2 do
            local value = entries[i + 1]
            local kind, ticket, deadline = string.match(value, '^(%a) (%d+) (%d+)')
            if kind == 'w' then
                -- A waiter's manager listens on its control channel while it lives.
                local control = string.match(value, '^w %d+ %d+ %d+ %d+ (%S+)$')
                local listening = control and redis.pcall('pubsub', 'numsub', control)
                if tonumber(deadline) <= now or type(listening) ~= 'table'
                        or type(listening[2]) ~= 'number' or listening[2] < 1 then
                    redis.call('hdel', KEYS[4], entries[i])
                else
                    live = live + 1
                    if not first or tonumber(ticket) < first_ticket then
                        first, first_ticket = i, tonumber(ticket)
                    end
                end
            elseif kind == 'g' and tonumber(deadline) <= now then
                redis.call('hdel', KEYS[4], entries[i])
            end
        end
        if live > 0 then
            local counted = redis.pcall('pubsub', ARGV[10], KEYS[2])
            if type(counted) == 'table' and type(counted[2]) == 'number'
                    and counted[2] - tonumber(ARGV[9]) == live then
                local owner = entries[first]
                local lease, wait = string.match(entries[first + 1], '^w %d+ %d+ (%d+) (%d+) ')
                redis.call('hset', KEYS[1], owner, 1)
                redis.call('pexpire', KEYS[1], lease)
                redis.call('hset', KEYS[4], owner, 'g ' .. wait .. ' ' .. (now + tonumber(lease)))
                if redis.call('pttl', KEYS[4]) < tonumber(lease) then
                    redis.call('pexpire', KEYS[4], lease)
                end
                redis.pcall(ARGV[4], KEYS[2], wait)
                result = 4
            end
        end
        waiters_tidy(KEYS[4])
    end
    if result == 1 then
        -- A handoff that nobody else could hear needs no message: asked first, so that the
        -- client's own listener is not woken for nothing at every local handoff.
        local quiet = false
        if ARGV[7] ~= '' then
            local numsub = ARGV[4] == 'spublish' and 'shardnumsub' or 'numsub'
            local counted = redis.pcall('pubsub', numsub, KEYS[2])
            quiet = type(counted) == 'table' and type(counted[2]) == 'number'
                and counted[2] <= tonumber(ARGV[6])
        end
        local heard = 0
        if not quiet then
            heard = redis.pcall(ARGV[4], KEYS[2], ARGV[1])
            if type(heard) ~= 'number' then
                heard = 0
            end
        end
        if heard > tonumber(ARGV[6]) then
            result = 3
        elseif ARGV[7] ~= '' then
            redis.call('hincrby', KEYS[1], ARGV[7], 1)
            redis.call('pexpire', KEYS[1], ARGV[8])
            -- The next owner may be registered as a waiter (the thread that waited in Redis):
            -- it waits no more, and must not be granted the lock again later.
            if redis.call('hdel', KEYS[4], ARGV[7]) == 1 then
                waiters_tidy(KEYS[4])
            end
            result = 2
        end
    end
end
redis.call('set', KEYS[3], result, 'px', ARGV[5])
return result
"#
    )
);

/// KEYS: lock keys. `ARGV[1]` watchdog timeout ms, `ARGV[i + 1]` the owner field for `KEYS[i]`.
/// Replies one integer per key: 1 renewed, 0 the owner's hold is gone (lost).
/// `pcall` keeps one key of the wrong type from failing the whole batch: that lock is lost.
pub const RENEW: &str = r#"
local out = {}
for i, key in ipairs(KEYS) do
    if redis.pcall('hexists', key, ARGV[i + 1]) == 1 then
        redis.call('pexpire', key, ARGV[1])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
"#;

/// `KEYS[1]` lock key, `KEYS[2]` unlock channel, `KEYS[3]` a fair lock's queue, `KEYS[4]` its
/// queue timeouts, `KEYS[5]` the read-write lock's channel. `ARGV[1]` message, `ARGV[2]` publish
/// command, `ARGV[3]` now (epoch ms). Replies 1 when a lock was deleted, 0 when there was none.
/// A key that is not a hash, or a hash whose fields are not hold counts (`not_a_lock`), is
/// refused with WRONGTYPE instead of deleted: it is somebody's data, not a lock.
///
/// The deletion is announced where the waiters of the name's kind listen, as Redisson's
/// `forceUnlock` of each kind does: a read-write lock's (it has `mode`) on its own channel,
/// with `1` (everyone may go: nothing is held any more); otherwise on the lock's channel, and
/// to a fair lock's first live waiter on its channel `<unlock channel>:<owner>` (the waiters at
/// the head whose queue timeout passed are dropped first, as in the fair acquire, so that the
/// message reaches one that still waits).
pub const FORCE_UNLOCK: &str = concat!(
    refuse_non_lock_key!(),
    r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if redis.call('del', KEYS[1]) == 0 then
    return 0
end
if mode then
    redis.call(ARGV[2], KEYS[5], '1')
    return 1
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
while true do
    local first = redis.call('lindex', KEYS[3], 0)
    if not first then
        break
    end
    local timeout = redis.call('zscore', KEYS[4], first)
    if timeout and tonumber(timeout) > tonumber(ARGV[3]) then
        redis.call(ARGV[2], KEYS[2] .. ':' .. first, ARGV[1])
        break
    end
    redis.call('lpop', KEYS[3])
    redis.call('zrem', KEYS[4], first)
end
return 1
"#
);

/// `KEYS[1]` lock key. `ARGV[1]` owner field. Replies `{held, holds}`: `held` 1 when anyone
/// holds the lock, 0 when the key is absent; `holds` the owner's hold count (0 when none).
/// A key that is not a hash, or a hash without TTL whose fields are not hold counts
/// (`not_a_lock`), is refused with WRONGTYPE: it is somebody's data, not a held lock. For the
/// inspection calls (`Lock::is_locked`, `hold_count`, `is_held_by_current_thread`), which would
/// otherwise call such a hash locked. As in the acquires, a hash with a TTL is taken for a
/// holder without reading it (a lock always has one): a large read-write lock costs no scan.
pub const INSPECT: &str = concat!(
    not_a_lock_fn!(),
    r#"
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {0, 0}
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a lock')
end
if redis.call('pttl', KEYS[1]) == -1 and not_a_lock(KEYS[1]) then
    "#,
    refuse_data_hash!(),
    r#"
end
return {1, tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')}
"#
);

/// The reentrant lock's scripts, loaded on every master when a manager starts so that the
/// first call of each does not meet NOSCRIPT.
pub(crate) struct LockScripts {
    pub(crate) acquire: Script,
    pub(crate) fenced_acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_unlock: Script,
    pub(crate) inspect: Script,
    pub(crate) stop_waiting: Script,
}

pub(crate) static LOCK_SCRIPTS: LockScripts = LockScripts {
    acquire: Script::new(ACQUIRE),
    fenced_acquire: Script::new(FENCED_ACQUIRE),
    release: Script::new(RELEASE),
    renew: Script::new(RENEW),
    force_unlock: Script::new(FORCE_UNLOCK),
    inspect: Script::new(INSPECT),
    stop_waiting: Script::new(STOP_WAITING),
};

impl LockScripts {
    pub(crate) fn all(&self) -> [&Script; 7] {
        [
            &self.acquire,
            &self.fenced_acquire,
            &self.release,
            &self.renew,
            &self.force_unlock,
            &self.inspect,
            &self.stop_waiting,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::{LOCK_SCRIPTS, RELEASE};

    #[test]
    fn the_lock_scripts_are_hashed_as_the_server_names_them() {
        assert_eq!(
            LOCK_SCRIPTS.release.get_hash(),
            redis::Script::new(RELEASE).get_hash()
        );
        assert_eq!(LOCK_SCRIPTS.all().len(), 7);
    }
}
