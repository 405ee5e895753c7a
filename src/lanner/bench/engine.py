"""The engine benchmark behind `lanner bench engine`: put, drain and pickup-latency figures.

It also owns `ChildGroup`, which runs benchmark code in spawned child processes that
report back on a queue, for the end-to-end benchmark to reuse.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import random
import sqlite3
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue as ProcessQueue
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from queue import Empty
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Final, NamedTuple, ParamSpec, Protocol, TypeVar
from urllib.parse import parse_qsl, urlsplit

from lanner._version import __version__
from lanner.bench.stats import Percentiles
from lanner.engine import Capability, Engine
from lanner.engines import open_engine
from lanner.records import NewJob

if TYPE_CHECKING:  # redis is an optional extra, imported when a Redis URL is measured
    import redis

DEFAULT_JOBS: Final = 20_000
DEFAULT_BATCH: Final = 100
DEFAULT_SAMPLES: Final = 200

KLASS: Final = "lanner.bench.Noop"

STALL_TIMEOUT: Final = 120.0
"""Seconds without any word from the children before a phase is declared stuck."""

PICKUP_TIMEOUT: Final = 10.0
"""Seconds a put job may wait to be picked up before the latency phase fails."""

IDLE_GAP: Final = (0.005, 0.020)
"""Random pause (seconds) before each latency sample's put, so the popper is really blocked
in `pop(wait=...)`, and so puts do not phase-lock with a polling engine's check interval."""

POP_WAIT: Final = 1.0
"""The latency child's `pop` wait; between two waits it checks that the parent still lives."""

_T = TypeVar("_T")
_P = ParamSpec("_P")


class BenchError(RuntimeError):
    """A benchmark could not run, or its results failed verification."""


# -- progress -----------------------------------------------------------------------------


class BenchProgress(Protocol):
    """Where a benchmark reports its phases and how far each has got."""

    def phase(self, description: str, total: int) -> None: ...

    def advance(self, amount: int = 1) -> None: ...


class NoProgress:
    """A `BenchProgress` that shows nothing."""

    def phase(self, description: str, total: int) -> None:
        pass

    def advance(self, amount: int = 1) -> None:
        pass


# -- child processes ----------------------------------------------------------------------


class ChildMessage(NamedTuple):
    """What a child reports: `ready`, `progress` (amount), `sample` (value), `finished`
    (value), or `error` (text: the traceback)."""

    kind: str
    child: int
    amount: int = 0
    value: float = 0.0
    text: str = ""


@dataclass(frozen=True)
class ChildContext:
    """A child's side of a `ChildGroup`: its index, the report queue and the start signal."""

    index: int
    messages: ProcessQueue[ChildMessage]
    start: ProcessEvent

    def send(self, kind: str, *, amount: int = 0, value: float = 0.0, text: str = "") -> None:
        self.messages.put(ChildMessage(kind, self.index, amount, value, text))

    def wait_for_start(self) -> None:
        """Block until the parent calls `ChildGroup.go`; exit if the parent dies first."""
        while not self.start.wait(0.5):
            if not parent_alive():
                raise SystemExit(1)


def parent_alive() -> bool:
    """Whether the process that spawned this one still runs (always true in the parent)."""
    parent = multiprocessing.parent_process()
    return parent is None or parent.is_alive()


