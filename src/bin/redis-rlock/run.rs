//! `redis-rlock run NAME -- COMMAND...`: acquire, run the command as a child while the lock is
//! held, release when it exits, and exit as it did.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use redis_rlock::{
    AcquireOptions, CancelToken, DistributedLock, Health, HealthChange, Lease, LockGuard,
    LockManager,
};
use rustix::process::{
    getpid, getppid, kill_process, set_parent_process_death_signal, Pid, Signal,
};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::{Cause, Origin};

use crate::duration::show;
use crate::exit::{self, Failure};
use crate::lock_kind::LockKind;
use crate::progress::Progress;

/// What the child gets when the lock is lost under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnLost {
    /// SIGTERM, then SIGKILL if it is still running after `--kill-after`.
    Term,
    /// SIGKILL at once.
    Kill,
    /// Nothing: a warning on stderr, and the command goes on unprotected.
    Ignore,
}

/// `run`'s settings, as parsed from the command line.
pub struct RunSettings {
    pub name: String,
    pub wait: Option<Duration>,
    pub lease: Option<Duration>,
    pub watchdog: Duration,
    pub fenced: bool,
    pub kind: LockKind,
    pub conflict_exit_code: u8,
    pub on_lost: OnLost,
    pub kill_after: Duration,
    pub command: Vec<OsString>,
}

/// Even with nothing to wait for, the child is looked at this often: a safety net should a
/// SIGCHLD ever be missed (signals of one kind are merged, never lost, but this costs nothing).
const CHILD_CHECK: Duration = Duration::from_secs(1);

/// How long a signal waits for the cancelled acquire to return: it ends within milliseconds,
/// or once a request in flight is answered (one response timeout, 3 s by default). Past this
/// something is badly wrong, and the exit does not wait for it.
const CANCEL_BUDGET: Duration = Duration::from_secs(10);

pub fn run(url: &str, settings: RunSettings) -> Result<u8, Failure> {
    // The handlers go in first: from here on SIGINT, SIGTERM and SIGHUP no longer end
    // redis-rlock on the spot, so it always gets to signal its child, wait for it and release
    // the lock. SIGCHLD tells it the child exited without polling.
    let signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGCHLD])
        .map_err(|err| Failure::new(exit::OS, format!("cannot handle signals: {err}")))?;
    let signals = forward_to_channel(signals)?;

    let fail = |err| Failure::from_lock_error(err, url);
    let manager = LockManager::builder(url)
        .watchdog_timeout(settings.watchdog)
        .build()
        .map_err(fail)?;
    let health = manager.health_changes();
    let lock = settings.kind.handle(&manager, &settings.name);
    // One cheap look first, so that a bad name, an unreachable Redis or a key that is not a
    // lock is reported as such before any waiting (and before the status line).
    lock.is_locked().map_err(fail)?;

    // A signal while waiting cancels the wait, which then ends within milliseconds and
    // leaves nothing behind (no hold, no place in a queue).
    let cancel = CancelToken::new();
    let acquired = start_acquire(&lock, acquire_options(&settings, &cancel))?;
    let progress = Progress::start(url, &settings.name);
    let waited = wait_for_acquire(&acquired, &signals);
    if let Some(progress) = progress {
        progress.finish();
    }
    let outcome = match waited {
        Waited::Acquired(outcome) => outcome,
        Waited::Signal(signal) => {
            return Ok(stop_waiting(signal, &cancel, &acquired, &settings, url));
        }
    };
    let guard = match outcome.map_err(fail)? {
        Some(guard) => guard,
        None => return Ok(gave_up(&settings, url)),
    };
    run_holding(guard, &settings, &signals, &health, url)
}

/// What the acquire thread answers.
type Acquired = redis_rlock::Result<Option<LockGuard>>;

/// How the wait for the lock ended.
enum Waited {
    Acquired(Acquired),
    /// A signal came first: its number.
    Signal(i32),
}

/// The acquire's options: `settings`' wait, lease and fencing, and `cancel` to end it.
fn acquire_options(settings: &RunSettings, cancel: &CancelToken) -> AcquireOptions {
    let mut options = AcquireOptions::new()
        .fenced(settings.fenced)
        .cancel_token(cancel);
    if let Some(wait) = settings.wait {
        options = options.wait(wait);
    }
    if let Some(lease) = settings.lease {
        options = options.lease(Lease::Fixed(lease));
    }
    options
}

