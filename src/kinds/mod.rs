//! The handles of each lock kind, each on one engine ([`crate::engine`]): the reentrant
//! lock and its guard, the fair lock, the read-write lock, the spin lock, and the counting
//! kinds (semaphores and the count-down latch), which wait without a hold ([`counting`]).

pub(crate) mod count_down_latch;
pub(crate) mod counting;
pub(crate) mod distributed_lock;
pub(crate) mod fair_lock;
pub(crate) mod lock;
pub(crate) mod permit_expirable_semaphore;
pub(crate) mod read_write_lock;
pub(crate) mod semaphore;
pub(crate) mod spin_lock;
