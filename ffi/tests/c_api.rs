//! The C API from C: compiles the programs in `examples/c/` (and `tests/c/`) with
//! `cc -Wall -Wextra -Werror` against `include/redis_rlock.h` and the libraries cargo built,
//! runs them against a throwaway redis-server, and runs them again under AddressSanitizer,
//! LeakSanitizer and UndefinedBehaviorSanitizer.
//!
//! Needs a C compiler and hiredis' headers (Debian: `gcc`, `libhiredis-dev`), which
//! `scripts/ensure-deps` installs; the C examples use hiredis for their own GET/SET.

use redis_rlock_testkit as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::RedisServer;

/// The repository's top directory (this crate is `ffi/` in it).
fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ffi/ is inside the repository")
}

/// Where cargo put `libredis_rlock_ffi.{a,so}` for this test run: `cargo test` builds the
/// library (all its crate types, in one rustc run) into `<target>/<profile>/deps/`, beside this test
/// binary. (`<target>/<profile>/` has them only after a `cargo build`, and may be stale.)
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .expect("<target>/<profile>/deps/<test>")
        .to_path_buf();
    for lib in ["libredis_rlock_ffi.a", "libredis_rlock_ffi.so"] {
        let path = dir.join(lib);
        assert!(path.is_file(), "{} was not built", path.display());
    }
    dir
}

#[derive(Clone, Copy)]
enum Link {
    Static,
    Shared,
}

/// Compiles `<dir>/<name>.c` (a directory of the repository) into `out_dir`, warnings as
/// errors, with extra `flags`.
fn compile_from(dir: &str, name: &str, link: Link, flags: &[&str], out_dir: &Path) -> PathBuf {
    let root = repository();
    let lib_dir = library_dir();
    let exe = out_dir.join(name);
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args([
        "-std=c11",
        "-D_POSIX_C_SOURCE=200809L",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-g",
    ])
    .args(flags)
    .arg("-I")
    .arg(root.join("include"))
    .arg(root.join(dir).join(format!("{name}.c")))
    .arg("-o")
    .arg(&exe);
    match link {
        Link::Static => {
            cc.arg(lib_dir.join("libredis_rlock_ffi.a"));
        }
        Link::Shared => {
            // The library's soname (build.rs) is `libredis_rlock.so.<major>`: that is the file
            // the program asks the loader for, and cargo makes no such link. Make one beside
            // the program and point the rpath there.
            let soname = format!("libredis_rlock.so.{}", env!("CARGO_PKG_VERSION_MAJOR"));
            let link = out_dir.join(soname);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(lib_dir.join("libredis_rlock_ffi.so"), &link)
                .expect("symlink the soname to the library");
            cc.arg("-L")
                .arg(&lib_dir)
                .arg("-lredis_rlock_ffi")
                .arg(format!("-Wl,-rpath,{}", out_dir.display()));
        }
    }
    cc.args(["-lhiredis", "-lpthread", "-ldl", "-lm"]);
    let output = cc
        .output()
        .expect("cannot run cc; install gcc (scripts/ensure-deps)");
    assert!(
        output.status.success(),
        "compiling {name}.c failed (hiredis headers come from libhiredis-dev; \
         scripts/ensure-deps installs them):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}

/// Compiles `examples/c/<name>.c`; see [`compile_from`].
fn compile(name: &str, link: Link, flags: &[&str], out_dir: &Path) -> PathBuf {
    compile_from("examples/c", name, link, flags, out_dir)
}

fn run(exe: &Path, args: &[String], sanitized: bool) -> Output {
    let mut cmd = Command::new(exe);
    // cargo points LD_LIBRARY_PATH at <target>/<profile> too, whose libredis_rlock_ffi.so may be
    // from another build; the rpath set at link time names the one this test checked.
    cmd.args(args).env_remove("LD_LIBRARY_PATH");
    if sanitized {
        cmd.env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:exitcode=86",
        )
        .env(
            "UBSAN_OPTIONS",
            "halt_on_error=1:print_stacktrace=1:exitcode=87",
        );
    }
    cmd.output().expect("run the compiled C program")
}

fn assert_clean_run(output: &Output, expected_line: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stdout.lines().any(|line| line == expected_line),
        "expected the line {expected_line:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for finding in ["AddressSanitizer", "LeakSanitizer", "runtime error"] {
        assert!(!stderr.contains(finding), "sanitizer report:\n{stderr}");
    }
}

