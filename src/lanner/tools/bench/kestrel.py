"""`lanner bench kestrel`: the memcache front's throughput, beside memcached in the same run.

`lanner serve` (over the engine measured) and `memcached` both run for the whole benchmark,
each in a process of its own. For each number of connections, client processes open that
many connections (spread over a few processes, each driving its own with one `select`
loop), and every connection does set-then-get pairs, one request at a time, as a memcache
client does: on `lanner serve` a set into one shared queue then a get from it, on
memcached a set of a key of its own then a get of that key. The two servers take turns,
round after round, so that a busy minute of the machine falls on both; each figure is the
median of its rounds. Then one client alone times its sets and gets, beside the engine's
own puts and pops on the same store, and the engine alone does the pairs in batches (what
the front could reach if it cost nothing). Last, one consumer takes items with blocking
gets while a producer sets them. Each server's CPU time per pair is measured beside its
rate (the steadier figure on a shared machine).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import selectors
import shutil
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Final

from lanner.tools.bench.common import BenchError, BenchProgress, MachineInfo, bench_store, rate
from lanner.tools.bench.kestrel_servers import Address, Served, lanner_serve, memcached

CONNECTIONS_PER_CLIENT: Final = 250
"""Connections one client process drives at most (more connections: more processes)."""

MIN_PAIRS_PER_CONNECTION: Final = 5
"""Each connection does at least this many pairs, however many connections share a run."""

LATENCY_SAMPLES: Final = 200
"""Requests of the lone client timed, and engine calls."""

ENGINE_BATCH: Final = 100
"""Items per engine call in the engine-alone figure."""


@dataclass(frozen=True, slots=True)
class PairsRow:
    """Set+get pairs per second at one number of connections: medians of the rounds."""

    connections: int
    pairs: int
    lanner_per_s: float
    memcached_per_s: float | None
    lanner_rounds: tuple[float, ...]
    memcached_rounds: tuple[float, ...]
    lanner_cpu_us: float | None  # the server's CPU µs per pair, median of the rounds
    memcached_cpu_us: float | None

    @property
    def ratio(self) -> float | None:
        return None if not self.memcached_per_s else self.lanner_per_s / self.memcached_per_s

    def to_json(self) -> dict[str, Any]:
        shown = {k: getattr(self, k) for k in self.__slots__}
        return {**shown, "ratio": self.ratio}


@dataclass(frozen=True, slots=True)
class LoneClient:
    """Median milliseconds of one client's requests beside the engine's own calls, made
    from the benchmark's process on the same store (a get is the engine's pop; its
    completion follows the reply)."""

    set_ms: float
    get_ms: float
    engine_put_ms: float
    engine_pop_ms: float

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class KestrelBenchResult:
    url: str
    processes: int
    rounds: int
    value_bytes: int
    rows: tuple[PairsRow, ...]
    lone: LoneClient
    engine_batched_per_s: float
    engine_batched_cpu_us: float  # this process's CPU per pair in those batches
    blocking_items: int
    blocking_consumer_per_s: float
    machine: MachineInfo

    @property
    def peak_per_s(self) -> float:
        return max(row.lanner_per_s for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "processes": self.processes,
            "rounds": self.rounds,
            "value_bytes": self.value_bytes,
            "rows": [row.to_json() for row in self.rows],
            "peak_per_s": self.peak_per_s,
            "lone": self.lone.to_json(),
            "engine_batched_per_s": self.engine_batched_per_s,
            "engine_batched_cpu_us": self.engine_batched_cpu_us,
            "blocking_items": self.blocking_items,
            "blocking_consumer_per_s": self.blocking_consumer_per_s,
            "machine": self.machine.to_json(),
        }


def run_kestrel_benchmark(
    url: str | None,
    connections: tuple[int, ...],
    pairs: int,
    value_bytes: int,
    progress: BenchProgress,
    *,
    rounds: int = 1,
    processes: int = 1,
) -> KestrelBenchResult:
    value = b"x" * value_bytes
    rows: list[PairsRow] = []
    with bench_store(url) as store, ExitStack() as servers:
        served = servers.enter_context(lanner_serve(store, processes))
        peer = servers.enter_context(memcached()) if shutil.which("memcached") else None
        lanner = served.address
        for count in connections:
            per_connection = max(MIN_PAIRS_PER_CONNECTION, pairs // count)
            total = per_connection * count
            ours: list[tuple[float, float | None]] = []
            theirs: list[tuple[float, float | None]] = []
            for round_number in range(1, rounds + 1):
                where = f"{count:,} connections, {total:,} pairs, round {round_number}"
                progress.phase(f"lanner serve: {where}", count)
                ours.append(_run(served, _queue_pairs, count, per_connection, value, progress))
                if peer is not None:
                    progress.phase(f"memcached: {where}", count)
                    theirs.append(_run(peer, _key_pairs, count, per_connection, value, progress))
            rows.append(
                PairsRow(
                    count,
                    total,
                    statistics.median(r for r, _ in ours),
                    statistics.median(r for r, _ in theirs) if theirs else None,
                    tuple(r for r, _ in ours),
                    tuple(r for r, _ in theirs),
                    _median_known(c for _, c in ours),
                    _median_known(c for _, c in theirs),
                )
            )
        progress.phase(f"lone client and engine calls: {LATENCY_SAMPLES} each", 2)
        lone = _lone_client(lanner, store, value)
        progress.advance()
        engine_batched = _engine_batched(store, pairs, value)
        progress.advance()
        blocking_items = max(MIN_PAIRS_PER_CONNECTION, pairs // 2)
        progress.phase(f"lanner serve: {blocking_items:,} items to one blocking consumer", 2)
        blocking = _blocking_consumer(lanner, blocking_items, value, progress)
    return KestrelBenchResult(
        url or "sqlite (temporary file, synchronous=full)",
        processes,
        rounds,
        value_bytes,
        tuple(rows),
        lone,
        *engine_batched,
        blocking_items,
        blocking,
        MachineInfo.current(),
    )


# -- set+get pairs over many connections -----------------------------------------------------
PairRequests = Callable[[int, int, bytes], tuple[bytes, bytes]]
"""(connection number, pair number, value) -> (the set request, the get request)."""


def _run(
    server: Served,
    requests: PairRequests,
    connections: int,
    per_connection: int,
    value: bytes,
    progress: BenchProgress,
) -> tuple[float, float | None]:
    """Pairs per second, and the server's CPU µs per pair (None: not measurable here)."""
    before = server.cpu_seconds()
    per_s = _pairs(server.address, requests, connections, per_connection, value, progress)
    after = server.cpu_seconds()
    if before is None or after is None:
        return per_s, None
    return per_s, (after - before) * 1e6 / (connections * per_connection)


