//! A TCP proxy in front of a redis-server that the tests control: it forwards bytes both ways
//! and can drop the next reply, delay replies, hold back requests that contain some bytes, or
//! cut every connection. Like the proxies and managed services in front of real deployments,
//! it can also answer commands with an error reply of its choosing ([`Proxy::refuse`],
//! [`Proxy::refuse_next`], [`Proxy::refuse_cross_slot`]): refuse `HELLO`, `WAIT`, or a
//! script call whose keys are in different cluster slots.
//!
//! Loopback only; its threads end when the proxy is dropped (connections are shut down).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Replies (server-to-client reads) still to swallow.
    drop_replies: AtomicUsize,
    /// Replies still to swallow while cutting their connection.
    cut_replies: AtomicUsize,
    /// Replies to let through before the next one swallowed.
    skip_replies: AtomicUsize,
    /// Replies swallowed so far.
    dropped: AtomicUsize,
    stopped: AtomicBool,
    /// Both ends of every connection, to cut them.
    streams: Mutex<Vec<TcpStream>>,
    /// How long every reply is held back, in µs: a uniformly slow server, or a network.
    reply_delay_us: AtomicUsize,
    /// Requests (client-to-server reads) containing these bytes wait until it is cleared.
    hold_requests: Mutex<Option<Vec<u8>>>,
    /// How many more matching requests are held back; the later ones pass (`usize::MAX`:
    /// all of them).
    hold_left: AtomicUsize,
    /// Requests held back so far.
    held: AtomicUsize,
    /// Commands answered with an error reply instead of by the server.
    refusals: Mutex<Vec<Refusal>>,
    /// Script calls whose keys are in different slots are answered with CROSSSLOT.
    cross_slot: AtomicBool,
    /// Error replies given so far in the server's stead.
    refused: AtomicUsize,
}

