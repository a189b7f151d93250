//! The checker over a row's recorded history. Each check counts violations; none of them
//! looks at what the library says about itself beyond what a holder is told (lost or not).

use std::collections::HashMap;

use super::history::{End, Hold, Kind, Record, LOCKS};
use super::store::Entry;

/// What a row's history shows.
#[derive(Default, Debug)]
pub struct Verdict {
    /// Critical sections entered (both locks).
    pub holds: usize,
    /// Acquires that returned without the lock.
    pub fails: usize,
    /// Fenced writes the store refused (a holder whose token was superseded).
    pub refused: usize,
    /// Fencing tokens handed to more than one hold (each extra hold counts).
    pub duplicate_tokens: usize,
    /// A fenced acquire that began after another had returned, yet got a lower token.
    pub token_regressions: usize,
    /// Writes the store accepted although a token at least as high was accepted before.
    pub stale_accepted: usize,
    /// Holds of one lock (plain, spin or string; the plain one also taken as a spin lock) by
    /// different owners inside each other's lease while both holders were never told they
    /// lost it: what the guarantees rule out.
    pub overlaps: usize,
    /// Holds that overlapped another of the same lock and whose holder was told (lost signal
    /// or `NotHeld`): the README's documented cases (a paused holder, a restart without
    /// persistence).
    pub told_overlaps: usize,
    /// `overlaps` and `told_overlaps` lock by lock: (lock, untold, told).
    pub overlaps_by_lock: Vec<(&'static str, usize, usize)>,
    /// Processes that did not acquire within the bound after a heal.
    pub liveness_misses: usize,
    /// Calls with a long wait (a waiter's, a fresh call's) that failed inside it: on Sentinel
    /// and Cluster, where the README promises that a waiter rides out a failover within its
    /// wait, a violation (see `waiters_promised`).
    pub waiter_failures: usize,
    /// Calls with a long wait that started during a fault (between its start and its heal).
    pub started_in_fault: usize,
    /// The row's fault is a failover (or a master that hangs) on Sentinel or Cluster: waiters
    /// failing inside their wait break the README's promise.
    pub waiters_promised: bool,
    /// Longest time from a heal to the last process's next acquire (ns).
    pub worst_recovery: u64,
    /// Keys left on the masters after everyone stopped (see `leftovers`).
    pub leftovers: usize,
    /// Worker processes that failed, or did not stop when asked and were killed.
    pub hung_workers: usize,
    /// The fault is one the README says forgets fencing counters (a restart without
    /// persistence): duplicate and regressed tokens are then counted but documented.
    pub tokens_documented: bool,
    /// Examples of what the checks found.
    pub notes: Vec<String>,
}

impl Verdict {
    pub fn violations(&self) -> usize {
        let tokens = if self.tokens_documented {
            0
        } else {
            self.duplicate_tokens + self.token_regressions
        };
        tokens
            + self.stale_accepted
            + self.overlaps
            + self.liveness_misses
            + if self.waiters_promised {
                self.waiter_failures
            } else {
                0
            }
            + self.leftovers
            + self.hung_workers
    }
}

/// Checks `histories` (one per worker process) against the store's `ledger` and the faults'
/// (began, healed) times; `bound` is the liveness bound (ns).
pub fn check(
    histories: &[Vec<Record>],
    ledger: &[Entry],
    faults: &[(u64, u64)],
    bound: u64,
) -> Verdict {
    let origin = faults.first().map_or(0, |f| f.0);
    let mut notes = Notes::new(origin);
    for &(began, healed) in faults {
        let (began, healed) = (notes.t(began), notes.t(healed));
        notes
            .lines
            .push(format!("fault: began {began}, healed {healed}"));
    }
    let heals: Vec<u64> = faults.iter().map(|f| f.1).collect();
    let holds: Vec<&Hold> = histories
        .iter()
        .flatten()
        .filter_map(|r| match r {
            Record::Hold(h) => Some(h),
            Record::Fail(_) => None,
        })
        .collect();
    let fenced: Vec<&Hold> = holds
        .iter()
        .copied()
        .filter(|h| h.kind == Kind::Fenced)
        .collect();
    let overlaps_by_lock: Vec<(&str, usize, usize)> = LOCKS
        .iter()
        .map(|&lock| {
            let same: Vec<&Hold> = holds
                .iter()
                .copied()
                .filter(|h| h.kind.lock() == Some(lock))
                .collect();
            let (untold, told) = overlaps(&same, lock, &mut notes);
            (lock, untold, told)
        })
        .collect();
    // Liveness is about the short rounds: a long wait's hold says less about recovery.
    let short: Vec<&Hold> = holds
        .iter()
        .copied()
        .filter(|h| !h.kind.waits_long())
        .collect();
    let (liveness_misses, worst_recovery) = liveness(&short, histories.len(), &heals, bound);
    let (waiter_failures, started_in_fault) = long_waits(histories, faults, &mut notes);
    Verdict {
        holds: holds.len(),
        fails: histories.iter().flatten().count() - holds.len(),
        refused: ledger.iter().filter(|e| !e.accepted).count(),
        duplicate_tokens: duplicate_tokens(&fenced, &mut notes),
        token_regressions: token_regressions(&fenced, &mut notes),
        stale_accepted: stale_accepted(ledger),
        overlaps: overlaps_by_lock.iter().map(|o| o.1).sum(),
        told_overlaps: overlaps_by_lock.iter().map(|o| o.2).sum(),
        overlaps_by_lock,
        liveness_misses,
        worst_recovery,
        waiter_failures,
        started_in_fault,
        notes: notes.lines,
        ..Verdict::default()
    }
}

/// A few examples of what each check found, with times relative to the first fault.
struct Notes {
    origin: u64,
    lines: Vec<String>,
}

impl Notes {
    fn new(origin: u64) -> Self {
        Notes {
            origin,
            lines: Vec::new(),
        }
    }

