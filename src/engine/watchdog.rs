//! The watchdog: one thread per manager that renews the leases of held locks.
//!
//! It asks the hold registry ([`crate::engine::holds`]) for the holds due, renews them all in one
//! pipelined round trip (100 keys per script call), and tells the registry what it found.
//! Between sweeps it sleeps on the registry's condition variable until the next renewal is due
//! or a lease runs out, and sleeps without a timeout when nothing is held. What the sweeps find
//! also moves the manager's [`Health`](crate::Health) (through the registry).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::engine::holds::{Holds, Sweep};
use crate::fork::Origin;
use crate::owner::owner_field;
use crate::store::LockStore;
use crate::threads;

/// Handle to the watchdog thread; dropping it stops and joins the thread.
pub(crate) struct Watchdog {
    holds: Arc<Holds>,
    thread: Option<JoinHandle<()>>,
    /// The process whose thread this is (see [`crate::fork`]).
    origin: Origin,
}

impl Watchdog {
    pub(crate) fn start(
        holds: Arc<Holds>,
        store: Arc<LockStore>,
        client_id: String,
        timeout_ms: u64,
    ) -> std::io::Result<Self> {
        let thread = std::thread::Builder::new()
            .name("redis-rlock-watchdog".into())
            .spawn({
                let holds = Arc::clone(&holds);
                move || {
                    while let Some(sweep) = holds.next_sweep() {
                        let renewed = renew(&store, &client_id, timeout_ms, &sweep);
                        holds.finish_sweep(sweep, renewed);
                        // After the sweep, never delaying it: a slow sentinel delays only
                        // the next one, which is a renewal period away.
                        store.topology().recheck();
                    }
                }
            })?;
        Ok(Watchdog {
            holds,
            thread: Some(thread),
            origin: Origin::current(),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if self.origin.is_forked() {
            // A child made by fork(): the thread does not exist here (joining it fails), and
            // the state lock may have been held by it at the fork, never to be released. Touch
            // nothing; the parent's copy is untouched either way.
            std::mem::forget(thread);
            return;
        }
        self.holds.shut_down();
        threads::join_stopping(thread, "watchdog");
    }
}

/// Sends one renewal sweep: per entry, whether the hold was still there, or `None` where
/// renewing it failed (error or panic) and should be retried.
fn renew(store: &LockStore, client_id: &str, timeout_ms: u64, sweep: &Sweep) -> Vec<Option<bool>> {
    let owners: Vec<String> = sweep
        .batch
        .iter()
        .map(|hold| match &hold.token {
            Some(token) => token.to_string(),
            None => owner_field(client_id, hold.thread),
        })
        .collect();
    let pairs: Vec<(&str, &str)> = sweep
        .batch
        .iter()
        .zip(&owners)
        .map(|(hold, owner)| (&*hold.keys.name, owner.as_str()))
        .collect();
    store.counters.renewal_sweep();
    let batch = sweep.batch.len();
    // One round trip per kind of lock among the holds due (usually one kind) and master,
    // all kinds within the sweep's one budget: a stalled master must not cost it once per kind.
    let deadline = std::time::Instant::now() + sweep.budget;
    let renew_all = || -> Vec<Option<bool>> {
        let mut renewed = vec![None; batch];
        let mut done = vec![false; batch];
        for first in 0..batch {
            if done[first] {
                continue;
            }
            let kind = sweep.batch[first].kind;
            let of_kind: Vec<usize> = (first..batch)
                .filter(|&i| !done[i] && sweep.batch[i].kind.id() == kind.id())
                .collect();
            let kind_pairs: Vec<(&str, &str)> = of_kind.iter().map(|&i| pairs[i]).collect();
            let budget = deadline.saturating_duration_since(std::time::Instant::now());
            let replies = kind.renew(store, &kind_pairs, timeout_ms, budget);
            for (&i, reply) in of_kind.iter().zip(replies) {
                renewed[i] = reply;
            }
            for &i in &of_kind {
                done[i] = true;
            }
        }
        renewed
    };
    catch_unwind(AssertUnwindSafe(renew_all)).unwrap_or_else(|_| {
        log::error!("lock renewal panicked; retrying");
        vec![None; batch]
    })
}
