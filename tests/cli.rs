//! The `redis-rlock` command (feature `cli`), run as a person or a script would run it: its
//! exclusion between processes, exit codes, signals, a lock lost under its command, `status`,
//! `unlock`, and the progress line on a real terminal (inside tmux).
//!
//! Run with `cargo test --features cli --test cli`. Every test starts its own redis-server.
#![cfg(feature = "cli")]

use redis_rlock_testkit as support;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_rlock::LockManager;
use support::{eventually, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_redis-rlock");

/// Every wait on another process is bounded by this: generous, for a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(30);

/// `redis-rlock --url <server> ARGS`, with no terminal and none of the caller's REDIS_URL.
fn redis_rlock(server: &RedisServer, args: &[&str]) -> Command {
    redis_rlock_at(&server.url(), args)
}

/// `redis-rlock --url URL ARGS`, with no terminal and none of the caller's REDIS_URL.
fn redis_rlock_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to the end (within [`LIMIT`]) and returns its output.
fn output(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redis-rlock");
    let mut child = KillOnDrop(child);
    let status = wait_limited(&mut child.0, LIMIT);
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits for `child` to exit, up to `limit`; panics (the child is killed by its guard) if
/// it does not.
fn wait_limited(child: &mut Child, limit: Duration) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            started.elapsed() < limit,
            "redis-rlock did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.conn().exists(key).expect("EXISTS")
}

fn sigterm(child: &Child) {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill -TERM");
}

/// Waits until `path` exists (a child's "I got here").
fn await_file(path: &Path) {
    assert!(
        eventually(LIMIT, || path.exists()),
        "{} never appeared",
        path.display()
    );
}

#[test]
fn runs_on_one_name_never_overlap() {
    const PROCESSES: usize = 3;
    const RUNS_EACH: usize = 4;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter"), "0").unwrap();
    // A read-modify-write that a second process inside would spoil, and a marker that must
    // be absent on entry: any overlap shows in one or the other.
    let script = r#"
        cd "$1" || exit 90
        if [ -e inside ]; then echo overlap >> errors; exit 91; fi
        touch inside
        n=$(cat counter)
        sleep 0.05
        echo $((n + 1)) > counter
        rm inside
    "#;
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(PROCESSES));
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let (url, dir_arg, barrier) = (server.url(), dir_arg.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait(); // all start together, so they really contend
                for _ in 0..RUNS_EACH {
                    let mut cmd = Command::new(BIN);
                    cmd.args(["--url", &url, "run", "cli-counter", "--"])
                        .args(["sh", "-c", script, "sh", &dir_arg])
                        .env_remove("REDIS_URL")
                        .stdin(Stdio::null());
                    let out = output(cmd);
                    assert!(
                        out.status.success(),
                        "a run failed: {} {}",
                        out.status,
                        stderr_of(&out)
                    );
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    assert!(
        !dir.path().join("errors").exists(),
        "two commands were inside at once"
    );
    let total: usize = std::fs::read_to_string(dir.path().join("counter"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(total, PROCESSES * RUNS_EACH, "lost updates mean overlap");
    assert!(!exists(&server, "cli-counter"), "the lock was left behind");
}

#[test]
fn wait_zero_gives_the_conflict_code_and_names_the_holder() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let guard = manager.lock("cli-busy").unwrap();

    let out = output(redis_rlock(
        &server,
        &["run", "cli-busy", "--wait", "0", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains(manager.client_id()),
        "the message names the holder: {}",
        stderr_of(&out)
    );

    let out = output(redis_rlock(
        &server,
        &[
            "run",
            "cli-busy",
            "--wait",
            "0",
            "--conflict-exit-code",
            "9",
            "--",
            "true",
        ],
    ));
    assert_eq!(out.status.code(), Some(9), "{}", stderr_of(&out));

    // A bounded wait gives up no sooner than asked.
    let started = Instant::now();
    let out = output(redis_rlock(
        &server,
        &["run", "cli-busy", "--wait", "300ms", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(started.elapsed() >= Duration::from_millis(300));

    guard.unlock().unwrap();
    let out = output(redis_rlock(
        &server,
        &["run", "cli-busy", "--wait", "0", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
}

#[test]
fn the_commands_exit_status_passes_through() {
    let server = RedisServer::start();
    let run = |command: &[&str]| {
        let mut args = vec!["run", "cli-status", "--fenced", "--"];
        args.extend_from_slice(command);
        output(redis_rlock(&server, &args))
    };
    assert_eq!(run(&["sh", "-c", "exit 3"]).status.code(), Some(3));
    // Killed by a signal: 128 + its number, as shells say.
    assert_eq!(run(&["sh", "-c", "kill -9 $$"]).status.code(), Some(137));
    // The command sees the lock's name and its fencing token.
    let out = run(&[
        "sh",
        "-c",
        r#"[ "$REDIS_RLOCK_NAME" = cli-status ] && [ "$REDIS_RLOCK_FENCING_TOKEN" -gt 0 ]"#,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let out = run(&["no-such-command-for-redis-rlock"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr_of(&out).contains("no-such-command-for-redis-rlock"));
    assert!(
        !exists(&server, "cli-status"),
        "every run released the lock"
    );
}

#[test]
fn sigterm_reaches_the_command_and_the_lock_is_released() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        trap 'echo term > "$1/term"; exit 7' TERM
        touch "$1/started"
        while :; do sleep 0.1; done
    "#;
    let mut cmd = redis_rlock(
        &server,
        &["run", "cli-signal", "--", "sh", "-c", script, "sh"],
    );
    cmd.arg(dir.path()).stdout(Stdio::null());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    await_file(&dir.path().join("started"));
    assert!(exists(&server, "cli-signal"), "held while the command runs");

    sigterm(&child.0);
    let status = wait_limited(&mut child.0, LIMIT);
    assert_eq!(
        status.code(),
        Some(7),
        "redis-rlock exits as its command did"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("term"))
            .unwrap()
            .trim(),
        "term",
        "the command got the SIGTERM"
    );
    assert!(!exists(&server, "cli-signal"), "the lock was released");
}

/// A SIGTERM while `run` waits for the lock cancels the wait (issue 24): the command exits
/// promptly with 128+15 and leaves nothing behind: no registration for a grant, so the
/// holder's release does not hand it the lock after it is gone.
#[test]
fn sigterm_while_waiting_ends_the_wait_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let holder = LockManager::new(&server.url()).unwrap();
    let guard = holder.lock("cli-wait-term").unwrap();
    let mut cmd = redis_rlock(&server, &["run", "cli-wait-term", "--", "true"]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let mut conn = server.conn();
    let registered = |conn: &mut redis::Connection| -> usize {
        let fields: Vec<String> = conn.hkeys("redis_rlock__waiters:{cli-wait-term}").unwrap();
        fields.iter().filter(|f| *f != "#").count()
    };
    assert!(
        eventually(LIMIT, || registered(&mut conn) == 1),
        "redis-rlock waits, registered for a grant"
    );
    let signalled = Instant::now();
    sigterm(&child.0);
    let status = wait_limited(&mut child.0, LIMIT);
    let took = signalled.elapsed();
    println!("redis-rlock exited {took:?} after SIGTERM");
    assert_eq!(status.code(), Some(128 + 15));
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(registered(&mut conn), 0, "its registration is gone");
    guard.unlock().unwrap();
    assert!(
        !exists(&server, "cli-wait-term"),
        "not granted to the gone waiter"
    );
    assert_eq!(holder.stats().grants_given, 0);
}

#[test]
fn kill_after_bounds_a_command_that_ignores_a_passed_on_sigterm() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // SIGTERM is ignored by the shell and, inherited, by its sleeps.
    let script = r#"
        trap '' TERM
        touch "$1/started"
        while :; do sleep 0.1; done
    "#;
    let mut cmd = redis_rlock(
        &server,
        &["run", "cli-stubborn", "--kill-after", "1s", "--"],
    );
    cmd.args(["sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    await_file(&dir.path().join("started"));

    let signalled = Instant::now();
    sigterm(&child.0);
    let status = wait_limited(&mut child.0, LIMIT);
    let waited = signalled.elapsed();
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(128 + 9), "killed by SIGKILL: {stderr}");
    assert!(
        stderr.contains("after SIGTERM; sending SIGKILL"),
        "{stderr}"
    );
    assert!(
        waited >= Duration::from_secs(1),
        "SIGKILL only after --kill-after: {waited:?}"
    );
    assert!(!exists(&server, "cli-stubborn"), "the lock was released");
}

#[test]
fn a_lock_lost_under_the_command_stops_it_with_70() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // A 3 s watchdog renews every second, so the loss is noticed within about a second.
    let mut cmd = redis_rlock(
        &server,
        &["run", "cli-lost", "--watchdog", "3s", "--", "sh", "-c"],
    );
    cmd.args([r#"touch "$1/started"; exec sleep 60"#, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    await_file(&dir.path().join("started"));

    // Taken away by another client, as an operator would.
    let out = output(redis_rlock(
        &server,
        &["unlock", "--force", "--yes", "cli-lost"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));

    let status = wait_limited(&mut child.0, LIMIT);
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("was lost"), "{stderr}");
}

#[test]
fn with_on_lost_ignore_the_command_goes_on() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // The command runs until the test says the loss was noticed, then exits 5.
    let script = r#"touch "$1/started"; while [ ! -e "$1/go" ]; do sleep 0.05; done; exit 5"#;
    let mut cmd = redis_rlock(
        &server,
        &[
            "run",
            "cli-ignore",
            "--watchdog",
            "3s",
            "--on-lost",
            "ignore",
        ],
    );
    cmd.args(["--", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    await_file(&dir.path().join("started"));
    let _: () = server.conn().del("cli-ignore").unwrap();

    // redis-rlock says it noticed (its first line on stderr), and the command is left alone.
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("was lost"), "{line}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let status = wait_limited(&mut child.0, LIMIT);
    assert_eq!(status.code(), Some(5), "the command's own status");
}

#[test]
fn bad_arguments_exit_64_and_no_redis_69() {
    let server = RedisServer::start();
    let usage = |args: &[&str], says: &str| {
        let out = output(redis_rlock(&server, args));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say {says:?}: {stderr}"
        );
    };
    usage(&["run", "x", "--wait", "5y", "--", "true"], "unknown unit");
    usage(&["run", "x", "--wait", "soon", "--", "true"], "500ms, 10s");
    // A negative number is a refused value, not an option with clap's tip to write `-- -1`.
    usage(
        &["run", "x", "--wait", "-1", "--", "true"],
        "does not start with a number",
    );
    usage(
        &["run", "x", "--conflict-exit-code", "-1", "--", "true"],
        "not in 0..=255",
    );
    usage(
        &["run", "x", "--lease", "0", "--", "true"],
        "more than zero",
    );
    usage(&["run", "x", "--on-lost", "later", "--", "true"], "term");
    usage(&["run", "x"], "COMMAND");
    usage(
        &["run", "x", "--no-such-flag", "--", "true"],
        "--no-such-flag",
    );
    usage(&["frobnicate"], "frobnicate");
    usage(&["run", "", "--", "true"], "invalid name");
    usage(&["unlock", "x"], "--force");
    // No terminal to confirm on, and no --yes.
    usage(&["unlock", "--force", "x"], "--yes");

    let out = output(redis_rlock_at("foo://", &["status", "x"]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("invalid Redis URL"));

    // A database the server does not have is the URL's fault too.
    let out = output(redis_rlock_at(
        &format!("{}99", server.url()),
        &["status", "x"],
    ));
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("DB index is out of range"));

    let nobody = format!("redis://127.0.0.1:{}/", support::free_port());
    for args in [&["status", "x"][..], &["run", "x", "--", "true"]] {
        let out = output(redis_rlock_at(&nobody, args));
        assert_eq!(out.status.code(), Some(69), "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains("cannot connect"),
            "{}",
            stderr_of(&out)
        );
    }

    // --help is no error.
    let out = output(redis_rlock(&server, &["run", "--help"]));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nightly-report --wait 0"));
}

#[test]
fn status_json_names_the_holder_and_its_ttl() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let status = || {
        let out = output(redis_rlock(
            &server,
            &["status", "cli-status-json", "--json"],
        ));
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("status --json is JSON")
    };
    let guard = manager.lock("cli-status-json").unwrap();
    let held = status();
    assert_eq!(held["name"], "cli-status-json");
    assert_eq!(held["held"], true);
    let owners = held["owners"].as_array().expect("owners");
    assert_eq!(owners.len(), 1);
    let owner = owners[0]["owner"].as_str().unwrap();
    assert!(
        owner.starts_with(&format!("{}:", manager.client_id())),
        "{owner}"
    );
    assert_eq!(owners[0]["holds"], 1);
    let ttl = held["ttl_ms"].as_u64().expect("a TTL");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    // The plain text says the same.
    let out = output(redis_rlock(&server, &["status", "cli-status-json"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(manager.client_id()) && text.contains("TTL"),
        "{text}"
    );

    guard.unlock().unwrap();
    let free = status();
    assert_eq!(free["held"], false);
    assert_eq!(free["owners"].as_array().unwrap().len(), 0);
    assert!(free["ttl_ms"].is_null());

    // A key that is not a lock is named as such, for status, run and unlock alike: a string,
    // and a hash that is somebody's data (its fields are not hold counts).
    let _: () = server.conn().set("cli-not-a-lock", "text").unwrap();
    let _: () = server
        .conn()
        .hset_multiple("cli-order", &[("status", "paid"), ("amount", "10")])
        .unwrap();
    for name in ["cli-not-a-lock", "cli-order"] {
        for args in [
            &["status", name][..],
            &["run", name, "--wait", "0", "--", "true"],
            &["unlock", "--force", "--yes", name],
        ] {
            let out = output(redis_rlock(&server, args));
            assert_eq!(out.status.code(), Some(65), "{args:?}: {}", stderr_of(&out));
            assert!(
                stderr_of(&out).contains("not a lock"),
                "{}",
                stderr_of(&out)
            );
        }
    }
    let value: String = server.conn().get("cli-not-a-lock").unwrap();
    assert_eq!(value, "text", "left untouched");
    let fields: usize = server.conn().hlen("cli-order").unwrap();
    assert_eq!(fields, 2, "left untouched");
}

/// A terminal: a tmux server on a private socket running one program in one pane. Killed on
/// drop.
///
/// The program runs under bash, which writes its exit status to a file: tmux's own
/// `pane_dead_status` is sometimes left empty when a pane's program exits. bash, unlike dash,
/// goes on after a Ctrl-C that its child survived, so the status is written then too.
struct Tmux {
    socket: std::path::PathBuf,
    status_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Starts `argv` in a 200x10 pane (wide enough for a whole status line), or `None` (with a
    /// notice) when tmux is not installed.
    fn start(argv: &[&str]) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!(
                "SKIPPED: tmux is not installed (apt-get install -y tmux): no terminal to run on"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let tmux = Tmux {
            socket: dir.path().join("tmux.sock"),
            status_file: dir.path().join("status"),
            _dir: dir,
        };
        let started = tmux
            .command()
            // No user or system configuration: the same terminal everywhere.
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "cli"])
            .args(["-x", "200", "-y", "10", "--"])
            .args([
                "bash",
                "-c",
                r#""$@"; echo $? > "$0.tmp"; mv "$0.tmp" "$0""#,
            ])
            .arg(&tmux.status_file)
            .args(argv)
            .env_remove("REDIS_URL")
            .env("TERM", "xterm")
            .status()
            .expect("tmux new-session");
        assert!(started.success(), "tmux new-session failed");
        Some(tmux)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.arg("-S").arg(&self.socket).stdin(Stdio::null());
        cmd
    }

    /// What the pane shows now. Each look runs tmux; a pause first keeps the polling light.
    fn screen(&self) -> String {
        std::thread::sleep(Duration::from_millis(100));
        let out = self
            .command()
            .args(["capture-pane", "-p", "-t", "cli"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen passes `check`; panics with the screen if it never does.
    fn await_screen(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        let seen = eventually(LIMIT, || {
            screen = self.screen();
            check(&screen)
        });
        assert!(seen, "{what}; the screen:\n{screen}");
        screen
    }

    /// Types `keys` (tmux key names: "y", "Enter", "C-c").
    fn keys(&self, keys: &[&str]) {
        let sent = self
            .command()
            .args(["send-keys", "-t", "cli"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(sent.success(), "tmux send-keys failed");
    }

    /// The program's exit status once it has exited (within [`LIMIT`]).
    fn exit_status(&self) -> i32 {
        let exited = eventually(LIMIT, || self.status_file.exists());
        assert!(exited, "the program did not exit:\n{}", self.screen());
        let status = std::fs::read_to_string(&self.status_file).unwrap();
        status.trim().parse().expect("an exit status")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").output();
    }
}

#[test]
fn the_progress_line_on_a_terminal_shows_the_holder_and_ttl() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let guard = manager.lock("cli-progress").unwrap();
    let url = server.url();
    let argv = [BIN, "--url", &url, "run", "cli-progress", "--"];
    // The command stays on: what a pane shows after its program exited is not reliable.
    let Some(tmux) = Tmux::start(&[&argv[..], &["sh", "-c", "echo ACQUIRED; sleep 60"]].concat())
    else {
        return;
    };
    tmux.await_screen("the progress line shows the holder and its TTL", |screen| {
        screen.contains("waiting for \"cli-progress\"")
            && screen.contains(manager.client_id())
            && screen.contains("TTL")
    });
    guard.unlock().unwrap();
    tmux.await_screen("the line is cleared once acquired", |screen| {
        screen.contains("ACQUIRED") && !screen.contains("waiting")
    });
}

#[test]
fn unlock_asks_on_a_terminal() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let guard = manager.lock("cli-ask").unwrap();
    let url = server.url();
    let argv = [BIN, "--url", &url, "unlock", "--force", "cli-ask"];

    // "n": nothing happens, exit 1.
    let Some(tmux) = Tmux::start(&argv) else {
        return;
    };
    tmux.await_screen("the question names the holder", |screen| {
        screen.contains("Delete it?") && screen.contains(manager.client_id())
    });
    tmux.keys(&["n", "Enter"]);
    assert_eq!(tmux.exit_status(), 1);
    assert!(exists(&server, "cli-ask"), "declined: still locked");
    drop(tmux);

    // "y": deleted.
    let tmux = Tmux::start(&argv).expect("tmux was there a moment ago");
    tmux.await_screen("the question", |screen| screen.contains("Delete it?"));
    tmux.keys(&["y", "Enter"]);
    assert_eq!(tmux.exit_status(), 0);
    assert!(!exists(&server, "cli-ask"), "confirmed: deleted");
    assert!(guard.unlock().unwrap_err().is_not_held());
}

#[test]
fn ctrl_c_at_the_terminal_reaches_the_command_once() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    // The command counts the SIGINTs it gets and exits 3 when the test says so. Ctrl-C goes to
    // the whole foreground process group: redis-rlock must not send the command a second one.
    let script = r#"
        trap 'echo INT >> "$1/ints"' INT
        touch "$1/started"
        while [ ! -e "$1/go" ]; do sleep 0.05; done
        exit 3
    "#;
    let url = server.url();
    let argv = [
        BIN,
        "--url",
        &url,
        "run",
        "cli-ctrl-c",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        dir_arg,
    ];
    let Some(tmux) = Tmux::start(&argv) else {
        return;
    };
    await_file(&dir.path().join("started"));
    tmux.keys(&["C-c"]);
    await_file(&dir.path().join("ints"));
    // A second SIGINT, if one were sent, would come right after the first: give it time to
    // show before looking (an absence cannot be awaited).
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(
        tmux.exit_status(),
        3,
        "redis-rlock exits as its command did"
    );
    let ints = std::fs::read_to_string(dir.path().join("ints")).unwrap();
    assert_eq!(
        ints.lines().count(),
        1,
        "the command got one SIGINT: {ints:?}"
    );
    assert!(!exists(&server, "cli-ctrl-c"), "the lock was released");
}

#[test]
fn run_and_unlock_take_the_kind_of_lock_named_by_kind() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    // The command prints how its lock looks from the server while it runs.
    let show = format!(
        "redis-cli -p {port} hget cli-kinds mode; redis-cli -p {port} hlen cli-kinds; \
         redis-cli -p {port} llen 'redisson_lock_queue:{{cli-kinds}}'"
    );
    let mut seen = Vec::new();
    for kind in ["lock", "fair", "spin", "read", "write"] {
        let out = output(redis_rlock(
            &server,
            &["run", "cli-kinds", "--kind", kind, "--", "sh", "-c", &show],
        ));
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr_of(&out));
        seen.push((kind, String::from_utf8(out.stdout).unwrap()));
        assert!(!exists(&server, "cli-kinds"), "{kind}: released");
    }
    let plain = "\n1\n0\n"; // no mode, one owner field, nobody queued
    assert_eq!(
        seen,
        [
            ("lock", plain.to_owned()),
            ("fair", plain.to_owned()),
            ("spin", plain.to_owned()),
            ("read", "read\n2\n0\n".to_owned()),
            ("write", "write\n2\n0\n".to_owned()),
        ]
    );
    let out = output(redis_rlock(
        &server,
        &[
            "run",
            "cli-kinds",
            "--kind",
            "read",
            "--fenced",
            "--",
            "true",
        ],
    ));
    assert_eq!(out.status.code(), Some(64), "read holds take no token");

    // unlock --kind read leaves a write lock alone; --kind write deletes it.
    let manager = LockManager::new(&server.url()).unwrap();
    let held = manager
        .get_read_write_lock("cli-kinds")
        .write_lock()
        .lock()
        .unwrap();
    let unlock = |kind: &str| {
        let args = ["unlock", "--force", "--yes", "--kind", kind, "cli-kinds"];
        let out = output(redis_rlock(&server, &args));
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", stderr_of(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(unlock("read").contains("read lock \"cli-kinds\" was not held"));
    assert!(exists(&server, "cli-kinds"));
    assert!(unlock("write").contains("write lock \"cli-kinds\" deleted"));
    assert!(!exists(&server, "cli-kinds"));
    assert!(held.unlock().unwrap_err().is_not_held());
}

#[test]
fn run_and_unlock_take_redis_pys_string_lock_with_kind_string() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    let show = format!("redis-cli -p {port} type cli-string; redis-cli -p {port} get cli-string");
    let out = output(redis_rlock(
        &server,
        &[
            "run",
            "cli-string",
            "--kind",
            "string",
            "--",
            "sh",
            "-c",
            &show,
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (kind, token) = stdout.split_once('\n').expect("two lines");
    assert_eq!(kind, "string", "{stdout}");
    assert!(
        token.trim().rsplit_once(':').is_some(),
        "the owner's token: {stdout}"
    );
    assert!(!exists(&server, "cli-string"), "released");

    // A redis-py holder: `run` gives up at once, `unlock --kind string` deletes its key.
    let mut python =
        support::redis_py::PyLock::new(server.conn(), "cli-string", Duration::from_secs(30), 7);
    assert!(python.attempt());
    let out = output(redis_rlock(
        &server,
        &[
            "run",
            "cli-string",
            "--kind",
            "string",
            "--wait",
            "0",
            "--",
            "true",
        ],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    // `status --kind string` shows the token and the TTL.
    let status = |json: bool| {
        let mut args = vec!["status", "cli-string", "--kind", "string"];
        if json {
            args.push("--json");
        }
        let out = output(redis_rlock(&server, &args));
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let said = status(false);
    let expected = format!("string lock \"cli-string\": held by {}, TTL ", python.token);
    assert!(said.starts_with(&expected), "{said}");
    let json: serde_json::Value = serde_json::from_str(&status(true)).expect("JSON");
    assert_eq!(json["kind"], "string");
    assert_eq!(json["held"], true);
    assert_eq!(json["owner"], python.token.as_str());
    assert!(
        json["ttl_ms"].as_u64().is_some_and(|ms| ms > 20_000),
        "{json}"
    );
    let args = [
        "unlock",
        "--force",
        "--yes",
        "--kind",
        "string",
        "cli-string",
    ];
    let out = output(redis_rlock(&server, &args));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("string lock \"cli-string\" deleted"),
        "{said}"
    );
    assert!(!python.locked());
    assert_eq!(status(false).trim(), "string lock \"cli-string\": free");
}

#[test]
fn status_shows_a_read_write_locks_mode_and_a_fair_locks_queue() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let status = |name: &str| {
        let out = output(redis_rlock(&server, &["status", name, "--json"]));
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("status --json is JSON")
    };

    // Readers: the hash's `mode` field is shown as the mode, not as an owner.
    let read = manager
        .get_read_write_lock("cli-rw")
        .read_lock()
        .lock()
        .unwrap();
    let rw = status("cli-rw");
    assert_eq!(rw["held"], true);
    assert_eq!(rw["mode"], "read");
    let owners = rw["owners"].as_array().expect("owners");
    assert_eq!(owners.len(), 1, "{rw}");
    assert_ne!(owners[0]["owner"], "mode");
    // `run` names the reader that holds it, not the `mode` field.
    let out = output(redis_rlock(
        &server,
        &["run", "cli-rw", "--wait", "0", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains(manager.client_id()) && !stderr_of(&out).contains("by mode"),
        "{}",
        stderr_of(&out)
    );
    read.unlock().unwrap();

    // A fair lock with one waiter queued behind its holder.
    let holder = manager.get_fair_lock("cli-fair").lock().unwrap();
    let waiter = {
        let manager = manager.clone();
        std::thread::spawn(move || {
            let guard = manager
                .get_fair_lock("cli-fair")
                .try_lock(Duration::from_secs(20))
                .unwrap()
                .expect("the waiter gets the lock once the holder lets go");
            guard.unlock().unwrap();
        })
    };
    let queued = support::eventually(Duration::from_secs(10), || {
        status("cli-fair")["queue"].as_array().map(Vec::len) == Some(1)
    });
    assert!(queued, "the waiter is listed in the queue");
    assert!(status("cli-fair")["mode"].is_null());
    holder.unlock().unwrap();
    waiter.join().unwrap();
    assert_eq!(
        status("cli-fair")["queue"].as_array().map(Vec::len),
        Some(0)
    );
}

#[test]
fn status_shows_a_semaphores_permits_and_a_latchs_count() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let run = |args: &[&str]| {
        let out = output(redis_rlock(&server, args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr_of(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json = |args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str::<serde_json::Value>(&run(&args)).expect("status --json is JSON")
    };

    let semaphore = manager.get_semaphore("cli-sem");
    assert!(semaphore.try_set_permits(5).unwrap());
    semaphore.acquire(2).unwrap();
    let latch = manager.get_count_down_latch("cli-latch");
    assert!(latch.try_set_count(2).unwrap());
    latch.count_down().unwrap();

    // Told which it is.
    let sem = json(&["status", "cli-sem", "--kind", "semaphore"]);
    assert_eq!(sem["kind"], "semaphore", "{sem}");
    assert_eq!(sem["name"], "cli-sem");
    assert_eq!(sem["exists"], true);
    assert_eq!(sem["permits"], 3);
    let text = run(&["status", "cli-sem", "--kind", "semaphore"]);
    assert!(
        text.contains("semaphore \"cli-sem\": 3 free permits"),
        "{text}"
    );
    let closed = json(&["status", "cli-latch", "--kind", "latch"]);
    assert_eq!(closed["kind"], "latch", "{closed}");
    assert_eq!(closed["count"], 1);
    assert_eq!(closed["open"], false);
    let text = run(&["status", "cli-latch", "--kind", "latch"]);
    assert!(text.contains("count 1"), "{text}");

    // Not told: both are a number at the key, so it says what it can.
    let either = json(&["status", "cli-sem"]);
    assert_eq!(either["kind"], "semaphore-or-latch", "{either}");
    assert_eq!(either["value"], 3);
    let text = run(&["status", "cli-latch"]);
    assert!(
        text.contains('1') && text.contains("semaphore") && text.contains("latch"),
        "{text}"
    );

    // At zero a latch's key is gone: it is open. A semaphore never set has no permits.
    latch.count_down().unwrap();
    let open = json(&["status", "cli-latch", "--kind", "latch"]);
    assert_eq!(
        (open["count"].clone(), open["open"].clone()),
        (0.into(), true.into())
    );
    assert!(run(&["status", "cli-latch", "--kind", "latch"]).contains("open"));
    let unset = json(&["status", "cli-no-sem", "--kind", "semaphore"]);
    assert_eq!(
        (unset["exists"].clone(), unset["permits"].clone()),
        (false.into(), 0.into())
    );
    assert!(run(&["status", "cli-no-sem", "--kind", "semaphore"]).contains("not set"));

    // A lock says it is one; a key of another kind is refused (65), and left as it is.
    let _guard = manager.lock("cli-a-lock").unwrap();
    assert_eq!(json(&["status", "cli-a-lock"])["kind"], "lock");
    let _: () = server.conn().set("cli-text", "text").unwrap();
    let _: () = server.conn().rpush("cli-list", "x").unwrap();
    for args in [
        &["status", "cli-a-lock", "--kind", "semaphore"][..],
        &["status", "cli-text", "--kind", "latch"],
        &["status", "cli-text"],
        &["status", "cli-list"],
        &["status", "cli-sem", "--kind", "lock"],
    ] {
        let out = output(redis_rlock(&server, args));
        assert_eq!(out.status.code(), Some(65), "{args:?}: {}", stderr_of(&out));
    }
    assert_eq!(semaphore.available_permits().unwrap(), 3, "left untouched");
}

#[test]
fn runs_on_a_cluster_through_its_url_form() {
    let cluster = support::cluster::RedisCluster::start();
    let url = cluster.url();
    let name = "cli-on-a-cluster";
    let master = cluster.master_for_slot(support::cluster::RedisCluster::slot_of(name));
    // While the command runs, the lock is on its slot's master.
    let check = format!(
        r#"[ "$REDIS_RLOCK_FENCING_TOKEN" -gt 0 ] && [ "$(redis-cli -p {master} EXISTS {name})" = 1 ]"#
    );
    let out = output(redis_rlock_at(
        &url,
        &["run", name, "--fenced", "--", "sh", "-c", &check],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let left: bool = redis::cmd("EXISTS")
        .arg(name)
        .query(
            &mut redis::Client::open(format!("redis://127.0.0.1:{master}/"))
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert!(!left, "the run released the lock");
}

#[test]
fn status_shows_a_permit_expirable_semaphores_permits_and_their_leases() {
    let server = RedisServer::start();
    let manager = LockManager::new(&server.url()).unwrap();
    let run = |args: &[&str]| {
        let out = output(redis_rlock(&server, args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr_of(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let kind = ["--kind", "permit-expirable-semaphore"];
    let semaphore = manager.get_permit_expirable_semaphore("cli-pes");
    assert!(semaphore.try_set_permits(4).unwrap());
    let forever = semaphore.acquire(None).unwrap();
    let leased = semaphore.acquire(Some(Duration::from_secs(600))).unwrap();
    let brief = semaphore.acquire(Some(Duration::from_millis(1))).unwrap();
    // The 1 ms lease has ended once the semaphore says so (it takes it back then).
    assert!(support::eventually(Duration::from_secs(10), || {
        semaphore.acquired_permit_leases().unwrap()[0]
            .expires_at
            .unwrap()
            < std::time::SystemTime::now()
    }));

    let mut args = vec!["status", "cli-pes"];
    args.extend(kind);
    args.push("--json");
    let value: serde_json::Value = serde_json::from_str(&run(&args)).expect("JSON");
    assert_eq!(value["kind"], "permit-expirable-semaphore", "{value}");
    assert_eq!(value["permits"], 2, "one free, one expired: {value}");
    let acquired = value["acquired"].as_array().expect("acquired");
    assert_eq!(acquired.len(), 3, "{value}");
    // Soonest expiry first; no lease last.
    assert_eq!(acquired[0]["id"], brief.as_str());
    assert_eq!(acquired[0]["expired"], true);
    assert_eq!(acquired[1]["id"], leased.as_str());
    let left = acquired[1]["lease_left_ms"].as_u64().expect("a lease");
    assert!((500_000..=600_000).contains(&left), "{left}");
    assert_eq!(acquired[2]["id"], forever.as_str());
    assert!(acquired[2]["lease_left_ms"].is_null());

    let text = run(&["status", "cli-pes", kind[0], kind[1]]);
    assert!(text.contains("\"cli-pes\": 2 free, 2 acquired"), "{text}");
    assert!(text.contains(&format!("{forever}  no lease")), "{text}");
    assert!(text.contains(&format!("{brief}  expired")), "{text}");
    assert!(text.contains(&format!("{leased}  expires in ")), "{text}");
    // Status reads only: the expired permit is still there for the next operation to take.
    let raw: u64 = redis::cmd("ZCARD")
        .arg("{cli-pes}:timeout")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(raw, 3);
}

/// `status` takes the Sentinel and Cluster URL forms, as `run` and `unlock` do: it reads the
/// lock where the manager found its master.
#[test]
fn status_reads_through_sentinel_and_cluster_urls() {
    let sentinel = support::sentinel::RedisSentinel::start();
    let hosts: Vec<String> = sentinel
        .sentinel_urls()
        .iter()
        .map(|url| {
            url.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    let sentinel_url = format!(
        "redis-sentinel://{}#{}",
        hosts.join(","),
        sentinel.master_name()
    );
    let manager = sentinel.manager();
    let guard = manager.lock("cli-status-sentinel").unwrap();
    let out = output(redis_rlock_at(
        &sentinel_url,
        &["status", "cli-status-sentinel", "--json"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let held: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(held["held"], true, "{held}");
    let owner = held["owners"][0]["owner"].as_str().unwrap_or_default();
    assert!(owner.starts_with(manager.client_id()), "{held}");
    guard.unlock().unwrap();
    drop(sentinel);

    let cluster = support::cluster::RedisCluster::start();
    let manager = LockManager::new(&cluster.url()).unwrap();
    // A name on each master: each read must go to its own slot's master.
    let mut names: Vec<(u16, String)> = Vec::new();
    for i in 0..100 {
        let name = format!("cli-status-cluster-{i}");
        let master = cluster.master_for_slot(support::cluster::RedisCluster::slot_of(&name));
        if names.iter().all(|(m, _)| *m != master) {
            names.push((master, name));
        }
    }
    assert_eq!(names.len(), cluster.master_ports().len(), "{names:?}");
    for (_, name) in &names {
        let guard = manager.lock(name).unwrap();
        let out = output(redis_rlock_at(&cluster.url(), &["status", name]));
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(manager.client_id()), "{name}: {text}");
        guard.unlock().unwrap();
    }
}

/// `status` warns on stderr when the server may evict lock keys; stdout keeps its form.
#[test]
fn status_warns_of_an_evicting_policy() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]);
    let out = output(redis_rlock(&server, &["status", "cli-evicting", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("volatile-lru") && stderr.contains("noeviction"),
        "{stderr}"
    );
    let free: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(free["held"], false);
    let quiet = output(redis_rlock(
        &RedisServer::start(),
        &["status", "cli-evicting"],
    ));
    assert!(
        !stderr_of(&quiet).contains("evict"),
        "{}",
        stderr_of(&quiet)
    );
}

/// Whether the process `pid` is gone (or a zombie nobody reaped yet: it runs no more).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// A `kill -9` of `redis-rlock run` (nothing can catch it) takes its command with it: the
/// command never runs without the lock, as under flock(1). The command is gone well before
/// the lock's lease runs out, and the next run, which gets the lock when the lease ends,
/// never runs beside it: the two commands' marks in one file never interleave.
#[test]
fn a_kill_9_of_run_takes_its_command_with_it() {
    const WATCHDOG: &str = "6s";
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Marks its start, then `$3` ticks 0.1 s apart, then its end.
    let script = r#"
        cd "$1" || exit 90
        echo $$ > "pid-$2"
        echo "$2 start" >> marks
        i=0
        while [ $i -lt "$3" ]; do echo "$2 tick" >> marks; sleep 0.1; i=$((i + 1)); done
        echo "$2 end" >> marks
    "#;
    let dir_arg = dir.path().to_str().unwrap();
    let run = |label: &str, ticks: &str| {
        let mut cmd = redis_rlock(
            &server,
            &["run", "cli-killed", "--watchdog", WATCHDOG, "--"],
        );
        cmd.args(["sh", "-c", script, "sh", dir_arg, label, ticks])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    // 20 s: longer than the lease.
    let mut first = KillOnDrop(run("A", "200").spawn().unwrap());
    // The pid is written before the first mark.
    await_file(&dir.path().join("marks"));
    let command: u32 = std::fs::read_to_string(dir.path().join("pid-A"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    first.0.kill().unwrap(); // SIGKILL
    first.0.wait().unwrap();
    let killed = Instant::now();
    let gone = eventually(LIMIT, || process_gone(command));
    let after = killed.elapsed();
    assert!(
        gone && after < Duration::from_secs(3),
        "the command ran on for {after:?} after redis-rlock was killed (lease {WATCHDOG})"
    );
    assert!(exists(&server, "cli-killed"), "the lock is left to expire");

    let second = output(run("B", "3"));
    assert!(second.status.success(), "{}", stderr_of(&second));
    let marks = std::fs::read_to_string(dir.path().join("marks")).unwrap();
    let b_started = marks.find("B start").expect("B ran");
    assert!(
        !marks[b_started..].contains('A'),
        "the killed run's command went on beside the next run:\n{marks}"
    );
}

/// `run` says on stderr when the lock's renewals start failing (the server frozen), before the
/// lease runs out, and when they answer again (the server thawed); the command goes on.
#[test]
fn run_tells_when_renewals_fail_and_when_they_answer_again() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Renewed every 3 s: a sweep to the frozen server times out (3 s) with about 5 s of the
    // 9 s lease left. The command ends when told, or after 30 s.
    let script = r#"touch "$1/started"; i=0
        while [ ! -e "$1/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; exit 5"#;
    let mut cmd = redis_rlock(&server, &["run", "cli-health", "--watchdog", "9s"]);
    cmd.args(["--", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    await_file(&dir.path().join("started"));
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();

    server.freeze();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    server.thaw();
    assert!(
        line.contains("renewals of lock \"cli-health\" are failing"),
        "{line}"
    );
    line.clear();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("answer again"), "{line}");

    std::fs::write(dir.path().join("go"), "").unwrap();
    let status = wait_limited(&mut child.0, LIMIT);
    assert_eq!(status.code(), Some(5), "the command's own status");
    assert!(!exists(&server, "cli-health"), "released after the command");
}
