//! A TCP proxy in front of a redis-server that the tests control: it forwards bytes both ways
//! and can drop the next reply, delay replies, hold back requests that contain some bytes, or
//! cut every connection.
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
    /// Requests held back so far.
    held: AtomicUsize,
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
        *self.shared.hold_requests.lock().unwrap() = Some(bytes.to_vec());
    }

    /// Lets the held-back requests through, and holds back no more.
    pub fn release_requests(&self) {
        *self.shared.hold_requests.lock().unwrap() = None;
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
    shared.held.fetch_add(1, Ordering::SeqCst);
    while matches(&shared.hold_requests.lock().unwrap()) && !shared.stopped.load(Ordering::SeqCst) {
        thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Copies `from` to `to` until either closes, applying the faults of its direction.
fn pump(mut from: TcpStream, mut to: TcpStream, direction: Direction, shared: Arc<Shared>) {
    thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if direction == Direction::Requests {
                hold_if_matching(&shared, &buf[..n]);
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
