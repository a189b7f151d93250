//! Hearing releases: the waiters' subscriptions per channel ([`subscriber`]) and the listener
//! threads, one per master, that hold the pub/sub connections ([`listener`]); what grants
//! add to both is in `grants`; the lock keys whose changes the server reports (client
//! tracking) are in `tracked` and `tracking`.

mod grants;
pub(crate) mod listener;
mod registry;
pub(crate) mod subscriber;
mod tracked;
mod tracking;
mod waiters;
