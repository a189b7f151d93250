//! A flash sale ("seckill"): threads in several processes sell a limited stock under one
//! distributed lock, with a deliberately non-atomic read-modify-write of the stock. Without
//! the lock they would oversell; with it the books balance exactly. It also prints each
//! process's share of the items sold: the lock should serve all processes, not only the one
//! whose threads happen to be in line.
//!
//! ```text
//! cargo run --example seckill
//! ```
//!
//! Uses `REDIS_URL` (default `redis://127.0.0.1:6379/`); when nothing answers there it starts
//! a throwaway `redis-server` and says so. It only touches keys under `seckill:`.

mod local_redis;

use std::process::{Command, ExitCode, Stdio};
use std::thread;

use redis::Commands;
use redis_rlock::LockManager;

const STOCK: i64 = 200;
const PROCESSES: usize = 3;
const THREADS_PER_PROCESS: usize = 4;
const LOCK: &str = "seckill:lock";
const STOCK_KEY: &str = "seckill:stock";
const SOLD_KEY: &str = "seckill:sold";

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--worker") {
        let url = std::env::var("REDIS_URL").expect("the parent passes REDIS_URL");
        let id = std::env::args().nth(2).unwrap_or_default();
        let sold = run_shop(&url);
        // Read by the parent, which prints every process's share.
        println!("SOLD {id} {sold}");
        return ExitCode::SUCCESS;
    }

    let (url, _server) = local_redis::url_from_env_or_start();
    let mut conn = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("connect to Redis");
    let _: () = conn.del(&[STOCK_KEY, SOLD_KEY, LOCK]).unwrap();
    let _: () = conn.set(STOCK_KEY, STOCK).unwrap();
    println!(
        "selling {STOCK} items: {PROCESSES} processes x {THREADS_PER_PROCESS} threads contend on lock {LOCK:?}"
    );

    let exe = std::env::current_exe().expect("own path");
    let workers: Vec<_> = (1..PROCESSES)
        .map(|id| {
            Command::new(&exe)
                .args(["--worker", &id.to_string()])
                .env("REDIS_URL", &url)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a worker process")
        })
        .collect();
    let sold_here = run_shop(&url);
    let mut sold_by = vec![sold_here];
    for worker in workers {
        // A worker's output is one short line, so it cannot fill the pipe while we sell.
        let output = worker.wait_with_output().expect("worker exit status");
        let sold = String::from_utf8_lossy(&output.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("SOLD "))
            .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<i64>().ok());
        match sold {
            Some(sold) if output.status.success() => sold_by.push(sold),
            _ => {
                eprintln!("a worker process failed: {}", output.status);
                return ExitCode::FAILURE;
            }
        }
    }
    let total: i64 = sold_by.iter().sum();
    for (id, sold) in sold_by.iter().enumerate() {
        let this_one = if id == 0 { " (this one)" } else { "" };
        println!(
            "  process {id}{this_one}: sold {sold:>3} ({:.1} % of the items sold)",
            *sold as f64 / total.max(1) as f64 * 100.0
        );
    }

    let stock: i64 = conn.get(STOCK_KEY).unwrap();
    let sold: i64 = conn.get(SOLD_KEY).unwrap_or(0);
    println!("stock left: {stock}, items sold: {sold}");
    let _: () = conn.del(&[STOCK_KEY, SOLD_KEY]).unwrap();
    if stock == 0 && sold == STOCK {
        println!("nothing was oversold: every item was sold exactly once");
        ExitCode::SUCCESS
    } else {
        eprintln!("OVERSOLD or lost sales: expected 0 left and {STOCK} sold");
        ExitCode::FAILURE
    }
}

/// Sells from this process with several threads until the stock is gone; returns how many
/// this process sold.
fn run_shop(url: &str) -> i64 {
    let manager = LockManager::new(url).expect("lock manager");
    let threads: Vec<_> = (0..THREADS_PER_PROCESS)
        .map(|_| {
            let manager = manager.clone();
            let url = url.to_owned();
            thread::spawn(move || {
                let mut conn = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("connect to Redis");
                let mut sold = 0;
                loop {
                    let guard = manager.lock(LOCK).expect("lock");
                    // Read, decide, write: only the lock makes this safe.
                    let stock: i64 = conn.get(STOCK_KEY).unwrap();
                    if stock <= 0 {
                        guard.unlock().expect("unlock");
                        return sold;
                    }
                    let _: () = conn.set(STOCK_KEY, stock - 1).unwrap();
                    let _: () = conn.incr(SOLD_KEY, 1).unwrap();
                    sold += 1;
                    guard.unlock().expect("unlock");
                }
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).sum()
}
