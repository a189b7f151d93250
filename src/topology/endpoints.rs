//! What a manager connects to: one server, a Sentinel-watched master, or a Redis Cluster, and
//! the URL forms that name each (docs/design/deployments.md, "Deployments").
//!
//! - `redis://`, `rediss://`, `redis+unix://`: one server (redis-rs' own URL format).
//! - `redis-sentinel://[[user:]password@]host1[:port1][,host2[:port2]...][/db]#master`:
//!   Lettuce's form for Sentinel (also `rediss-sentinel://` for TLS). Ports default to 26379.
//! - `redis-cluster://[[user:]password@]host1[:port1][,host2[:port2]...][/db]`: this crate's
//!   form for a cluster's seed nodes, built like the Sentinel one (also `rediss-cluster://`).
//!   Ports default to 6379. A `/db` other than 0 needs a cluster that has numbered databases
//!   (Valkey 9.0+ with `cluster-databases`): checked when the manager starts.
//!
//! Each form turns into plain `redis://` (or `rediss://`) URLs, one per host, carrying the
//! credentials, so everything after this file speaks redis-rs' format only.

use crate::error::{Error, Result};

/// The deployment a manager talks to, as URLs of single nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoints {
    /// One server (or a proxy in front of one).
    Server(String),
    /// The sentinels that watch `master_name`. The master is reached with the credentials and
    /// database of the first sentinel URL.
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
    /// Seed nodes of a cluster: any of them tells where the others and the slots are.
    Cluster { seeds: Vec<String> },
}

const SENTINEL_PORT: u16 = 26379;
const SERVER_PORT: u16 = 6379;

impl Endpoints {
    /// Reads any of the URL forms above; plain URLs are left for redis-rs to check.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        match scheme {
            "redis-sentinel" | "rediss-sentinel" => {
                let (rest, master_name) = rest.rsplit_once('#').ok_or_else(|| {
                    bad_url(
                        url,
                        "a Sentinel URL names its master after '#' (…#mymaster)",
                    )
                })?;
                let sentinels = node_urls(url, tls(scheme), rest, SENTINEL_PORT)?;
                Ok(Endpoints::Sentinel {
                    sentinels,
                    master_name: decode(master_name),
                })
            }
            "redis-cluster" | "rediss-cluster" => {
                let seeds = node_urls(url, tls(scheme), rest, SERVER_PORT)?;
                Ok(Endpoints::Cluster { seeds })
            }
            _ => {
                // Only a URL redis-rs refuses is looked at, to say why: nothing it accepts
                // (`#insecure`, an upper-case scheme, an empty port, `unix:/path`) is refused.
                if redis::IntoConnectionInfo::into_connection_info(url).is_err() {
                    if let Some(reason) = what_is_wrong(scheme, rest) {
                        return Err(bad_url(url, &reason));
                    }
                }
                Ok(Endpoints::Server(url.to_owned()))
            }
        }
    }

    /// Checks the lists of the builders (`LockManager::sentinel_builder`,
    /// `LockManager::cluster_builder`): at least one URL, each a plain node URL.
    pub(crate) fn check(&self) -> Result<()> {
        let (urls, what) = match self {
            Endpoints::Server(_) => return Ok(()),
            Endpoints::Sentinel {
                sentinels,
                master_name,
            } => {
                if master_name.is_empty() {
                    return Err(Error::invalid("master name", "must not be empty"));
                }
                (sentinels, "sentinel URLs")
            }
            Endpoints::Cluster { seeds } => (seeds, "cluster node URLs"),
        };
        if urls.is_empty() {
            return Err(Error::invalid(what, "at least one is needed"));
        }
        if let Some(url) = urls.iter().find(|url| url.contains("-sentinel://")) {
            return Err(bad_url(url, "give each node as redis://host:port/"));
        }
        Ok(())
    }
}

/// Why redis-rs refused a plain URL, where it says only "did not parse": no scheme, an unknown
/// one, a port that is no port. `None` when none of these is it (redis-rs' error stands).
fn what_is_wrong(scheme: &str, rest: &str) -> Option<String> {
    const FORMS: &str = "expected redis://[user:password@]host[:port][/db], rediss://..., \
                         redis+unix:///path, redis-sentinel://... or redis-cluster://...";
    if scheme.is_empty() {
        return Some(format!("no scheme; {FORMS}"));
    }
    let known = [
        "redis",
        "rediss",
        "redis+unix",
        "unix",
        "valkey",
        "valkeys",
        "valkey+unix",
    ];
    let lowered = scheme.trim().to_ascii_lowercase();
    if !known.contains(&lowered.as_str()) {
        return Some(format!("unknown scheme {scheme:?}; {FORMS}"));
    }
    if lowered.ends_with("unix") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let port = match host.rfind(':') {
        // An IPv6 address in brackets has colons of its own.
        Some(colon) if !host[colon..].contains(']') => &host[colon + 1..],
        _ => return None,
    };
    match port.parse::<u16>() {
        Ok(port) if port > 0 => None,
        _ if port.is_empty() => None,
        _ => Some(format!("the port {port:?} is not a number from 1 to 65535")),
    }
}

