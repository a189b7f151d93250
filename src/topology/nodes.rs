//! Clients, pools and one-off connections for the nodes of one deployment, all with the
//! settings of the first URL (credentials, database, TLS).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Client, Connection, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::error::{Error, Result};
use crate::topology::config::Config;
use crate::topology::map::Map;
use crate::topology::pool::Pool;

/// Opens clients and pools for nodes of one deployment, all with the same settings.
pub(crate) struct Nodes {
    /// The first URL's settings: credentials, database, TLS or not.
    pub(crate) template: ConnectionInfo,
    tls_root_certificate: Option<Vec<u8>>,
    pool_size: usize,
    connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

impl Nodes {
    /// Nodes reached with `template`'s settings and `config`'s pools and timeouts.
    pub(crate) fn new(template: ConnectionInfo, config: &Config) -> Self {
        Nodes {
            template,
            tls_root_certificate: config
                .tls_root_certificate
                .as_ref()
                .map(|pem| pem.0.clone()),
            pool_size: config.pool_size,
            connect_timeout: config.connect_timeout,
            response_timeout: config.response_timeout,
        }
    }

    /// The template's settings with another node's address.
    pub(crate) fn at(&self, host: &str, port: u16) -> ConnectionInfo {
        let addr = match self.template.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        self.template.clone().set_addr(addr)
    }

    pub(crate) fn client(&self, info: ConnectionInfo) -> Result<Client> {
        client(info, self.tls_root_certificate.as_deref())
    }

    pub(crate) fn pool(&self, info: ConnectionInfo) -> Result<Pool> {
        Ok(Pool::new(
            self.client(info)?,
            self.pool_size,
            self.connect_timeout,
            self.response_timeout,
        ))
    }

    /// The error for the first command on a new connection to `node` not answered in time.
    /// Over TLS, that is most often a server that does not speak TLS on that port: the
    /// handshake, which redis-rs runs with the first command, waits for a reply that never
    /// comes, and the socket's "Resource temporarily unavailable" would not say so.
    pub(crate) fn first_reply_timeout(&self, node: &ConnectionInfo) -> Error {
        let operation = match node.addr() {
            ConnectionAddr::TcpTls { .. } => {
                "the first reply over TLS (does the server serve TLS on that port?)"
            }
            _ => "the first reply from Redis",
        };
        Error::Timeout {
            operation,
            after: self.response_timeout,
        }
    }

    /// A connection of its own, for discovery, with the pool's timeouts.
    pub(crate) fn probe(&self, info: ConnectionInfo) -> Result<Connection> {
        let deadline = Instant::now() + self.connect_timeout;
        let conn = crate::topology::pool::connect_by(&self.client(info)?, 1, deadline)
            .map_err(Error::from_connect)?;
        conn.set_read_timeout(Some(self.response_timeout))
            .map_err(Error::connect)?;
        Ok(conn)
    }

    /// The pool of the master at `info`: `current`'s, if it has one there.
    pub(crate) fn reuse(&self, current: &Map, info: ConnectionInfo) -> Result<Arc<Pool>> {
        let addr = info.addr().to_string();
        match current.masters.iter().find(|p| p.addr() == addr) {
            Some(pool) => Ok(Arc::clone(pool)),
            None => Ok(Arc::new(self.pool(info)?)),
        }
    }
}

/// Makes a redis-rs client for `info`: TCP_NODELAY, no `CLIENT SETINFO`, TLS roots if given.
pub(crate) fn client(info: ConnectionInfo, tls_root_certificate: Option<&[u8]>) -> Result<Client> {
    // Every request is a small write followed by a wait for the reply: Nagle's algorithm
    // would only add delay (up to a delayed-ACK period) to each of them.
    let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    // CLIENT SETINFO (which redis-rs sends on connect unless told not to) is informative
    // only and its replies are ignored, but a paused server makes each of them cost a
    // full timeout of the connect.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_tcp_settings(tcp).set_redis_settings(settings);
    match tls_root_certificate {
        #[cfg(feature = "tls")]
        Some(pem) => Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ),
        _ => Client::open(info),
    }
    .map_err(Error::invalid_url)
}

pub(crate) fn parse_url(url: &str) -> Result<ConnectionInfo> {
    url.into_connection_info().map_err(Error::invalid_url)
}

/// `host:port` → its parts (`[::1]:7000` too).
pub(crate) fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_into_host_and_port() {
        assert_eq!(split_addr("127.0.0.1:30001"), Some(("127.0.0.1", 30001)));
        assert_eq!(split_addr("[::1]:7000"), Some(("::1", 7000)));
        assert_eq!(split_addr("nohost"), None);
    }
}
