//! Running a few blocking calls at once without starting a thread per call: the worker
//! threads that [`RedLock`](crate::RedLock) tries and releases its masters on.
//!
//! # The workers
//!
//! One small set per process, shared by every `RedLock` of every manager. A worker is started
//! when a task finds no idle worker that may take it (see below), up to [`MAX_WORKERS`]: so
//! there are as many as the most tasks ever in flight at once, at most 16, however many locks
//! exist. Workers are kept for the life of the process and sleep on their mailbox when idle.
//! The calling thread runs one of the tasks that may run anywhere (a release) itself, and
//! waits for the others.
//!
//! # Who owns a hold a worker takes
//!
//! A lock's owner is a thread number ([`crate::owner`]), and a worker's is fixed for its life.
//! So a worker that holds a lock, or may (an attempt whose reply was lost, a release that
//! failed), must not attempt that lock again for someone else: Redis would let it re-enter.
//! Every attempt therefore *claims* its worker for the lock's name on the lock's manager, and
//! the caller ends the claim once the worker holds nothing there: at once when the attempt
//! took nothing or its hold was released, else when the lease of what may be left on Redis has
//! run out (counted from when it was given up on). An attempt goes to a worker without a claim
//! on its lock; when all 16 have one (guards leaked with `mem::forget`, say), it runs on a
//! short-lived thread of its own, whose thread number is new.
//!
//! After `fork()` the child has none of the parent's workers: the set starts empty again there.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::kinds::lock::Lock;

/// The most workers a process starts.
const MAX_WORKERS: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

/// One call to run: where it may run and what it does.
pub(crate) struct Task<R> {
    /// The lock an attempt may take: its worker is claimed for it. `None`: runs anywhere.
    claims: Option<Lock>,
    job: TaskJob<R>,
}

impl<R> Task<R> {
    /// An attempt on `lock`: runs on a worker that holds nothing of it (never on the caller,
    /// whose own holds must stay apart), which is claimed for it until
    /// [`end_claim`] says otherwise.
    pub(crate) fn attempt(lock: &Lock, job: impl FnOnce() -> R + Send + 'static) -> Self {
        Task {
            claims: Some(lock.clone()),
            job: Box::new(job),
        }
    }

    /// A call that may run on any thread (a release: a guard releases its own owner's hold).
    pub(crate) fn anywhere(job: impl FnOnce() -> R + Send + 'static) -> Self {
        Task {
            claims: None,
            job: Box::new(job),
        }
    }
}

/// A worker's jobs to run, in order.
#[derive(Default)]
struct Mailbox {
    jobs: Mutex<std::collections::VecDeque<Job>>,
    posted: Condvar,
}

impl Mailbox {
    /// Queues `job` and wakes the worker.
    fn post(&self, job: Job) {
        self.jobs.lock().push_back(job);
        self.posted.notify_one();
    }

    /// The next job, waiting for one.
    fn next(&self) -> Job {
        let mut jobs = self.jobs.lock();
        loop {
            if let Some(job) = jobs.pop_front() {
                return job;
            }
            self.posted.wait(&mut jobs);
        }
    }
}

/// A worker: its mailbox, and what choosing one needs to know.
struct Worker {
    /// Its thread number: the owner of the holds it takes.
    thread: u64,
    jobs: Arc<Mailbox>,
    /// Jobs sent to it and not finished yet.
    pending: Arc<AtomicUsize>,
}

/// A worker that holds, or may hold, a lock of `name` on the manager `client`.
struct Claim {
    client: String,
    name: String,
    thread: u64,
    /// `None` while a guard (or the attempt) may hold it; else when what may be left on Redis
    /// has surely expired.
    until: Option<Instant>,
}

impl Claim {
    fn is_on(&self, lock: &Lock, thread: u64) -> bool {
        self.thread == thread && self.name == lock.name() && self.client == client_id(lock)
    }
}

/// The process' workers and their claims.
struct Workers {
    /// The process they belong to: a child made by `fork()` has none of them.
    pid: u32,
    workers: Vec<Worker>,
    claims: Vec<Claim>,
}