def _child_main(
    target: Callable[..., None],
    context: ChildContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    try:
        target(context, *args, **kwargs)
    except KeyboardInterrupt:
        # Ctrl-C reaches the whole process group; the parent reports it, once.
        raise SystemExit(130) from None
    except Exception:
        context.send("error", text=traceback.format_exc())
        raise SystemExit(1) from None
    finally:
        if not parent_alive():
            # Nobody reads the queue any more: flushing it at exit would block forever.
            context.messages.cancel_join_thread()


class ChildGroup:
    """Child processes that report on one queue and can be started together.

    Children are started with `spawn`, so they inherit nothing (no engine connection, no
    lock): each opens what it needs itself, like a real worker on another host would.
    Leaving the `with` block joins them, and terminates any that the block's failure left
    running or that do not exit in time, so no child outlives the benchmark.
    """

    def __init__(self, *, join_timeout: float = 10.0) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._messages: ProcessQueue[ChildMessage] = self._context.Queue()
        self._start = self._context.Event()
        self._processes: list[BaseProcess] = []
        self._join_timeout = join_timeout

    def __enter__(self) -> ChildGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._shutdown(graceful=exc_type is None)

    def spawn(
        self,
        target: Callable[Concatenate[ChildContext, _P], None],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> int:
        """Start `target(context, *args, **kwargs)` in a new process; return its index.

        `target` must be a module-level function and its arguments picklable.
        """
        index = len(self._processes)
        context = ChildContext(index, self._messages, self._start)
        process = self._context.Process(
            target=_child_main,
            args=(target, context, args, kwargs),
            name=f"lanner-bench-{index}",
            daemon=True,
        )
        process.start()
        self._processes.append(process)
        return index

    def receive(self, timeout: float) -> ChildMessage:
        """The next message from any child, within `timeout` seconds.

        Raises `BenchError` if a child reported an error or died, or if nothing came in time.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"no word from the benchmark's child processes in {timeout:g}s")
            try:
                message = self._messages.get(timeout=min(remaining, 0.1))
            except Empty:
                self._check_alive()
                continue
            if message.kind == "error":
                raise BenchError(f"benchmark child process {message.child} failed:\n{message.text}")
            return message

    def expect(self, kind: str, timeout: float) -> ChildMessage:
        message = self.receive(timeout)
        if message.kind != kind:
            raise BenchError(f"expected {kind!r} from a child process, got {message!r}")
        return message

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every child has sent `ready`."""
        ready: set[int] = set()
        while len(ready) < len(self._processes):
            ready.add(self.expect("ready", timeout).child)

    def go(self) -> float:
        """Start every child waiting in `wait_for_start`; return the start time (`time.time()`)."""
        started = time.time()
        self._start.set()
        return started

    def join(self) -> None:
        """Wait for every child to exit; raise `BenchError` unless all exit cleanly in time."""
        deadline = time.monotonic() + self._join_timeout
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        failed = [
            f"{index} ({'still running' if process.exitcode is None else process.exitcode})"
            for index, process in enumerate(self._processes)
            if process.exitcode != 0
        ]
        if failed:
            raise BenchError(
                f"benchmark child process(es) did not exit cleanly: {', '.join(failed)}"
            )

    def _check_alive(self) -> None:
        for index, process in enumerate(self._processes):
            if process.exitcode not in (None, 0):
                # Its last words may still be in the pipe: prefer them to a bare exit code.
                try:
                    while (message := self._messages.get(timeout=0.5)).kind != "error":
                        pass
                except Empty:
                    pass
                else:
                    raise BenchError(
                        f"benchmark child process {message.child} failed:\n{message.text}"
                    )
                raise BenchError(
                    f"benchmark child process {index} exited with code {process.exitcode}"
                )

    def _shutdown(self, *, graceful: bool) -> None:
        if graceful:
            deadline = time.monotonic() + self._join_timeout
            for process in self._processes:
                process.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.exitcode is None:
                process.terminate()
        for process in self._processes:
            process.join(2.0)
            if process.exitcode is None:
                process.kill()
                process.join()
            process.close()
        self._messages.close()
        self._messages.join_thread()


# -- what the children run ----------------------------------------------------------------


def drain_worker(context: ChildContext, url: str, queue: str, worker: str, batch: int) -> None:
    """Child: pop `batch` jobs at a time and complete them until `queue` gives none (or the
    parent is gone).

    Reports `progress` (jobs completed) per batch, then `finished` with the time of its
    last completion.
    """
    engine = open_engine(url)
    try:
        context.send("ready")
        context.wait_for_start()
        last_completion = 0.0
        while parent_alive() and (jobs := engine.pop(queue, worker, batch)):
            done = engine.complete_many([job.jid for job in jobs], worker, queue)
            last_completion = time.time()
            context.send("progress", amount=len(done))
        context.send("finished", value=last_completion)
    finally:
        engine.close()


def _redis_client(url: str) -> redis.Redis:
    """The engine's kind of redis-py client for a lanner Redis URL, without the engine."""
    from lanner.engines.redis.connection import parse_url, redis_client

    address, options = parse_url(url)
    # A BLPOP's reply may take its whole timeout on top of a command's.
    return redis_client(address, options, options.socket_timeout + POP_WAIT)


def floor_worker(context: ChildContext, url: str, key: str) -> None:
    """Child: block in a bare `BLPOP key`, and for each value report (as a `sample`) the
    seconds since the time it holds. The value `stop` ends the loop."""
    client = _redis_client(url)
    try:
        context.send("ready")
        while True:
            woken = client.blpop([key], timeout=POP_WAIT)
            popped = time.time()
            if woken is None:
                if not parent_alive():
                    return
                continue
            if woken[1] == "stop":
                context.send("finished")
                return
            context.send("sample", value=popped - float(woken[1]))
    finally:
        client.close()


def pickup_worker(context: ChildContext, url: str, queue: str, worker: str) -> None:
    """Child: block in `pop(wait=...)`, and for each job report (as a `sample`) the seconds
    since the `put_time` in its data. A job whose data has `stop` ends the loop."""
    engine = open_engine(url)
    try:
        context.send("ready")
        while True:
            jobs = engine.pop(queue, worker, 1, wait=POP_WAIT)
            popped = time.time()
            if not jobs:
                if not parent_alive():
                    return
                continue
            job = jobs[0]
            data = json.loads(job.data)
            # Complete before reporting: the parent's next put must find this child idle.
            engine.complete(job.jid, worker, queue)
            if data.get("stop"):
                context.send("finished")
                return
            context.send("sample", value=popped - float(data["put_time"]))
    finally:
        engine.close()


# -- measurements -------------------------------------------------------------------------


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _new_jobs(queue: str, count: int) -> list[NewJob]:
    return [
        NewJob(queue=queue, jid=uuid.uuid4().hex, klass=KLASS, data=json.dumps({"n": n}))
        for n in range(count)
    ]


def _rate(count: int, seconds: float) -> float:
    if seconds <= 0:
        raise BenchError(f"a phase of {count} jobs took no measurable time")
    return count / seconds


def measure_put_single(
    engine: Engine, queue: str, jobs: int, batch: int, progress: BenchProgress
) -> float:
    """Put `jobs` jobs into `queue`, one `put` call each; return jobs per second."""
    progress.phase("put, 1 job per call", jobs)
    elapsed = 0.0
    # Timed per chunk so that progress reporting stays outside the measurement.
    for chunk in _chunks(_new_jobs(queue, jobs), batch):
        started = time.perf_counter()
        for job in chunk:
            engine.put(job.queue, job.jid, job.klass, job.data)
        elapsed += time.perf_counter() - started
        progress.advance(len(chunk))
    return _rate(jobs, elapsed)


def measure_put_batch(
    engine: Engine, queue: str, jobs: int, batch: int, progress: BenchProgress
) -> float:
    """Put `jobs` jobs into `queue` with `put_many`, `batch` per call; return jobs per second."""
    progress.phase(f"put_many, {batch} jobs per call", jobs)
    elapsed = 0.0
    for chunk in _chunks(_new_jobs(queue, jobs), batch):
        started = time.perf_counter()
        engine.put_many(chunk)
        elapsed += time.perf_counter() - started
        progress.advance(len(chunk))
    return _rate(jobs, elapsed)


def measure_drain(
    url: str, queue: str, jobs: int, batch: int, processes: int, progress: BenchProgress
) -> float:
    """Drain `queue`, which holds exactly `jobs` waiting jobs, with `processes` children
    looping `pop(batch)` + `complete_many`; return jobs per second, from the common start to
    the last completion. Raises `BenchError` unless exactly `jobs` jobs were completed."""
    plural = "es" if processes > 1 else ""
    progress.phase(f"pop + complete_many, {processes} process{plural}", jobs)
    completed = 0
    last_completions: list[float] = []
    with ChildGroup() as group:
        for index in range(processes):
            group.spawn(drain_worker, url, queue, f"bench-drain-{index}", batch)
        group.wait_ready()
        started = group.go()
        while len(last_completions) < processes:
            message = group.receive(STALL_TIMEOUT)
            if message.kind == "progress":
                completed += message.amount
                progress.advance(message.amount)
            elif message.kind == "finished":
                last_completions.append(message.value)
            else:
                raise BenchError(f"unexpected message from a drain process: {message!r}")
        group.join()
    if completed != jobs:
        raise BenchError(f"{processes} drain process(es) completed {completed} of {jobs} jobs")
    return _rate(jobs, max(last_completions) - started)


def verify_drained(engine: Engine, queue: str) -> None:
    """Raise `BenchError` if `queue` still holds any job that is not complete."""
    counts = engine.queue_counts(queue)
    left = {
        "waiting": counts.waiting,
        "running": counts.running,
        "stalled": counts.stalled,
        "scheduled": counts.scheduled,
        "depends": counts.depends,
    }
    if any(left.values()):
        found = ", ".join(f"{count} {state}" for state, count in left.items() if count)
        raise BenchError(f"queue {queue!r} was not drained: {found}")


def _latency_samples(
    group: ChildGroup, samples: int, send: Callable[[float | None], None], progress: BenchProgress
) -> Percentiles:
    """Latency (ms) from `send(time.time())` to the child of `group` reporting that it
    received that time.

    Each sample follows the previous one's report and a short random idle gap, so it
    measures waking an idle, blocked receiver. `send(None)` ends the child.
    """
    rng = random.Random()
    latencies: list[float] = []
    group.wait_ready()
    for _ in range(samples):
        time.sleep(rng.uniform(*IDLE_GAP))
        send(time.time())
        latencies.append(group.expect("sample", PICKUP_TIMEOUT).value)
        progress.advance(1)
    send(None)
    group.expect("finished", PICKUP_TIMEOUT)
    group.join()
    return Percentiles.of(latencies, scale=1000.0)


def measure_pickup(
    engine: Engine, url: str, queue: str, samples: int, progress: BenchProgress
) -> Percentiles:
    """Latency (ms) from `put` to a blocked `pop` in another process returning the job.

    Jobs are put one at a time (see `_latency_samples`). The time includes the put's own
    commit, as a producer would see it.
    """
    progress.phase("pickup latency", samples)

    def put(put_time: float | None) -> None:
        data = {"stop": True} if put_time is None else {"put_time": put_time}
        engine.put(queue, uuid.uuid4().hex, KLASS, json.dumps(data))

    with ChildGroup() as group:
        group.spawn(pickup_worker, url, queue, "bench-pickup")
        return _latency_samples(group, samples, put, progress)


def measure_redis_floor(url: str, key: str, samples: int, progress: BenchProgress) -> Percentiles:
    """What pickup latency costs on this machine before lanner does anything: latency (ms)
    from a bare `LPUSH` to a `BLPOP` blocked in another process, with the engine's kind of
    client and the idle gaps of `measure_pickup`: a hop to Redis and one from it, and two
    idle processes woken."""
    progress.phase("pickup floor: bare LPUSH to a blocked BLPOP", samples)
    client = _redis_client(url)
    try:
        with ChildGroup() as group:
            group.spawn(floor_worker, url, key)

            def push(pushed: float | None) -> None:
                client.lpush(key, "stop" if pushed is None else repr(pushed))

            return _latency_samples(group, samples, push, progress)
    finally:
        client.delete(key)
        client.close()


# -- the whole benchmark ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MachineInfo:
    platform: str
    cpu_count: int | None
    python: str
    sqlite: str
    lanner: str

    @classmethod
    def current(cls) -> MachineInfo:
        return cls(
            platform=platform.platform(),
            cpu_count=os.cpu_count(),
            python=platform.python_version(),
            sqlite=sqlite3.sqlite_version,
            lanner=__version__,
        )


@dataclass(frozen=True, slots=True)
class EngineBenchResult:
    """Results of `run_engine_benchmark`; rates are jobs per second."""

    url: str
    synchronous: str | None
    jobs: int
    batch: int
    samples: int
    put_single_per_s: float
    put_batch_per_s: float
    drain_1proc_per_s: float
    drain_2proc_per_s: float
    pickup_ms: Percentiles
    pickup_floor_ms: Percentiles | None
    """Redis only: the machine's share of pickup latency (see `measure_redis_floor`)."""
    machine: MachineInfo

    def to_json(self) -> dict[str, Any]:
        floor = self.pickup_floor_ms
        return {
            "url": self.url,
            "synchronous": self.synchronous,
            "jobs": self.jobs,
            "batch": self.batch,
            "samples": self.samples,
            "put_single_per_s": self.put_single_per_s,
            "put_batch_per_s": self.put_batch_per_s,
            "drain_1proc_per_s": self.drain_1proc_per_s,
            "drain_2proc_per_s": self.drain_2proc_per_s,
            "pickup_ms": self.pickup_ms.as_dict(),
            "pickup_floor_ms": None if floor is None else floor.as_dict(),
            "machine": {
                "platform": self.machine.platform,
                "cpu_count": self.machine.cpu_count,
                "python": self.machine.python,
                "sqlite": self.machine.sqlite,
                "lanner": self.machine.lanner,
            },
        }


def synchronous_of(url: str) -> str | None:
    """The SQLite `synchronous` mode a URL asks for (its default if unset); None if not SQLite."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return None
    from lanner.engines.sqlite.options import SQLiteOptions

    return SQLiteOptions.from_query(dict(parse_qsl(parts.query))).synchronous


@contextmanager
def bench_store(url: str | None) -> Iterator[str]:
    """`url`, or the URL of a new SQLite file (synchronous=full) deleted afterwards."""
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="lanner-bench-") as directory:
        path = (Path(directory) / "bench.db").as_posix()
        yield f"sqlite:///{path}?synchronous=full"


def run_engine_benchmark(
    url: str | None = None,
    jobs: int = DEFAULT_JOBS,
    batch: int = DEFAULT_BATCH,
    samples: int = DEFAULT_SAMPLES,
    progress: BenchProgress | None = None,
) -> EngineBenchResult:
    """Measure an engine: put rates (single and batched), drain rates (1 and 2 processes)
    and pickup latency (on Redis, also the machine's floor under it).

    With `url` None the engine is SQLite on a new temporary file. Otherwise `url` should
    name an empty store: the benchmark leaves its `2 * jobs + samples + 1` completed jobs
    there, in queues named `bench-<run id>-...`.
    """
    for name, value in (("jobs", jobs), ("batch", batch), ("samples", samples)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    progress = progress or NoProgress()
    run = uuid.uuid4().hex[:8]
    single_queue, batch_queue, pickup_queue = (
        f"bench-{run}-{q}" for q in ("put", "many", "pickup")
    )
    with bench_store(url) as store_url:
        synchronous = synchronous_of(store_url)
        engine = open_engine(store_url)
        try:
            if Capability.BLOCKING_POP not in engine.capabilities:
                raise BenchError(f"the {engine.name} engine has no blocking pop to measure")
            put_single = measure_put_single(engine, single_queue, jobs, batch, progress)
            put_batch = measure_put_batch(engine, batch_queue, jobs, batch, progress)
            # The put phases left `jobs` waiting jobs in each queue: drain those.
            drain_1 = measure_drain(store_url, single_queue, jobs, batch, 1, progress)
            verify_drained(engine, single_queue)
            drain_2 = measure_drain(store_url, batch_queue, jobs, batch, 2, progress)
            verify_drained(engine, batch_queue)
            pickup = measure_pickup(engine, store_url, pickup_queue, samples, progress)
            floor = None
            if engine.name == "redis":
                floor = measure_redis_floor(store_url, f"bench-{run}-floor", samples, progress)
        finally:
            engine.close()
    return EngineBenchResult(
        url=store_url,
        synchronous=synchronous,
        jobs=jobs,
        batch=batch,
        samples=samples,
        put_single_per_s=put_single,
        put_batch_per_s=put_batch,
        drain_1proc_per_s=drain_1,
        drain_2proc_per_s=drain_2,
        pickup_ms=pickup,
        pickup_floor_ms=floor,
        machine=MachineInfo.current(),
    )
