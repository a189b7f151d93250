//! A network namespace joined to this one by a veth pair, made by the campaign for the
//! partition faults and deleted when the value is dropped (also when the campaign panics).
//! Addresses come from a private /30 chosen by process id; the only traffic on it is between
//! processes this campaign started: a worker inside the namespace and the servers, or a
//! server inside (the cut master) and the servers, sentinels and workers here.

use std::process::{Command, Stdio};

pub struct Netns {
    name: String,
    host_if: String,
    host: String,
    inside: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// Makes the namespace and the pair, addressed and up; `Err` says why not (not root).
    pub fn create() -> Result<Netns, String> {
        let pid = std::process::id();
        let block = (pid % 64) * 4;
        let ns = Netns {
            name: format!("rlock-campaign-{pid}"),
            host_if: format!("rlc{pid}a"),
            host: format!("10.231.{}.{}", (pid / 64) % 256, block + 1),
            inside: format!("10.231.{}.{}", (pid / 64) % 256, block + 2),
        };
        ip(&["netns", "add", &ns.name])?;
        // From here on, Drop removes whatever was made.
        let peer = format!("rlc{pid}b");
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &ns.name])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/30", ns.host),
            "dev",
            &ns.host_if,
        ])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns.name, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{}/30", ns.inside), "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// This namespace's end of the pair: servers listen here for workers inside.
    pub fn host_addr(&self) -> String {
        self.host.clone()
    }

    /// The namespace's end of the pair: a server inside listens here for everyone else.
    pub fn inside_addr(&self) -> String {
        self.inside.clone()
    }

    /// Addressing for a deployment that a partition crosses: the servers here also on our
    /// end of the pair, and with `node`, the master inside the namespace.
    pub fn network(&self, node: bool) -> super::support::Network {
        super::support::Network {
            host_addr: self.host_addr(),
            netns: node.then(|| (self.name.clone(), self.inside_addr())),
        }
    }

    /// A command run inside the namespace.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Cuts the pair (both directions): the worker inside reaches nothing.
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_if, "down"]).expect("cut the veth pair");
    }

    /// Joins the pair again.
    pub fn heal(&self) {
        ip(&["link", "set", &self.host_if, "up"]).expect("join the veth pair");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}
