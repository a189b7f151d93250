//! `rediss://`: a server with a certificate from a private CA (made here with `openssl`),
//! trusted through `LockManagerBuilder::tls_root_certificate`.
#![cfg(feature = "tls")]

use redis_rlock_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redis_rlock::{LockManager, Result};
use support::RedisServer;

/// A CA and a server certificate for localhost / 127.0.0.1, in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (scripts/ensure-deps installs it)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=redis-rlock test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(
        dir.join("server.ext"),
        [
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "basicConstraints=CA:FALSE",
            "keyUsage=digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth",
            "",
        ]
        .join("\n"),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

fn tls_server(dir: &Path) -> (RedisServer, u16) {
    let tls_port = support::free_port();
    let path = |file: &str| dir.join(file).to_string_lossy().into_owned();
    let port = tls_port.to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let server = RedisServer::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    (server, tls_port)
}

/// Whether the selected server can listen for TLS; says why not when it cannot (the servers of
/// the matrix that come from wheels were built without TLS).
fn server_has_tls(test: &str) -> bool {
    let has = support::server_has_tls();
    if !has {
        support::skip(test, "was built without TLS");
    }
    has
}

#[test]
fn a_lock_over_tls_with_a_private_ca() -> Result<()> {
    if !server_has_tls("a_lock_over_tls_with_a_private_ca") {
        return Ok(());
    }
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let (_server, tls_port) = tls_server(certs.path());
    let ca = std::fs::read(certs.path().join("ca.crt")).unwrap();
    let url = format!("rediss://localhost:{tls_port}/");
    let manager = LockManager::builder(&url)
        .tls_root_certificate(ca)
        .connect_timeout(Duration::from_secs(5))
        .build()?;
    let guard = manager.lock("tls:orders")?;
    assert!(guard.lock().is_held_by_current_thread()?);
    let waiter = support::Waiter::spawn(&manager, "tls:orders");
    guard.unlock()?;
    waiter.acquired_since(std::time::Instant::now());
    assert!(!manager.get_lock("tls:orders").is_locked()?);
    Ok(())
}

#[test]
fn a_server_certificate_from_an_untrusted_ca_is_a_connection_error() {
    if !server_has_tls("a_server_certificate_from_an_untrusted_ca_is_a_connection_error") {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    make_certificates(certs.path());
    let (_server, tls_port) = tls_server(certs.path());
    // Without the private CA, the system's roots do not vouch for this server.
    let err = LockManager::new(&format!("rediss://localhost:{tls_port}/")).unwrap_err();
    assert!(err.is_connection_error(), "{err}");
}

#[test]
fn rediss_to_a_server_without_tls_says_so_instead_of_eagain() {
    let server = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}/", server.port());
    let err = LockManager::builder(&url)
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap_err();
    // The plain server waits for the rest of a "command" (the TLS hello), so the handshake
    // gets no answer: a timeout, and one that names TLS rather than "Resource temporarily
    // unavailable".
    assert!(err.is_timeout(), "{err}");
    assert!(err.to_string().contains("TLS"), "{err}");
    assert!(!err.to_string().contains("os error"), "{err}");
}
