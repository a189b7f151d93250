//! The table a campaign prints (and RELIABILITY.md keeps): one row per topology × fault.

use super::run::RowResult;

const HEADER: &str = "| topology | fault | faults | holds | failed acquires | refused writes | duplicate tokens | token regressions | stale writes accepted | overlaps, untold | overlaps, told (documented) | liveness misses | long waits failed (started in a fault) | keys left | workers failed or hung | worst recovery | violations |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|";

pub fn table(rows: &[RowResult]) -> String {
    let mut out = String::from(HEADER);
    for row in rows {
        out.push('\n');
        out.push_str(&line(row));
    }
    out
}

fn line(row: &RowResult) -> String {
    let v = match &row.verdict {
        Err(reason) => {
            let blanks = " |".repeat(14);
            return format!("| {} | {} | {reason} |{blanks}", row.topology, row.fault);
        }
        Ok(v) => v,
    };
    let documented = |n: usize| match (n, v.tokens_documented) {
        (0, _) | (_, false) => n.to_string(),
        (n, true) => format!("{n} (documented)"),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} s | **{}** |",
        row.topology,
        row.fault,
        row.injected,
        v.holds,
        v.fails,
        v.refused,
        documented(v.duplicate_tokens),
        documented(v.token_regressions),
        v.stale_accepted,
        by_lock(v.overlaps, v.overlaps_by_lock.iter().map(|o| (o.0, o.1))),
        by_lock(v.told_overlaps, v.overlaps_by_lock.iter().map(|o| (o.0, o.2))),
        v.liveness_misses,
        waiters(v),
        v.leftovers,
        v.hung_workers,
        v.worst_recovery as f64 / 1e9,
        v.violations()
    )
}

/// A total, and which locks it came from when it is not 0: "3 (spin 1, string 2)".
fn by_lock<'a>(total: usize, counts: impl Iterator<Item = (&'a str, usize)>) -> String {
    let parts: Vec<String> = counts
        .filter(|&(_, n)| n > 0)
        .map(|(lock, n)| format!("{lock} {n}"))
        .collect();
    match total {
        0 => "0".into(),
        _ => format!("{total} ({})", parts.join(", ")),
    }
}

/// Long waits that failed inside their wait, marked "(not promised)" where the README does not
/// promise that they ride the fault out, and the calls started during a fault.
fn waiters(v: &super::checker::Verdict) -> String {
    let promised = if v.waiters_promised || v.waiter_failures == 0 {
        ""
    } else {
        " (not promised)"
    };
    format!("{}{promised} ({})", v.waiter_failures, v.started_in_fault)
}

/// Violations over every row that ran.
pub fn total_violations(rows: &[RowResult]) -> usize {
    rows.iter()
        .filter_map(|r| r.verdict.as_ref().ok())
        .map(|v| v.violations())
        .sum()
}
