"""A real Redis Cluster for the tests: N primaries (and replicas if asked) from Debian's
redis-server on free loopback ports, joined by `redis-cli --cluster create`.

`RedisCluster.url` is the `redis+cluster://` URL of its seed nodes. Each node is a
`RedisServer` (tests/conftest.py) with cluster mode on, its cluster bus on a second free
port, and a short node timeout so that a failover takes seconds, not the default 15.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

NODE_TIMEOUT_MS = 2000
READY_TIMEOUT = 60.0


class RedisCluster:
    """`primaries` primaries with `replicas` replicas each, started and joined."""

    def __init__(
        self,
        directory: Path,
        server: Callable[[Path, Sequence[str]], Any],
        free_port: Callable[[], int],
        primaries: int = 3,
        replicas: int = 0,
    ) -> None:
        """`server(directory, args)` makes a conftest `RedisServer`, not yet started."""
        self.replicas = replicas
        self.nodes: list[Any] = []
        self._bus: dict[int, int] = {}  # node port -> its cluster bus port
        # A killed node's ports, kept bound until the cluster stops: a server another test
        # run starts there would answer the survivors' gossip, and no failover comes.
        self._held: list[socket.socket] = []
        for index in range(primaries * (1 + replicas)):
            bus = free_port()
            args = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--cluster-port", str(bus),
                # A test that kills a primary wants its replica to take over at once.
                "--cluster-replica-validity-factor", "0",
            ]  # fmt: skip
            self.nodes.append(server(directory / f"node-{index}", args))
            self._bus[self.nodes[-1].port] = bus
        self.cli = shutil.which("redis-cli") or str(
            Path(self.nodes[0].binary).with_name("redis-cli")
        )

    @property
    def url(self) -> str:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes if node.process)
        return f"redis+cluster://{seeds}"

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [self.cli, "--cluster", "create", *addresses,
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
        self.wait_ready()

    def wait_ready(self) -> None:
        """Wait until every running node says the cluster is ok and covers all slots."""
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if all(self._node_ok(node.port) for node in self.nodes if node.process):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not become ready")
            time.sleep(0.1)

    @staticmethod
    def _node_ok(port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=2) as client:
                info = client.cluster("info")
        except redis.RedisError:
            return False
        text = info if isinstance(info, str) else str(info)
        if isinstance(info, dict):
            return info.get("cluster_state") == "ok" and int(info["cluster_slots_ok"]) == 16384
        return "cluster_state:ok" in text

    def primaries(self) -> list[int]:
        """The ports of the nodes that are primaries now."""
        found: list[int] = []
        for node in self.nodes:
            if node.process is None:
                continue
            with redis.Redis(port=node.port, socket_timeout=2) as client:
                if client.info("replication")["role"] == "master":
                    found.append(node.port)
        return found

    def owner(self, queue: str) -> int:
        """The port of the primary that serves a queue's partition now."""
        from redis.crc import key_slot

        slot = key_slot(("ql:{q:" + queue.partition("+")[0] + "}").encode())
        port = self.primaries()[0]
        with redis.Redis(port=port, socket_timeout=5) as client:
            for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return int(primary[1])
        raise RuntimeError(f"no primary serves slot {slot}")

    def spread_queues(self, per_primary: int, stem: str = "q") -> list[str]:
        """Queue names `<stem><n>`, `per_primary` of them served by each primary."""
        wanted = {port: per_primary for port in self.primaries()}
        chosen: list[str] = []
        for n in range(10_000):
            name = f"{stem}{n}"
            port = self.owner(name)
            if wanted.get(port, 0) > 0:
                wanted[port] -= 1
                chosen.append(name)
            if not any(wanted.values()):
                return chosen
        raise RuntimeError("could not spread queues over the primaries")

    def wait_replicated(self) -> None:
        """Wait until every primary's replicas have all it has written."""
        for port in self.primaries():
            with redis.Redis(port=port, socket_timeout=30) as client:
                client.execute_command("WAIT", self.replicas, 20_000)

    def replicas_of(self, port: int) -> list[Any]:
        """The nodes that replicate the primary on `port` now."""
        with redis.Redis(port=port, socket_timeout=5) as client:
            info = client.info("replication")
        ports = {int(value["port"]) for name, value in info.items() if name.startswith("slave")}
        return [node for node in self.nodes if node.port in ports]

    def kill(self, port: int) -> None:
        """kill -9 the node on `port`, then wait until a replica has taken over its slots."""
        self.crash(port)
        self.wait_taken_over(port)

    def crash(self, port: int) -> None:
        """kill -9 the node on `port` and go on at once."""
        node = next(node for node in self.nodes if node.port == port)
        process, node.process = node.process, None
        process.kill()
        process.wait()
        for held in (port, self._bus[port]):
            holder = socket.socket()
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                holder.bind(("127.0.0.1", held))
            except OSError:
                holder.close()  # taken already: nothing to keep
                continue
            self._held.append(holder)

    def wait_taken_over(self, port: int) -> None:
        """Wait until a replica has taken over the slots of the dead node on `port`."""
        deadline = time.monotonic() + READY_TIMEOUT
        while self._serves(port) or not self._covered():
            if time.monotonic() > deadline:
                raise RuntimeError("no replica took over from the killed primary")
            time.sleep(0.1)

    def _covered(self) -> bool:
        """Whether the running nodes say the cluster is ok without the dead ones."""
        return all(self._node_ok(node.port) for node in self.nodes if node.process)

    def _serves(self, port: int) -> bool:
        """Whether a running node still names the node on `port` a slot's primary."""
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                with redis.Redis(port=node.port, socket_timeout=2) as client:
                    slots = client.execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                return True
            if any(int(primary[1]) == port for _, _, primary, *_ in slots):
                return True
        return False

    def flush(self) -> None:
        for port in self.primaries():
            with redis.Redis(port=port, socket_timeout=5) as client:
                client.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        for holder in self._held:
            holder.close()
