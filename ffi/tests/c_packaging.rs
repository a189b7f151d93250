//! The C packaging from a C project's side: `scripts/install-c` installs the libraries, the
//! header, a pkg-config file and a CMake package into a throwaway prefix, then
//! `examples/c/counter.c` is built the two ways C projects do, through pkg-config (the
//! `examples/c/Makefile`) and through CMake's `find_package` (`examples/c/cmake/`), warnings
//! as errors, and run against a throwaway redis-server, loading the *installed* library.
//!
//! The install builds the release libraries once (`cargo build --release -p redis-rlock-ffi`, in this
//! test run's target directory, so CI builds them once): 139 s from an empty target directory
//! on two shared cores, about 10 s after a change to the crate alone, under a second when
//! they are fresh. The builds through pkg-config and CMake
//! are skipped, with a notice, when `pkg-config`, `make` or `cmake` is missing;
//! `scripts/ensure-deps` installs them.

use redis_rlock_testkit as support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::RedisServer;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const SONAME: &str = concat!("libredis_rlock.so.", env!("CARGO_PKG_VERSION_MAJOR"));

/// How long the release build and install may take (a cold build on two cores takes minutes).
const INSTALL_LIMIT: Duration = Duration::from_secs(30 * 60);
/// How long configuring or building one example may take.
const BUILD_LIMIT: Duration = Duration::from_secs(5 * 60);
/// How long one run of a C program may take (they take about a second).
const RUN_LIMIT: Duration = Duration::from_secs(2 * 60);

/// The repository's top directory (this crate is `ffi/` in it).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ffi/ is inside the repository")
}

/// This test run's scratch directory, `<target>/tmp/c_packaging/`, emptied on first use.
fn scratch() -> &'static Path {
    static SCRATCH: OnceLock<PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_packaging");
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("cannot empty {}: {e}", dir.display()),
        }
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// A fresh directory under the scratch directory.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = scratch().join(name);
    std::fs::create_dir_all(&dir).expect("directory under the scratch directory");
    dir
}

struct Finished {
    success: bool,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs `cmd` to completion, killed after `limit`; output goes through files, so a chatty
/// program cannot block on a full pipe.
fn run(mut cmd: Command, what: &str, limit: Duration) -> Finished {
    let logs = tempfile::tempdir().expect("temp dir for the output");
    let (out_path, err_path) = (logs.path().join("out"), logs.path().join("err"));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"));
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish in {limit:?}; its output:\n{}\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Finished {
        success: status.success(),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        elapsed: start.elapsed(),
    }
}

fn run_ok(cmd: Command, what: &str, limit: Duration) -> Finished {
    let finished = run(cmd, what, limit);
    assert!(
        finished.success,
        "{what} failed\nstdout:\n{}\nstderr:\n{}",
        finished.stdout, finished.stderr
    );
    finished
}

/// Whether `tool` runs; prints why the calling test skips when it does not.
fn have(tool: &str, test: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        eprintln!(
            "NOTICE: {test} SKIPPED: `{tool}` is not installed (scripts/ensure-deps installs it)"
        );
    }
    found
}

/// `scripts/install-c` with cargo building in this run's target directory.
fn install_command(prefix: &Path) -> Command {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("<target>/tmp");
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/install-c"))
        .arg("--prefix")
        .arg(prefix)
        .env("CARGO_TARGET_DIR", target_dir)
        .env_remove("DESTDIR");
    cmd
}

/// The prefix `scripts/install-c` installed into, once per test run.
fn prefix() -> &'static Path {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let prefix = scratch().join("prefix");
        let finished = run_ok(install_command(&prefix), "scripts/install-c", INSTALL_LIMIT);
        eprintln!(
            "scripts/install-c (release build included) took {:.1} s",
            finished.elapsed.as_secs_f64()
        );
        prefix
    })
}

/// Runs `counter` (3 processes x 4 threads x 50 increments) against a throwaway server.
fn run_counter(exe: &Path, library_dir: Option<&Path>) {
    let server = RedisServer::start();
    let mut cmd = Command::new(exe);
    cmd.args(["127.0.0.1", &server.port().to_string(), "3", "4", "50"]);
    set_library_path(&mut cmd, library_dir);
    let finished = run_ok(cmd, &exe.display().to_string(), RUN_LIMIT);
    assert!(
        finished
            .stdout
            .lines()
            .any(|line| line == "counter=600 expected=600"),
        "stdout:\n{}\nstderr:\n{}",
        finished.stdout,
        finished.stderr
    );
}