static WORKERS: Mutex<Workers> = parking_lot::const_mutex(Workers {
    pid: 0,
    workers: Vec::new(),
    claims: Vec::new(),
});

/// Where a task was placed.
enum Placement {
    /// On the worker of this index.
    Worker(usize),
    /// On a short-lived thread of its own: no worker may take it.
    OwnThread,
}

impl Workers {
    /// The set of this process, emptied first in a child made by `fork()`.
    fn of_this_process() -> parking_lot::MutexGuard<'static, Workers> {
        let mut workers = WORKERS.lock();
        let pid = std::process::id();
        if workers.pid != pid {
            // The parent's workers do not exist here; their mailboxes are only memory.
            workers.workers.clear();
            workers.claims.clear();
            workers.pid = pid;
        }
        workers
    }

    fn is_claimed(&self, lock: &Lock, thread: u64, now: Instant) -> bool {
        self.claims
            .iter()
            .any(|claim| claim.until.is_none_or(|until| until > now) && claim.is_on(lock, thread))
    }

    /// Chooses a worker for a task (claiming it for an attempt), starting one if none is idle
    /// and there is room. `taken`: the workers already given a task of this call, used only
    /// when no other may take it.
    fn place(&mut self, claims: Option<&Lock>, taken: &[usize]) -> io::Result<Placement> {
        let now = Instant::now();
        self.claims
            .retain(|claim| claim.until.is_none_or(|until| until > now));
        let free = |workers: &Workers, index: usize| {
            claims.is_none_or(|lock| !workers.is_claimed(lock, workers.workers[index].thread, now))
        };
        let least_busy = |workers: &Workers, skip_taken: bool| {
            (0..workers.workers.len())
                .filter(|&index| !(skip_taken && taken.contains(&index)) && free(workers, index))
                .min_by_key(|&index| workers.workers[index].pending.load(Ordering::Acquire))
        };
        let mut chosen = least_busy(self, true);
        let idle =
            chosen.is_some_and(|index| self.workers[index].pending.load(Ordering::Acquire) == 0);
        if !idle && self.workers.len() < MAX_WORKERS {
            match start_worker(self.workers.len()) {
                Ok(worker) => {
                    self.workers.push(worker);
                    chosen = Some(self.workers.len() - 1);
                }
                // Queue behind a busy worker rather than fail.
                Err(err) if chosen.is_none() && least_busy(self, false).is_none() => {
                    return Err(err);
                }
                Err(err) => log::debug!("fan-out: cannot start another worker: {err}"),
            }
        }
        let Some(index) = chosen.or_else(|| least_busy(self, false)) else {
            return Ok(Placement::OwnThread);
        };
        let worker = &self.workers[index];
        worker.pending.fetch_add(1, Ordering::AcqRel);
        if let Some(lock) = claims {
            self.claims.push(Claim {
                client: client_id(lock).to_owned(),
                name: lock.name().to_owned(),
                thread: worker.thread,
                until: None,
            });
        }
        Ok(Placement::Worker(index))
    }
}

/// Starts worker number `index` and learns its thread number.
fn start_worker(index: usize) -> io::Result<Worker> {
    let jobs = Arc::new(Mailbox::default());
    let mailbox = Arc::clone(&jobs);
    let (number_tx, number_rx) = crossbeam_channel::bounded(1);
    thread::Builder::new()
        .name(format!("redis-rlock-fan-out-{index}"))
        .spawn(move || {
            let _ = number_tx.send(crate::owner::current_thread_number());
            // Runs until the process exits.
            loop {
                mailbox.next()();
            }
        })?;
    let thread = number_rx
        .recv()
        .map_err(|_| io::Error::other("a new fan-out worker ended at once"))?;
    Ok(Worker {
        thread,
        jobs,
        pending: Arc::new(AtomicUsize::new(0)),
    })
}

/// The results of one call's tasks, filled in by whoever runs them.
struct Gather<R> {
    slots: Vec<Mutex<Option<thread::Result<R>>>>,
    left: AtomicUsize,
    caller: Thread,
}

impl<R> Gather<R> {
    /// Room for `count` results, for the calling thread to wait on.
    fn new(count: usize) -> Self {
        Gather {
            slots: (0..count).map(|_| Mutex::new(None)).collect(),
            left: AtomicUsize::new(count),
            caller: thread::current(),
        }
    }

