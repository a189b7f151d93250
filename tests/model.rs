//! A model-based property test: random sequences of acquires, re-entries and releases of every
//! lock kind (and of a semaphore's permits), on two shared names, by four actors (two threads
//! in each of two managers), with guards moved between threads, checked after every step
//! against a model of what the server must hold: the hash's fields and hold counts per owner,
//! the read timeout keys, who may hold what (one owner of a lock, readers only with readers),
//! `is_locked`, `hold_count`, `is_held_by_current_thread`, the renewed holds per manager,
//! fencing tokens that only grow, and no guard lost; once every guard is dropped, nothing left.
//!
//! No step blocks: an acquire makes one attempt or waits 30 ms, which nobody can end early
//! (each actor is a thread that runs the steps sent to it over a channel, one at a time). One
//! server serves every case (`FLUSHALL` in between). `PROPTEST_CASES` sets the number of cases
//! (64 by default, of up to 30 steps: about 3 s); a failure is shrunk to a short sequence and
//! printed one step a line.

use redis_rlock_testkit as support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};
use redis::Commands;
use redis_rlock::{AcquireOptions, Error, Lease, LockGuard, LockManager, SemaphorePermits};
use support::RedisServer;

const NAMES: [&str; 2] = ["model:a", "model:b"];
const SEMAPHORE: &str = "model:permits";
const PERMITS: u32 = 2;
const MANAGERS: usize = 2;
const THREADS: usize = 2;
const ACTORS: usize = MANAGERS * THREADS;
/// Short enough that the watchdog renews during a run (every 3 s), long enough that a loaded
/// machine's stalls (up to 6 s) do not lose a lease.
const WATCHDOG: Duration = Duration::from_secs(9);
/// Longer than any run: a fixed lease never runs out here.
const FIXED_LEASE: Duration = Duration::from_secs(120);
/// How long one step may take before the actor counts as blocked.
const STEP_LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Spin,
    Read,
    Write,
}

/// Where a kind counts its holds: the lock's three kinds share one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Family {
    Plain,
    Read,
    Write,
}

impl Kind {
    fn family(self) -> Family {
        match self {
            Kind::Lock | Kind::Fair | Kind::Spin => Family::Plain,
            Kind::Read => Family::Read,
            Kind::Write => Family::Write,
        }
    }
}

/// How an acquire asks: one attempt, or a short wait that nobody can end early (steps run
/// one at a time), which goes through the line, the subscription, a fair lock's queue and
/// leaving them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    TryLock,
    Fenced,
    FixedLease,
    ShortWait,
}

/// A short wait's length.
const SHORT_WAIT: Duration = Duration::from_millis(30);

#[derive(Clone, Copy, PartialEq, Eq)]
struct Actor(usize);

impl Actor {
    fn manager(self) -> usize {
        self.0 / THREADS
    }
}

impl fmt::Debug for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}t{}", self.manager(), self.0 % THREADS)
    }
}

#[derive(Clone, Copy)]
enum Step {
    Acquire {
        actor: Actor,
        kind: Kind,
        name: usize,
        how: How,
    },
    /// Releases the actor's guard number `pick` (modulo how many it has), by `unlock` or drop.
    Release {
        actor: Actor,
        pick: usize,
        unlock: bool,
    },
    /// Moves the actor's guard number `pick` to another actor's thread, which may release it
    /// later: it releases the acquiring thread's hold.
    Give {
        actor: Actor,
        pick: usize,
        to: Actor,
    },
    TakePermit {
        actor: Actor,
    },
    ReturnPermit {
        actor: Actor,
    },
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Acquire {
                actor,
                kind,
                name,
                how,
            } => write!(f, "{actor:?} {how:?} {kind:?} {}", NAMES[*name]),
            Step::Release {
                actor,
                pick,
                unlock,
            } => {
                let how = if *unlock { "unlock" } else { "drop" };
                write!(f, "{actor:?} {how} guard #{pick}")
            }
            Step::Give { actor, pick, to } => write!(f, "{actor:?} give guard #{pick} to {to:?}"),
            Step::TakePermit { actor } => write!(f, "{actor:?} take a permit"),
            Step::ReturnPermit { actor } => write!(f, "{actor:?} return a permit"),
        }
    }
}

