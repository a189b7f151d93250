"""Throwaway Redis deployments for the tests: a server, a Sentinel deployment, a cluster.

Each starts its own redis-server processes on free loopback ports, waits until they answer,
and kills them on stop(), as the Rust tests' fixtures (testkit/) do.
"""

import os
import socket
import subprocess
import tempfile
import time

import redis

SERVER = os.environ.get("REDIS_RLOCK_SERVER", "redis-server")
CLI = os.environ.get("REDIS_RLOCK_CLI", "redis-cli")
#: How long a deployment may take to come up on a loaded machine.
START_BOUND = 60.0


def free_port(below=55535):
    """A free loopback port below `below` (a cluster node's bus listens on port + 10000)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below:
            return port


def wait_for(what, check, bound=START_BOUND):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def client(port):
    return redis.Redis(port=port, socket_timeout=5, decode_responses=True)


class Server:
    """One redis-server on a free port, with no persistence."""

    def __init__(self, *args, workdir=None):
        self.port = free_port()
        self.workdir = workdir or tempfile.mkdtemp(prefix="redis-rlock-py-")
        self.process = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.workdir, *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(f"redis-server on port {self.port}", lambda: client(self.port).ping())

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/"

    def client(self):
        return client(self.port)

    def stop(self):
        self.process.kill()
        self.process.wait()


class Sentinel:
    """A master, one replica and one sentinel watching them as `mymaster`."""

    MASTER = "mymaster"

    def __init__(self):
        self.master = Server()
        self.replica = Server("--replicaof", "127.0.0.1", str(self.master.port))
        wait_for("the replica's link", lambda: self.replica.client().info("replication")
                 .get("master_link_status") == "up")
        self.port = free_port()
        self.workdir = tempfile.mkdtemp(prefix="redis-rlock-py-sentinel-")
        conf = os.path.join(self.workdir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\ndir {self.workdir}\n"
                    f"sentinel monitor {self.MASTER} 127.0.0.1 {self.master.port} 1\n"
                    f"sentinel down-after-milliseconds {self.MASTER} 5000\n")
        self.process = subprocess.Popen([SERVER, conf, "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("the sentinel to see the replica", self._sees_replica)

    def _sees_replica(self):
        replicas = client(self.port).execute_command("SENTINEL", "REPLICAS", self.MASTER)
        return len(replicas) >= 1

    @property
    def urls(self):
        return [f"redis://127.0.0.1:{self.port}/"]

    def stop(self):
        self.process.kill()
        self.process.wait()
        self.replica.stop()
        self.master.stop()


class Cluster:
    """Three masters with one replica each, made by `redis-cli --cluster create`."""

    def __init__(self):
        workdir = tempfile.mkdtemp(prefix="redis-rlock-py-cluster-")
        self.nodes = []
        self.nodes = [self._node(workdir) for _ in range(6)]
        subprocess.run([CLI, "--cluster", "create",
                        *[f"127.0.0.1:{n.port}" for n in self.nodes],
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for node in self.nodes:
            wait_for("the cluster to form", lambda n=node: n.client().cluster("info")
                     .get("cluster_state") == "ok")
        for node in self.nodes:
            wait_for("the replicas' links", lambda n=node: self._replica_ok(n))

    @staticmethod
    def _node(workdir):
        return Server("--cluster-enabled", "yes", "--cluster-node-timeout", "5000",
                      "--cluster-config-file", f"nodes-{time.monotonic_ns()}.conf",
                      workdir=workdir)

    @staticmethod
    def _replica_ok(node):
        info = node.client().info("replication")
        return info.get("role") == "master" or info.get("master_link_status") == "up"

    @property
    def urls(self):
        return [n.url for n in self.nodes]

    def stop(self):
        for node in self.nodes:
            node.stop()