    /// Stores task `index`'s result; the last one wakes the caller.
    fn finish(&self, index: usize, result: thread::Result<R>) {
        *self.slots[index].lock() = Some(result);
        self.done();
    }

    /// Counts a task off; the last one wakes the caller.
    fn done(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.caller.unpark();
        }
    }

    /// Waits (on the calling thread) until every task is counted off.
    fn wait_all(&self) {
        while self.left.load(Ordering::Acquire) != 0 {
            thread::park();
        }
    }

    /// The results in the tasks' order, `unplaced` standing for the tasks that never ran.
    /// Panics with the payload of the first task that panicked.
    fn take_results(&self, unplaced: Vec<Option<io::Error>>) -> Vec<io::Result<R>> {
        let mut panicked = None;
        let results = self
            .slots
            .iter()
            .zip(unplaced)
            .map(|(slot, unplaced)| match unplaced {
                Some(err) => Err(err),
                None => match slot.lock().take().expect("every task finished") {
                    Ok(result) => Ok(result),
                    Err(payload) => {
                        panicked.get_or_insert(payload);
                        Err(io::Error::other("the task panicked"))
                    }
                },
            })
            .collect();
        if let Some(payload) = panicked {
            panic::resume_unwind(payload);
        }
        results
    }
}

/// What a task runs, returning `R`.
type TaskJob<R> = Box<dyn FnOnce() -> R + Send>;

/// Where one call's tasks go: chosen under the workers' lock, started after it is released.
struct Plan<R> {
    /// Run by the caller itself.
    here: Vec<(usize, TaskJob<R>)>,
    /// Posted to these workers' mailboxes.
    sends: Vec<(Arc<Mailbox>, Job)>,
    /// Each on a short-lived thread of its own: no worker may take them.
    own_threads: Vec<(usize, TaskJob<R>)>,
    /// By task: the error of one that no thread could be started for.
    unplaced: Vec<Option<io::Error>>,
}

/// Runs `tasks` at once and returns their results in the same order, once all have finished.
///
/// An attempt that no thread could be started for comes back as the error of the spawn (a
/// task that runs anywhere never does: the caller runs it). A task that panicked makes this
/// call panic with its payload, after all the others have finished.
pub(crate) fn run_all<R: Send + 'static>(tasks: Vec<Task<R>>) -> Vec<io::Result<R>> {
    if tasks.is_empty() {
        return Vec::new();
    }
    let gather = Arc::new(Gather::new(tasks.len()));
    let Plan {
        here,
        sends,
        own_threads,
        mut unplaced,
    } = plan(tasks, &gather);
    for (mailbox, job) in sends {
        mailbox.post(job);
    }
    for (index, job) in own_threads {
        if let Err(err) = spawn_own_thread(index, job, &gather) {
            unplaced[index] = Some(err);
            gather.done();
        }
    }
    for (index, job) in here {
        gather.finish(index, panic::catch_unwind(AssertUnwindSafe(job)));
    }
    gather.wait_all();
    gather.take_results(unplaced)
}

/// Chooses where each task runs, claiming workers for attempts; a task that cannot be placed
/// is counted off `gather` with its error in `unplaced`.
fn plan<R: Send + 'static>(tasks: Vec<Task<R>>, gather: &Arc<Gather<R>>) -> Plan<R> {
    let mut plan = Plan {
        here: Vec::new(),
        sends: Vec::new(),
        own_threads: Vec::new(),
        unplaced: (0..tasks.len()).map(|_| None).collect(),
    };
    let mut workers = Workers::of_this_process();
    let mut taken = Vec::new();
    for (index, task) in tasks.into_iter().enumerate() {
        if task.claims.is_none() && plan.here.is_empty() {
            // The caller would only wait: it runs one itself.
            plan.here.push((index, task.job));
            continue;
        }
        match workers.place(task.claims.as_ref(), &taken) {
            Ok(Placement::Worker(worker)) => {
                taken.push(worker);
                let worker = &workers.workers[worker];
                let job = worker_job(worker, index, task.job, gather);
                plan.sends.push((Arc::clone(&worker.jobs), job));
            }
            Ok(Placement::OwnThread) => plan.own_threads.push((index, task.job)),
            Err(err) if task.claims.is_none() => {
                log::debug!("fan-out: no worker for a release ({err}); the caller runs it");
                plan.here.push((index, task.job));
            }
            Err(err) => {
                plan.unplaced[index] = Some(err);
                gather.done();
            }
        }
    }
    plan
}