/// Commands the proxy answers with an error reply.
struct Refusal {
    /// The command's name, upper-case.
    command: Vec<u8>,
    /// Only commands with an argument containing these bytes (all when empty).
    containing: Vec<u8>,
    /// The error reply, without the leading `-`.
    error: String,
    /// How many more such commands are refused (`usize::MAX`: all).
    left: usize,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `127.0.0.1:target`.
    pub fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut streams = accepting.streams.lock().unwrap();
                    streams.push(client.try_clone().unwrap());
                    streams.push(server.try_clone().unwrap());
                }
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    Direction::Requests,
                    Arc::clone(&accepting),
                );
                pump(server, client, Direction::Replies, Arc::clone(&accepting));
            }
        });
        Proxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The next reply the server sends (on any connection) never reaches the client: the
    /// command ran, its answer is lost.
    pub fn drop_next_reply(&self) {
        self.shared.drop_replies.fetch_add(1, Ordering::SeqCst);
    }

    /// The reply after the next `skip` replies (on any connection) never reaches the client:
    /// for a command whose reply comes after others (a `WAIT` after its acquire).
    pub fn drop_reply_after(&self, skip: usize) {
        self.shared.skip_replies.store(skip, Ordering::SeqCst);
        self.shared.drop_replies.fetch_add(1, Ordering::SeqCst);
    }

    /// The next reply the server sends (on any connection) never reaches the client, and
    /// that connection is cut: the command ran, and the client sees its connection die.
    pub fn cut_at_next_reply(&self) {
        self.shared.cut_replies.fetch_add(1, Ordering::SeqCst);
    }

    /// Every reply from now on reaches the client `delay` late (each read from the server is
    /// held that long): a server that answers everything slowly, without timing out.
    pub fn delay_replies(&self, delay: std::time::Duration) {
        let us = usize::try_from(delay.as_micros()).unwrap_or(usize::MAX);
        self.shared.reply_delay_us.store(us, Ordering::SeqCst);
    }

    /// From now on, a request (on any connection) containing `bytes` is held back, with
    /// whatever else its connection sends after it, until [`Proxy::release_requests`]: the
    /// server runs it late, while the client already counts it as sent.
    pub fn hold_requests_containing(&self, bytes: &[u8]) {
        self.hold_first_requests_containing(bytes, usize::MAX);
    }

    /// From now on, the next `count` requests containing `bytes` are held back as by
    /// [`Proxy::hold_requests_containing`], and later ones pass: a first send delayed on
    /// its way while the client's resend gets through.
    pub fn hold_first_requests_containing(&self, bytes: &[u8], count: usize) {
        let mut pattern = self.shared.hold_requests.lock().unwrap();
        self.shared.hold_left.store(count, Ordering::SeqCst);
        *pattern = Some(bytes.to_vec());
    }

    /// Lets the held-back requests through, and holds back no more.
    pub fn release_requests(&self) {
        *self.shared.hold_requests.lock().unwrap() = None;
    }

    /// Every command named `command` (any case) is answered with the error reply `error`
    /// (without the leading `-`), from now on: `refuse("HELLO", "ERR unknown command 'HELLO'")`
    /// is a proxy that speaks RESP2 only.
    pub fn refuse(&self, command: &str, error: &str) {
        self.refuse_next(command, b"", error, usize::MAX);
    }

    /// The next `times` commands named `command` with an argument containing `containing`
    /// (any, when empty) are answered with the error reply `error` (without the leading `-`).
    pub fn refuse_next(&self, command: &str, containing: &[u8], error: &str, times: usize) {
        self.shared.refusals.lock().unwrap().push(Refusal {
            command: command.to_ascii_uppercase().into_bytes(),
            containing: containing.to_vec(),
            error: error.to_owned(),
            left: times,
        });
    }

    /// From now on, an `EVAL` or `EVALSHA` whose keys do not all hash to one cluster slot is
    /// answered with CROSSSLOT, as a cluster proxy in front of several shards does.
    pub fn refuse_cross_slot(&self) {
        self.shared.cross_slot.store(true, Ordering::SeqCst);
    }

    /// How many commands were answered with an error reply in the server's stead.
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }

    /// How many requests were held back so far.
    pub fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// How many replies were swallowed.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Cuts every connection open now (both sides see a reset or EOF).
    pub fn cut_all(&self) {
        for stream in self.shared.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    /// Client to server: requests may be held back.
    Requests,
    /// Server to client: replies may be swallowed or delayed.
    Replies,
}