fn tls(scheme: &str) -> bool {
    scheme.starts_with("rediss")
}

/// `[credentials@]host[:port],host[:port]...[/db][?query]` → one URL per host.
fn node_urls(url: &str, tls: bool, rest: &str, default_port: u16) -> Result<Vec<String>> {
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (Some(credentials), hosts),
        None => (None, authority),
    };
    let scheme = if tls { "rediss" } else { "redis" };
    let mut urls = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(bad_url(
                url,
                "a host is missing (…://host1:port1,host2:port2…)",
            ));
        }
        let has_port = match host.rfind(':') {
            // An IPv6 address in brackets has colons of its own.
            Some(colon) => !host[colon..].contains(']'),
            None => false,
        };
        let port = if has_port {
            String::new()
        } else {
            format!(":{default_port}")
        };
        let credentials = credentials.map_or(String::new(), |c| format!("{c}@"));
        let path = if path.is_empty() { "/" } else { path };
        urls.push(format!("{scheme}://{credentials}{host}{port}{path}"));
    }
    Ok(urls)
}

/// `%xx` escapes in a master name.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An invalid URL error that names what is wrong, without the URL's password.
fn bad_url(url: &str, reason: &str) -> Error {
    let shown = redact_url(url);
    Error::InvalidUrl {
        source: crate::error::RedisFailure::new((
            redis::ErrorKind::InvalidClientConfig,
            "invalid URL",
            format!("{shown}: {reason}"),
        )),
    }
}

/// The URL with any credentials replaced by `***`, for `Debug` and messages.
pub(crate) fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_urls_are_one_server() {
        let parsed = Endpoints::parse("redis://127.0.0.1:6379/2").unwrap();
        assert_eq!(parsed, Endpoints::Server("redis://127.0.0.1:6379/2".into()));
        // What redis-rs accepts stays accepted (`#insecure`: TLS without certificate checks).
        for url in [
            "rediss://user:p%40ss@[::1]:6380/0?protocol=resp3",
            "rediss://10.0.0.5:6380#insecure",
            "redis://127.0.0.1:6379#x",
            "REDIS://127.0.0.1/",
            "redis://127.0.0.1:/",
            "redis://host",
            "redis+unix:///run/redis.sock",
            "unix:///run/redis.sock?db=1",
            "unix:/run/redis.sock",
        ] {
            Endpoints::parse(url).unwrap();
        }
    }

    #[test]
    fn plain_urls_say_what_is_wrong() {
        for (url, says) in [
            ("", "no scheme"),
            ("127.0.0.1:6379", "no scheme"),
            ("http://127.0.0.1/", "unknown scheme \"http\""),
            ("redis://127.0.0.1:99999/", "port \"99999\""),
            ("redis://:secret@127.0.0.1:x/", "port \"x\""),
        ] {
            let err = Endpoints::parse(url).unwrap_err();
            assert!(err.is_invalid_argument(), "{url}: {err}");
            assert!(err.to_string().contains(says), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{url}: {err}");
        }
    }

    #[test]
    fn sentinel_urls_in_lettuces_form() {
        let parsed =
            Endpoints::parse("redis-sentinel://:s3cret@host1:26380,host2/3#my%20master").unwrap();
        assert_eq!(
            parsed,
            Endpoints::Sentinel {
                sentinels: vec![
                    "redis://:s3cret@host1:26380/3".into(),
                    "redis://:s3cret@host2:26379/3".into(),
                ],
                master_name: "my master".into(),
            }
        );
        let tls = Endpoints::parse("rediss-sentinel://h#m").unwrap();
        assert_eq!(
            tls,
            Endpoints::Sentinel {
                sentinels: vec!["rediss://h:26379/".into()],
                master_name: "m".into(),
            }
        );
        let err = Endpoints::parse("redis-sentinel://user:pw@h1,h2").unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    #[test]
    fn cluster_urls_list_seeds() {
        let parsed = Endpoints::parse("redis-cluster://127.0.0.1:30001,127.0.0.1:30002").unwrap();
        assert_eq!(
            parsed,
            Endpoints::Cluster {
                seeds: vec![
                    "redis://127.0.0.1:30001/".into(),
                    "redis://127.0.0.1:30002/".into(),
                ],
            }
        );
        let ipv6 = Endpoints::parse("redis-cluster://[::1],[::1]:7001").unwrap();
        assert_eq!(
            ipv6,
            Endpoints::Cluster {
                seeds: vec!["redis://[::1]:6379/".into(), "redis://[::1]:7001/".into()],
            }
        );
        assert!(Endpoints::parse("redis-cluster://a,,b").is_err());
    }
}
