//! Redlock over 5 masters against one master, on loopback and with replies delayed as
//! by a network (`redlock-net`).

use std::time::{Duration, Instant};

use redis_rlock::{LockManager, RedLock};
use redis_rlock_testkit as support;

use crate::args::Scale;
use crate::measure::{percentiles, violation};
use crate::table::{micros, row, Row};

/// How much later than on loopback every reply arrives in `redlock-net`: about a round trip
/// within one availability zone, and across zones, so that a round trip is network time, as
/// between separate machines, rather than this machine's CPU shared by every server.
pub(crate) const NETWORK_DELAYS: [(Duration, &str); 2] = [
    (
        Duration::from_micros(250),
        "Redlock over 5 masters, replies 0.25 ms late",
    ),
    (
        Duration::from_millis(1),
        "Redlock over 5 masters, replies 1 ms late",
    ),
];

/// Redlock lock+unlock cycles over 5 masters (the run's server and 4 started here, all on
/// this machine), against lock+unlock cycles on one of them, rounds alternating as in W1.
/// A Redlock round tries every master at once, the caller one and a helper thread of each
/// other master's manager the others (no thread is started per round), so its cycle is about
/// the slowest master's plus the handoffs to the helpers and back. With all five servers on this machine's cores, five masters also cost
/// five times the CPU of one: the floor rows send the lock's two scripts raw to all five at
/// once from one thread (every request written before any reply is read), against one master.
///
/// With `network` (a delay and the rows' name), every connection goes through a proxy in
/// front of its server that delivers each reply that much later (this kernel has no
/// `tc netem`), standing in for masters on separate machines: a round trip is then mostly
/// network time, which five masters spend at once, rather than CPU, which they share here.
pub(crate) fn redlock_cycles(
    url: &str,
    scale: &Scale,
    network: Option<(Duration, &'static str)>,
) -> Vec<Row> {
    /// The lock's acquire and release scripts sent raw, at once, to every connection of
    /// `conns`: each request is written to all before any reply is read.
    struct RawMasters {
        conns: Vec<redis::Connection>,
        acquire: String,
        release: String,
        request: u64,
        latch_prefix: String,
    }
    const KEY: &str = "loadgen:redlock:raw";
    const OWNER: &str = "00000000-0000-0000-0000-000000000000:1";
    impl RawMasters {
        fn connect(urls: &[String]) -> Self {
            let acquire = redis::Script::new(redis_rlock::lua::ACQUIRE);
            let release = redis::Script::new(redis_rlock::lua::RELEASE);
            let conns = urls
                .iter()
                .map(|url| {
                    let mut conn = support::nodelay_conn(url);
                    acquire.load(&mut conn).expect("SCRIPT LOAD");
                    release.load(&mut conn).expect("SCRIPT LOAD");
                    conn
                })
                .collect();
            RawMasters {
                conns,
                acquire: acquire.get_hash().to_owned(),
                release: release.get_hash().to_owned(),
                request: 0,
                latch_prefix: format!(
                    "redisson_unlock_latch:{{{KEY}}}:{}",
                    uuid::Uuid::new_v4().simple()
                ),
            }
        }

        fn all_at_once(&mut self, packed: &[u8]) -> Vec<redis::Value> {
            for conn in &mut self.conns {
                conn.send_packed_command(packed).expect("raw send");
            }
            let conns = self.conns.iter_mut();
            conns
                .map(|conn| conn.recv_response().expect("raw reply"))
                .collect()
        }

        fn cycle(&mut self) {
            let acquire = redis::cmd("EVALSHA")
                .arg(&self.acquire)
                .arg(3)
                .arg(KEY)
                .arg(format!("redis_rlock__attempt:{{{KEY}}}:{OWNER}"))
                .arg(format!("redis_rlock__waiters:{{{KEY}}}"))
                .arg(30_000)
                .arg(OWNER)
                .arg(self.request) // the attempt id: a new one per attempt
                .arg(11_000)
                .get_packed_command();
            for reply in self.all_at_once(&acquire) {
                assert_eq!(reply, redis::Value::Nil, "the raw lock is uncontended");
            }
            self.request += 1;
            let release = redis::cmd("EVALSHA")
                .arg(&self.release)
                .arg(4)
                .arg(KEY)
                .arg(format!("redisson_lock__channel:{{{KEY}}}"))
                .arg(format!("{}-{}", self.latch_prefix, self.request))
                .arg(format!("{}-{}", self.latch_prefix, self.request - 1))
                .arg("0")
                .arg(30_000)
                .arg(OWNER)
                .arg("publish")
                .arg(11_000)
                .arg(0) // no listener of our own
                .arg("") // no handoff
                .arg(0)
                .get_packed_command();
            for reply in self.all_at_once(&release) {
                assert_eq!(reply, redis::Value::Int(1), "the raw lock was held");
            }
        }
    }

    let others: Vec<_> = (0..4).map(|_| support::RedisServer::start()).collect();
    let mut urls = vec![url.to_owned()];
    urls.extend(others.iter().map(support::RedisServer::url));
    let proxies: Vec<support::proxy::Proxy> = match network {
        None => Vec::new(),
        Some((delay, _)) => urls
            .iter()
            .map(|url| {
                let port = url
                    .trim_end_matches('/')
                    .rsplit(':')
                    .next()
                    .and_then(|port| port.parse().ok())
                    .expect("a redis://host:port/ URL");
                let proxy = support::proxy::Proxy::start(port);
                proxy.delay_replies(delay);
                proxy
            })
            .collect(),
    };
    if !proxies.is_empty() {
        urls = proxies.iter().map(support::proxy::Proxy::url).collect();
    }
    let managers: Vec<_> = urls
        .iter()
        .map(|url| LockManager::new(url).expect("manager"))
        .collect();
    let red = RedLock::new(
        managers
            .iter()
            .map(|m| m.get_lock("loadgen:redlock"))
            .collect(),
    );
    let single = managers[0].get_lock("loadgen:redlock:single");
    let mut raw_five = RawMasters::connect(&urls);
    let mut raw_one = RawMasters::connect(&urls[..1]);
    // A cycle over the network takes milliseconds: fewer of them.
    let cycles = if network.is_some() {
        scale.w1_cycles / 10
    } else {
        scale.w1_cycles / 2
    };
    let rounds = 10;
    let mut samples: [Vec<Duration>; 4] = Default::default();
    for _ in 0..rounds {
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            single.lock().expect("lock").unlock().expect("unlock");
            samples[0].push(start.elapsed());
        }
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            let guard = red.lock().expect("redlock");
            if guard.guards().len() != 5 {
                violation(format!(
                    "redlock held {} of 5 uncontended masters",
                    guard.guards().len()
                ));
            }
            guard.unlock().expect("unlock");
            samples[1].push(start.elapsed());
        }
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            raw_one.cycle();
            samples[2].push(start.elapsed());
        }
        for _ in 0..cycles / rounds {
            let start = Instant::now();
            raw_five.cycle();
            samples[3].push(start.elapsed());
        }
    }
    let [single, red, raw_one, raw_five] = samples.map(|mut s| percentiles(&mut s));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let workload = network.map_or("Redlock over 5 masters", |(_, name)| name);
    vec![
        row(workload, "cycle p50, against one master's", micros(red.p50)).against(
            micros(single.p50),
            ratio(red.p50, single.p50),
            "≤ 1.3",
        ),
        row(workload, "cycle p99, against one master's", micros(red.p99)).against(
            micros(single.p99),
            ratio(red.p99, single.p99),
            "",
        ),
        row(
            workload,
            "floor: raw scripts to 5 at once p50, against to 1",
            micros(raw_five.p50),
        )
        .against(micros(raw_one.p50), ratio(raw_five.p50, raw_one.p50), ""),
        row(
            workload,
            "floor: raw scripts to 5 at once p99, against to 1",
            micros(raw_five.p99),
        )
        .against(micros(raw_one.p99), ratio(raw_five.p99, raw_one.p99), ""),
        row(
            workload,
            "cycle p50, against the raw floor to 5",
            micros(red.p50),
        )
        .against(micros(raw_five.p50), ratio(red.p50, raw_five.p50), ""),
    ]
}
