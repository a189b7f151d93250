//! `redis-rlock`: a distributed flock(1). Runs a command while holding a Redisson-compatible
//! lock in Redis, shows who holds a lock, and deletes a stuck one.
//!
//! Built with the `cli` feature: `cargo install --path . --features cli`.
// One `unsafe` block, reviewed: the hook that ties the command's life to redis-rlock's
// (`run::die_with`), which std only offers as an unsafe `pre_exec`.
#![deny(unsafe_code)]

#[cfg(not(target_os = "linux"))]
compile_error!("the redis-rlock command needs Linux (it signals its child through rustix)");

/// Writes a line to stderr, prefixed `redis-rlock: `. Unlike `eprintln!`, a stderr that cannot
/// be written (a terminal that hung up, a closed pipe) is no panic: redis-rlock must still wait
/// for its command and release the lock.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "redis-rlock: {}", format_args!($($arg)*));
    }};
}

/// `println!` that ignores a closed stdout (`redis-rlock status x | head -0`) instead of
/// panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod duration;
mod exit;
mod lock_kind;
mod progress;
mod run;
mod status;
mod string_status;
mod unlock;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::Failure;
use crate::lock_kind::LockKind;
use crate::run::{OnLost, RunSettings};
use crate::status::Kind;

const AFTER_HELP: &str = "\
Durations: 500ms, 10s, 2m, 1h, 1.5s; a bare number is seconds.

Exit codes:
  (the command's)  run: the command's own exit code, or 128+N if signal N ended it
  1    unlock: the answer to the question was not yes
  64   bad arguments (usage, durations, URL, lock name)
  65   the key exists and is not a lock
  69   Redis cannot be reached or failed
  70   run: the lock was lost while the command ran (--on-lost term or kill)
  75   run: not acquired within --wait (change with --conflict-exit-code)
  126  run: the command cannot be executed
  127  run: the command was not found
  128+N  run: redis-rlock got signal N while waiting; the command was not run

Examples:
  # cron: skip tonight's report if yesterday's still runs (on any machine)
  redis-rlock run nightly-report --wait 0 -- ./report.sh

  # deploys one at a time; wait up to 10 minutes for the one before
  redis-rlock run deploy:prod --wait 10m -- ./deploy.sh v1.4.2

  # one job of the CI fleet at a time touches the shared staging database
  REDIS_URL=redis://ci-redis:6379/ redis-rlock run staging-db -- make migrate test

  # who has it?
  redis-rlock status deploy:prod

  # how many permits are free?
  redis-rlock status connections:db --kind semaphore

  # a lock whose holder is known to be gone for good
  redis-rlock unlock --force deploy:prod";

const RUN_AFTER_HELP: &str = "\
Durations: 500ms, 10s, 2m, 1h, 1.5s; a bare number is seconds.

The lock is Redisson's: a hash at key NAME whose TTL the watchdog renews every third of
--watchdog while the command runs. If redis-rlock dies (SIGKILL, a crash, the machine), the lock
expires within --watchdog. SIGINT, SIGTERM and SIGHUP sent to redis-rlock are passed to the
command (those from the terminal reach it directly); redis-rlock then waits for it (SIGKILL
after --kill-after), releases the lock and exits as the command did. The lock is released
when COMMAND exits, even if processes it started in the background still run: to cover them,
have it wait for them (sh -c 'job1 & job2 & wait'). The command's environment has REDIS_RLOCK_NAME, and
with --fenced REDIS_RLOCK_FENCING_TOKEN: a number that grows with every fenced acquisition of
NAME, for the resource to refuse writes from an older holder.

Exit codes: the command's own (128+N if signal N ended it); 64 bad arguments; 65 the key is
not a lock; 69 Redis unreachable; 70 the lock was lost while the command ran (unless
--on-lost ignore); 75 not acquired within --wait (--conflict-exit-code); 126/127 the command
cannot be executed / was not found; 128+N signal N while waiting, the command not run.

Examples:
  redis-rlock run nightly-report --wait 0 -- ./report.sh        # cron: skip if running
  redis-rlock run deploy:prod --wait 10m -- ./deploy.sh v1.4.2   # deploys one at a time
  redis-rlock run staging-db -- make migrate test                # one CI job at a time";

/// A distributed flock(1): run a command while holding a lock in Redis.
///
/// Locks are stored as Redisson's RLock stores them, so Java services using Redisson and
/// programs using the redis-rlock crate share them with this command.
#[derive(Parser)]
#[command(name = "redis-rlock", version, after_help = AFTER_HELP)]
struct Cli {
    /// The Redis server: redis://[user:password@]host[:port][/db], rediss:// for TLS, or
    /// redis+unix:///path/to/socket.
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true, // it may carry a password
        default_value = "redis://127.0.0.1:6379/",
        value_name = "URL"
    )]
    url: String,

    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Acquire the lock, run COMMAND while holding it, release it when COMMAND exits.
    #[command(
        after_help = RUN_AFTER_HELP,
        override_usage = "redis-rlock run [OPTIONS] <NAME> -- <COMMAND>..."
    )]
    Run(RunArgs),
    /// Show whether a lock is held, by whom (owner fields with hold counts), and its TTL; or a
    /// semaphore's free permits, or a count-down latch's count.
    Status(StatusArgs),
    /// Delete a lock whoever holds it (Redisson's forceUnlock); its waiters are woken.
    Unlock(UnlockArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The lock's name (its Redis key).
    name: String,

    /// Wait at most this long for the lock (0: one attempt); then exit with the conflict
    /// code. Default: wait as long as it takes.
    // A negative value is taken as the value, and refused by the parser, rather than as an
    // option whose tip (`-- -1`) would make it the command.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration::parse,
        allow_negative_numbers = true
    )]
    wait: Option<Duration>,

    /// A fixed lease instead of the watchdog: the lock expires this long after it was
    /// acquired, even if the command still runs (which then counts as losing it).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse_positive)]
    lease: Option<Duration>,

    /// The watchdog's lease, renewed every third of it while the command runs: how long the
    /// lock outlives a redis-rlock that was killed outright.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30s",
        value_parser = duration::parse_positive,
        conflicts_with = "lease"
    )]
    watchdog: Duration,

    /// Take a fencing token and pass it to the command as REDIS_RLOCK_FENCING_TOKEN (not
    /// with --kind read: read holds are shared).
    #[arg(long)]
    fenced: bool,

    /// Which kind of lock to take on NAME.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = LockKind::Lock)]
    kind: LockKind,

    /// Exit code when the lock was not acquired within --wait (flock's -E).
    #[arg(
        long,
        value_name = "N",
        default_value_t = exit::CONFLICT,
        allow_negative_numbers = true
    )]
    conflict_exit_code: u8,

    /// What the command gets when the lock is lost while it runs.
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = OnLost::Term)]
    on_lost: OnLost,

    /// Send SIGKILL if the command still runs this long after it was told to stop: by SIGTERM
    /// on a lost lock (--on-lost term), or by a SIGINT, SIGTERM or SIGHUP passed on to it.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = duration::parse_positive
    )]
    kill_after: Duration,

    /// The command and its arguments; put `--` before it so that its options stay its own.
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        value_parser = clap::value_parser!(OsString)
    )]
    command: Vec<OsString>,
}

