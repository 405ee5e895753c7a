"""`lanner bench kestrel`: the memcache front's throughput, beside memcached on the same machine.

`lanner serve` runs in a process of its own over the engine measured; client processes
(raw sockets, one request at a time each, as memcache clients do) set then get items
concurrently, then one consumer takes items with blocking gets while a producer sets
them. The same set and get phases then run against `memcached` itself, if installed: the
cost of the memcache protocol on this machine with no queue behind it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lanner.bench.common import BenchError, BenchProgress, MachineInfo, bench_store, rate

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class KestrelBenchResult:
    url: str
    clients: int
    items: int
    value_bytes: int
    set_per_s: float
    get_per_s: float
    blocking_consumer_per_s: float
    memcached_set_per_s: float | None
    memcached_get_per_s: float | None
    machine: MachineInfo

    def to_json(self) -> dict[str, Any]:
        shown = {k: getattr(self, k) for k in self.__slots__ if k != "machine"}
        return {**shown, "machine": self.machine.to_json()}


def run_kestrel_benchmark(
    url: str | None, clients: int, items: int, value_bytes: int, progress: BenchProgress
) -> KestrelBenchResult:
    value = b"x" * value_bytes
    per_client = max(1, items // clients)
    total = per_client * clients
    with bench_store(url) as store, _lanner_serve(store) as address:
        progress.phase(f"lanner serve: {total:,} sets by {clients} clients", clients)
        sets = _phase(address, _set_items, clients, per_client, value, progress)
        progress.phase(f"lanner serve: {total:,} gets by {clients} clients", clients)
        gets = _phase(address, _get_items, clients, per_client, value, progress)
        progress.phase(f"lanner serve: {total:,} items to one blocking consumer", 2)
        blocking = _blocking_consumer(address, total, value, progress)
    memcached_set = memcached_get = None
    if shutil.which("memcached"):
        with _memcached() as address:
            progress.phase(f"memcached: {total:,} sets by {clients} clients", clients)
            memcached_set = _phase(address, _set_keys, clients, per_client, value, progress)
            progress.phase(f"memcached: {total:,} gets by {clients} clients", clients)
            memcached_get = _phase(address, _get_keys, clients, per_client, value, progress)
    return KestrelBenchResult(
        url or "sqlite (temporary file, synchronous=full)",
        clients,
        total,
        value_bytes,
        sets,
        gets,
        blocking,
        memcached_set,
        memcached_get,
        MachineInfo.current(),
    )


ClientWork = Callable[[socket.socket, int, int, bytes], int]


def _phase(
    address: Address,
    work: ClientWork,
    clients: int,
    per_client: int,
    value: bytes,
    progress: BenchProgress,
) -> float:
    """Items per second of `clients` processes each doing `work` on a connection of its own,
    from the moment all are connected to the moment the last is done."""
    context = multiprocessing.get_context("spawn")  # no connection or lock crosses a fork
    ready = context.Barrier(clients + 1)
    done: multiprocessing.Queue[int] = context.Queue()
    processes = [
        context.Process(
            target=_client, args=(address, work, n, per_client, value, ready, done), daemon=True
        )
        for n in range(clients)
    ]
    for process in processes:
        process.start()
    ready.wait(timeout=60)
    started = time.perf_counter()
    count = 0
    for _ in processes:
        count += done.get(timeout=600)
        progress.advance()
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join(timeout=10)
    if count != clients * per_client:
        raise BenchError(f"{count} of {clients * per_client} items went through")
    return rate(count, elapsed)


def _client(
    address: Address,
    work: ClientWork,
    number: int,
    count: int,
    value: bytes,
    ready: multiprocessing.synchronize.Barrier,
    done: multiprocessing.Queue[int],
) -> None:
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ready.wait(timeout=60)
        done.put(work(sock, number, count, value))


def _set_items(sock: socket.socket, number: int, count: int, value: bytes) -> int:
    request = b"set bench 0 0 %d\r\n%s\r\n" % (len(value), value)
    return _requests(sock, [request] * count, b"STORED\r\n")


def _set_keys(sock: socket.socket, number: int, count: int, value: bytes) -> int:
    size = len(value)
    requests = [b"set k%d-%d 0 0 %d\r\n%s\r\n" % (number, i, size, value) for i in range(count)]
    return _requests(sock, requests, b"STORED\r\n")


def _get_items(sock: socket.socket, number: int, count: int, value: bytes) -> int:
    return _requests(sock, [b"get bench\r\n"] * count, b"END\r\n")


def _get_keys(sock: socket.socket, number: int, count: int, value: bytes) -> int:
    requests = [b"get k%d-%d\r\n" % (number, i) for i in range(count)]
    return _requests(sock, requests, b"END\r\n")


def _requests(sock: socket.socket, requests: list[bytes], ending: bytes) -> int:
    """Send each request and read its whole reply before the next; count the replies."""
    for request in requests:
        sock.sendall(request)
        received = b""
        while not received.endswith(ending):
            chunk = sock.recv(65536)
            if not chunk:
                raise BenchError("the server closed the connection")
            received += chunk
        if received.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")):
            raise BenchError(f"the server refused a request: {received[:200]!r}")
    return len(requests)


def _blocking_consumer(
    address: Address, total: int, value: bytes, progress: BenchProgress
) -> float:
    """Items per second one consumer takes with `get q/t=1000` while a producer sets them."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(3)
    done: multiprocessing.Queue[int] = context.Queue()
    consumer = context.Process(
        target=_client, args=(address, _take_blocking, 0, total, value, ready, done)
    )
    producer = context.Process(
        target=_client, args=(address, _set_stream, 0, total, value, ready, done)
    )
    consumer.start()
    producer.start()
    ready.wait(timeout=60)
    started = time.perf_counter()
    taken = 0
    for _ in range(2):
        taken = max(taken, done.get(timeout=600))
        progress.advance()
    elapsed = time.perf_counter() - started
    consumer.join(timeout=10)
    producer.join(timeout=10)
    return rate(taken, elapsed)


def _take_blocking(sock: socket.socket, number: int, count: int, value: bytes) -> int:
    return _requests(sock, [b"get stream/t=1000\r\n"] * count, b"END\r\n")


def _set_stream(sock: socket.socket, number: int, count: int, value: bytes) -> int:
    request = b"set stream 0 0 %d\r\n%s\r\n" % (len(value), value)
    return _requests(sock, [request] * count, b"STORED\r\n")


def _free_port() -> int:
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
def _server(command: list[str], port: int, what: str) -> Iterator[Address]:
    address = ("127.0.0.1", port)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(address, process, what)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _lanner_serve(url: str) -> Any:
    port = _free_port()
    command = [sys.executable, "-m", "lanner", "serve", "--broker", url, "--port", str(port)]
    return _server(command, port, "lanner serve")


def _memcached() -> Any:
    port = _free_port()
    binary = shutil.which("memcached") or "memcached"
    command = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "512", "-t", "2"]
    if os.geteuid() == 0:
        command += ["-u", "root"]  # memcached refuses to run as root unless told to
    return _server(command, port, "memcached")
