//! W8: a read-write lock's throughput, against the plain lock for everything.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::violation;
use crate::table::{row, Row};
use crate::w2::increment;

/// W8: 4 readers and 1 writer on one read-write lock for the W2 duration, against the same 5
/// threads taking the plain lock for everything. The writer increments a counter
/// non-atomically; a reader reads it twice and finds it unchanged (else a writer overlapped a
/// reader). Readers pause 100 µs between holds: without any pause their holds overlap
/// without a gap and, as in Redisson, the writer would wait for all of them to stop.
pub(crate) fn w8_read_write(url: &str, scale: &Scale) -> Vec<Row> {
    const READERS: usize = 4;
    let manager = LockManager::new(url).expect("manager");
    let counter = "loadgen:w8:counter";
    // Returns (read holds, write holds) done in the duration.
    let run = |exclusive: bool| -> (u64, u64) {
        let mut conn = support::nodelay_conn(url);
        let _: () = conn.del(counter).expect("DEL");
        let name = if exclusive {
            "loadgen:w8:plain"
        } else {
            "loadgen:w8:rw"
        };
        let stop = AtomicBool::new(false);
        let barrier = Barrier::new(READERS + 2);
        let (reads, writes) = (AtomicU64::new(0), AtomicU64::new(0));
        thread::scope(|s| {
            for i in 0..=READERS {
                let writer = i == READERS;
                let (manager, stop, barrier) = (&manager, &stop, &barrier);
                let (reads, writes) = (&reads, &writes);
                s.spawn(move || {
                    let mut conn = support::nodelay_conn(url);
                    let rw = manager.get_read_write_lock(name);
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let guard = match (exclusive, writer) {
                            (true, _) => manager.lock(name),
                            (false, true) => rw.write_lock().lock(),
                            (false, false) => rw.read_lock().lock(),
                        }
                        .expect("lock");
                        if writer {
                            increment(&mut conn, counter);
                            writes.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let first: Option<u64> = conn.get(counter).expect("GET");
                            let second: Option<u64> = conn.get(counter).expect("GET");
                            if first != second {
                                violation(format!("{name}: a write overlapped a read hold"));
                            }
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        guard.unlock().expect("unlock");
                        if !writer {
                            thread::sleep(Duration::from_micros(100));
                        }
                    }
                });
            }
            barrier.wait();
            thread::sleep(scale.w2_duration);
            stop.store(true, Ordering::Relaxed);
        });
        let (reads, writes) = (reads.into_inner(), writes.into_inner());
        let value: Option<u64> = conn.get(counter).expect("GET counter");
        if value.unwrap_or(0) != writes {
            violation(format!("{counter} is {value:?} after {writes} writes"));
        }
        (reads, writes)
    };
    let start = Instant::now();
    let (reads, writes) = run(false);
    let rw_elapsed = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let (plain_reads, plain_writes) = run(true);
    let plain_elapsed = start.elapsed().as_secs_f64();
    let rw_total = (reads + writes) as f64 / rw_elapsed;
    let plain_total = (plain_reads + plain_writes) as f64 / plain_elapsed;
    vec![
        row(
            "W8 rw lock",
            "4 readers + 1 writer: holds/s, against all 5 on the plain lock",
            format!("{rw_total:.0}/s"),
        )
        .against(format!("{plain_total:.0}/s"), rw_total / plain_total, ""),
        row(
            "W8 rw lock",
            "of which read holds/s, write holds/s",
            format!(
                "{:.0}/s, {:.0}/s",
                reads as f64 / rw_elapsed,
                writes as f64 / rw_elapsed
            ),
        ),
    ]
}
