//! The handles of each lock kind, each on one engine ([`crate::engine`]): the reentrant
//! lock and its guard, the fair lock, the read-write lock, the spin lock, the string lock
//! (redis-py's format), and the counting
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
pub(crate) mod string_lock;

#[cfg(test)]
mod tests {
    use crate::engine::kind::{grants, hands_over, LockKind};
    use crate::kinds::fair_lock::FAIR;
    use crate::kinds::lock::REENTRANT;
    use crate::kinds::read_write_lock::{READ, WRITE};
    use crate::kinds::spin_lock::SPIN;
    use crate::kinds::string_lock::STRING;

    /// (takes turns, hands over, grants) of a kind.
    fn abilities(kind: &dyn LockKind) -> (bool, bool, bool) {
        (
            kind.takes_turns().is_some(),
            hands_over(kind).is_some(),
            grants(kind).is_some(),
        )
    }

    #[test]
    fn only_the_lock_and_the_polling_locks_take_turns_and_only_the_lock_hands_over_and_grants() {
        assert_eq!(abilities(&REENTRANT), (true, true, true), "the lock");
        assert_eq!(abilities(&SPIN), (true, false, false), "the spin lock");
        assert_eq!(abilities(&STRING), (true, false, false), "the string lock");
        for (name, kind) in [
            ("the fair lock", &FAIR as &dyn LockKind),
            ("the read lock", &READ),
            ("the write lock", &WRITE),
        ] {
            assert_eq!(abilities(kind), (false, false, false), "{name}");
        }
    }
}
