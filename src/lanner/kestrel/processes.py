"""What the processes of `lanner serve` need from the system: file descriptors for their
connections, and one port shared by several processes (their event loop: eventloops.py).

Each connection holds a file descriptor, and a process may open only so many (`ulimit -n`,
often 1,024 by default): past that, accepting fails and clients hang in the listen queue.
So a server raises its own soft limit as far as its connections need (the hard limit is the
system's to raise), and refuses to start where even that is too low.

With `--processes N` the processes listen on the same port, each with a socket of its own
(SO_REUSEPORT): the kernel spreads new connections over them, with no process in between.
The parent binds the port first (port 0 is resolved there, and a port in use is refused
before any process starts) but never listens, so it takes no connections; it waits for the
servers, and when one ends (a `shutdown` request, a crash) it stops the others.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.process
import resource
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Final

from lanner.errors import ConfigError

DEFAULT_MAX_CONNECTIONS: Final = 1024
"""Connections one server process takes at once unless told (memcached's default too)."""

RESERVED_DESCRIPTORS: Final = 320
"""Descriptors a server keeps besides its connections: the engine's (one Redis connection
per thread that may wait in a blocked pop: 256 of them, the SQLite file, its WAL and
watch), the listening socket, standard streams and logs."""

STOP_WAIT_SEC: Final = 30.0
"""How long the parent waits for a stopped server process before it kills it."""


@dataclass(frozen=True, slots=True)
class Descriptors:
    """The descriptor limit a server runs with, once raised as far as it may be."""

    soft: int
    hard: int

    @property
    def connections(self) -> int:
        """The connections that fit, besides what the server keeps for itself."""
        return max(0, self.soft - RESERVED_DESCRIPTORS)


def raise_descriptor_limit(connections: int) -> Descriptors:
    """Raise this process's soft limit on open files far enough for `connections` (never
    past the hard limit, never lower than it is); the limit it has then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + RESERVED_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):  # left as it was: the caller checks
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinite = 1 << 62
    return Descriptors(
        infinite if soft == resource.RLIM_INFINITY else soft,
        infinite if hard == resource.RLIM_INFINITY else hard,
    )


def require_descriptors(connections: int) -> None:
    """Raise the limit for `connections`, or refuse with a `ConfigError` saying what to do."""
    limit = raise_descriptor_limit(connections)
    if limit.connections < connections:
        raise ConfigError(
            f"--max-connections {connections} needs {connections + RESERVED_DESCRIPTORS} "
            f"open files, and this process may open only {limit.soft} (hard limit "
            f"{limit.hard}): raise it (ulimit -n) or lower --max-connections to "
            f"{limit.connections} or less"
        )


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` with SO_REUSEPORT, not listening: it holds the port
    for the server processes, which bind it again (raises `OSError` if it is taken)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--processes above 1 needs SO_REUSEPORT, which this system lacks")
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def run_processes(count: int, target: Callable[..., None], args: tuple[object, ...]) -> int:
    """Run `target(*args)` in `count` new processes until one ends (the others are then
    stopped) or this one is told to stop; the exit status of the first that ended."""
    context = multiprocessing.get_context("spawn")  # no engine connection crosses a fork
    children: list[multiprocessing.process.BaseProcess] = [
        context.Process(target=target, args=args, name=f"lanner-serve-{n}")
        for n in range(1, count + 1)
    ]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for child in children:
            child.start()
        status = _wait_first(children, lambda: stopping)
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: each gives back the items it held open
        for child in children:
            child.join(STOP_WAIT_SEC)
            if child.is_alive():
                child.kill()
                child.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def _wait_first(
    children: list[multiprocessing.process.BaseProcess], stopping: Callable[[], bool]
) -> int:
    from multiprocessing.connection import wait

    sentinels = [child.sentinel for child in children]
    while not stopping():
        if wait(sentinels, timeout=0.5):
            ended = next((child for child in children if not child.is_alive()), None)
            if ended is not None:
                return ended.exitcode or 0
    return 0
