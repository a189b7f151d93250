//! The driver's side of the worker processes: starting them (one of them inside the network
//! namespace when a row partitions a client), pausing them, and stopping them within a bound.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::history::{self, Record};
use super::netns::Netns;
use super::worker::{history_path, Args};

pub struct Workers {
    children: Vec<Child>,
    dir: PathBuf,
    stop_file: PathBuf,
}

/// How the workers of a row run.
pub struct Setup<'a> {
    pub processes: usize,
    pub threads: usize,
    pub watchdog: Duration,
    pub replica_sync: bool,
    pub store_url: String,
    pub row: String,
    /// The URL for workers outside and inside the namespace.
    pub lock_url: (String, String),
    /// The namespace that worker 0 runs in, for the client partition.
    pub netns: Option<(&'a Netns, String)>,
}

impl Workers {
    pub fn spawn(setup: &Setup, dir: &Path) -> Workers {
        let exe = std::env::current_exe().expect("own path");
        let stop_file = dir.join("stop");
        let children = (0..setup.processes)
            .map(|process| {
                let inside = setup.netns.as_ref().filter(|_| process == 0);
                let args = Args {
                    process,
                    lock_url: match inside {
                        Some(_) => setup.lock_url.1.clone(),
                        None => setup.lock_url.0.clone(),
                    },
                    store_url: match inside {
                        Some((_, store)) => store.clone(),
                        None => setup.store_url.clone(),
                    },
                    row: setup.row.clone(),
                    history: history_path(dir, process),
                    stop_file: stop_file.clone(),
                    threads: setup.threads,
                    watchdog: setup.watchdog,
                    replica_sync: setup.replica_sync,
                };
                let mut cmd = match inside {
                    Some((ns, _)) => ns.command(&exe),
                    None => Command::new(&exe),
                };
                cmd.args(args.to_vec())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit());
                cmd.spawn().expect("start a worker process")
            })
            .collect();
        Workers {
            children,
            dir: dir.to_path_buf(),
            stop_file,
        }
    }

    /// Every record so far of every worker, by process.
    pub fn histories(&self) -> Vec<Vec<Record>> {
        (0..self.children.len())
            .map(|p| history::read(&history_path(&self.dir, p)))
            .collect()
    }

    /// The manager id a worker wrote first into its history: its holds' owner prefix.
    pub fn client_id(&self, process: usize) -> Option<String> {
        let text = std::fs::read_to_string(history_path(&self.dir, process)).ok()?;
        let line = text.lines().next()?;
        line.strip_prefix("client ").map(str::to_string)
    }

    pub fn pause(&self, process: usize) {
        self.signal(process, "-STOP");
    }

    pub fn resume(&self, process: usize) {
        self.signal(process, "-CONT");
    }

    fn signal(&self, process: usize, signal: &str) {
        let pid = self.children[process].id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pid}");
    }

    /// Asks every worker to stop and waits up to `limit`; returns how many had to be killed
    /// or had failed (a panic: its manager could not be built, a thread's call panicked).
    pub fn stop(mut self, limit: Duration) -> usize {
        std::fs::write(&self.stop_file, b"").expect("stop file");
        let started = Instant::now();
        let mut killed = 0;
        for child in &mut self.children {
            loop {
                if let Some(status) = child.try_wait().ok().flatten() {
                    killed += usize::from(!status.success());
                    break;
                }
                if started.elapsed() > limit {
                    let _ = child.kill();
                    let _ = child.wait();
                    killed += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        killed
    }
}

impl Drop for Workers {
    /// A driver that panics leaves no worker behind (SIGCONT first: a stopped one too).
    fn drop(&mut self) {
        for child in &mut self.children {
            if child.try_wait().ok().flatten().is_none() {
                let _ = Command::new("kill")
                    .args(["-CONT", &child.id().to_string()])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
