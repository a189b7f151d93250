//! How often a lock's waiter looks again when no unlock message comes.
//!
//! Redisson's lock announces every release, and a waiter sleeps until the message or the
//! holder's TTL. Some holders never announce one: a Java spin lock (`RSpinLock`), a client
//! that deletes the key itself. Behind them a waiter would sleep a whole TTL (30 s with the
//! watchdog). So it also looks again after a back-off that starts short and doubles, up to a
//! cap: a release nobody announced is found within about the cap. The cap grows with the
//! number of locks its manager waits for, so that a manager sends about
//! [`LOOKS_PER_SECOND`] such looks a second at most, however many threads wait. Where the
//! server watches the lock key for the waiter (client tracking, `crate::pubsub::tracking`),
//! a silent release wakes it at once, and the back-off is a longer safety net
//! ([`Backoff::tracked`]).

use std::time::Duration;

/// The first back-off.
const FIRST: Duration = Duration::from_millis(100);
/// The cap with few waiting locks: a silent release is found within about this.
const CAP: Duration = Duration::from_secs(2);
/// The first back-off of a waiter whose lock key the server watches (client tracking): a
/// silent release reaches it through the tracking, and the back-off is only a safety net.
const FIRST_TRACKED: Duration = Duration::from_secs(1);
/// The cap of that safety net: how late a release is found should the tracking fail unseen.
const CAP_TRACKED: Duration = Duration::from_secs(8);
/// About how many looks a second a manager's waiters send at most while no message comes.
pub(crate) const LOOKS_PER_SECOND: u32 = 1000;

/// One waiter's back-off.
pub(crate) struct Backoff {
    next: Duration,
    cap: Duration,
    salt: u64,
}

impl Backoff {
    /// A back-off whose jitter is drawn from `salt` (the waiter's thread number, say), so
    /// that waiters that started together do not look together.
    pub(crate) fn new(salt: u64) -> Self {
        Backoff {
            next: FIRST,
            cap: CAP,
            salt,
        }
    }

    /// The back-off of a waiter whose lock key the server watches: from 1 s to 8 s, a
    /// handful of looks behind a lease of a few seconds.
    pub(crate) fn tracked(salt: u64) -> Self {
        Backoff {
            next: FIRST_TRACKED,
            cap: CAP_TRACKED,
            salt,
        }
    }

    /// The sleep before the next look, for a waiter of a manager that waits for `waiting`
    /// locks: the current back-off plus up to a quarter of it, then doubled up to the cap.
    /// Never shorter than the waiter's share of [`LOOKS_PER_SECOND`], from the first look on.
    pub(crate) fn next(&mut self, waiting: usize) -> Duration {
        let share = (Duration::from_secs(1) / LOOKS_PER_SECOND)
            .saturating_mul(u32::try_from(waiting).unwrap_or(u32::MAX));
        let cap = self.cap.max(share);
        let current = self.next.max(share).min(cap);
        self.salt = splitmix64(self.salt);
        let jitter = current / 4 * (self.salt % 1024) as u32 / 1024;
        self.next = current.saturating_mul(2).min(cap);
        current + jitter
    }
}

/// Redisson's default spin-lock back-off (`LockOptions.ExponentialBackOff`): 1 ms first, then
/// each sleep twice the last plus a random 0 to n - 1 ms at the n-th doubling, at most 128 ms.
/// Redisson's `RSpinLock` waiters use it, and so do ours: nothing announces a spin lock's
/// release, so this alone decides how soon a waiter finds it (within about the cap).
pub(crate) struct SpinBackoff {
    next_ms: u64,
    doublings: u64,
    salt: u64,
}

impl SpinBackoff {
    const FIRST_MS: u64 = 1;
    const CAP_MS: u64 = 128;

    /// A back-off whose jitter is drawn from `salt` (see [`Backoff::new`]).
    pub(crate) fn new(salt: u64) -> Self {
        SpinBackoff {
            next_ms: Self::FIRST_MS,
            doublings: 0,
            salt,
        }
    }

    /// The sleep before the next look.
    pub(crate) fn next(&mut self) -> Duration {
        let current = self.next_ms;
        if current < Self::CAP_MS {
            self.doublings += 1;
            self.salt = splitmix64(self.salt);
            let jitter = self.salt % self.doublings;
            self.next_ms = (current * 2 + jitter).min(Self::CAP_MS);
        }
        Duration::from_millis(current)
    }
}

/// One step of splitmix64: enough randomness for jitter, with no dependency.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_doubles_from_a_tenth_of_a_second_to_the_cap_with_up_to_a_quarter_more() {
        let mut backoff = Backoff::new(7);
        let sleeps: Vec<Duration> = (0..8).map(|_| backoff.next(1)).collect();
        let bases = [100, 200, 400, 800, 1600, 2000, 2000, 2000];
        for (sleep, base) in sleeps.iter().zip(bases) {
            let base = Duration::from_millis(base);
            assert!(
                *sleep >= base && *sleep <= base + base / 4,
                "{sleep:?} for {base:?}"
            );
        }
    }

    #[test]
    fn a_tracked_waiters_safety_net_doubles_from_a_second_to_eight() {
        let mut backoff = Backoff::tracked(3);
        let bases = [1, 2, 4, 8, 8];
        for base in bases {
            let (sleep, base) = (backoff.next(1), Duration::from_secs(base));
            assert!(sleep >= base && sleep <= base + base / 4, "{sleep:?}");
        }
    }

    #[test]
    fn with_many_waiting_locks_every_look_waits_for_its_share() {
        // 10,000 locks at 1,000 looks a second: each looks every 10 s, the first time too.
        let mut backoff = Backoff::new(1);
        for _ in 0..5 {
            let sleep = backoff.next(10_000);
            assert!(sleep >= Duration::from_secs(10) && sleep <= Duration::from_millis(12_500));
        }
        // 1,000 locks: a second at first, then the usual cap.
        let mut backoff = Backoff::new(1);
        let first = backoff.next(1_000);
        assert!(first >= Duration::from_secs(1) && first <= Duration::from_millis(1_250));
        let second = backoff.next(1_000);
        assert!(second >= Duration::from_secs(2) && second <= Duration::from_millis(2_500));
    }

    #[test]
    fn the_spin_back_off_is_redissons_from_a_millisecond_to_128() {
        for salt in 0..64 {
            let mut backoff = SpinBackoff::new(salt);
            let sleeps: Vec<u64> = (0..12).map(|_| backoff.next().as_millis() as u64).collect();
            assert_eq!(sleeps[0], 1, "{sleeps:?}");
            for pair in sleeps.windows(2) {
                // Doubled, plus less than one ms per doubling so far, capped.
                let doubled = pair[0] * 2;
                assert!(
                    pair[1] == 128 || (pair[1] >= doubled && pair[1] < doubled + 12),
                    "{sleeps:?}"
                );
            }
            assert!(sleeps[..7].iter().all(|&ms| ms < 128), "{sleeps:?}");
            assert_eq!(sleeps[11], 128, "{sleeps:?}");
        }
    }

    #[test]
    fn waiters_started_together_spread_out() {
        let sleeps: Vec<Duration> = (0..16).map(|t| Backoff::new(t).next(1)).collect();
        let distinct: std::collections::HashSet<_> = sleeps.iter().collect();
        assert!(distinct.len() > 8, "{sleeps:?}");
    }
}