fn step() -> impl Strategy<Value = Step> {
    let actor = (0..ACTORS).prop_map(Actor);
    let kind = prop_oneof![
        Just(Kind::Lock),
        Just(Kind::Fair),
        Just(Kind::Spin),
        Just(Kind::Read),
        Just(Kind::Write),
    ];
    let how = prop_oneof![
        Just(How::TryLock),
        Just(How::Fenced),
        Just(How::FixedLease),
        Just(How::ShortWait),
    ];
    prop_oneof![
        4 => (actor.clone(), kind, 0..NAMES.len(), how).prop_map(|(actor, kind, name, how)| {
            Step::Acquire { actor, kind, name, how }
        }),
        3 => (actor.clone(), 0..8usize, any::<bool>())
            .prop_map(|(actor, pick, unlock)| Step::Release { actor, pick, unlock }),
        1 => (actor.clone(), 0..8usize, actor.clone())
            .prop_map(|(actor, pick, to)| Step::Give { actor, pick, to }),
        1 => actor.clone().prop_map(|actor| Step::TakePermit { actor }),
        1 => actor.prop_map(|actor| Step::ReturnPermit { actor }),
    ]
}

/// What an acquire got, as the model predicts it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Granted,
    NotGranted,
    /// `Error::InvalidArgument`: refused before anything was sent.
    Invalid,
    /// `Error::WrongType`: the key holds the other format.
    WrongType,
    Other(String),
}

/// One guard as the model sees it.
#[derive(Clone, Copy)]
struct Guard {
    /// The actor whose thread acquired it, whose hold it is.
    owner: usize,
    name: usize,
    family: Family,
    fixed: bool,
}

/// What the server must hold, and what each actor holds.
#[derive(Default)]
struct Model {
    /// Per name: hold counts per (actor, family).
    holds: Vec<BTreeMap<(usize, Family), u32>>,
    /// Per actor: the guards on its thread.
    guards: Vec<Vec<Guard>>,
    /// Per name: the last fencing token handed out.
    tokens: Vec<u64>,
    free_permits: u32,
    /// Per actor: permits taken.
    permits: Vec<u32>,
}

impl Model {
    fn new() -> Self {
        Model {
            holds: vec![BTreeMap::new(); NAMES.len()],
            guards: vec![Vec::new(); ACTORS],
            tokens: vec![0; NAMES.len()],
            free_permits: PERMITS,
            permits: vec![0; ACTORS],
        }
    }

    fn count(&self, name: usize, actor: usize, family: Family) -> u32 {
        self.holds[name].get(&(actor, family)).copied().unwrap_or(0)
    }

    fn held_by_others(&self, name: usize, actor: usize) -> bool {
        self.holds[name].keys().any(|(a, _)| *a != actor)
    }

    fn plain_held(&self, name: usize) -> bool {
        self.holds[name].keys().any(|(_, f)| *f == Family::Plain)
    }

    fn write_held(&self, name: usize) -> bool {
        self.holds[name].keys().any(|(_, f)| *f == Family::Write)
    }

    /// What an acquire with zero wait gets.
    fn predict(&self, actor: usize, kind: Kind, name: usize, how: How) -> Got {
        let mine = |family| self.count(name, actor, family) > 0;
        let others = self.held_by_others(name, actor);
        match kind.family() {
            Family::Plain if mine(Family::Read) || mine(Family::Write) => Got::Invalid,
            Family::Plain if others => Got::NotGranted,
            Family::Plain => Got::Granted,
            Family::Read if how == How::Fenced => Got::Invalid,
            Family::Write if mine(Family::Read) && !mine(Family::Write) => Got::Invalid,
            _ if self.plain_held(name) => Got::WrongType,
            Family::Read if !self.write_held(name) || mine(Family::Write) => Got::Granted,
            Family::Write if !others => Got::Granted,
            _ => Got::NotGranted,
        }
    }

    fn acquired(&mut self, actor: usize, kind: Kind, name: usize, how: How) {
        *self.holds[name].entry((actor, kind.family())).or_default() += 1;
        self.guards[actor].push(Guard {
            owner: actor,
            name,
            family: kind.family(),
            fixed: how == How::FixedLease,
        });
    }

