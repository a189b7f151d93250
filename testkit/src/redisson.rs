//! Redisson's `RLock` scripts as a Java client sends them (Redisson 3.2x–4.x): the Java side of
//! a shared lock, run raw by tests and the load generator.

/// Redisson's `tryLockInnerAsync`: take or re-enter the hash, nil; else the holder's PTTL.
pub const REDISSON_LOCK: &str = r#"
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Redisson's `unlockInnerAsync`, with its unlock latch (`KEYS[3]`).
pub const REDISSON_UNLOCK: &str = r#"
local val = redis.call('get', KEYS[3]);
if val ~= false then return tonumber(val); end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;
"#;