def _median_known(values: Iterator[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def _queue_pairs(connection: int, pair: int, value: bytes) -> tuple[bytes, bytes]:
    return b"set bench 0 0 %d\r\n%s\r\n" % (len(value), value), b"get bench\r\n"


def _key_pairs(connection: int, pair: int, value: bytes) -> tuple[bytes, bytes]:
    key = b"k%d-%d" % (connection, pair)
    return b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value), b"get %s\r\n" % key


def _pairs(
    address: Address,
    requests: PairRequests,
    connections: int,
    per_connection: int,
    value: bytes,
    progress: BenchProgress,
) -> float:
    """Pairs per second of `connections` connections doing `per_connection` pairs each,
    from the moment all are connected to the moment the last is done."""
    context = multiprocessing.get_context("spawn")  # no connection or lock crosses a fork
    clients = -(-connections // CONNECTIONS_PER_CLIENT)
    ready = context.Barrier(clients + 1)
    done: multiprocessing.Queue[tuple[int, int]] = context.Queue()
    shares = [len(range(n, connections, clients)) for n in range(clients)]
    processes = [
        context.Process(
            target=_client,
            args=(address, requests, first, share, per_connection, value, ready, done),
            daemon=True,
        )
        for first, share in zip(_starts(shares), shares, strict=True)
    ]
    for process in processes:
        process.start()
    ready.wait(timeout=120)
    started = time.perf_counter()
    count = misses = 0
    for share in shares:
        answered, missed = done.get(timeout=600)
        count, misses = count + answered, misses + missed
        progress.advance(share)
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join(timeout=10)
    if count != connections * per_connection or misses:
        raise BenchError(
            f"{count - misses} of {connections * per_connection} set+get pairs went through"
        )
    return rate(count, elapsed)


def _starts(shares: list[int]) -> Iterator[int]:
    start = 0
    for share in shares:
        yield start
        start += share


def _client(
    address: Address,
    requests: PairRequests,
    first: int,
    connections: int,
    per_connection: int,
    value: bytes,
    ready: multiprocessing.synchronize.Barrier,
    done: multiprocessing.Queue[tuple[int, int]],
) -> None:
    socks = [_connect(address) for _ in range(connections)]
    ready.wait(timeout=120)
    try:
        done.put(_drive(socks, requests, first, per_connection, value))
    finally:
        for sock in socks:
            sock.close()


def _connect(address: Address) -> socket.socket:
    sock = socket.create_connection(address, timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    return sock


def _drive(
    socks: list[socket.socket],
    requests: PairRequests,
    first: int,
    per_connection: int,
    value: bytes,
) -> tuple[int, int]:
    """Every connection sends its requests one at a time, each after the reply to the one
    before: (pairs answered, gets that found nothing)."""
    selector = selectors.DefaultSelector()
    steps = dict.fromkeys(range(len(socks)), 0)  # requests answered, per connection
    received = {n: b"" for n in steps}
    pairs = misses = 0

    def send(n: int) -> None:
        pair, is_get = divmod(steps[n], 2)
        request = requests(first + n, pair, value)[is_get]
        socks[n].setblocking(True)  # a request is small: sent whole, then back to select
        socks[n].sendall(request)
        socks[n].setblocking(False)

    for n, sock in enumerate(socks):
        selector.register(sock, selectors.EVENT_READ, n)
        send(n)
    live = len(socks)
    while live:
        for key, _ in selector.select(timeout=60):
            n = int(key.data)
            chunk = socks[n].recv(65536)
            if not chunk:
                raise BenchError("the server closed a connection")
            reply = received[n] + chunk
            if reply.startswith((b"SERVER_ERROR", b"CLIENT_ERROR", b"ERROR")):
                raise BenchError(f"the server refused a request: {reply[:200]!r}")
            is_get = steps[n] % 2
            if not reply.endswith(b"END\r\n" if is_get else b"STORED\r\n"):
                received[n] = reply
                continue
            received[n] = b""
            if is_get:
                pairs += 1
                misses += not reply.startswith(b"VALUE")
            steps[n] += 1
            if steps[n] < 2 * per_connection:
                send(n)
            else:
                selector.unregister(socks[n])
                live -= 1
    selector.close()
    return pairs, misses


# -- one client alone, and the engine alone --------------------------------------------------
def _lone_client(address: Address, url: str, value: bytes) -> LoneClient:
    """Median times of one client's sets and gets, then of the engine's own puts and pops."""
    sets: list[float] = []
    gets: list[float] = []
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        set_request, get_request = _queue_pairs(0, 0, value)
        for _ in range(LATENCY_SAMPLES):
            sets.append(_timed(sock, set_request, b"STORED\r\n"))
            gets.append(_timed(sock, get_request, b"END\r\n"))
    from lanner.engines import open_engine
    from lanner.kestrel.items import ITEM_KLASS, to_data

    puts: list[float] = []
    pops: list[float] = []
    data = to_data(value)
    with open_engine(url) as engine:
        for n in range(LATENCY_SAMPLES):
            started = time.perf_counter()
            engine.put("bench-alone", f"lone-{n}", ITEM_KLASS, data)
            put_at = time.perf_counter()
            jobs = engine.pop("bench-alone", "bench", 1)
            puts.append(put_at - started)
            pops.append(time.perf_counter() - put_at)
            engine.complete_many([job.jid for job in jobs], "bench", "bench-alone")
    return LoneClient(*(statistics.median(times) * 1000 for times in (sets, gets, puts, pops)))


def _timed(sock: socket.socket, request: bytes, ending: bytes) -> float:
    started = time.perf_counter()
    _requests(sock, [request], ending)
    return time.perf_counter() - started


def _engine_batched(url: str, pairs: int, value: bytes) -> tuple[float, float]:
    """Pairs per second of the engine alone, in batches as a busy server makes them: one
    thread doing put_many, pop and complete_many of ENGINE_BATCH items at a time; and the
    CPU µs per pair this process spent on them (the engine's share of a server's CPU)."""
    from lanner.engines import open_engine
    from lanner.kestrel.items import ITEM_KLASS, to_data
    from lanner.records import NewJob

    data = to_data(value)
    done = 0
    with open_engine(url) as engine:
        started, cpu = time.perf_counter(), time.process_time()
        while done < pairs:
            batch = min(ENGINE_BATCH, pairs - done)
            engine.put_many(
                [NewJob("bench-batched", f"b-{done + n}", ITEM_KLASS, data) for n in range(batch)]
            )
            jobs = engine.pop("bench-batched", "bench", batch)
            engine.complete_many([job.jid for job in jobs], "bench", "bench-batched")
            done += batch
        spent = time.process_time() - cpu
        return rate(done, time.perf_counter() - started), spent * 1e6 / done


# -- one consumer blocked in gets -------------------------------------------------------------
def _blocking_consumer(
    address: Address, total: int, value: bytes, progress: BenchProgress
) -> float:
    """Items per second one consumer takes with `get q/t=1000` while a producer sets them."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(3)
    done: multiprocessing.Queue[int] = context.Queue()
    consumer = context.Process(
        target=_stream_client, args=(address, _take_blocking, total, value, ready, done)
    )
    producer = context.Process(
        target=_stream_client, args=(address, _set_stream, total, value, ready, done)
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


def _stream_client(
    address: Address,
    work: Callable[[socket.socket, int, bytes], int],
    count: int,
    value: bytes,
    ready: multiprocessing.synchronize.Barrier,
    done: multiprocessing.Queue[int],
) -> None:
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ready.wait(timeout=60)
        done.put(work(sock, count, value))


def _take_blocking(sock: socket.socket, count: int, value: bytes) -> int:
    return _requests(sock, [b"get stream/t=1000\r\n"] * count, b"END\r\n")


def _set_stream(sock: socket.socket, count: int, value: bytes) -> int:
    request = b"set stream 0 0 %d\r\n%s\r\n" % (len(value), value)
    return _requests(sock, [request] * count, b"STORED\r\n")


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
