"""Fixtures shared by every test folder: a private Redis server for the Redis engine's tests.

`redis_url` (session-scoped) is `LANNER_REDIS_URL` if set, else the URL of a redis-server
started from PATH on a free loopback port, with no persistence, for the whole session. It
is only started when a test asks for it, so SQLite-only runs never need Redis. Without
redis-server the tests that need it are skipped, or fail under CI (CI=true) where a missing
server is a broken set-up, not an optional extra.

`redis_server_factory` starts further private servers (with extra arguments such as
`--requirepass`), each of which a test can stop, start and restart on the same port.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

START_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not on PATH: the Redis engine's tests need it"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI installs it in .ci/run)")
        pytest.skip(message)
    return binary


def _ping(port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis server answers PING on the port (raw RESP, so no client is needed).

    A server with a password answers -NOAUTH, which still says that it is up.
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


class RedisServer:
    """A redis-server child process on a fixed loopback port, without persistence."""

    def __init__(self, directory: Path, args: Sequence[str] = (), port: int | None = None) -> None:
        self.binary = _redis_server_binary()
        self.directory = directory
        self.args = list(args)
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (empty: nothing is saved) and wait until it answers PING."""
        if self.process is not None:
            raise RuntimeError("the server is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        log = self.directory / "redis.log"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--save", "",
                "--appendonly", "no",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--logfile", str(log),
                *self.args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{text}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Terminate the server and wait for it to exit (its data is gone)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop the server and start a new, empty one on the same port."""
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server for the session: LANNER_REDIS_URL, or a private redis-server."""
    external = os.environ.get("LANNER_REDIS_URL")
    if external:
        yield external
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start private redis-servers for one test: `factory(*extra_args)`; stopped afterwards."""
    servers: list[RedisServer] = []

    def start(*args: str) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(servers)}", args)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()