/// Starts acquiring `lock`. The acquire blocks (woken by the holder's unlock message), so it
/// gets a thread of its own and this one stays free to answer signals while it waits.
fn start_acquire(
    lock: &Arc<dyn DistributedLock>,
    options: AcquireOptions,
) -> Result<Receiver<Acquired>, Failure> {
    let (acquired_tx, acquired) = crossbeam_channel::bounded(1);
    let acquiring = Arc::clone(lock);
    std::thread::Builder::new()
        .name("redis-rlock-acquire".into())
        .spawn(move || {
            let _ = acquired_tx.send(acquiring.acquire(options));
        })
        .map_err(|err| Failure::new(exit::OS, format!("cannot start a thread: {err}")))?;
    Ok(acquired)
}

/// Waits for the acquire to answer or a signal to end the wait, whichever comes first.
fn wait_for_acquire(acquired: &Receiver<Acquired>, signals: &Receiver<Origin>) -> Waited {
    loop {
        select! {
            recv(acquired) -> outcome => {
                return Waited::Acquired(outcome.expect("the acquire thread always answers"));
            }
            recv(signals) -> origin => {
                let origin = origin.expect("the signal thread runs as long as the process");
                if origin.signal == SIGCHLD {
                    continue; // no child yet: someone else's business
                }
                return Waited::Signal(origin.signal);
            }
        }
    }
}

/// A signal came while waiting: cancels the wait and gives back whatever it took. Returns
/// the exit code, 128 + the signal, as a shell reports a command the signal ended.
fn stop_waiting(
    signal: i32,
    cancel: &CancelToken,
    acquired: &Receiver<Acquired>,
    settings: &RunSettings,
    url: &str,
) -> u8 {
    note!(
        "{} while waiting for {:?}; the command was not run",
        signal_name(signal),
        settings.name
    );
    // The cancelled acquire returns once its request in flight, if any, is
    // answered (a response timeout at most), giving back what it took; an acquire
    // that completed just before is released here.
    cancel.cancel();
    if let Ok(Ok(Some(guard))) = acquired.recv_timeout(CANCEL_BUDGET) {
        release(guard, &settings.name, url);
    }
    128 + signal as u8
}

/// The wait passed without the lock: says who holds it, and returns the conflict exit code.
fn gave_up(settings: &RunSettings, url: &str) -> u8 {
    let waited = match settings.wait {
        Some(wait) if !wait.is_zero() => format!("waited {}", show(wait)),
        _ => "--wait 0: one attempt".into(),
    };
    let holder = describe_holder(url, &settings.name);
    note!("{:?} is {holder}; gave up ({waited})", settings.name);
    settings.conflict_exit_code
}

/// Runs the command while `guard` holds the lock, then releases it.
fn run_holding(
    guard: LockGuard,
    settings: &RunSettings,
    signals: &Receiver<Origin>,
    health: &Receiver<HealthChange>,
    url: &str,
) -> Result<u8, Failure> {
    let (program, args) = settings
        .command
        .split_first()
        .expect("clap requires a command");
    let mut command = Command::new(program);
    command.args(args).env("REDIS_RLOCK_NAME", &settings.name);
    die_with(&mut command, getpid());
    if let Some(token) = guard.fencing_token() {
        command.env("REDIS_RLOCK_FENCING_TOKEN", token.to_string());
    }
    let lost = guard.lost_signal();
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            release(guard, &settings.name, url);
            let code = match err.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            return Err(Failure::new(
                code,
                format!("cannot run {}: {err}", program.to_string_lossy()),
            ));
        }
    };
    let watched = watch(child, settings, signals, &lost, health);
    // The child is reaped: release now, also after a failure to wait for it.
    let released = guard.unlock();
    let (status, lost_noticed) = watched?;
    let mut lost = lost_noticed;
    match released {
        Ok(()) => {}
        Err(err) if err.is_not_held() => {
            if !lost {
                note!(
                    "lock {:?} was lost while the command ran (found when releasing it): \
                     the command may have overlapped with another holder",
                    settings.name
                );
            }
            lost = true;
        }
        Err(err) => note!(
            "releasing {:?} failed ({err}); its lease runs out by itself",
            settings.name
        ),
    }
    if lost && settings.on_lost != OnLost::Ignore {
        return Ok(exit::LOST);
    }
    Ok(exit_code(status))
}

