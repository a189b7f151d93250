//! W1 of python/bench/bench.py done from Rust, for the same run's table: one thread, acquire +
//! release of one uncontended lock, `CYCLES` times; prints the p50 and p99 cycle in µs.
//!
//! `cargo build --release -p redis-rlock-python --example rust_w1`, then
//! `target/release/examples/rust_w1 URL CYCLES` (bench.py runs it when given `--rust-w1`).

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: rust_w1 URL CYCLES")?;
    let cycles: usize = args.next().ok_or("usage: rust_w1 URL CYCLES")?.parse()?;
    let manager = redis_rlock::LockManager::new(&url)?;
    let lock = manager.get_lock(&format!("bench:rust-w1:{}", std::process::id()));
    for _ in 0..cycles / 10 {
        lock.lock()?.unlock()?;
    }
    let mut samples = Vec::with_capacity(cycles);
    for _ in 0..cycles {
        let start = Instant::now();
        lock.lock()?.unlock()?;
        samples.push(start.elapsed().as_secs_f64());
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((q * cycles as f64) as usize).min(cycles - 1)] * 1e6;
    println!("{:.1} {:.1}", at(0.5), at(0.99));
    manager.shutdown();
    Ok(())
}
