"""The servers `lanner bench kestrel` measures: `lanner serve` and `memcached`, each started
in a process of its own for the whole benchmark, and the CPU time each spends.

A server's CPU time is read from /proc for its process and every process under it
(`lanner serve --processes N` serves from children): on a machine shared with other work,
the CPU a server spends per request is steadier than its rate, which moves with the load.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from lanner.tools.bench.common import BenchError

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Served:
    """A server the benchmark started: where it listens, and its process."""

    address: Address
    pid: int

    def cpu_seconds(self) -> float | None:
        """User + system CPU of the server's process and its descendants so far (None
        where /proc is not there to tell)."""
        return tree_cpu_seconds(self.pid)


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of process `pid` and every live process under it, from /proc."""
    try:
        stats = {p.name: (p / "stat").read_bytes() for p in Path("/proc").iterdir()
                 if p.name.isdigit() and (p / "stat").exists()}  # fmt: skip
    except OSError:
        return None
    fields: dict[int, list[bytes]] = {}
    for name, text in stats.items():
        # The name (field 2) is in parentheses and may hold spaces: count from after it.
        fields[int(name)] = text.rsplit(b")", 1)[1].split()
    if pid not in fields:
        return None
    children: dict[int, list[int]] = {}
    for child, values in fields.items():
        children.setdefault(int(values[1]), []).append(child)  # field 4: ppid
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += int(fields[current][11]) + int(fields[current][12])  # utime, stime
        todo += children.get(current, [])
    return total / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(address: Address, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"{what} exited at start (status {process.returncode})")
        try:
            socket.create_connection(address, timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise BenchError(f"{what} did not listen on {address[0]}:{address[1]} within 30 s")


@contextmanager
def _server(command: list[str], port: int, what: str) -> Iterator[Served]:
    address = ("127.0.0.1", port)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(address, process, what)
        yield Served(address, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def lanner_serve(url: str, processes: int) -> AbstractContextManager[Served]:
    port = free_port()
    command = [sys.executable, "-m", "lanner", "serve", "--broker", url, "--port", str(port)]
    if processes > 1:
        command += ["--processes", str(processes)]
    return _server(command, port, "lanner serve")


def memcached() -> AbstractContextManager[Served]:
    port = free_port()
    binary = shutil.which("memcached") or "memcached"
    command = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "512", "-t", "2"]
    command += ["-c", "4096", "-b", "4096"]  # connections and backlog: 1,000 clients fit
    if os.geteuid() == 0:
        command += ["-u", "root"]  # memcached refuses to run as root unless told to
    return _server(command, port, "memcached")