/// Has the command killed (SIGKILL) when redis-rlock dies, whatever ends it (`kill -9`, the OOM
/// killer, a crash): its lease would keep the lock for a while, but the next holder gets it
/// once that runs out, and must not find the command still running. The kernel sends the
/// signal when the thread that started the command ends: this one, the main thread, which
/// ends only with the process. Only the command itself is tied; processes it starts are not
/// (docs/CLI.md, "Processes the command leaves behind").
#[allow(unsafe_code)]
fn die_with(command: &mut Command, parent: Pid) {
    let tie = move || {
        set_parent_process_death_signal(Some(Signal::KILL))?;
        // redis-rlock may have died between the fork and the request: no signal would come.
        // The child then gives up (ESRCH: its parent is gone) instead of running the command.
        if getppid() != Some(parent) {
            return Err(std::io::Error::from(rustix::io::Errno::SRCH));
        }
        Ok(())
    };
    // SAFETY: runs in the child between fork and exec, where only async-signal-safe calls
    // are allowed: `tie` makes two system calls (prctl, getppid) through rustix and allocates
    // nothing (an `Errno` becomes an `io::Error` without allocating).
    unsafe {
        command.pre_exec(tie);
    }
}

/// Waits for the child, forwarding signals and acting on a lost lock. Returns its status and
/// whether the lock was found lost meanwhile.
fn watch(
    mut child: Child,
    settings: &RunSettings,
    signals: &Receiver<Origin>,
    lost: &Receiver<()>,
    health: &Receiver<HealthChange>,
) -> Result<(ExitStatus, bool), Failure> {
    // The child is only ever signalled before it is reaped (try_wait below), so its pid
    // cannot have been reused by another process.
    let pid = Pid::from_child(&child);
    let never = crossbeam_channel::never();
    let mut lost_signal = Some(lost);
    let mut lost_noticed = false;
    let mut kill_at: KillAt = None;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|err| Failure::new(exit::OS, format!("cannot wait for the command: {err}")))?
        {
            return Ok((status, lost_noticed));
        }
        kill_at = kill_if_due(kill_at, pid, settings);
        let timeout = kill_at.map_or(CHILD_CHECK, |(at, _)| {
            at.saturating_duration_since(Instant::now())
                .min(CHILD_CHECK)
        });
        select! {
            recv(signals) -> origin => {
                let origin = origin.expect("the signal thread runs as long as the process");
                // A first deadline is kept.
                kill_at = kill_at.or(forward(&origin, pid, settings));
            }
            recv(lost_signal.unwrap_or(&never)) -> message => match message {
                Ok(()) => {
                    lost_noticed = true;
                    lost_signal = None; // told once
                    let deadline = on_lost(settings, pid).map(|at| (at, "SIGTERM"));
                    kill_at = kill_at.or(deadline);
                }
                // Disconnected: the hold ended, which only releasing it here does.
                Err(_) => lost_signal = None,
            },
            recv(health) -> change => {
                if let Ok(change) = change {
                    tell_health(&settings.name, &change);
                }
            }
            default(timeout) => {}
        }
    }
}

/// Says on stderr when the lock's renewals start failing, before its lease runs out (the
/// command still holds the lock, and may want to know), and when they answer again. A lost
/// lock is told by the lost signal, with what `--on-lost` does.
fn tell_health(name: &str, change: &HealthChange) {
    match (change.from, change.to) {
        (Health::Healthy, Health::Suspended { .. }) => note!(
            "the renewals of lock {name:?} are failing (Redis does not answer them); \
             the lock is lost if this lasts until its lease runs out"
        ),
        (Health::Suspended { .. }, Health::Healthy) => {
            note!("the renewals of lock {name:?} answer again")
        }
        _ => {}
    }
}

