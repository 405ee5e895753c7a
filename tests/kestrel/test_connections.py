"""`lanner serve` under many connections: a thousand clients at once each get their own
answers, connections past `--max-connections` are refused with a memcache error, several
processes share one port, and an open-files limit too low is a one-line error at start."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import lanner
from lanner.kestrel import ServerThread
from lanner.kestrel.processes import RESERVED_DESCRIPTORS, raise_descriptor_limit

from .conftest import Running, reply, until
from .test_command import _connect, _start

MANY: int = 1000


def test_a_thousand_connections_each_set_then_get(server: Running) -> None:
    # Both ends of every connection are in this process.
    fits = raise_descriptor_limit(2 * MANY).connections // 2
    count = min(MANY, fits)
    socks = [socket.create_connection(server.address, timeout=30) for _ in range(count)]
    try:
        for n, sock in enumerate(socks):
            value = b"v%04d" % n
            sock.sendall(b"set many 0 0 %d\r\n%s\r\n" % (len(value), value))
        assert all(reply(sock, b"\r\n") == b"STORED\r\n" for sock in socks)
        for sock in socks:
            sock.sendall(b"get many\r\n")
        got = {reply(sock).split(b"\r\n")[1] for sock in socks}
        assert got == {b"v%04d" % n for n in range(count)}
        assert server.stat("many", "items") == 0
    finally:
        for sock in socks:
            sock.close()


def test_a_connection_past_the_limit_is_refused(tmp_path: Path) -> None:
    with (
        lanner.open_engine(f"sqlite:///{tmp_path / 'limit.db'}") as engine,
        ServerThread(engine, max_connections=2) as server,
    ):
        address = ("127.0.0.1", server.port)
        first, second = (socket.create_connection(address, timeout=10) for _ in range(2))
        for sock in (first, second):
            sock.sendall(b"version\r\n")
            assert reply(sock, b"\r\n").startswith(b"VERSION")
        with socket.create_connection(address, timeout=10) as third:
            assert reply(third, b"\r\n") == b"SERVER_ERROR too many open connections\r\n"
            assert third.recv(10) == b""
        first.close()

        def fourth_served() -> bool:
            with socket.create_connection(address, timeout=10) as fourth:
                fourth.sendall(b"version\r\n")
                return reply(fourth, b"\r\n").startswith(b"VERSION")

        until(fourth_served)
        second.close()


def _pid(sock: socket.socket) -> int:
    sock.sendall(b"stats\r\n")
    stats = reply(sock).split(b"\r\n")
    return int(next(line for line in stats if line.startswith(b"STAT pid ")).split()[2])


def test_processes_share_the_port_and_one_shutdown_stops_them_all(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    process, port = _start("--broker", url, "--processes", "2")
    socks: dict[int, socket.socket] = {}  # the pid that answers -> a connection to it
    try:

        def both_answer() -> bool:  # the kernel spreads new connections over the listeners
            sock = _connect(port)
            if socks.setdefault(_pid(sock), sock) is not sock:
                sock.close()
            return len(socks) == 2

        until(both_answer, timeout=60)
        one, other = socks.values()
        one.sendall(b"set shared 0 0 4\r\nfrom\r\n")
        assert reply(one, b"\r\n") == b"STORED\r\n"
        other.sendall(b"get shared\r\n")  # set through one process, taken through the other
        assert reply(other) == b"VALUE shared 0 4\r\nfrom\r\nEND\r\n"
        one.sendall(b"shutdown\r\n")
        assert process.wait(timeout=60) == 0
    finally:
        for sock in socks.values():
            sock.close()
        process.kill()
        stderr = process.communicate()[1]
    assert f"memcache protocol on 127.0.0.1:{port}, 2 processes" in stderr
    assert "Traceback" not in stderr
    with lanner.open_engine(url) as engine:
        assert engine.queue_counts("shared").waiting == 0


def _low_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))


@pytest.mark.parametrize("processes", ["1", "3"])
def test_too_few_open_files_for_max_connections_is_a_one_line_error(
    tmp_path: Path, processes: str
) -> None:
    url = f"sqlite:///{tmp_path / 'fd.db'}"
    command = [sys.executable, "-m", "lanner", "serve", "--port", "0", "--broker", url,
               "--processes", processes, "--max-connections", "1000"]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, preexec_fn=_low_open_files
    )
    assert done.returncode == 1
    fits = 512 - RESERVED_DESCRIPTORS
    assert done.stderr == (
        f"Error: --max-connections 1000 needs {1000 + RESERVED_DESCRIPTORS} open files, and "
        f"this process may open only 512 (hard limit 512): raise it (ulimit -n) or lower "
        f"--max-connections to {fits} or less\n"
    )
