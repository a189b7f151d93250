//! One view of the deployment's masters: each with its connection pool and, on a cluster, the
//! slots it serves. A map is never changed: a new one replaces it (`Topology::install`).

use std::sync::Arc;

use crate::slot;
use crate::topology::pool::Pool;

/// A slot served by no known master.
pub(crate) const NO_MASTER: u16 = u16::MAX;

/// One view of the deployment's masters.
pub(crate) struct Map {
    /// Grows with every new map; a caller that saw a stale map names it when asking for a
    /// refresh, so that many callers seeing the same stale map cause one refresh.
    pub(crate) generation: u64,
    pub(crate) masters: Vec<Arc<Pool>>,
    /// Cluster only: for each slot, its master's index in `masters` (or [`NO_MASTER`]).
    pub(crate) slots: Option<Box<[u16]>>,
}

impl Map {
    /// The master that serves `key`; on one server or Sentinel, the master. An empty key
    /// (commands that touch no key) goes to the first master.
    pub(crate) fn master_for(&self, key: &str) -> Option<&Arc<Pool>> {
        let index = match (&self.slots, key) {
            (Some(slots), key) if !key.is_empty() => slots[usize::from(slot::of(key.as_bytes()))],
            _ => 0,
        };
        self.masters.get(usize::from(index))
    }

    /// Every master, each once.
    pub(crate) fn masters(&self) -> &[Arc<Pool>] {
        &self.masters
    }

    /// The map before any discovery: no master.
    pub(crate) fn empty() -> Self {
        Map {
            generation: 0,
            masters: Vec::new(),
            slots: None,
        }
    }
}