/// When to send SIGKILL, and the signal the command was asked to stop with.
type KillAt = Option<(Instant, &'static str)>;

/// Sends SIGKILL if its time has come; returns the deadline still ahead, if any.
fn kill_if_due(kill_at: KillAt, pid: Pid, settings: &RunSettings) -> KillAt {
    if let Some((at, asked_with)) = kill_at {
        if Instant::now() >= at {
            note!(
                "the command is still running {} after {asked_with}; sending SIGKILL",
                show(settings.kill_after)
            );
            send(pid, Signal::KILL);
            return None;
        }
    }
    kill_at
}

/// Passes a signal that a process sent on to the command (see `sent_by_a_process`); returns
/// when to send SIGKILL if the command is still running then.
fn forward(origin: &Origin, pid: Pid, settings: &RunSettings) -> KillAt {
    if origin.signal == SIGCHLD || !sent_by_a_process(origin) {
        return None;
    }
    if let Some(signal) = Signal::from_named_raw(origin.signal) {
        send(pid, signal);
    }
    // Whoever sent it (systemd, a CI runner, timeout(1)) wants the command
    // gone and the lock free: a command that ignores it is killed after
    // --kill-after, as on a lost lock.
    Some((
        Instant::now() + settings.kill_after,
        signal_name(origin.signal),
    ))
}

/// What a lost signal may mean; it does not say which.
const WHY: &str = "its lease ran out unrenewed, or it was deleted or taken over";

/// Tells the child as `--on-lost` says; returns when to send SIGKILL if it is still running.
fn on_lost(settings: &RunSettings, pid: Pid) -> Option<Instant> {
    let name = &settings.name;
    match settings.on_lost {
        OnLost::Term => {
            note!(
                "lock {name:?} was lost ({WHY}); sending SIGTERM to the command \
                 (SIGKILL after {})",
                show(settings.kill_after)
            );
            send(pid, Signal::TERM);
            Some(Instant::now() + settings.kill_after)
        }
        OnLost::Kill => {
            note!("lock {name:?} was lost ({WHY}); sending SIGKILL to the command");
            send(pid, Signal::KILL);
            None
        }
        OnLost::Ignore => {
            note!(
                "lock {name:?} was lost ({WHY}); the command goes on unprotected \
                 (--on-lost ignore)"
            );
            None
        }
    }
}

/// Whether to forward a signal: one sent by a process (`kill`) is meant for redis-rlock alone
/// and is passed on; one the kernel sent (Ctrl-C, a terminal hangup) went to the whole
/// foreground process group, the child included, and is not sent to it a second time. A
/// process's signal to the whole group looks the same as one to redis-rlock alone, so the child
/// gets that one twice (docs/CLI.md says so, and how to avoid it).
fn sent_by_a_process(origin: &Origin) -> bool {
    origin.cause != Cause::Kernel
}

fn send(pid: Pid, signal: Signal) {
    if let Err(err) = kill_process(pid, signal) {
        note!("cannot signal the command: {err}");
    }
}

/// The child's exit code, or 128 + the signal that ended it, as shells report it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => exit::OS,
    }
}

fn release(guard: LockGuard, name: &str, url: &str) {
    if let Err(err) = guard.unlock() {
        let failure = Failure::from_lock_error(err, url);
        note!("releasing {name:?} failed: {failure}");
    }
}

/// `held by <owner> (1 hold), TTL ...` for the conflict message; less when the lock cannot be
/// read (or was released just now).
fn describe_holder(url: &str, name: &str) -> String {
    let snapshot = crate::status::connect(url, name)
        .ok()
        .and_then(|mut conn| crate::status::Snapshot::read(&mut conn, name).ok());
    match snapshot {
        Some(snapshot) if !snapshot.owners.is_empty() => snapshot.describe(),
        _ => "held by another owner".into(),
    }
}

/// Moves the signals onto a channel read by a thread of their own, so that they can be
/// selected together with the acquire, the lost signal and a timeout.
fn forward_to_channel(mut signals: SignalsInfo<WithOrigin>) -> Result<Receiver<Origin>, Failure> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("redis-rlock-signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                if tx.send(origin).is_err() {
                    break;
                }
            }
        })
        .map_err(|err| Failure::new(exit::OS, format!("cannot start a thread: {err}")))?;
    Ok(rx)
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
