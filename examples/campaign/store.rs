//! The fenced resource: a redis-server of its own that no fault touches, with a script that
//! accepts a write only if its token is greater than every token accepted before, and appends
//! every write, accepted or refused, to a ledger the checker reads back afterwards.
//!
//! Strictly greater: each fenced hold writes once, so a token seen twice is a token issued
//! twice, and its second write must not pass.

use std::time::Duration;

use super::history::Write;

const FENCED_WRITE: &str = r"
local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
local accepted = token > highest
if accepted then redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. (accepted and '1' or '0') .. ' ' .. ARGV[2])
if accepted then return 1 end
return 0
";

/// One worker thread's connection to the store, for one campaign row (`row` names its keys).
pub struct Store {
    conn: Option<redis::Connection>,
    url: String,
    row: String,
    script: redis::Script,
}

impl Store {
    pub fn new(url: &str, row: &str) -> Self {
        Store {
            conn: None,
            url: url.to_string(),
            row: row.to_string(),
            script: redis::Script::new(FENCED_WRITE),
        }
    }

    /// Offers `token`'s write by `writer`; `Failed` when the store cannot be reached (a
    /// partitioned client), which the next write tries again with a new connection.
    pub fn write(&mut self, token: u64, writer: &str) -> Write {
        let (high, ledger) = keys(&self.row);
        let script = self.script.clone();
        let Some(conn) = self.connection() else {
            return Write::Failed;
        };
        let answer: redis::RedisResult<i64> = script
            .key(high)
            .key(ledger)
            .arg(token)
            .arg(writer)
            .invoke(conn);
        match answer {
            Ok(1) => Write::Accepted,
            Ok(_) => Write::Refused,
            Err(_) => {
                self.conn = None;
                Write::Failed
            }
        }
    }

    fn connection(&mut self) -> Option<&mut redis::Connection> {
        if self.conn.is_none() {
            let client = redis::Client::open(self.url.as_str()).ok()?;
            let conn = client
                .get_connection_with_timeout(Duration::from_secs(1))
                .ok()?;
            conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            conn.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
            self.conn = Some(conn);
        }
        self.conn.as_mut()
    }
}

/// One write in the store's ledger, in the order the store saw them.
pub struct Entry {
    pub token: u64,
    pub accepted: bool,
}

/// The ledger of a row, read by the driver after every worker stopped.
pub fn ledger(conn: &mut redis::Connection, row: &str) -> Vec<Entry> {
    let (_, ledger) = keys(row);
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(ledger)
        .arg(0)
        .arg(-1)
        .query(conn)
        .expect("LRANGE of the store's ledger");
    lines
        .iter()
        .filter_map(|line| {
            let mut f = line.split(' ');
            let token = f.next()?.parse().ok()?;
            let accepted = f.next()? == "1";
            Some(Entry { token, accepted })
        })
        .collect()
}

fn keys(row: &str) -> (String, String) {
    (
        format!("store:{row}:highest"),
        format!("store:{row}:ledger"),
    )
}
