//! What workers record, one line per event, and how it is read back: plain text, one record
//! per line, fields separated by spaces (no field contains one), so a history that a killed
//! worker left half-written still parses up to its last whole line.

use std::fmt;

/// Which lock a round used: the fenced one (writes to the store), or one of the short rounds'
/// locks (plain, spin, string: each its own name; and a spin lock on the plain lock's name,
/// which the two kinds share: one hash); or a long wait: the waited lock, which
/// every process's waiter thread contends for, or the process's own lock, which its fresh
/// thread takes again and again (so that calls start during a fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Fenced,
    Plain,
    /// `get_spin_lock`: Redisson's hash, no unlock message, waiters woken by client tracking.
    Spin,
    /// `get_string_lock`: redis-py's `SET NX PX` string, no unlock message, tracking too.
    StringLock,
    /// `get_spin_lock` on the plain lock's name: a silent holder that plain waiters must find
    /// (tracking after 100 ms without a message), and a plain holder that spin waiters find.
    SpinOnPlain,
    Waited,
    Fresh,
}

/// The locks whose holds the checker compares for overlaps, as [`Kind::lock`] names them.
pub const LOCKS: [&str; 3] = ["plain", "spin", "string"];

impl Kind {
    /// Which of [`LOCKS`] a hold of this kind is a hold of (holds of one lock, whatever their
    /// kind, exclude each other), or `None` for the locks the overlap check leaves alone.
    pub fn lock(self) -> Option<&'static str> {
        match self {
            Kind::Plain | Kind::SpinOnPlain => Some("plain"),
            Kind::Spin => Some("spin"),
            Kind::StringLock => Some("string"),
            Kind::Fenced | Kind::Waited | Kind::Fresh => None,
        }
    }

    /// A call with a wait longer than any failover: it must not fail inside it.
    pub fn waits_long(self) -> bool {
        matches!(self, Kind::Waited | Kind::Fresh)
    }
}

/// What the fenced write of a hold got from the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Accepted,
    Refused,
    /// The store could not be reached (a partitioned client), or no write was made.
    Failed,
    None,
}

/// How a hold ended, as the holder saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Not lost by the guard's own account and released with `Ok`: the holder believed it held
    /// the lock the whole time.
    Held,
    /// The guard said it was lost, or the unlock answered `NotHeld`: the library told the
    /// holder, as the README promises after restarts and pauses.
    Lost,
    /// The unlock failed otherwise (the server unreachable): the holder cannot know.
    Unknown,
}

/// One critical section: times on the shared clock (ns).
#[derive(Clone, Debug)]
pub struct Hold {
    pub kind: Kind,
    /// `<process>:<thread>`.
    pub owner: String,
    pub process: usize,
    pub call_start: u64,
    pub acquired: u64,
    pub left: u64,
    pub token: Option<u64>,
    pub write: Write,
    pub end: End,
}

/// An acquire that returned without the lock (its wait ran out, or an error).
#[derive(Clone, Debug)]
pub struct Fail {
    pub kind: Kind,
    pub process: usize,
    pub call_start: u64,
    pub at: u64,
    pub reason: String,
}

pub enum Record {
    Hold(Hold),
    Fail(Fail),
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Fenced => "fenced",
            Kind::Plain => "plain",
            Kind::Spin => "spin",
            Kind::StringLock => "string",
            Kind::SpinOnPlain => "spin-on-plain",
            Kind::Waited => "waited",
            Kind::Fresh => "fresh",
        })
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Hold(h) => write!(
                f,
                "hold {} {} {} {} {} {} {} {:?} {:?}",
                h.kind,
                h.owner,
                h.process,
                h.call_start,
                h.acquired,
                h.left,
                h.token.map_or(0, |t| t),
                h.write,
                h.end
            ),
            Record::Fail(x) => {
                let reason: String = x.reason.split_whitespace().collect::<Vec<_>>().join("_");
                write!(
                    f,
                    "fail {} {} {} {} {}",
                    x.kind, x.process, x.call_start, x.at, reason
                )
            }
        }
    }
}

/// Parses one line; `None` for a line cut short or unknown.
pub fn parse(line: &str) -> Option<Record> {
    let f: Vec<&str> = line.split(' ').collect();
    let kind = match *f.get(1)? {
        "fenced" => Kind::Fenced,
        "plain" => Kind::Plain,
        "spin" => Kind::Spin,
        "string" => Kind::StringLock,
        "spin-on-plain" => Kind::SpinOnPlain,
        "waited" => Kind::Waited,
        "fresh" => Kind::Fresh,
        _ => return None,
    };
    match (f[0], f.len()) {
        ("hold", 10) => Some(Record::Hold(Hold {
            kind,
            owner: f[2].to_string(),
            process: f[3].parse().ok()?,
            call_start: f[4].parse().ok()?,
            acquired: f[5].parse().ok()?,
            left: f[6].parse().ok()?,
            token: f[7].parse().ok().filter(|&t: &u64| t > 0),
            write: parse_write(f[8])?,
            end: parse_end(f[9])?,
        })),
        ("fail", 6) => Some(Record::Fail(Fail {
            kind,
            process: f[2].parse().ok()?,
            call_start: f[3].parse().ok()?,
            at: f[4].parse().ok()?,
            reason: f[5].to_string(),
        })),
        _ => None,
    }
}

fn parse_write(s: &str) -> Option<Write> {
    Some(match s {
        "Accepted" => Write::Accepted,
        "Refused" => Write::Refused,
        "Failed" => Write::Failed,
        "None" => Write::None,
        _ => return None,
    })
}

fn parse_end(s: &str) -> Option<End> {
    Some(match s {
        "Held" => End::Held,
        "Lost" => End::Lost,
        "Unknown" => End::Unknown,
        _ => return None,
    })
}

/// Every record of a history file (whole lines only).
pub fn read(path: &std::path::Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse)
        .collect()
}