    fn released(&mut self, actor: usize, index: usize) {
        let guard = self.guards[actor].remove(index);
        let slot = (guard.owner, guard.family);
        let count = self.holds[guard.name].get_mut(&slot).expect("a hold");
        *count -= 1;
        if *count == 0 {
            self.holds[guard.name].remove(&slot);
        }
    }

    /// The hash the server must hold at `name` (empty: no key), by owner field.
    fn hash(&self, name: usize, owners: &[String]) -> HashMap<String, String> {
        let mut hash = HashMap::new();
        for (&(actor, family), count) in &self.holds[name] {
            let field = match family {
                Family::Plain | Family::Read => owners[actor].clone(),
                Family::Write => format!("{}:write", owners[actor]),
            };
            hash.insert(field, count.to_string());
        }
        if !hash.is_empty() && !self.plain_held(name) {
            let mode = if self.write_held(name) {
                "write"
            } else {
                "read"
            };
            hash.insert("mode".into(), mode.into());
        }
        hash
    }

    /// The read timeout keys at `name`: one per read hold, numbered from 1 per owner.
    fn read_timeouts(&self, name: usize, owners: &[String]) -> HashSet<String> {
        let mut keys = HashSet::new();
        for (&(actor, family), &count) in &self.holds[name] {
            if family == Family::Read {
                for n in 1..=count {
                    let owner = &owners[actor];
                    keys.insert(format!("{{{}}}:{owner}:rwlock_timeout:{n}", NAMES[name]));
                }
            }
        }
        keys
    }

    /// What `Lock::hold_count` reads for `actor` at `name`: its field `<owner>`, which a read
    /// lock's holds use too.
    fn field_count(&self, name: usize, actor: usize) -> u32 {
        self.count(name, actor, Family::Plain) + self.count(name, actor, Family::Read)
    }

    /// How many holds of each manager the watchdog renews: one per thread, name and family
    /// with a hold without a fixed lease.
    fn renewing(&self, manager: usize) -> usize {
        let mut slots: Vec<(usize, usize, Family)> = Vec::new();
        for guard in self.guards.iter().flatten() {
            let slot = (guard.owner, guard.name, guard.family);
            if Actor(guard.owner).manager() == manager && !guard.fixed && !slots.contains(&slot) {
                slots.push(slot);
            }
        }
        slots.len()
    }
}

/// What an actor is told to do.
enum Command {
    Acquire(Kind, String, How),
    Release(usize, bool),
    /// Hands guard number `.0` back, to be given to another actor.
    Give(usize),
    Take(LockGuard),
    TakePermit,
    ReturnPermit,
    /// `hold_count` and `is_held_by_current_thread` per name, and whether any guard is lost.
    Inspect,
    /// Drops every guard and permit.
    Reset,
}

enum Reply {
    Acquired(Got, Option<u64>),
    Released(Result<(), String>),
    Given(LockGuard),
    Permit(Result<bool, String>),
    Inspected(Vec<(u32, bool)>, usize),
    Done,
}

/// One actor: a thread of one manager that holds its guards.
struct ActorThread {
    commands: Sender<Command>,
    replies: Receiver<Reply>,
    /// Its owner field, `<client id>:<thread number>`.
    owner: String,
}

impl ActorThread {
    fn spawn(manager: LockManager, server: &RedisServer, index: usize) -> Self {
        let (commands, inbox) = mpsc::channel();
        let (outbox, replies) = mpsc::channel();
        let mut conn = server.conn();
        thread::spawn(move || run_actor(manager, inbox, outbox));
        let actor = ActorThread {
            commands,
            replies,
            owner: String::new(),
        };
        // The owner field, read off a lock it takes once.
        let probe = format!("model:probe:{index}");
        let Reply::Acquired(Got::Granted, _) =
            actor.ask(Command::Acquire(Kind::Lock, probe.clone(), How::TryLock))
        else {
            panic!("the probe lock");
        };
        let fields: Vec<String> = conn.hkeys(&probe).unwrap();
        actor.ask(Command::Reset);
        ActorThread {
            owner: fields.into_iter().next().expect("the probe's owner field"),
            ..actor
        }
    }

    fn ask(&self, command: Command) -> Reply {
        self.commands.send(command).expect("the actor runs");
        self.replies
            .recv_timeout(STEP_LIMIT)
            .expect("the actor answers within the step limit: no step may block")
    }
}

