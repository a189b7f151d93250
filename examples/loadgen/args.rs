//! The command line (`--quick`, `--w5-waiters N`, `--only NAME[,NAME...]`) and the size of
//! each workload it selects.

use std::time::Duration;

/// How big each workload is.
pub(crate) struct Scale {
    pub(crate) w1_cycles: usize,
    pub(crate) w2_duration: Duration,
    pub(crate) w3_handoffs: usize,
    pub(crate) w4_locks: usize,
    pub(crate) w4_timeout: Duration,
    pub(crate) w4_hold: Duration,
    pub(crate) w5_waiters: usize,
    pub(crate) w6_duration: Duration,
    pub(crate) semaphore_cycles: usize,
}

const FULL: Scale = Scale {
    w1_cycles: 5_000,
    w2_duration: Duration::from_secs(3),
    w3_handoffs: 300,
    w4_locks: 10_000,
    w4_timeout: Duration::from_secs(3),
    w4_hold: Duration::from_secs(30),
    w5_waiters: 1_000,
    w6_duration: Duration::from_secs(6),
    semaphore_cycles: 5_000,
};

const QUICK: Scale = Scale {
    w1_cycles: 300,
    w2_duration: Duration::from_millis(400),
    w3_handoffs: 20,
    w4_locks: 1_000,
    w4_timeout: Duration::from_millis(900),
    w4_hold: Duration::from_secs(2),
    w5_waiters: 100,
    w6_duration: Duration::from_millis(500),
    semaphore_cycles: 300,
};

/// What the command line asks for.
pub(crate) struct Args {
    /// `--quick`: the CI smoke test's sizes rather than the full run's.
    pub(crate) quick: bool,
    pub(crate) scale: Scale,
    /// `--only NAME[,NAME...]`: only those workloads (w1 w2 w6 w6s w3 w7 w8 w4 w5 semaphore
    /// permit-semaphore redlock redlock-net cluster); without it, all of them.
    only: Option<Vec<String>>,
}

impl Args {
    /// This process's arguments.
    pub(crate) fn parse() -> Self {
        let args: Vec<String> = std::env::args().collect();
        let value_of = |flag: &str| {
            let at = args.iter().position(|a| a == flag)?;
            args.get(at + 1)
        };
        let quick = args.iter().any(|a| a == "--quick");
        let mut scale = if quick { QUICK } else { FULL };
        // `--w5-waiters N`: W5 with N blocked threads (10,000 measures the back-off's cost at
        // scale).
        if let Some(n) = value_of("--w5-waiters") {
            scale.w5_waiters = n.parse().expect("--w5-waiters takes a number");
        }
        let only = value_of("--only").map(|list| list.split(',').map(str::to_owned).collect());
        Args { quick, scale, only }
    }

    /// Whether the workload `name` is to run.
    pub(crate) fn wants(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }
}
