//! What the workloads measure with and check against: live heap bytes (a counting
//! allocator), latency percentiles, the PING floor, a thread's CPU time, and the correctness
//! violations that fail the run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts live heap bytes, so the memory figures are measured, not estimated.
struct CountingAllocator;

pub(crate) static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Correctness violations seen; any makes the run fail (after the table is printed and the
/// throwaway server is stopped).
pub(crate) static VIOLATIONS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn violation(what: String) {
    eprintln!("VIOLATION: {what}");
    VIOLATIONS.lock().unwrap().push(what);
}

/// Latency percentiles of a sample.
pub(crate) struct Percentiles {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
}

pub(crate) fn percentiles(samples: &mut [Duration]) -> Percentiles {
    assert!(!samples.is_empty(), "no samples");
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Percentiles {
        p50: at(0.50),
        p99: at(0.99),
    }
}

pub(crate) fn ping_round_trips(conn: &mut redis::Connection, n: usize) -> Percentiles {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let _: String = redis::cmd("PING").query(conn).expect("PING");
        samples.push(start.elapsed());
    }
    percentiles(&mut samples)
}

/// CPU time a thread of this process has used, found by name (Linux).
pub(crate) fn thread_cpu_time(name: &str) -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        // The kernel keeps the first 15 bytes of a thread's name.
        if comm.trim_end() == &name[..name.len().min(15)] {
            let schedstat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let ns: u64 = schedstat.split_whitespace().next()?.parse().ok()?;
            return Some(Duration::from_nanos(ns));
        }
    }
    None
}