#[derive(Args)]
struct StatusArgs {
    /// The lock's (semaphore's, latch's) name: its Redis key.
    name: String,
    /// What to read the key as. A semaphore and a count-down latch are both a number at the
    /// key, so without this a number is shown as either.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = Kind::Auto)]
    kind: Kind,
    /// Print one JSON object. A lock: {"name", "kind": "lock", "held", "owners": [{"owner",
    /// "holds"}], "ttl_ms", "mode", "queue"}; a semaphore: {"name", "kind", "exists",
    /// "permits"}; a latch: {"name", "kind", "count", "open"}; a permit-expirable semaphore:
    /// {"name", "kind", "permits", "acquired": [{"id", "lease_left_ms", "expired"}]}; a number
    /// not told which: {"name", "kind": "semaphore-or-latch", "value"}; redis-py's string
    /// lock: {"name", "kind": "string", "held", "owner", "ttl_ms"}.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct UnlockArgs {
    /// The lock's name (its Redis key).
    name: String,
    /// Required: delete the lock whoever holds it. Its holder is not asked; it finds out at
    /// its next renewal, and redis-rlock run stops its command then.
    #[arg(long)]
    force: bool,
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Which kind of lock to delete: a read or write lock is deleted only while held in that
    /// mode, a spin or string lock without a message (client tracking wakes its waiters).
    #[arg(long, value_enum, value_name = "KIND", default_value_t = LockKind::Lock)]
    kind: LockKind,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version print and succeed; every usage error is EX_USAGE (64),
            // like the command's other bad arguments, not clap's default of 2.
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    let outcome = match cli.command {
        Cmd::Run(args) => run::run(&cli.url, args.into_settings()),
        Cmd::Status(args) => status::status(&cli.url, &args.name, args.kind, args.json),
        Cmd::Unlock(args) => unlock::unlock(&cli.url, &args.name, args.kind, args.force, args.yes),
    };
    let code = outcome.unwrap_or_else(|failure: Failure| {
        note!("{failure}");
        failure.code
    });
    let _ = std::io::stdout().flush();
    ExitCode::from(code)
}

impl RunArgs {
    fn into_settings(self) -> RunSettings {
        RunSettings {
            name: self.name,
            wait: self.wait,
            lease: self.lease,
            watchdog: self.watchdog,
            fenced: self.fenced,
            kind: self.kind,
            conflict_exit_code: self.conflict_exit_code,
            on_lost: self.on_lost,
            kill_after: self.kill_after,
            command: self.command,
        }
    }
}