/// Task `index` as `worker` runs it: its result goes to `gather`.
fn worker_job<R: Send + 'static>(
    worker: &Worker,
    index: usize,
    job: TaskJob<R>,
    gather: &Arc<Gather<R>>,
) -> Job {
    let pending = Arc::clone(&worker.pending);
    let gather = Arc::clone(gather);
    Box::new(move || {
        let result = panic::catch_unwind(AssertUnwindSafe(job));
        // Idle again before the caller hears: its next call may choose it.
        pending.fetch_sub(1, Ordering::AcqRel);
        gather.finish(index, result);
    })
}

/// Runs task `index` on a short-lived thread of its own.
fn spawn_own_thread<R: Send + 'static>(
    index: usize,
    job: TaskJob<R>,
    gather: &Arc<Gather<R>>,
) -> io::Result<()> {
    let for_thread = Arc::clone(gather);
    thread::Builder::new()
        .name("redis-rlock-fan-out-extra".into())
        .spawn(move || for_thread.finish(index, panic::catch_unwind(AssertUnwindSafe(job))))
        .map(drop)
}

/// Ends worker `thread`'s claim on `lock`: at once (`until` is `None`: it holds nothing of it
/// any more), or at `until`, when a hold it may have left on Redis has surely expired. A thread
/// without a claim (a short-lived one, with a number of its own) is ignored.
pub(crate) fn end_claim(lock: &Lock, thread: u64, until: Option<Instant>) {
    let mut workers = Workers::of_this_process();
    let Some(at) = workers
        .claims
        .iter()
        .position(|claim| claim.until.is_none() && claim.is_on(lock, thread))
    else {
        return;
    };
    match until {
        Some(until) => workers.claims[at].until = Some(until),
        None => {
            workers.claims.swap_remove(at);
        }
    }
}

/// The client id of `lock`'s manager: with the name, what a claim is on.
fn client_id(lock: &Lock) -> &str {
    lock.engine_in_any_process().client_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_from_a_few_reused_threads() {
        let caller = thread::current().id();
        let mut threads = std::collections::HashSet::new();
        for _ in 0..50 {
            let tasks = (0..5)
                .map(|i| {
                    Task::anywhere(move || {
                        thread::sleep(std::time::Duration::from_micros(200 * (5 - i)));
                        (i, thread::current().id())
                    })
                })
                .collect();
            let results: Vec<_> = run_all(tasks).into_iter().map(Result::unwrap).collect();
            assert_eq!(
                results.iter().map(|r| r.0).collect::<Vec<_>>(),
                [0, 1, 2, 3, 4]
            );
            // The caller runs one release itself.
            assert_eq!(results[0].1, caller);
            threads.extend(results.iter().map(|r| r.1));
        }
        // 250 tasks, on the caller and at most the process' workers.
        assert!(threads.len() <= MAX_WORKERS + 1, "{}", threads.len());
    }

    #[test]
    fn a_panicking_task_panics_the_call_after_the_others_finished() {
        let finished = Arc::new(AtomicUsize::new(0));
        let tasks = (0..4)
            .map(|i| {
                let finished = Arc::clone(&finished);
                Task::anywhere(move || {
                    if i == 2 {
                        panic!("task 2 fails");
                    }
                    thread::sleep(std::time::Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        let payload = panic::catch_unwind(AssertUnwindSafe(|| run_all(tasks)))
            .expect_err("the panic goes on");
        assert_eq!(crate::threads::panic_message(&*payload), "task 2 fails");
        assert_eq!(finished.load(Ordering::SeqCst), 3);
        // The worker that ran it is still there to run more.
        let again = run_all((0..5).map(|i| Task::anywhere(move || i)).collect());
        assert_eq!(
            again.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
    }
}