    /// `at` as seconds since the first fault began (negative before it).
    fn t(&self, at: u64) -> String {
        format!("{:+.3} s", (at as f64 - self.origin as f64) / 1e9)
    }

    /// Keeps up to 3 examples per kind of finding.
    fn add(&mut self, kind: &str, text: String) {
        if self.lines.iter().filter(|l| l.starts_with(kind)).count() < 3 {
            self.lines.push(format!("{kind}: {text}"));
        }
    }

    fn hold(&self, h: &Hold) -> String {
        format!(
            "{} {} token {:?} acquired {} left {} ({:?})",
            h.kind,
            h.owner,
            h.token,
            self.t(h.acquired),
            self.t(h.left),
            h.end
        )
    }
}

fn duplicate_tokens(fenced: &[&Hold], notes: &mut Notes) -> usize {
    let mut seen: HashMap<u64, &Hold> = HashMap::new();
    let mut duplicates = 0;
    for h in fenced {
        let Some(token) = h.token else { continue };
        if let Some(first) = seen.insert(token, h) {
            duplicates += 1;
            notes.add(
                "duplicate token",
                format!("{} and {}", notes.hold(first), notes.hold(h)),
            );
        }
    }
    duplicates
}

/// The counter is one Redis key: an INCR that began after another returned must see it. So a
/// fenced acquire that began after another acquire had returned must get a higher token.
fn token_regressions(fenced: &[&Hold], notes: &mut Notes) -> usize {
    let mut by_return: Vec<(u64, u64)> = fenced
        .iter()
        .filter_map(|h| Some((h.acquired, h.token?)))
        .collect();
    by_return.sort_unstable();
    // Highest token among the acquires that returned up to each point.
    let mut highest = Vec::with_capacity(by_return.len());
    let mut max = 0;
    for &(_, token) in &by_return {
        max = max.max(token);
        highest.push(max);
    }
    let mut regressions = 0;
    for h in fenced {
        let returned_before = by_return.partition_point(|&(at, _)| at < h.call_start);
        let Some(&high) = returned_before.checked_sub(1).and_then(|i| highest.get(i)) else {
            continue;
        };
        if h.token.is_some_and(|t| t < high) {
            regressions += 1;
            let began = notes.t(h.call_start);
            let text = format!(
                "{}, whose acquire began {began} after token {high} was issued",
                notes.hold(h)
            );
            notes.add("token regression", text);
        }
    }
    regressions
}

/// Replays the store's ledger: a write is stale when a token at least as high was accepted
/// before it. (The store's script refuses those; this checks that it did.)
fn stale_accepted(ledger: &[Entry]) -> usize {
    let mut highest = 0;
    let mut stale = 0;
    for entry in ledger.iter().filter(|e| e.accepted) {
        if entry.token <= highest {
            stale += 1;
        }
        highest = highest.max(entry.token);
    }
    stale
}

/// Holds of `lock` (one name, whichever kind took it) by different owners whose
/// [acquired, left] intervals intersect: (pairs where neither holder was told, holds that
/// were told they were lost and overlapped another). The
/// recorded interval lies inside the real hold (entered after the acquire returned, left
/// before the unlock was sent), so an intersection here is a real one.
fn overlaps(holds: &[&Hold], lock: &str, notes: &mut Notes) -> (usize, usize) {
    let mut sorted: Vec<&Hold> = holds.to_vec();
    sorted.sort_by_key(|h| h.acquired);
    let mut silent = 0;
    let mut told = vec![false; sorted.len()];
    for (i, a) in sorted.iter().enumerate() {
        for (j, b) in sorted.iter().enumerate().skip(i + 1) {
            if b.acquired >= a.left {
                break;
            }
            if a.owner == b.owner {
                continue;
            }
            // A failed unlock (`Unknown`) told its holder nothing either.
            if a.end != End::Lost && b.end != End::Lost {
                silent += 1;
                let text = format!("{} and {}", notes.hold(a), notes.hold(b));
                notes.add(&format!("untold overlap ({lock})"), text);
            }
            told[i] |= a.end == End::Lost;
            told[j] |= b.end == End::Lost;
        }
    }
    (silent, told.iter().filter(|&&t| t).count())
}

/// For each heal, each process's first acquire after it: (processes later than `bound` or
/// never, the longest wait).
fn liveness(holds: &[&Hold], processes: usize, heals: &[u64], bound: u64) -> (usize, u64) {
    let (mut misses, mut worst) = (0, 0);
    for &heal in heals {
        for process in 0..processes {
            let next = holds
                .iter()
                .filter(|h| h.process == process && h.acquired >= heal)
                .map(|h| h.acquired - heal)
                .min();
            match next {
                Some(wait) if wait <= bound => worst = worst.max(wait),
                Some(wait) => {
                    misses += 1;
                    worst = worst.max(wait);
                }
                None => {
                    misses += 1;
                    worst = worst.max(bound);
                }
            }
        }
    }
    (misses, worst)
}

/// The calls with a long wait: (those that failed inside it, those that started during a
/// fault). A call that returned "not acquired" at the end of its wait did not fail inside it.
fn long_waits(
    histories: &[Vec<Record>],
    faults: &[(u64, u64)],
    notes: &mut Notes,
) -> (usize, usize) {
    let wait = super::worker::LONG_WAIT.as_nanos() as u64;
    let in_fault = |at: u64| {
        faults
            .iter()
            .any(|&(began, healed)| (began..=healed).contains(&at))
    };
    let (mut failed, mut started) = (0, 0);
    for record in histories.iter().flatten() {
        let (kind, call_start) = match record {
            Record::Hold(h) => (h.kind, h.call_start),
            Record::Fail(f) => (f.kind, f.call_start),
        };
        if !kind.waits_long() {
            continue;
        }
        started += usize::from(in_fault(call_start));
        let Record::Fail(f) = record else { continue };
        if f.at.saturating_sub(f.call_start) < wait {
            failed += 1;
            let text = format!(
                "{} call of process {} began {}, failed {}: {}",
                f.kind,
                f.process,
                notes.t(f.call_start),
                notes.t(f.at),
                f.reason
            );
            notes.add("waiter failed inside its wait", text);
        }
    }
    (failed, started)
}