const SANITIZERS: &[&str] = &["-fsanitize=address,undefined", "-fno-omit-frame-pointer"];

fn counter_args(server: &RedisServer) -> Vec<String> {
    // 3 processes x 4 threads x 50 increments, each GET + SET under the lock.
    [
        "127.0.0.1".into(),
        server.port().to_string(),
        "3".into(),
        "4".into(),
        "50".into(),
    ]
    .to_vec()
}

#[test]
fn threads_in_several_c_processes_keep_a_non_atomic_counter_exact() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile("counter", Link::Shared, &[], out.path());
    let output = run(&exe, &counter_args(&server), false);
    assert_clean_run(&output, "counter=600 expected=600");
}

#[test]
fn the_counter_is_clean_under_address_leak_and_ub_sanitizers() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile("counter", Link::Static, SANITIZERS, out.path());
    let output = run(&exe, &counter_args(&server), true);
    assert_clean_run(&output, "counter=600 expected=600");
}

#[test]
fn every_function_and_result_code_behaves_as_the_header_says() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile("api_tour", Link::Static, &[], out.path());
    let args = ["127.0.0.1".into(), server.port().to_string()];
    let output = run(&exe, &args, false);
    assert_clean_run(&output, "api_tour: 185 checks passed");
}

#[test]
fn the_api_tour_is_clean_under_address_leak_and_ub_sanitizers() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile("api_tour", Link::Shared, SANITIZERS, out.path());
    let args = ["127.0.0.1".into(), server.port().to_string()];
    let output = run(&exe, &args, true);
    assert_clean_run(&output, "api_tour: 185 checks passed");
}

#[test]
fn the_c_api_reaches_a_cluster_through_its_url_form() {
    let cluster = support::cluster::RedisCluster::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile("any_deployment", Link::Shared, &[], out.path());
    let url = cluster.url();
    let output = run(&exe, &[url, "c-on-a-cluster".into()], false);
    assert_clean_run(
        &output,
        "any_deployment: c-on-a-cluster held 2 times, then free",
    );
}

#[test]
fn leases_and_watchdog_timeouts_beyond_the_maximum_are_invalid_arguments() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile_from(
        "ffi/tests/c",
        "duration_limits",
        Link::Shared,
        &[],
        out.path(),
    );
    let output = run(&exe, &[server.url()], false);
    assert_clean_run(&output, "duration_limits: 19 checks passed");
}

#[test]
fn the_spin_lock_is_taken_re_entered_refused_while_held_and_released_from_c() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile_from(
        "ffi/tests/c",
        "spin_lock",
        Link::Static,
        SANITIZERS,
        out.path(),
    );
    let output = run(&exe, &[server.url()], true);
    assert_clean_run(&output, "spin_lock: 24 checks passed");
}

#[test]
fn the_string_lock_is_taken_re_entered_refused_inspected_and_force_unlocked_from_c() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile_from(
        "ffi/tests/c",
        "string_lock",
        Link::Static,
        SANITIZERS,
        out.path(),
    );
    let output = run(&exe, &[server.url()], true);
    assert_clean_run(&output, "string_lock: 35 checks passed");
}

#[test]
fn a_manager_inherited_through_fork_is_refused_and_freed_cleanly_in_the_child() {
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile_from("ffi/tests/c", "fork_child", Link::Shared, &[], out.path());
    let output = run(&exe, &[server.url()], false);
    assert_clean_run(
        &output,
        "fork_child: the child was refused and freed cleanly, the parent kept its lock",
    );
}

#[test]
fn the_health_goes_suspended_while_the_server_is_stopped_and_heals_after() {
    use std::io::{BufRead, BufReader, Read};
    let server = RedisServer::start();
    let out = tempfile::tempdir().unwrap();
    let exe = compile_from("ffi/tests/c", "health", Link::Shared, &[], out.path());
    let mut child = Command::new(&exe)
        .arg(server.url())
        .env_remove("LD_LIBRARY_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the health program");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_line = || lines.next().and_then(|line| line.ok()).unwrap_or_default();
    assert_eq!(next_line(), "READY");
    server.freeze();
    let suspended = next_line();
    server.thaw();
    assert_eq!(suspended, "SUSPENDED");
    let last = next_line();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    assert_eq!(last, "health: 16 checks passed", "{stderr}");
}
