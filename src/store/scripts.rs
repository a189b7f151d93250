//! Script plumbing: [`Script`], through which every script of every kind is sent (by EVALSHA,
//! and loaded again when the server answers NOSCRIPT after a restart or `SCRIPT FLUSH`), and
//! the Lua pieces that several kinds' scripts share (the unlock latch's and the attempt id's
//! prologues, telling a lock from somebody's hash). Each kind keeps its own scripts next to
//! it (the reentrant lock's in `kinds/lock/scripts.rs`), each with the effect
//! docs/design/wire-format.md describes for Redisson's, so a Java client and this crate can
//! share a lock; the code is our own.

use std::sync::OnceLock;

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs};

/// Builds a release script made idempotent by an unlock latch: `body` runs after the prologue
/// every kind's release shares, which deletes this client's earlier latches of the lock
/// (`KEYS[earlier..]`, their replies are in hand) and answers a repeated call (this call's
/// latch, `KEYS[latch]`, exists) with the first call's reply. The body stores its reply in
/// `KEYS[latch]` with the latch TTL.
macro_rules! latched_script {
    (latch = $latch:literal, earlier = $earlier:literal, $body:expr) => {
        concat!(
            "\nfor i = ",
            $earlier,
            ", #KEYS do\n    redis.call('del', KEYS[i])\nend\nlocal done = redis.call('get', KEYS[",
            $latch,
            "])\nif done then\n    return tonumber(done)\nend",
            $body
        )
    };
}
pub(crate) use latched_script;

/// Builds an acquire script whose repeated sends take one hold: `body` runs after the prologue
/// every kind's acquire shares. `KEYS[marker]` is the owner's attempt marker
/// (`redis_rlock__attempt:{name}:<owner>`), `ARGV[id]` this attempt's id (the same in every
/// send of one attempt), `ARGV[ttl]` how long the marker lives in ms (an unlock latch's TTL).
///
/// The body calls `taken(stored)` when it took something: the marker then holds
/// `<id>:<stored>` (`stored` is the fencing token, or empty). A later send of the same attempt
/// (its first reply was lost) finds its id there and, while `held` is still true (the hold
/// was not lost meanwhile), runs `replay` with `stored` instead of the body: it answers what
/// the first send did, and takes nothing more. Any other marker is an earlier attempt's and
/// is ignored. A replay still writes (it renews the marker's TTL): `WAIT` counts the
/// replicas that have this connection's last write, so with replica sync on, a replay on a
/// new connection that wrote nothing would be acknowledged at once, whether or not any
/// replica has what the first send wrote. The write comes after it in the replication
/// stream, so `WAIT` covers both.
///
/// With `unmarked_when`, a Lua condition on the call's keys and arguments, an attempt for which
/// it holds neither reads nor writes the marker: the body must then take no more on a repeated
/// send by itself (the reentrant lock's fresh attempt, which makes its hold the owner's only
/// one: docs/design/guarantees.md, "What the attempt marker and the unlock latch repair").
macro_rules! attempt_script {
    (marker = $marker:literal, id = $id:literal, ttl = $ttl:literal, held = $held:literal,
     replay = $replay:expr, $body:expr) => {
        concat!(
            "\nlocal function taken(stored)\n    redis.call('set', KEYS[",
            $marker,
            "], ARGV[",
            $id,
            "] .. ':' .. (stored or ''), 'px', ARGV[",
            $ttl,
            "])\nend\nlocal seen = redis.call('get', KEYS[",
            $marker,
            "])",
            $crate::store::scripts::attempt_replay!($marker, $id, $ttl, $held, $replay),
            $body
        )
    };
    (unmarked_when = $unmarked:literal, marker = $marker:literal, id = $id:literal,
     ttl = $ttl:literal, held = $held:literal, replay = $replay:expr, $body:expr) => {
        concat!(
            "\nlocal unmarked = ",
            $unmarked,
            "\nlocal function taken(stored)\n    if not unmarked then\n        redis.call('set', KEYS[",
            $marker,
            "], ARGV[",
            $id,
            "] .. ':' .. (stored or ''), 'px', ARGV[",
            $ttl,
            "])\n    end\nend\nlocal seen = not unmarked and redis.call('get', KEYS[",
            $marker,
            "])",
            $crate::store::scripts::attempt_replay!($marker, $id, $ttl, $held, $replay),
            $body
        )
    };
}
pub(crate) use attempt_script;

