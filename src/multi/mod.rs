//! Locks of several names or servers held as one: [`multi_lock`] (Redisson's `RedissonMultiLock`:
//! all or nothing) and [`red_lock`] (a majority of independent masters), which run their
//! attempts on many servers at once through [`fan_out`].

pub(crate) mod fan_out;
pub(crate) mod multi_lock;
pub(crate) mod red_lock;
