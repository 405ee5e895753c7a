"""A real `lanner serve` on a free port, over a real engine (SQLite file, Redis server).

The server runs its asyncio loop in a thread of the test process (`server` fixture, a
`ServerThread`) or as the `lanner serve` command in a process of its own
(`tests/kestrel/test_command.py`). Tests
reach it only through sockets: pymemcache as a stock memcache client, and raw sockets.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pymemcache.client.base import Client

import lanner
from lanner import Capability, Engine
from lanner.kestrel import KestrelServer, ServerThread


@dataclass
class Running:
    """A server under test, the engine behind it, and ways to reach it."""

    engine: Engine
    server: KestrelServer
    opened: list[Client | socket.socket] = field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.server.port)

    def client(self, **options: object) -> Client:
        """A pymemcache client; storage commands wait for the reply (noreply=False)."""
        client = Client(self.address, default_noreply=False, timeout=10, **options)
        self.opened.append(client)
        return client

    def raw(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=10)
        self.opened.append(sock)
        return sock

    def stat(self, queue: str, name: str) -> int:
        client = Client(self.address, timeout=10)
        try:
            return int(client.stats().get(f"queue_{queue}_{name}".encode(), 0))
        finally:
            client.close()

    def close(self) -> None:
        for opened in self.opened:
            opened.close()

    def require(self, capability: Capability) -> None:
        if capability not in self.engine.capabilities:
            pytest.skip(f"{self.engine.name} engine lacks {capability.value}")


def until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Poll `condition` until it holds, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def reply(sock: socket.socket, ending: bytes = b"END\r\n") -> bytes:
    """Read from a raw socket until the reply ends with `ending` (or the peer closes)."""
    received = b""
    while not received.endswith(ending):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def _url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return "sqlite:///" + str(tmp_path / "kestrel.db")
    import redis

    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return url


@pytest.fixture(params=["sqlite", "redis"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    engine = lanner.open_engine(_url(request, tmp_path))
    thread = ServerThread(engine)
    running = Running(engine, thread.server)
    try:
        yield running
    finally:
        running.close()
        thread.stop()
        engine.close()