/// Holds `request` back while the proxy holds back requests containing some bytes it has.
fn hold_if_matching(shared: &Shared, request: &[u8]) {
    let matches = |pattern: &Option<Vec<u8>>| {
        pattern
            .as_ref()
            .is_some_and(|p| request.windows(p.len()).any(|w| w == p.as_slice()))
    };
    if !matches(&shared.hold_requests.lock().unwrap()) {
        return;
    }
    let held = shared
        .hold_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    if held.is_err() {
        return; // as many as asked are held back already
    }
    shared.held.fetch_add(1, Ordering::SeqCst);
    while matches(&shared.hold_requests.lock().unwrap()) && !shared.stopped.load(Ordering::SeqCst) {
        thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Copies `from` to `to` until either closes, applying the faults of its direction.
fn pump(mut from: TcpStream, mut to: TcpStream, direction: Direction, shared: Arc<Shared>) {
    thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        let mut requests = Requests::default();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if direction == Direction::Requests {
                hold_if_matching(&shared, &buf[..n]);
                let out = requests.forward(&shared, &buf[..n]);
                if to.write_all(&out).is_err() {
                    break;
                }
                continue;
            } else {
                let cut = shared
                    .cut_replies
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if cut {
                    shared.dropped.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                let skipped = shared.drop_replies.load(Ordering::SeqCst) > 0
                    && shared
                        .skip_replies
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                let swallow = !skipped
                    && shared
                        .drop_replies
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                if swallow {
                    shared.dropped.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let delay = shared.reply_delay_us.load(Ordering::SeqCst) as u64;
                if delay > 0 {
                    thread::sleep(std::time::Duration::from_micros(delay));
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// The requests of one connection, cut into whole commands so that some can be answered with
/// an error: such a command is replaced by a script that replies that error, so that its
/// reply comes back in its place among the others (a pipeline's replies keep their order).
#[derive(Default)]
struct Requests {
    /// Bytes of a command not complete yet.
    pending: Vec<u8>,
    /// Not RESP (a TLS handshake): forwarded as it comes.
    raw: bool,
}

impl Requests {
    /// The bytes to send to the server for `chunk`: whole commands only, refused ones replaced.
    fn forward(&mut self, shared: &Shared, chunk: &[u8]) -> Vec<u8> {
        if self.raw || (self.pending.is_empty() && chunk.first() != Some(&b'*')) {
            self.raw = true;
            self.pending.clear();
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut at = 0;
        while let Some((args, end)) = parse_command(&self.pending[at..]) {
            match refusal(shared, &args) {
                Some(error) => {
                    shared.refused.fetch_add(1, Ordering::SeqCst);
                    out.extend(error_script(&error));
                }
                None => out.extend_from_slice(&self.pending[at..at + end]),
            }
            at += end;
        }
        self.pending.drain(..at);
        out
    }
}

/// One RESP array of bulk strings at the start of `bytes`: its items and its length, or
/// `None` while it is incomplete.
fn parse_command(bytes: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(bytes: &[u8], at: usize, prefix: u8) -> Option<(usize, usize)> {
        if *bytes.get(at)? != prefix {
            return None;
        }
        let end = at + bytes[at..].windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&bytes[at + 1..end])
            .ok()?
            .parse()
            .ok()?;
        Some((n, end + 2))
    }
    let (count, mut at) = line(bytes, 0, b'*')?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = line(bytes, at, b'$')?;
        if bytes.len() < start + len + 2 {
            return None;
        }
        args.push(bytes[start..start + len].to_vec());
        at = start + len + 2;
    }
    Some((args, at))
}

/// The error reply the proxy gives to the command `args` instead of the server, if any.
fn refusal(shared: &Shared, args: &[Vec<u8>]) -> Option<String> {
    let name = args.first()?.to_ascii_uppercase();
    if shared.cross_slot.load(Ordering::SeqCst) && crosses_slots(&name, args) {
        return Some("CROSSSLOT Keys in request don't hash to the same slot".to_owned());
    }
    let mut refusals = shared.refusals.lock().unwrap();
    let refusal = refusals.iter_mut().find(|r| {
        r.left > 0
            && r.command == name
            && (r.containing.is_empty()
                || args[1..].iter().any(|arg| {
                    arg.windows(r.containing.len())
                        .any(|w| w == r.containing.as_slice())
                }))
    })?;
    if refusal.left != usize::MAX {
        refusal.left -= 1;
    }
    Some(refusal.error.clone())
}

/// Whether the script call `args` names keys of more than one cluster slot.
fn crosses_slots(name: &[u8], args: &[Vec<u8>]) -> bool {
    if name != b"EVAL" && name != b"EVALSHA" {
        return false;
    }
    let keys: usize = args
        .get(2)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .unwrap_or(0);
    let slots: Vec<u16> = args.iter().skip(3).take(keys).map(|k| slot(k)).collect();
    slots.windows(2).any(|w| w[0] != w[1])
}

/// A key's cluster slot: CRC16 (XMODEM) of its hash tag, modulo 16384.
fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A command that makes the server answer with the error reply `error`, in order.
fn error_script(error: &str) -> Vec<u8> {
    let args = ["EVAL", "return redis.error_reply(ARGV[1])", "0", error];
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n{arg}\r\n", arg.len()).into_bytes());
    }
    out
}