fn run_actor(manager: LockManager, inbox: Receiver<Command>, outbox: Sender<Reply>) {
    let mut guards: Vec<LockGuard> = Vec::new();
    let mut permits: Vec<SemaphorePermits> = Vec::new();
    for command in inbox {
        let reply = match command {
            Command::Acquire(kind, name, how) => {
                let (got, token) = acquire(&manager, kind, &name, how, &mut guards);
                Reply::Acquired(got, token)
            }
            Command::Release(index, unlock) => {
                let guard = guards.remove(index);
                let result = if unlock {
                    guard.unlock()
                } else {
                    drop(guard);
                    Ok(())
                };
                Reply::Released(result.map_err(|e| e.to_string()))
            }
            Command::Give(index) => Reply::Given(guards.remove(index)),
            Command::Take(guard) => {
                guards.push(guard);
                Reply::Done
            }
            Command::TakePermit => {
                let semaphore = manager.get_semaphore(SEMAPHORE);
                Reply::Permit(
                    semaphore
                        .try_acquire_guard(1, Duration::ZERO)
                        .map(|permit| match permit {
                            Some(permit) => {
                                permits.push(permit);
                                true
                            }
                            None => false,
                        })
                        .map_err(|e| e.to_string()),
                )
            }
            Command::ReturnPermit => {
                let permit = permits.pop().expect("the model counts permits");
                Reply::Permit(permit.release().map(|()| true).map_err(|e| e.to_string()))
            }
            Command::Inspect => {
                let seen = NAMES
                    .iter()
                    .map(|name| {
                        let lock = manager.get_lock(name);
                        let count = lock.hold_count().expect("hold_count");
                        let held = lock.is_held_by_current_thread().expect("is_held");
                        (count, held)
                    })
                    .collect();
                let lost = guards.iter().filter(|g| g.is_lost()).count();
                Reply::Inspected(seen, lost)
            }
            Command::Reset => {
                guards.clear();
                permits.clear();
                Reply::Done
            }
        };
        if outbox.send(reply).is_err() {
            return;
        }
    }
}

fn acquire(
    manager: &LockManager,
    kind: Kind,
    name: &str,
    how: How,
    guards: &mut Vec<LockGuard>,
) -> (Got, Option<u64>) {
    let mut options = AcquireOptions::new().wait(Duration::ZERO);
    match how {
        How::TryLock => {}
        How::Fenced => options = options.fenced(true),
        How::FixedLease => options = options.lease(Lease::Fixed(FIXED_LEASE)),
        How::ShortWait => options = options.wait(SHORT_WAIT),
    }
    let outcome = match kind {
        Kind::Lock => manager.get_lock(name).acquire(options),
        Kind::Fair => manager.get_fair_lock(name).acquire(options),
        Kind::Spin => manager.get_spin_lock(name).acquire(options),
        Kind::Read => manager
            .get_read_write_lock(name)
            .read_lock()
            .acquire(options),
        Kind::Write => manager
            .get_read_write_lock(name)
            .write_lock()
            .acquire(options),
    };
    match outcome {
        Ok(Some(guard)) => {
            let token = guard.fencing_token();
            guards.push(guard);
            (Got::Granted, token)
        }
        Ok(None) => (Got::NotGranted, None),
        Err(Error::InvalidArgument { .. }) => (Got::Invalid, None),
        Err(Error::WrongType { .. }) => (Got::WrongType, None),
        Err(other) => (Got::Other(other.to_string()), None),
    }
}

/// The server, the two managers and the four actors, shared by every case.
struct World {
    // Field order is drop order: the actors and managers go before their server.
    actors: Vec<ActorThread>,
    managers: Vec<LockManager>,
    conn: std::cell::RefCell<redis::Connection>,
    _server: RedisServer,
}

impl World {
    fn start() -> Self {
        let server = RedisServer::start();
        let managers: Vec<LockManager> = (0..MANAGERS)
            .map(|_| support::manager_with_watchdog(&server, WATCHDOG))
            .collect();
        let actors = (0..ACTORS)
            .map(|i| ActorThread::spawn(managers[Actor(i).manager()].clone(), &server, i))
            .collect();
        let conn = std::cell::RefCell::new(server.conn());
        World {
            actors,
            managers,
            conn,
            _server: server,
        }
    }

