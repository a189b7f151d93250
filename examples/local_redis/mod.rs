//! Where the examples find Redis: the server at `REDIS_URL` (default
//! `redis://127.0.0.1:6379/`) when one answers there, or else a throwaway `redis-server`
//! started for the run, with nothing saved to disk, stopped when the example ends.
//!
//! Your program connects to its own Redis instead: `LockManager::new("redis://host:6379/")`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` this example started; killed when dropped.
pub struct LocalRedis(Child);

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The URL to use, and the server started for it (keep it alive while the example runs).
pub fn url_from_env_or_start() -> (String, Option<LocalRedis>) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    if answers(&url) {
        return (url, None);
    }
    let (local_url, server) = start_redis_server();
    eprintln!(
        "no Redis answered at REDIS_URL (default 127.0.0.1:6379); started one at {local_url}"
    );
    (local_url, Some(server))
}

/// Whether a Redis server answers PING at `url` within half a second.
fn answers(url: &str) -> bool {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

/// Starts `redis-server` on a free loopback port, persistence off, and waits for its PING.
fn start_redis_server() -> (String, LocalRedis) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on $PATH (scripts/ensure-deps --examples installs it)");
    let (url, server) = (format!("redis://127.0.0.1:{port}/"), LocalRedis(child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answers(&url) {
        assert!(
            Instant::now() < deadline,
            "redis-server did not answer at {url}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (url, server)
}
