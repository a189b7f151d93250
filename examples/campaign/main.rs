//! A fault campaign in the spirit of Jepsen (issue 23): worker processes × threads take a
//! fenced lock (writing their tokens to a store that refuses stale ones) and in turn a plain,
//! a spin and a string lock (and a spin lock on the plain lock's name),
//! while the driver breaks the deployment under them: failovers, killed and stopped masters,
//! a stopped client, restarts, partitions in network namespaces, slot migration. A checker
//! then reads every recorded history. See RELIABILITY.md for the table and what it means.
//!
//! ```sh
//! cargo run --release --example campaign              # short mode (CI), about 3.5 minutes
//! cargo run --release --example campaign -- --long    # every fault, repeated: about 40 minutes
//! cargo run --release --example campaign -- --only cluster   # rows whose names contain it
//! cargo run --release --example campaign -- --long --only "cluster 3+3 kill" --only "random"
//!                                                      # rows that contain any of them
//! cargo run --release --example campaign -- --long --only "=cluster 3+3 partition node"
//!                                                      # "=": that row exactly
//! cargo run --release --example campaign -- --no-replica-sync # what asynchronous replication does
//! ```
//!
//! Exits 1 when any row shows a violation or fails to run, 2 when `--only` matches nothing,
//! 0 otherwise. Every server is its own, on loopback
//! (or on the veth pair it makes); partitions need root, and are reported "not run" without.

use redis_rlock_testkit as support;

mod checker;
mod clock;
mod deployment;
mod faults;
mod history;
mod netns;
mod plan;
mod report;
mod run;
mod selftest;
mod store;
mod worker;
mod workers;

use std::process::ExitCode;
use std::time::Instant;

use deployment::Topology;
use faults::Fault;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        let parsed = worker::Args::parse(&args[1..]).expect("worker arguments from the driver");
        worker::run(parsed);
        return ExitCode::SUCCESS;
    }
    let mode = if args.iter().any(|a| a == "--long") {
        &plan::LONG
    } else {
        &plan::SHORT
    };
    let only: Vec<&str> = args
        .windows(2)
        .filter(|pair| pair[0] == "--only")
        .map(|pair| pair[1].as_str())
        .collect();
    let replica_sync = !args.iter().any(|a| a == "--no-replica-sync");
    drive(mode, &only, replica_sync)
}

/// Runs the rows of `mode` whose "topology fault" matches one of `only` (all without any).
fn drive(mode: &plan::Mode, only: &[&str], replica_sync: bool) -> ExitCode {
    let started = Instant::now();
    selftest::run();
    let rows: Vec<_> = plan::rows(mode)
        .into_iter()
        .filter(|(t, f)| only.is_empty() || only.iter().any(|o| matches(o, &format!("{t} {f}"))))
        .collect();
    if rows.is_empty() {
        eprintln!("no row matches {only:?}");
        return ExitCode::from(2);
    }
    let partitions = [
        Fault::ClientPartition,
        Fault::NodePartition,
        Fault::MinorityPartition,
    ];
    let netns = if rows.iter().any(|(_, f)| partitions.contains(f)) {
        netns::Netns::create()
            .map_err(|e| eprintln!("no network namespace, partitions not run: {e}"))
            .ok()
    } else {
        None
    };
    let store = start_store(netns.as_ref());
    let shared = run::Shared {
        mode,
        store: &store,
        netns: netns.as_ref(),
        replica_sync,
    };
    let results: Vec<run::RowResult> = rows
        .into_iter()
        .enumerate()
        .map(|(index, (topology, fault))| run_and_show(&shared, topology, fault, index))
        .collect();
    let sync = if replica_sync {
        ""
    } else {
        ", replica sync off"
    };
    println!(
        "campaign, {} mode{sync}, {} s:\n\n{}",
        mode.name,
        started.elapsed().as_secs(),
        report::table(&results)
    );
    let violations = report::total_violations(&results);
    let failed = results
        .iter()
        .filter(|r| r.verdict.as_ref().err() == Some(&run::HARNESS_FAILED))
        .count();
    println!("\n{violations} violations, {failed} rows where the campaign itself failed");
    if violations == 0 && failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Whether `row` ("topology fault") is selected by `only`: the row itself after a "=", so
/// that "partition node" can be run without "partition node+client"; else any part of it.
fn matches(only: &str, row: &str) -> bool {
    match only.strip_prefix('=') {
        Some(exact) => row == exact,
        None => row.contains(only),
    }
}

/// The fenced store, also on the veth pair when there is one (for the worker inside).
fn start_store(netns: Option<&netns::Netns>) -> support::RedisServer {
    match netns {
        Some(ns) => support::RedisServer::start_with(&[
            "--bind",
            "127.0.0.1",
            &ns.host_addr(),
            "--protected-mode",
            "no",
        ]),
        None => support::RedisServer::start(),
    }
}

/// Runs one row and shows its line and the checker's examples on stderr.
fn run_and_show(
    shared: &run::Shared,
    topology: Topology,
    fault: Fault,
    index: usize,
) -> run::RowResult {
    eprintln!("campaign ({}): {topology} × {fault} ...", shared.mode.name);
    // A fault helper that gives up (a deployment that never settles) panics: the row says
    // so, the others still run, and the campaign fails.
    let row = std::panic::AssertUnwindSafe(|| run::run_row(shared, topology, fault, index));
    let result = std::panic::catch_unwind(row).unwrap_or(run::RowResult {
        topology,
        fault,
        injected: 0,
        verdict: Err(run::HARNESS_FAILED),
        seconds: 0,
    });
    let line = report::table(std::slice::from_ref(&result));
    eprintln!("  {}", line.lines().last().unwrap_or(""));
    eprintln!("  ({} s)", result.seconds);
    if let Ok(verdict) = &result.verdict {
        for note in &verdict.notes {
            eprintln!("  {note}");
        }
    }
    result
}
