//! [`BootInstant`]: the clock that lease deadlines are kept on.
//!
//! A lease runs on the Redis server's clock, which keeps going while this machine is
//! suspended. `std::time::Instant` is CLOCK_MONOTONIC on Linux, which stops during suspend: a
//! guard would then think its lease had time left that the server already spent. Deadlines
//! are therefore kept on CLOCK_BOOTTIME, which counts suspended time too.

use std::time::Duration;

/// A point on the boot clock, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BootInstant(u64);

impl BootInstant {
    #[cfg(target_os = "linux")]
    pub(crate) fn now() -> Self {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        BootInstant(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
    }

    /// Elsewhere the monotonic clock, measured from the first call.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn now() -> Self {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = START.get_or_init(std::time::Instant::now);
        BootInstant(start.elapsed().as_nanos() as u64)
    }

    pub(crate) fn from_nanos(nanos: u64) -> Self {
        BootInstant(nanos)
    }

    pub(crate) fn as_nanos(self) -> u64 {
        self.0
    }

    /// Saturates at about 584 years of boot clock; leases are capped well below that (see
    /// `limits::MAX_LEASE_MILLIS`), so a lease deadline never saturates in practice.
    pub(crate) fn saturating_add(self, d: Duration) -> Self {
        BootInstant(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }

    /// How long from `earlier` to `self`; zero if `earlier` is later.
    pub(crate) fn saturating_since(self, earlier: BootInstant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Where a lease confirmed by a request sent at `sent` ends, on this side: the lease, less a
/// margin for the two clocks' rates (1 %) and timer jitter (2 ms, or a tenth of very short
/// leases).
pub(crate) fn lease_deadline(sent: BootInstant, lease: Duration) -> BootInstant {
    let margin = lease / 100 + Duration::from_millis(2).min(lease / 10);
    sent.saturating_add(lease.saturating_sub(margin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = BootInstant::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = BootInstant::now();
        assert!(b.saturating_since(a) >= Duration::from_millis(5));
        assert_eq!(a.saturating_since(b), Duration::ZERO);
    }

    #[test]
    fn a_deadline_keeps_a_margin_and_never_precedes_the_send() {
        let sent = BootInstant::from_nanos(1_000_000_000);
        let end = lease_deadline(sent, Duration::from_secs(30));
        assert_eq!(
            end.saturating_since(sent),
            Duration::from_millis(30_000 - 300 - 2)
        );
        let tiny = lease_deadline(sent, Duration::from_millis(1));
        assert_eq!(tiny.saturating_since(sent), Duration::from_micros(890));
    }

    #[test]
    fn the_longest_lease_has_an_exact_deadline_after_centuries_of_uptime() {
        // The boot clock after 400 years of uptime: far more than any machine has.
        let sent = BootInstant::from_nanos(400 * 365 * 24 * 3600 * 1_000_000_000);
        let lease = Duration::from_millis(crate::limits::MAX_LEASE_MILLIS);
        let end = lease_deadline(sent, lease);
        let margin = lease / 100 + Duration::from_millis(2);
        assert_eq!(end.saturating_since(sent), lease - margin, "no saturation");
    }
}
