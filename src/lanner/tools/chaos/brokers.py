"""The stores a chaos run works on, and the faults done to them from outside lanner.

- `RedisServer`: a private redis-server with an append-only file fsynced on every write
  (`--appendonly yes --appendfsync always`), on a free loopback port, that the harness
  can kill -9 and start again on the same port and folder.
- `RestartableRedis`: what the harness needs of such a server (tests adapt their own).
- `WriteLock`: another process that takes an SQLite file's write lock (`BEGIN IMMEDIATE`)
  and holds it for a while, as a long transaction of some other program would;
  `write_lock_free` says whether anyone holds it now.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Final, Protocol

START_TIMEOUT: Final = 10.0
AOF_ARGS: Final = ("--appendonly", "yes", "--appendfsync", "always")


class ChaosError(Exception):
    """The harness cannot do what it was asked (bad options, a missing tool): one line."""


class RestartableRedis(Protocol):
    """A Redis server the harness may kill -9 and start again (same port, same data)."""

    @property
    def url(self) -> str: ...

    def kill(self) -> None: ...

    def start(self) -> None: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers_ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith((b"+PONG", b"-LOADING"))
    except OSError:
        return False


class RedisServer:
    """A private redis-server with AOF (every write fsynced), killable and restartable."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ChaosError("redis-server is not on PATH: the Redis engine's run needs one")
        self.binary = binary
        self.folder = folder
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.process is not None:
            raise ChaosError("redis-server is already running")
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "redis.log"
        self.process = subprocess.Popen(
            [
                self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--logfile", str(log), "--save", "",
                *AOF_ARGS,
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not answers_ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                raise ChaosError(f"redis-server did not start on port {self.port}: {tail}")
            time.sleep(0.02)

    def kill(self) -> None:
        """kill -9, then reap it: what was fsynced to the AOF is all that is left."""
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()


class WriteLock:
    """A separate Python process holding an SQLite file's write lock for `seconds`."""

    SCRIPT: Final = (
        "import sqlite3, sys, time\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)\n"
        "conn.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "conn.execute('ROLLBACK')\n"
        "print('released', flush=True)\n"
    )

    def __init__(self, path: Path, seconds: float) -> None:
        self.path = path
        self.seconds = seconds
        self.process: subprocess.Popen[str] | None = None
        self.locked_at: float | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(self.path), repr(self.seconds)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )

    def wait_locked(self) -> float:
        """Block until the lock is taken; return when (Unix time)."""
        stdout = self.process.stdout if self.process is not None else None
        line = stdout.readline() if stdout is not None else ""
        if line.strip() != "locked":
            raise ChaosError(f"could not take the write lock of {self.path}")
        self.locked_at = time.time()
        return self.locked_at

    def done(self) -> bool:
        return self.process is None or self.process.poll() is not None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()
            stdout: IO[str] | None = self.process.stdout
            if stdout is not None:
                stdout.close()


def write_lock_free(path: Path, timeout: float = 0.05) -> bool:
    """Whether the write lock of an SQLite file can be taken within `timeout` (it is given
    back at once): False while another process holds it, in a transaction."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