/// The replay of `attempt_script!`: when the marker read (`seen`) is this attempt's and the
/// hold is still there, answers as the first send did.
macro_rules! attempt_replay {
    ($marker:literal, $id:literal, $ttl:literal, $held:literal, $replay:expr) => {
        concat!(
            "\nif seen and string.sub(seen, 1, #ARGV[",
            $id,
            "] + 1) == ARGV[",
            $id,
            "] .. ':' and ",
            $held,
            " then\n    redis.call('pexpire', KEYS[",
            $marker,
            "], ARGV[",
            $ttl,
            "])\n    local stored = string.sub(seen, #ARGV[",
            $id,
            "] + 2)\n    ",
            $replay,
            "\nend"
        )
    };
}
pub(crate) use attempt_replay;

/// What a replayed lock acquire answers: nil, or `{token}` when the first send was fenced.
macro_rules! replay_lock_reply {
    () => {
        "if stored == '' then\n        return nil\n    end\n    return {stored}"
    };
}
pub(crate) use replay_lock_reply;

/// Lua: `not_a_lock(key)`, whether the hash at `key` is somebody's data rather than a lock:
/// every field of a lock (of any kind, Redisson's or ours) but a read-write lock's `mode`
/// holds a hold count. Runs only where a lock could not be (a hash without TTL, a force
/// unlock, an inspection of a hash without TTL), never on the way of an acquire that works.
/// Reads the hash 100 fields at a time (HSCAN), so a large data hash is told from a lock by its
/// first page, not read whole.
macro_rules! not_a_lock_fn {
    () => {
        r#"
local function not_a_lock(key)
    local cursor = '0'
    repeat
        local page = redis.call('hscan', key, cursor, 'count', 100)
        cursor = page[1]
        local fields = page[2]
        for i = 1, #fields, 2 do
            if fields[i] ~= 'mode' and not string.find(fields[i + 1], '^%d+$') then
                return true
            end
        end
    until cursor == '0'
    return false
end
"#
    };
}
pub(crate) use not_a_lock_fn;

/// The WRONGTYPE error (reported as `Error::WrongType`) for a hash that `not_a_lock` says is
/// somebody's data, as a Lua statement.
macro_rules! refuse_data_hash {
    () => {
        "return redis.error_reply('WRONGTYPE the key holds a hash whose fields are not hold \
         counts: not a lock')"
    };
}
pub(crate) use refuse_data_hash;

/// Lua for a script that deletes the lock key whatever holds it (a force unlock): `KEYS[1]`
/// of another type, or a hash that is somebody's data, is refused with WRONGTYPE and left
/// alone. Brings `not_a_lock` with it; `kind` (the key's type) is set for what follows.
macro_rules! refuse_non_lock_key {
    () => {
        concat!(
            $crate::store::scripts::not_a_lock_fn!(),
            "\nlocal kind = redis.call('type', KEYS[1])['ok']\n",
            "if kind ~= 'hash' and kind ~= 'none' then\n",
            "    return redis.error_reply('WRONGTYPE the key holds a ' .. kind .. ', not a lock')\n",
            "end\n",
            "if kind == 'hash' and not_a_lock(KEYS[1]) then\n    ",
            $crate::store::scripts::refuse_data_hash!(),
            "\nend\n"
        )
    };
}
pub(crate) use refuse_non_lock_key;

