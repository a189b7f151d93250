//! A single server: its one master never moves, and its replicas are counted once, at connect
//! (nobody promotes them).

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::topology::map::Map;
use crate::topology::nodes::Nodes;
use crate::topology::pool::Pool;
use crate::topology::replica_count;

/// The one server, its replicas counted once, here (a refresh is never needed for one
/// server); a wrong address or password fails here too.
pub(crate) fn discover(nodes: &Nodes, current: &Map) -> Result<Arc<Pool>> {
    let pool = nodes.reuse(current, nodes.template.clone())?;
    let mut conn = pool.get_by(Instant::now() + nodes.response_timeout)?;
    let replicas = match replica_count::listed_replicas(&mut conn) {
        Ok(replicas) => replicas.unwrap_or(0),
        Err(source) if source.is_timeout() => {
            return Err(nodes.first_reply_timeout(&nodes.template))
        }
        Err(source) => match Error::from_command("connecting", "", source) {
            // A user allowed neither INFO nor ROLE (an ACL) can still lock: replica
            // sync is then off for this server.
            Error::Redis { source, .. } if source.code().is_some() => {
                log::info!(
                    "cannot count the server's replicas ({source}); acquires will not \
                         wait for replicas"
                );
                0
            }
            err => return Err(err),
        },
    };
    drop(conn);
    pool.set_replicas(replicas);
    Ok(pool)
}
