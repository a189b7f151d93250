//! The checker run on a made-up history with one of each violation, before any real row: a
//! check that stopped counting would otherwise pass every row unnoticed.

use super::checker::check;
use super::history::{End, Fail, Hold, Kind, Record, Write};
use super::store::Entry;

fn hold(kind: Kind, process: usize, times: (u64, u64, u64), token: u64, end: End) -> Record {
    Record::Hold(Hold {
        kind,
        owner: format!("{process}:0"),
        process,
        call_start: times.0,
        acquired: times.1,
        left: times.2,
        token: (token > 0).then_some(token),
        write: Write::None,
        end,
    })
}

/// Panics when a check misses its planted violation (or finds one that is not there).
pub fn run() {
    use Kind::{Fenced, Plain, Spin, SpinOnPlain, StringLock};
    let worker_0 = vec![
        hold(Plain, 0, (0, 10, 50), 0, End::Held),
        hold(Fenced, 0, (60, 70, 80), 10, End::Held),
        hold(Fenced, 0, (90, 95, 99), 11, End::Held),
        hold(Plain, 0, (2000, 2100, 2200), 0, End::Held),
        hold(Spin, 0, (3000, 3010, 3050), 0, End::Held),
        hold(StringLock, 0, (4000, 4010, 4050), 0, End::Held),
        hold(SpinOnPlain, 0, (5000, 5010, 5050), 0, End::Held),
    ];
    let worker_1 = vec![
        // Overlaps worker 0's first plain hold, neither told: one untold overlap.
        hold(Plain, 1, (0, 20, 40), 0, End::Held),
        // Began after token 11 was issued, got 7: a regression; 11 again: a duplicate.
        hold(Fenced, 1, (100, 110, 120), 7, End::Held),
        hold(Fenced, 1, (130, 140, 150), 11, End::Held),
        // Overlaps worker 0's last plain hold, and was told: documented.
        hold(Plain, 1, (2000, 2150, 2300), 0, End::Lost),
        // Overlaps worker 0's spin hold: an untold overlap of the spin lock.
        hold(Spin, 1, (3000, 3020, 3060), 0, End::Held),
        // Inside worker 0's spin hold too, but another lock (another name): no overlap.
        hold(Plain, 1, (3000, 3030, 3040), 0, End::Held),
        // Overlaps worker 0's string hold: an untold overlap of the string lock.
        hold(StringLock, 1, (4000, 4020, 4060), 0, End::Held),
        // Overlaps worker 0's spin hold of the plain lock's name: an untold overlap of the
        // plain lock, taken by two kinds.
        hold(Plain, 1, (5000, 5020, 5060), 0, End::Held),
        // A long wait that began during the fault and failed long before its wait ended.
        Record::Fail(Fail {
            kind: Kind::Waited,
            process: 1,
            call_start: 950,
            at: 980,
            reason: "error:planted".into(),
        }),
    ];
    let ledger =
        [(3, true), (2, true), (4, false)].map(|(token, accepted)| Entry { token, accepted });
    // Healed at 1000; worker 0 acquires 1100 later, worker 1 1150 later: bound 1120.
    let v = check(&[worker_0, worker_1], &ledger, &[(900, 1000)], 1120);
    let found = [
        v.overlaps,
        v.told_overlaps,
        v.duplicate_tokens,
        v.token_regressions,
        v.stale_accepted,
        v.liveness_misses,
        v.refused,
        v.waiter_failures,
        v.started_in_fault,
    ];
    assert_eq!(
        found,
        [4, 1, 1, 1, 1, 1, 1, 1, 1],
        "the checker's self-test (untold over the three locks, told, duplicates, regressions, stale, liveness, \
         refused, long waits failed, long waits started in a fault)"
    );
    assert_eq!(v.worst_recovery, 1150, "worst recovery in the self-test");
    assert_eq!(
        v.overlaps_by_lock,
        [("plain", 2, 1), ("spin", 1, 0), ("string", 1, 0)],
        "the checker's self-test: (kind, untold, told) overlaps lock by lock"
    );
}
