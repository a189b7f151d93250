//! Load generator: runs workloads W1–W6 of BENCHMARKS.md (and W6s, W6 on a spin lock), W7
//! (the fair lock's handoff) and W8 (a read-write lock's throughput) against one Redis server
//! and prints one table with each figure, the floor it is measured against (in the same run) and the ratio.
//! A row measures semaphore acquire/release cycles the same way W1 measures locks, and the
//! last ones a Redlock over 5 masters (this server and 4 throwaway ones) against one master,
//! on loopback and with every reply delayed as by a network (`redlock-net`).
//!
//! ```sh
//! cargo run --release --example loadgen            # the full run (about a minute)
//! cargo run --release --example loadgen -- --quick # seconds; CI's smoke test
//! ```
//!
//! It uses `REDIS_URL` when a server answers there, else starts a throwaway `redis-server`.
//! Correctness is checked in every mode (exact counters, no lost lock, every waiter served)
//! and a violation exits non-zero; timings are reported, never asserted.
//!
//! W6 runs this binary again as child processes (`--w6-child`, see [`w6_child`]).
//!
//! One module per workload family (`w1` … `w8`, `w6s`, `redlock`, `semaphores`, `cluster`),
//! the floors they share (`raw_lock`, `redisson_raw`, `handoff_floors`), and the shared
//! parts: `args` (the command line and sizes), `measure` (what is measured and checked),
//! `table` (the output).
//! The servers come from the test fixtures (`redis_rlock_testkit`).

mod args;
mod cluster;
mod handoff_floors;
mod measure;
mod raw_lock;
mod redisson_raw;
mod redlock;
mod semaphores;
mod table;
mod w1;
mod w2;
mod w3;
mod w4;
mod w5;
mod w6;
mod w6s;
mod w7;
mod w8;

use std::process::ExitCode;
use std::thread;

use redis_rlock_testkit as support;

use crate::args::Args;
use crate::cluster::cluster_workloads;
use crate::measure::{ping_round_trips, VIOLATIONS};
use crate::redlock::{redlock_cycles, NETWORK_DELAYS};
use crate::semaphores::{permit_semaphore_cycles, semaphore_cycles};
use crate::table::{micros, print_table, row};
use crate::w1::w1_uncontended;
use crate::w2::w2_contended;
use crate::w3::{w3_handoff, w3_in_process};
use crate::w4::w4_watchdog_scale;
use crate::w5::w5_waiter_scale;
use crate::w6::{w6_child, w6_fairness, W6_CHILD};
use crate::w6s::w6s_spin_fairness;
use crate::w7::w7_fair_handoff;
use crate::w8::w8_read_write;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(W6_CHILD) {
        return w6_child();
    }
    let args = Args::parse();
    let (quick, scale, wants) = (args.quick, &args.scale, |name: &str| args.wants(name));
    let (url, _server) = support::url_from_env_or_start();
    let mut conn = support::nodelay_conn(&url);
    println!(
        "redis-rlock loadgen ({} mode), redis {}, {} CPUs",
        if quick { "quick" } else { "full" },
        redis_version(&mut conn),
        thread::available_parallelism().map_or(0, |n| n.get())
    );

    let mut rows = Vec::new();
    let ping = ping_round_trips(&mut conn, if quick { 200 } else { 2_000 });
    rows.push(row("floor", "PING round trip p50", micros(ping.p50)));
    if wants("w1") {
        rows.extend(w1_uncontended(&url, scale));
    }
    if wants("w2") {
        for threads in [4, 16] {
            rows.extend(w2_contended(&url, scale, threads));
        }
    }
    if wants("w6") {
        rows.extend(w6_fairness(&url, scale));
    }
    if wants("w6s") {
        rows.extend(w6s_spin_fairness(&url, scale));
    }
    if wants("w3") {
        rows.extend(w3_handoff(&url, scale));
        rows.extend(w3_in_process(&url, scale));
    }
    if wants("w7") {
        rows.extend(w7_fair_handoff(&url, scale));
    }
    if wants("w8") {
        rows.extend(w8_read_write(&url, scale));
    }
    if wants("w4") {
        rows.extend(w4_watchdog_scale(&url, scale));
    }
    if wants("w5") {
        rows.extend(w5_waiter_scale(&url, scale));
    }
    if wants("semaphore") {
        rows.extend(semaphore_cycles(&url, scale));
    }
    if wants("permit-semaphore") {
        rows.extend(permit_semaphore_cycles(&url, scale));
    }
    if wants("redlock") {
        rows.extend(redlock_cycles(&url, scale, None));
    }
    if wants("redlock-net") {
        for network in NETWORK_DELAYS {
            rows.extend(redlock_cycles(&url, scale, Some(network)));
        }
    }
    if wants("cluster") {
        rows.extend(cluster_workloads(scale));
    }
    print_table(&rows);
    let violations = VIOLATIONS.lock().unwrap();
    if violations.is_empty() {
        println!("\nno correctness violation (exact counters, no lock lost, every waiter served)");
        ExitCode::SUCCESS
    } else {
        eprintln!("\n{} correctness violations", violations.len());
        ExitCode::FAILURE
    }
}

/// The server's `redis_version` (Valkey reports its Redis compatibility level there).
fn redis_version(conn: &mut redis::Connection) -> String {
    redis::cmd("INFO")
        .arg("server")
        .query::<String>(conn)
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:").map(str::to_owned))
        })
        .unwrap_or_default()
}
