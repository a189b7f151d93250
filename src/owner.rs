//! Who holds a lock: the owner field `<client-uuid>:<thread-number>`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers OS threads of this process, starting at 1, in the order they first touch a lock.
///
/// `std::thread::ThreadId::as_u64` is unstable, and a Java thread id is likewise just a
/// process-unique number, so a counter is all the protocol needs.
static NEXT_THREAD_NUMBER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_NUMBER: u64 = NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's number: unique per OS thread for the life of the process.
pub(crate) fn current_thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// The hash field that marks a hold by thread `thread` of the client `client_id`.
pub(crate) fn owner_field(client_id: &str, thread: u64) -> String {
    format!("{client_id}:{thread}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_stable_numbers() {
        let here = current_thread_number();
        assert_eq!(here, current_thread_number());
        let there = std::thread::spawn(current_thread_number).join().unwrap();
        assert_ne!(here, there);
    }

    #[test]
    fn owner_field_is_uuid_colon_thread() {
        assert_eq!(
            owner_field("9c345276-aa6e-44c1-b478-bf4b14ba1498", 7),
            "9c345276-aa6e-44c1-b478-bf4b14ba1498:7"
        );
    }
}
