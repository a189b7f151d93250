//! The pub/sub listener's own connection, in RESP3 or RESP2 ([`PubSubProtocol`]), and what
//! it hears, read the same way in both.
//!
//! RESP3 (`HELLO 3`) is preferred: messages and subscription confirmations arrive as push
//! values, which redis-rs never mistakes for a command's reply. Some endpoints refuse
//! `HELLO` (ElastiCache's configuration endpoint, Redis Enterprise databases with RESP3 off,
//! Envoy, kvrocks); with [`PubSubProtocol::Auto`] the listener then speaks RESP2 on a
//! dedicated subscribed connection, as redis-rs' sync `PubSub` does, but reads every value
//! itself: `PubSub` drops the `smessage` of sharded pub/sub, the subscription confirmations
//! and the error replies, all of which the listener needs.
//!
//! One RESP2 trap: redis-rs counts a read that timed out (or was interrupted) as a reply still
//! owed, and skips the next non-push value it reads; in RESP2 every message is a plain array,
//! so the next message would be dropped. Each such read is therefore followed by a
//! `PING <marker>`, whose reply (`["pong", marker]`) is the value skipped. A message that
//! arrives before that reply is skipped in its place, and the reply then comes through: the
//! listener is told ([`Heard::Missed`]) and lets every waiter look again. This costs a PING
//! per read tick of an idle RESP2 listener (two a second).

use redis::{Connection, PushKind, RedisResult, ServerError, Value};

/// Which protocol the pub/sub listener speaks (see
/// [`LockManagerBuilder::pubsub_protocol`](crate::LockManagerBuilder::pubsub_protocol)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PubSubProtocol {
    /// RESP3 where the server accepts `HELLO 3`, RESP2 where it refuses it (the first refusal
    /// is logged; that server is not asked again).
    #[default]
    Auto,
    /// RESP3 only: a server that refuses `HELLO 3` fails
    /// [`build`](crate::LockManagerBuilder::build) with [`Error::Connect`](crate::Error::Connect).
    Resp3,
    /// RESP2 only, also where RESP3 would work: costs a `PING` per idle read tick (two a
    /// second per listener) that RESP3 does without.
    Resp2,
}

/// The payload of the PINGs that stand in for a timed-out read (see the module's docs).
const PING_MARKER: &str = "redis_rlock__tick";

/// What the listener's connection heard.
#[derive(Debug)]
pub(crate) enum Heard {
    /// A message, a confirmation or a server-sent unsubscribe: its kind, then the channel
    /// and the rest, as RESP3 pushes carry them.
    Push(PushKind, Vec<Value>),
    /// An error reply (to a subscription: which one is not said).
    Error(ServerError),
    /// RESP2 only: a value was skipped in a PING reply's place, so a message or a
    /// confirmation may have been lost.
    Missed,
    /// Anything else (nothing the listener waits for).
    Other,
}

/// A pub/sub connection in either protocol.
pub(crate) struct PubSubConnection {
    conn: Connection,
    resp2: bool,
}

impl PubSubConnection {
    pub(crate) fn new(conn: Connection, resp2: bool) -> Self {
        PubSubConnection { conn, resp2 }
    }

    /// Whether it speaks RESP2.
    pub(crate) fn is_resp2(&self) -> bool {
        self.resp2
    }

    /// The connection itself, for a caller that reads its replies raw (the channel rights'
    /// probe reads one reply per command, RESP2 or not).
    pub(crate) fn raw(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Sends `command channel` without waiting for anything.
    pub(crate) fn send(&mut self, command: &str, channel: &str) -> RedisResult<()> {
        self.conn
            .send_packed_command(&redis::cmd(command).arg(channel).get_packed_command())
    }

    /// Reads one value, within the read timeout. A read that timed out or was interrupted
    /// is returned as its error; on RESP2 a PING is sent first to take the skip that redis-rs
    /// now owes (see the module's docs).
    pub(crate) fn recv(&mut self) -> RedisResult<Heard> {
        match self.conn.recv_response() {
            Ok(value) => Ok(self.heard(value)),
            Err(err) => {
                if self.resp2 && (err.is_timeout() || crate::error::is_interrupted(&err)) {
                    let ping = redis::cmd("PING").arg(PING_MARKER).get_packed_command();
                    self.conn.send_packed_command(&ping)?;
                }
                Err(err)
            }
        }
    }

    fn heard(&self, value: Value) -> Heard {
        match value {
            Value::Push { kind, data } => Heard::Push(kind, data),
            Value::ServerError(err) => Heard::Error(err),
            Value::Array(items) if self.resp2 => resp2_push(items),
            // A PING answered outside subscribed mode (the control channel's subscription
            // was refused): the same stand-in.
            Value::BulkString(bytes) if self.resp2 && bytes == PING_MARKER.as_bytes() => {
                Heard::Missed
            }
            _ => Heard::Other,
        }
    }
}

/// A RESP2 pub/sub array (`[kind, channel, ...]`) as the push it would be in RESP3.
fn resp2_push(mut items: Vec<Value>) -> Heard {
    let kind = match items.first() {
        Some(Value::BulkString(kind)) => kind.to_ascii_lowercase(),
        _ => return Heard::Other,
    };
    let kind = match kind.as_slice() {
        b"message" => PushKind::Message,
        b"smessage" => PushKind::SMessage,
        b"subscribe" => PushKind::Subscribe,
        b"ssubscribe" => PushKind::SSubscribe,
        b"unsubscribe" => PushKind::Unsubscribe,
        b"sunsubscribe" => PushKind::SUnsubscribe,
        b"pong" => return Heard::Missed,
        _ => return Heard::Other,
    };
    items.remove(0);
    Heard::Push(kind, items)
}

/// Whether a RESP3 connect failed because the server refused `HELLO 3` (an unknown
/// command, `NOPROTO`, or any other error reply but a refused password), not because it is
/// unreachable: it may then speak RESP2.
pub(crate) fn refused_hello(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::RESP3NotSupported {
        return true;
    }
    !err.is_io_error()
        && !err.is_timeout()
        && err.kind() != redis::ErrorKind::AuthenticationFailed
        && !matches!(err.code(), None | Some("WRONGPASS" | "NOAUTH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_arrays_read_as_the_pushes_of_resp3() {
        let conn_heard = resp2_push;
        match conn_heard(vec![bulk("smessage"), bulk("ch"), bulk("0")]) {
            Heard::Push(PushKind::SMessage, data) => assert_eq!(data, vec![bulk("ch"), bulk("0")]),
            other => panic!("{other:?}"),
        }
        match conn_heard(vec![bulk("subscribe"), bulk("ch"), Value::Int(1)]) {
            Heard::Push(PushKind::Subscribe, data) => assert_eq!(data[0], bulk("ch")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            conn_heard(vec![bulk("pong"), bulk(PING_MARKER)]),
            Heard::Missed
        ));
        assert!(matches!(conn_heard(vec![Value::Int(3)]), Heard::Other));
    }

    #[test]
    fn a_connect_that_failed_otherwise_is_not_a_refused_hello() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!refused_hello(&redis::RedisError::from(io)));
        let auth = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "no"));
        assert!(!refused_hello(&auth));
        let unsupported = redis::RedisError::from((redis::ErrorKind::RESP3NotSupported, "no"));
        assert!(refused_hello(&unsupported));
    }
}