    fn owners(&self) -> Vec<String> {
        self.actors.iter().map(|a| a.owner.clone()).collect()
    }

    /// Every actor lets go of everything, and the server starts empty.
    fn reset(&self) {
        for actor in &self.actors {
            actor.ask(Command::Reset);
        }
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut *self.conn.borrow_mut())
            .unwrap();
        let semaphore = self.managers[0].get_semaphore(SEMAPHORE);
        assert!(semaphore.try_set_permits(PERMITS).unwrap());
    }

    fn run(&self, steps: &[Step]) -> std::result::Result<(), String> {
        self.reset();
        let mut model = Model::new();
        for (i, step) in steps.iter().enumerate() {
            self.apply(&mut model, *step)
                .and_then(|()| self.check(&model))
                .map_err(|why| format!("step {i} ({step:?}): {why}"))?;
        }
        for actor in &self.actors {
            actor.ask(Command::Reset);
        }
        self.nothing_left()
            .map_err(|why| format!("once every guard was dropped: {why}"))
    }

    /// Every guard dropped, nothing of the locks is left on the server but what expires by
    /// itself (attempt markers and unlock latches) and the fencing counters (kept for good).
    fn nothing_left(&self) -> std::result::Result<(), String> {
        let keys: Vec<String> = self.conn.borrow_mut().keys("*").unwrap();
        let left: Vec<&String> = keys
            .iter()
            .filter(|k| *k != SEMAPHORE && !k.starts_with("redis_rlock__attempt:"))
            .filter(|k| !k.starts_with("redisson_unlock_latch:"))
            .filter(|k| !k.starts_with("redisson_lock_token:"))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        Err(format!("keys left: {left:?}"))
    }

    fn apply(&self, model: &mut Model, step: Step) -> std::result::Result<(), String> {
        match step {
            Step::Acquire {
                actor,
                kind,
                name,
                how,
            } => {
                let expected = model.predict(actor.0, kind, name, how);
                let Reply::Acquired(got, token) =
                    self.actors[actor.0].ask(Command::Acquire(kind, NAMES[name].into(), how))
                else {
                    unreachable!()
                };
                if got != expected {
                    return Err(format!("expected {expected:?}, got {got:?}"));
                }
                if got == Got::Granted {
                    model.acquired(actor.0, kind, name, how);
                    match (how, token) {
                        (How::Fenced, Some(token)) if token > model.tokens[name] => {
                            model.tokens[name] = token
                        }
                        (How::Fenced, token) => {
                            return Err(format!("token {token:?} after {}", model.tokens[name]))
                        }
                        (_, None) => {}
                        (_, Some(token)) => return Err(format!("an unfenced token {token}")),
                    }
                }
            }
            Step::Release {
                actor,
                pick,
                unlock,
            } => {
                let count = model.guards[actor.0].len();
                if count == 0 {
                    return Ok(());
                }
                let index = pick % count;
                model.released(actor.0, index);
                let Reply::Released(result) =
                    self.actors[actor.0].ask(Command::Release(index, unlock))
                else {
                    unreachable!()
                };
                result.map_err(|e| format!("the release failed: {e}"))?;
            }
            Step::Give { actor, pick, to } => {
                let count = model.guards[actor.0].len();
                if count == 0 {
                    return Ok(());
                }
                let index = pick % count;
                let guard = model.guards[actor.0].remove(index);
                model.guards[to.0].push(guard);
                let Reply::Given(guard) = self.actors[actor.0].ask(Command::Give(index)) else {
                    unreachable!()
                };
                self.actors[to.0].ask(Command::Take(guard));
            }
            Step::TakePermit { actor } => {
                let Reply::Permit(got) = self.actors[actor.0].ask(Command::TakePermit) else {
                    unreachable!()
                };
                let expected = model.free_permits > 0;
                if got != Ok(expected) {
                    return Err(format!("expected a permit: {expected}, got {got:?}"));
                }
                if expected {
                    model.free_permits -= 1;
                    model.permits[actor.0] += 1;
                }
            }
            Step::ReturnPermit { actor } => {
                if model.permits[actor.0] == 0 {
                    return Ok(());
                }
                let Reply::Permit(got) = self.actors[actor.0].ask(Command::ReturnPermit) else {
                    unreachable!()
                };
                got.map_err(|e| format!("returning a permit failed: {e}"))?;
                model.permits[actor.0] -= 1;
                model.free_permits += 1;
            }
        }
        Ok(())
    }

    /// The server and every actor's view against the model.
    fn check(&self, model: &Model) -> std::result::Result<(), String> {
        let owners = self.owners();
        let mut conn = self.conn.borrow_mut();
        for (name, key) in NAMES.iter().enumerate() {
            let hash: HashMap<String, String> = conn.hgetall(*key).unwrap();
            exclusive(key, &hash)?;
            let expected = model.hash(name, &owners);
            if hash != expected {
                return Err(format!("{key} holds {hash:?}, the model {expected:?}"));
            }
            let pttl: i64 = conn.pttl(*key).unwrap();
            if !hash.is_empty() && pttl <= 0 {
                return Err(format!("{key} has no lease (PTTL {pttl})"));
            }
            let timeouts: HashSet<String> = conn.keys(format!("{{{key}}}:*")).unwrap();
            let expected = model.read_timeouts(name, &owners);
            if timeouts != expected {
                return Err(format!(
                    "{key}'s read timeout keys are {timeouts:?}, the model {expected:?}"
                ));
            }
            let locked = self.managers[0].get_lock(key).is_locked().unwrap();
            if locked == hash.is_empty() {
                return Err(format!("{key}: is_locked says {locked}"));
            }
        }
        let permits = self.managers[1]
            .get_semaphore(SEMAPHORE)
            .available_permits()
            .unwrap();
        if permits != u64::from(model.free_permits) {
            return Err(format!(
                "{permits} permits free, the model {}",
                model.free_permits
            ));
        }
        for (i, actor) in self.actors.iter().enumerate() {
            let Reply::Inspected(seen, lost) = actor.ask(Command::Inspect) else {
                unreachable!()
            };
            if lost > 0 {
                return Err(format!("{:?}: {lost} guards lost", Actor(i)));
            }
            for (name, (count, held)) in seen.into_iter().enumerate() {
                let expected = model.field_count(name, i);
                if count != expected || held != (expected > 0) {
                    return Err(format!(
                        "{:?} on {}: hold_count {count}, is_held_by_current_thread {held}; \
                         the model {expected}",
                        Actor(i),
                        NAMES[name]
                    ));
                }
            }
        }
        for (m, manager) in self.managers.iter().enumerate() {
            let renewing = manager.renewing_count();
            // The probe names are gone; only the model's names are held.
            if renewing != model.renewing(m) {
                return Err(format!(
                    "manager {m} renews {renewing} holds, the model {}",
                    model.renewing(m)
                ));
            }
        }
        Ok(())
    }
}

