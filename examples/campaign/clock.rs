//! The clock every process of a campaign shares: `CLOCK_MONOTONIC` is system-wide on Linux
//! (std's `Instant` reads it too, but cannot be sent to another process), so intervals that
//! workers record can be compared with each other and with the driver's fault times.

/// Nanoseconds on the system-wide monotonic clock.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