/// Only `library_dir` (or the program's rpath, when None) may supply the library: cargo's
/// LD_LIBRARY_PATH names its target directories.
fn set_library_path(cmd: &mut Command, library_dir: Option<&Path>) {
    match library_dir {
        Some(dir) => cmd.env("LD_LIBRARY_PATH", dir),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
}

/// Asserts, through `ldd`, that `exe` loads the library installed in `prefix`.
fn assert_loads_installed_library(exe: &Path, prefix: &Path, library_dir: Option<&Path>) {
    let mut cmd = Command::new("ldd");
    cmd.arg(exe);
    set_library_path(&mut cmd, library_dir);
    let ldd = run_ok(cmd, "ldd", RUN_LIMIT).stdout;
    let expected = format!("{SONAME} => {}", prefix.join("lib").join(SONAME).display());
    assert!(
        ldd.lines().any(|line| line.trim().starts_with(&expected)),
        "{} does not load the installed library ({expected}):\n{ldd}",
        exe.display()
    );
}

#[test]
fn install_c_installs_a_versioned_library_the_header_and_package_files() {
    let prefix = prefix();
    let lib = prefix.join("lib");
    let real = format!("libredis_rlock.so.{VERSION}");

    let header = std::fs::read(prefix.join("include/redis_rlock.h")).expect("installed header");
    assert_eq!(
        header,
        std::fs::read(root().join("include/redis_rlock.h")).unwrap()
    );
    assert!(lib.join(&real).symlink_metadata().unwrap().is_file());
    assert_eq!(
        std::fs::read_link(lib.join(SONAME)).unwrap(),
        Path::new(&real)
    );
    assert_eq!(
        std::fs::read_link(lib.join("libredis_rlock.so")).unwrap(),
        Path::new(SONAME)
    );
    assert!(lib.join("libredis_rlock.a").is_file());

    let pc = std::fs::read_to_string(lib.join("pkgconfig/redis_rlock.pc")).unwrap();
    for line in [
        format!("prefix={}", prefix.display()),
        "libdir=${prefix}/lib".to_string(),
        format!("Version: {VERSION}"),
        "Libs: -L${libdir} -lredis_rlock".to_string(),
        "Cflags: -I${includedir}".to_string(),
    ] {
        assert!(pc.lines().any(|l| l == line), "no line {line:?} in:\n{pc}");
    }
    assert!(
        pc.lines()
            .any(|l| l.starts_with("Libs.private: ") && l.contains("-lpthread")),
        "{pc}"
    );
    let cmake = lib.join("cmake/redis_rlock");
    let config = std::fs::read_to_string(cmake.join("redis_rlockConfig.cmake")).unwrap();
    assert!(
        config.contains("redis_rlock::redis_rlock_static"),
        "{config}"
    );
    let config_version =
        std::fs::read_to_string(cmake.join("redis_rlockConfigVersion.cmake")).unwrap();
    assert!(
        config_version.contains(&format!("\"{VERSION}\"")),
        "{config_version}"
    );

    // The soname, as the dynamic section says it.
    if have("readelf", "the soname check by readelf") {
        let mut cmd = Command::new("readelf");
        cmd.arg("-d").arg(lib.join(&real));
        let dynamic = run_ok(cmd, "readelf -d", RUN_LIMIT).stdout;
        assert!(
            dynamic
                .lines()
                .any(|l| l.contains("(SONAME)") && l.contains(&format!("[{SONAME}]"))),
            "{dynamic}"
        );
    }
}

#[test]
fn destdir_stages_the_install_and_the_files_name_the_real_prefix() {
    prefix(); // the release build, once
    let stage = fresh_dir("stage");
    let prefix = Path::new("/nonexistent/redis-rlock-packaging-test");
    let mut cmd = install_command(prefix);
    cmd.args(["--libdir", "lib64"]).env("DESTDIR", &stage);
    run_ok(cmd, "scripts/install-c with DESTDIR", INSTALL_LIMIT);
    assert!(!prefix.exists(), "install-c wrote outside DESTDIR");

    let staged = stage.join(prefix.strip_prefix("/").unwrap());
    let lib = staged.join("lib64");
    assert!(staged.join("include/redis_rlock.h").is_file());
    assert!(lib.join(SONAME).exists() && lib.join("libredis_rlock.a").is_file());
    let pc = std::fs::read_to_string(lib.join("pkgconfig/redis_rlock.pc")).unwrap();
    assert!(
        pc.lines()
            .any(|l| l == format!("prefix={}", prefix.display())),
        "{pc}"
    );
    assert!(pc.lines().any(|l| l == "libdir=${prefix}/lib64"), "{pc}");

    // The CMake package finds its files from where it lies, so the staged tree is usable.
    if have("cmake", "the CMake check of a staged install") {
        let build = fresh_dir("cmake-staged");
        let mut cmd = Command::new("cmake");
        cmd.arg("-S")
            .arg(root().join("examples/c/cmake"))
            .arg("-B")
            .arg(&build)
            // Debian's CMake does not search lib64/ (multiarch): name the package's folder.
            .arg(format!(
                "-Dredis_rlock_DIR={}",
                lib.join("cmake/redis_rlock").display()
            ));
        let configured = run_ok(cmd, "cmake (configure, staged)", BUILD_LIMIT);
        // The imported targets point into the staged tree, not at the prefix.
        let rules = std::fs::read_to_string(build.join("CMakeFiles/counter.dir/build.make"))
            .expect("CMake's makefile for counter");
        let library = lib.join(format!("libredis_rlock.so.{VERSION}"));
        assert!(
            rules.contains(&library.display().to_string()),
            "counter does not link {}\n{}",
            library.display(),
            configured.stdout
        );
    }
}

#[test]
fn counter_built_through_pkg_config_runs_on_the_installed_library() {
    let test = "counter_built_through_pkg_config_runs_on_the_installed_library";
    if !have("pkg-config", test) || !have("make", test) {
        return;
    }
    let prefix = prefix();
    let lib = prefix.join("lib");
    let out = fresh_dir("make");
    let mut cmd = Command::new("make");
    cmd.arg("-C")
        .arg(root().join("examples/c"))
        .arg(format!("OUT={}", out.display()))
        .arg("CFLAGS=-O2 -g -Wall -Wextra -Werror")
        .env("PKG_CONFIG_PATH", lib.join("pkgconfig"));
    run_ok(cmd, "make -C examples/c", BUILD_LIMIT);

    let counter = out.join("counter");
    assert_loads_installed_library(&counter, prefix, Some(&lib));
    run_counter(&counter, Some(&lib));

    // The tour of every function, including the stats, through the same build.
    let server = RedisServer::start();
    let mut cmd = Command::new(out.join("api_tour"));
    cmd.args(["127.0.0.1", &server.port().to_string()]);
    set_library_path(&mut cmd, Some(&lib));
    let tour = run_ok(cmd, "api_tour", RUN_LIMIT);
    assert!(tour.stdout.contains(" checks passed"), "{}", tour.stdout);
}

#[test]
fn counter_built_through_cmake_find_package_runs_shared_and_static() {
    let test = "counter_built_through_cmake_find_package_runs_shared_and_static";
    if !have("cmake", test) {
        return;
    }
    let prefix = prefix();
    let build = fresh_dir("cmake");
    let mut cmd = Command::new("cmake");
    cmd.arg("-S")
        .arg(root().join("examples/c/cmake"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg("-DCMAKE_C_FLAGS=-Wall -Wextra -Werror");
    run_ok(cmd, "cmake (configure)", BUILD_LIMIT);
    let mut cmd = Command::new("cmake");
    cmd.arg("--build").arg(&build);
    run_ok(cmd, "cmake --build", BUILD_LIMIT);

    // CMake gave the program an rpath to <prefix>/lib: no LD_LIBRARY_PATH at all.
    let shared = build.join("counter");
    assert_loads_installed_library(&shared, prefix, None);
    run_counter(&shared, None);

    let static_ = build.join("counter_static");
    let mut cmd = Command::new("ldd");
    cmd.arg(&static_).env_remove("LD_LIBRARY_PATH");
    let ldd = run_ok(cmd, "ldd", RUN_LIMIT).stdout;
    assert!(!ldd.contains("libredis_rlock"), "{ldd}");
    run_counter(&static_, None);
}
