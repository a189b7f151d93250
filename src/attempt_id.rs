//! Acquire attempt ids: what makes an acquire sent again after its reply was lost take one
//! hold, not two (docs/design/deployments.md, "Never twice blindly").

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Error;

/// Numbers attempts in this process. The marker that remembers an attempt is named after its
/// owner (client id and thread), so ids only need to differ between one owner's attempts.
static NEXT_ATTEMPT: AtomicU64 = AtomicU64::new(1);

/// The id that every send of one acquire attempt carries (see `attempt_script!`): the script
/// remembers the id of an attempt that took something, and a later send with the same id gets
/// the first send's answer instead of a second hold (or a second set of permits).
///
/// An attempt lasts until an answer is read: while its outcome is unknown (the reply was
/// lost to a timeout or a broken connection), the next send repeats it.
pub(crate) struct AttemptId {
    id: String,
    outcome_unknown: bool,
}

impl AttemptId {
    pub(crate) fn new() -> Self {
        AttemptId {
            id: String::new(),
            outcome_unknown: false,
        }
    }

    /// Starts the next send: `true` when it repeats the last attempt (whose reply was lost),
    /// `false` when it is a new attempt with a new id.
    pub(crate) fn start(&mut self) -> bool {
        if self.outcome_unknown && !self.id.is_empty() {
            return true;
        }
        self.id.clear();
        let n = NEXT_ATTEMPT.fetch_add(1, Ordering::Relaxed);
        write!(self.id, "{n:x}").expect("writing to a String");
        false
    }

    /// The id of the current send.
    pub(crate) fn current(&self) -> &str {
        &self.id
    }

    /// Records how the send ended: only after a lost reply does the next send repeat it.
    pub(crate) fn ended<T>(&mut self, outcome: &Result<T, Error>) {
        self.outcome_unknown = match outcome {
            Ok(_) => false,
            Err(err) => err.is_timeout() || err.is_connection_error(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_repeated_only_after_a_lost_reply() {
        let mut attempt = AttemptId::new();
        assert!(!attempt.start());
        let first = attempt.current().to_owned();
        attempt.ended(&Ok(()));
        assert!(!attempt.start());
        let second = attempt.current().to_owned();
        assert_ne!(first, second, "an answered attempt's id is not used again");

        let lost = Error::Timeout {
            operation: "acquire",
            after: std::time::Duration::ZERO,
        };
        attempt.ended::<()>(&Err(lost));
        assert!(attempt.start(), "a lost reply: the next send repeats");
        assert_eq!(attempt.current(), second);

        attempt.ended::<()>(&Err(Error::invalid("lease", "zero")));
        assert!(
            !attempt.start(),
            "an error that is an answer ends the attempt"
        );
        assert_ne!(attempt.current(), second);
    }
}