/// Lua, where an acquire found the lock key held by another: `pttl` is its PTTL, and a hash
/// without TTL that is somebody's data (`not_a_lock_fn!` must come first) is refused.
macro_rules! holder_pttl {
    () => {
        concat!(
            "\nlocal pttl = redis.call('pttl', KEYS[1])\n",
            "if pttl == -1 and not_a_lock(KEYS[1]) then\n    ",
            $crate::store::scripts::refuse_data_hash!(),
            "\nend\n"
        )
    };
}
pub(crate) use holder_pttl;

/// A Lua script, sent by its SHA1 (`EVALSHA`). Every script call of the crate goes through
/// here: [`ScriptInvocation::invoke`] for one call, the one place where a script the server
/// lost (a restart, `SCRIPT FLUSH`, a failover to a node that never loaded it: NOSCRIPT) is
/// loaded and the call sent once more; [`ScriptInvocation::add_to`] for a call in a renewal
/// pipeline, whose NOSCRIPT replies the sweep answers with [`Script::load`] (see
/// `store::renewal`).
pub(crate) struct Script {
    source: &'static str,
    hash: OnceLock<String>,
}

impl Script {
    pub(crate) const fn new(source: &'static str) -> Self {
        Script {
            source,
            hash: OnceLock::new(),
        }
    }

    /// The SHA1 of the source, in hex, as the server names the script.
    pub(crate) fn get_hash(&self) -> &str {
        self.hash
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned())
    }

    /// Loads the script on the server (`SCRIPT LOAD`); replies its hash.
    pub(crate) fn load(&self, conn: &mut dyn ConnectionLike) -> RedisResult<String> {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.source)
            .query(conn)
    }

    /// A call of the script, to which keys and arguments are added.
    pub(crate) fn prepare_invoke(&self) -> ScriptInvocation<'_> {
        ScriptInvocation {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// A call with `key` as `KEYS[1]`.
    pub(crate) fn key<T: ToRedisArgs>(&self, key: T) -> ScriptInvocation<'_> {
        let mut call = self.prepare_invoke();
        call.key(key);
        call
    }
}

/// One call of a [`Script`]: its keys and arguments.
pub(crate) struct ScriptInvocation<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl ScriptInvocation<'_> {
    /// Adds the next key (`KEYS[n]`).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds the next argument (`ARGV[n]`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Sends the call; when the server does not have the script, loads it and sends the call
    /// once more. Nothing of a call refused with NOSCRIPT ran, so the second send is its only
    /// run.
    pub(crate) fn invoke<T: FromRedisValue>(
        &self,
        conn: &mut dyn ConnectionLike,
    ) -> RedisResult<T> {
        let call = self.command();
        match call.query(conn) {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load(conn)?;
                call.query(conn)
            }
            other => other,
        }
    }

    /// Adds the call to a pipeline (a renewal sweep's).
    pub(crate) fn add_to(&self, pipe: &mut redis::Pipeline) {
        pipe.add_command(self.command());
    }

    fn command(&self) -> redis::Cmd {
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.script.get_hash())
            .arg(self.keys.len())
            .arg(&*self.keys)
            .arg(&*self.args);
        call
    }
}

#[cfg(test)]
mod tests {
    use super::Script;

    #[test]
    fn a_call_is_evalsha_of_the_hash_with_its_keys_then_its_arguments() {
        let script = Script::new("return 1");
        let mut call = script.key("lock");
        call.key(&["latch", "earlier"][..])
            .arg(30_000u64)
            .arg("")
            .arg(7i64);
        let mut pipe = redis::pipe();
        call.add_to(&mut pipe);
        let expected = redis::cmd("EVALSHA")
            .arg(redis::Script::new("return 1").get_hash())
            .arg(3)
            .arg("lock")
            .arg("latch")
            .arg("earlier")
            .arg(30_000u64)
            .arg("")
            .arg(7i64)
            .get_packed_command();
        assert_eq!(pipe.get_packed_pipeline(), expected);
    }
}
