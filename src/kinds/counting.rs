//! What the semaphore and the count-down latch share: the wait for a condition that another
//! client announces on a channel (permits released, a count that reached zero).
//!
//! Neither has a holder whose TTL bounds the wait, as a lock does, so a waiter also looks
//! again every [`POLL`]: a message that was lost (the subscription not yet confirmed, a
//! publish the server refused) or that woke the wrong waiter costs at most that long.

use std::time::{Duration, Instant};

use crate::engine::outage::Outage;
use crate::engine::Engine;
use crate::error::Result;
use crate::stop::Stop;

/// How long a waiter sleeps at most between two looks when no message comes. Redisson does
/// not poll at all; a second keeps the cost of a lost message bounded, and one request per
/// second per waiting thread is nothing next to the traffic that wakes it.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// How often a waiter looks again while Redis does not answer (it is also woken as soon as
/// the pub/sub listener has reconnected), as a lock's waiter does.
const OUTAGE_RETRY: Duration = Duration::from_millis(100);

/// Runs `attempt` until it succeeds (`Ok(true)`) or `deadline` passes (`Ok(false)`; `None`:
/// no limit), sleeping between attempts until a message on `channel` or [`POLL`].
///
/// The first attempt is made before subscribing (the common case needs no subscription); the
/// second right after, which closes the race with a message published before the
/// subscription. A waiter rides out Redis not answering for the outage grace
/// (`crate::engine::outage`), as a lock's waiter does, and so does the first attempt where
/// masters can be replaced (on one server its error is returned at once); any other error
/// is returned at once. `stop` ends the wait with its error (before the first attempt, if it
/// is stopped already: nothing is sent then).
pub(crate) fn wait_on_channel(
    engine: &Engine,
    name: &str,
    channel: &str,
    deadline: Option<Instant>,
    stop: &Stop,
    mut attempt: impl FnMut() -> Result<bool>,
) -> Result<bool> {
    // A semaphore's acquire carries its attempt id, a latch's look is a read: both are safe
    // to send again after a lost reply, so a timeout is ridden out too where masters can be
    // replaced (a stopped master).
    let outage = Outage::of(engine).resending();
    wait_with_outage(engine, name, channel, deadline, stop, outage, || {
        Ok(if attempt()? {
            Look::Got
        } else {
            Look::Wait(None)
        })
    })
}

/// What one look of a waiter of [`wait_on_channel_or_timer`] found.
pub(crate) enum Look {
    /// It got what it waited for.
    Got,
    /// Not yet; something changes by itself within this long at the latest (a permit's lease
    /// ends), so look again then even if no message comes. `None`: nothing does.
    Wait(Option<Duration>),
}

/// [`wait_on_channel`] for a condition that also comes true without a message: each look
/// may name when to look again (a leased permit expires with nobody announcing it), which
/// shortens that sleep. Same first attempt, subscription, poll, outage and stop rules.
pub(crate) fn wait_on_channel_or_timer(
    engine: &Engine,
    name: &str,
    channel: &str,
    deadline: Option<Instant>,
    stop: &Stop,
    attempt: impl FnMut() -> Result<Look>,
) -> Result<bool> {
    // A permit-expirable semaphore's acquire sent again after a lost reply may take a second
    // permit: a timeout is reported, not ridden out.
    let outage = Outage::of(engine);
    wait_with_outage(engine, name, channel, deadline, stop, outage, attempt)
}

/// [`wait_on_channel_or_timer`] with the outage rules of `outage`. Where masters can be
/// replaced, an outage met by the first attempt is ridden out too, for a wait that has time.
fn wait_with_outage(
    engine: &Engine,
    name: &str,
    channel: &str,
    deadline: Option<Instant>,
    stop: &Stop,
    mut outage: Outage,
    mut attempt: impl FnMut() -> Result<Look>,
) -> Result<bool> {
    stop.check()?;
    let has_time = |deadline: Option<Instant>| deadline.is_none_or(|d| Instant::now() < d);
    match attempt() {
        Ok(Look::Got) => return Ok(true),
        Ok(Look::Wait(_)) => {}
        Err(err) if has_time(deadline) => outage.ride_out_first(name, err)?,
        Err(err) => return Err(err),
    }
    if !has_time(deadline) {
        return outage.at_deadline();
    }
    let subscription = engine.subscribe(channel, deadline, stop);
    loop {
        stop.check()?;
        let mut sleep = POLL;
        match attempt() {
            Ok(Look::Got) => return Ok(true),
            Ok(Look::Wait(within)) => {
                outage.over();
                sleep = sleep.min(within.unwrap_or(POLL));
            }
            Err(err) => {
                outage.ride_out(name, err)?;
                sleep = OUTAGE_RETRY;
            }
        }
        if let Some(deadline) = deadline {
            let now = Instant::now();
            if now >= deadline {
                return outage.at_deadline();
            }
            sleep = sleep.min(deadline - now);
        }
        subscription.wait(sleep);
    }
}

/// The deadline of a wait of `wait`, counted from now; `wait` is checked as a lock's is.
pub(crate) fn deadline_after(wait: Duration) -> Result<Instant> {
    crate::limits::check_wait(wait)?;
    Ok(Instant::now() + wait)
}
