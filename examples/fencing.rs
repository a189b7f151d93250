//! Fencing tokens protect a resource from a holder that lost its lock without knowing.
//!
//! ```sh
//! cargo run --example fencing
//! ```
//!
//! Client A takes the lock and is then stalled (a long GC pause, a SIGSTOP, a partition) for
//! longer than its lease; here an operator's force unlock stands in for the lease running out
//! meanwhile. Client B takes the lock and writes. When A wakes up it still believes it holds
//! the lock and writes too, but the resource refuses its write, because A's token is lower
//! than one it has already accepted. Uses `REDIS_URL`, or starts a throwaway `redis-server`.

mod local_redis;

use std::sync::Mutex;

use redis_rlock::LockManager;

/// The protected resource. It needs no lock of its own: it only remembers the highest token
/// it has accepted and refuses older ones.
struct FencedStore {
    state: Mutex<(u64, String)>,
}

impl FencedStore {
    fn write(&self, token: u64, value: &str) -> Result<(), String> {
        let mut state = self.state.lock().unwrap();
        if token < state.0 {
            return Err(format!(
                "refused {value:?}: token {token} is older than {}",
                state.0
            ));
        }
        *state = (token, value.to_owned());
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = local_redis::url_from_env_or_start();
    let (client_a, client_b) = (LockManager::new(&url)?, LockManager::new(&url)?);
    let store = FencedStore {
        state: Mutex::new((0, String::new())),
    };
    let name = "examples:fencing";

    let guard_a = client_a.lock_fenced(name)?;
    let token_a = guard_a.fencing_token().expect("a fenced guard has a token");
    println!("A holds the lock with token {token_a}, then stalls");

    // While A is stalled its lease runs out (here: an operator force-unlocks it).
    client_b.get_lock(name).force_unlock()?;
    let guard_b = client_b.lock_fenced(name)?;
    let token_b = guard_b.fencing_token().expect("a fenced guard has a token");
    println!("B holds the lock with token {token_b}");
    store.write(token_b, "written by B")?;
    println!("B's write accepted");
    guard_b.unlock()?;

    // A wakes up and writes, believing it still holds the lock.
    let refused = store.write(token_a, "written by A").unwrap_err();
    println!("A's late write: {refused}");
    match guard_a.unlock() {
        Err(err) if err.is_not_held() => println!("A's unlock: {err}"),
        other => return Err(format!("A's unlock should report the lost lock: {other:?}").into()),
    }
    let (token, value) = store.state.lock().unwrap().clone();
    assert_eq!((token, value.as_str()), (token_b, "written by B"));
    println!("the store kept B's write (token {token})");
    Ok(())
}