/// Mutual exclusion on the server, whatever the model says: one owner of a lock; a read-write
/// lock's writer alone (with its own read holds); readers only in read mode.
fn exclusive(key: &str, hash: &HashMap<String, String>) -> std::result::Result<(), String> {
    let owners: Vec<&str> = hash
        .keys()
        .filter(|f| *f != "mode")
        .map(|f| f.trim_end_matches(":write"))
        .collect();
    let writers = hash.keys().filter(|f| f.ends_with(":write")).count();
    let broken = match hash.get("mode").map(String::as_str) {
        None => owners.len() > 1,
        Some("write") => writers != 1 || owners.iter().any(|o| *o != owners[0]),
        Some(_) => writers > 0,
    };
    if broken {
        return Err(format!("mutual exclusion broken at {key}: {hash:?}"));
    }
    Ok(())
}

#[test]
fn random_sequences_of_every_kind_on_shared_names_match_the_model() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64);
    let world = World::start();
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let steps = proptest::collection::vec(step(), 1..=30);
    let outcome = runner.run(&steps, |steps| {
        world.run(&steps).map_err(TestCaseError::fail)
    });
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(why, steps)) => {
            let lines: Vec<String> = steps.iter().map(|s| format!("  {s:?}")).collect();
            panic!("{why}\nafter these steps:\n{}", lines.join("\n"));
        }
        Err(TestError::Abort(why)) => panic!("aborted: {why}"),
    }
}
