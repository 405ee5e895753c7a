"""The workload: a task module and a queue file written into a run's folder, and its jobs.

The module is what a real `lanner worker -A <module> --queues <yaml>` imports. Its normal
task writes `start` and `end` lines into the ledger around a short sleep. Its poison tasks
each break a worker process in one way, and each must end in a failure group whose
message says why (`POISONS` says which group and which words):

    raise     raises every time: its own exception's group, after its retries
    exit      os._exit(1)
    segv      a segmentation fault (reads address 0)
    memory    allocates until the address-space limit its worker set at start-up
    overrun   starts a marked `sleep` subprocess, then ignores its time limit
    fork      forks; both processes return from the task (the copy must never work)

Every job's first argument is its own jid, so the ledger can name it; jids are chosen
here. Publishing goes through the module's own App, as a user's code would.

The tasks are `async def` (`kind="async"`) or plain functions (`"sync"`): async by default
when the pool's processes run many jobs at once (`tasks_per_process` > 1), so that they
share each process's event loop (the normal task then awaits `asyncio.sleep`); sync ones
run in up to `threads` threads of each process. Poison tasks are of the same kind as the
normal one: a process pops at most as many jobs from a queue that holds sync jobs as it
has threads free, so one sync poison would hold an async run to one job per pop.
"""

from __future__ import annotations

import importlib
import random
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

PUBLISH_CHUNK: Final = 1000
KINDS: Final = ("async", "sync")


@dataclass(frozen=True, slots=True)
class Poison:
    """What a poison job must end as: failed into `group` (a suffix for the task's own
    exception, whose module name varies) with one of `reasons` in the failure message."""

    group: str
    reasons: tuple[str, ...]
    fails: bool = True  # fork: its task returns, so the job completes
    # Each run may end or fail the jobs in flight beside it in its process (they run
    # again): it ends the process, or (memory) leaves the process no memory for a while.
    hits_neighbours: bool = False


POISONS: Final[dict[str, Poison]] = {
    "raise": Poison(".PoisonError", ("raised on purpose",)),
    "exit": Poison("lanner-worker-died", ("exit code 1",), hits_neighbours=True),
    "segv": Poison("lanner-worker-died", ("-11", "SIGSEGV"), hits_neighbours=True),
    "memory": Poison("MemoryError", ("address-space limit",), hits_neighbours=True),
    "overrun": Poison("TimeLimitExceeded", ("time limit",), hits_neighbours=True),
    "fork": Poison("", (), fails=False),
}


@dataclass(frozen=True)
class WorkloadSpec:
    """The jobs of a run and the settings its worker pool runs them with."""

    jobs: int = 1000
    sleep: float = 0.005  # seconds a normal job works
    concurrency: int = 4
    tasks_per_process: int = 1  # jobs each worker process runs at once (`lanner worker -t`)
    threads: int = 1  # of those, sync tasks at once, in threads (`--threads`)
    kind: str | None = None  # "async" or "sync" tasks; None: async when tasks_per_process > 1
    batch_size: int = 10
    lease: float = 30.0  # the queue's visibility_timeout_sec
    time_limit: float | None = None  # the normal task's (None: half the lease, at most 10 s)
    retries: int = 5  # the normal task's max_retries
    poisons: tuple[str, ...] = tuple(POISONS)
    poison_copies: int = 2
    poison_retries: int = 1
    poison_time_limit: float = 1.0  # the overrun task's
    retry_delay: float | None = None  # RETRY_DELAY_MULTIPLE_SEC; None: lanner's default
    time_limit_grace: float | None = None  # TIME_LIMIT_GRACE_SEC; None: the harness picks
    shutdown_timeout: float = 10.0
    memory_headroom_mb: int = 256  # the address-space limit over a worker's size at start

    @property
    def task_time_limit(self) -> float:
        return self.time_limit if self.time_limit is not None else min(10.0, self.lease / 2)

    @property
    def runs_async(self) -> bool:
        """Whether the tasks are `async def`."""
        if self.kind is None:
            return self.tasks_per_process > 1
        return self.kind == "async"

    def check(self) -> None:
        """ValueError saying what is wrong, if anything."""
        if self.jobs < 1 or self.concurrency < 1 or self.batch_size < 1:
            raise ValueError("jobs, concurrency and batch size must be at least 1")
        if self.tasks_per_process < 1 or self.threads < 1:
            raise ValueError("tasks per process and threads must be at least 1")
        if self.kind not in (None, *KINDS):
            raise ValueError(f"unknown kind of task {self.kind!r} (async or sync)")
        if self.sleep < 0 or self.lease <= 0:
            raise ValueError("the sleep must be >= 0 and the lease > 0")
        for name, limit in (("time limit", self.task_time_limit),
                            ("poison time limit", self.poison_time_limit)):  # fmt: skip
            if not 0 < limit < self.lease:
                raise ValueError(f"the {name} ({limit:g} s) must be shorter than the lease "
                                 f"({self.lease:g} s)")  # fmt: skip
        check_poisons(self.poisons)


MODULE_TEMPLATE = '''\
"""Tasks of a lanner chaos run (written by lanner.tools.chaos.workload)."""

import asyncio
import ctypes
import os
import resource
import subprocess
import time

import lanner

BROKER = {broker!r}
LEDGER = {ledger!r}
QUEUES = {queues!r}
MARKER = {marker!r}
HEADROOM_MB = {headroom}
_fd = None


def record(what, jid):
    """One ledger line, one os.write on an O_APPEND file (reopened after a fork)."""
    global _fd
    if _fd is None or _fd[0] != os.getpid():
        _fd = (os.getpid(), os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
    os.write(_fd[1], f"{{what}} {{jid}} {{os.getpid()}} {{time.time()!r}}\\n".encode())


def limit_memory():
    """ON_WORKER_STARTUP: cap this worker's address space a little above its size now."""
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size + HEADROOM_MB * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


app = lanner.App(
    BROKER,
    settings=lanner.Settings(
        broker=BROKER,
        {retry_delay}time_limit_grace_sec={grace!r},
        shutdown_timeout_sec={shutdown!r},
        on_worker_startup=limit_memory,
    ),
    queues=lanner.load_queue_config(QUEUES),
)


class PoisonError(Exception):
    pass


@app.task(queue={queue!r}, time_limit={time_limit!r}, max_retries={retries})
{async_}def work(jid, seconds):
    record("start", jid)
    {sleep}(seconds)
    record("end", jid)


@app.task(queue={queue!r}, time_limit={time_limit!r}, max_retries={poison_retries})
{async_}def poison_raise(jid):
    record("pstart", jid)
    try:
        raise PoisonError(f"poison {{jid}} raised on purpose")
    finally:
        record("pend", jid)


@app.task(queue={queue!r}, time_limit={time_limit!r}, max_retries={poison_retries})
{async_}def poison_exit(jid):
    record("pstart", jid)
    os._exit(1)


@app.task(queue={queue!r}, time_limit={time_limit!r}, max_retries={poison_retries})
{async_}def poison_segv(jid):
    record("pstart", jid)
    ctypes.string_at(0)


@app.task(queue={queue!r}, time_limit={time_limit!r}, max_retries={poison_retries})
{async_}def poison_memory(jid):
    record("pstart", jid)
    try:
        chunks = []
        try:
            while True:
                chunks.append(bytearray(16 * 2**20))
        except MemoryError:
            held = len(chunks) * 16
            del chunks
            raise MemoryError(
                f"poison {{jid}}: {{held}} MiB allocated, then the address-space limit"
            ) from None
    finally:
        record("pend", jid)


@app.task(queue={queue!r}, time_limit={poison_time_limit!r}, max_retries={poison_retries})
{async_}def poison_overrun(jid):
    record("pstart", jid)
    subprocess.Popen(["sleep", MARKER], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        try:
            {sleep}(1)
        except {stopped}:
            pass  # stubborn: only a kill ends it


@app.task(queue={queue!r}, time_limit={time_limit!r}, max_retries={poison_retries})
{async_}def poison_fork(jid):
    record("pstart", jid)
    if os.fork() == 0:
        record("forked", jid)
    record("pend", jid)
'''


@dataclass
class Workload:
    """A run's task module, queue file and published jobs."""

    folder: Path
    module_name: str
    queue: str
    ledger: Path
    queues_file: Path
    marker: str
    normal: list[str]
    poison: dict[str, str]  # jid -> poison kind

    @property
    def module_file(self) -> Path:
        return self.folder / f"{self.module_name}.py"


def write(folder: Path, broker: str, spec: WorkloadSpec, seed: int) -> Workload:
    """Write the module and queue file into `folder` and choose the jobs' jids."""
    token = uuid.uuid4().hex[:10]
    rng = random.Random(seed)
    module_name = f"lanner_chaos_{token}"
    queue = f"chaos-{token}"  # a queue of its own: a shared store may hold other runs' jobs
    ledger = folder / "ledger.txt"
    queues_file = folder / "queues.yaml"
    marker = f"86400.{rng.randrange(10**8):08d}"  # a `sleep` argument no one else uses
    queues_file.write_text(
        f"{queue}:\n  name: {queue}\n  priority: 1\n  batch_size: {spec.batch_size}\n"
        f"  visibility_timeout_sec: {spec.lease!r}\n  long_poll_time_sec: 1\n"
        "  num_iterations: 10\n"
    )
    retry_delay = ""
    if spec.retry_delay is not None:
        retry_delay = f"retry_delay_multiple_sec={spec.retry_delay!r},\n        "
    text = MODULE_TEMPLATE.format(
        broker=broker,
        ledger=str(ledger),
        queues=str(queues_file),
        marker=marker,
        headroom=spec.memory_headroom_mb,
        retry_delay=retry_delay,
        grace=spec.time_limit_grace if spec.time_limit_grace is not None else 1.0,
        shutdown=spec.shutdown_timeout,
        queue=queue,
        time_limit=spec.task_time_limit,
        retries=spec.retries,
        poison_retries=spec.poison_retries,
        poison_time_limit=spec.poison_time_limit,
        # An async task is stopped by cancelling it where it awaits.
        async_="async " if spec.runs_async else "",
        sleep="await asyncio.sleep" if spec.runs_async else "time.sleep",
        stopped=(
            "(asyncio.CancelledError, lanner.TimeLimitExceeded)"
            if spec.runs_async
            else "lanner.TimeLimitExceeded"
        ),
    )
    (folder / f"{module_name}.py").write_text(text)
    ledger.touch()
    normal = [f"n{token}{index:07d}" for index in range(spec.jobs)]
    poison = {
        f"p{token}{kind}{copy}": kind for kind in spec.poisons for copy in range(spec.poison_copies)
    }
    return Workload(folder, module_name, queue, ledger, queues_file, marker, normal, poison)


def import_module(workload: Workload) -> ModuleType:
    """Import the task module into this process (to publish through its App)."""
    sys.path.insert(0, str(workload.folder))
    try:
        return importlib.import_module(workload.module_name)
    finally:
        sys.path.remove(str(workload.folder))


def forget_module(workload: Workload) -> None:
    module = sys.modules.pop(workload.module_name, None)
    if module is not None:
        module.app.close()


def publish(workload: Workload, spec: WorkloadSpec, seed: int) -> None:
    """Publish every job; poison jobs sit at random places in the middle of the queue."""
    module = import_module(workload)
    rng = random.Random(seed + 1)
    order: list[tuple[str, str]] = [("work", jid) for jid in workload.normal]
    for jid, kind in workload.poison.items():
        low, high = len(order) // 10, max(len(order) // 10, (len(order) * 6) // 10)
        order.insert(rng.randint(low, high), (kind, jid))
    app: Any = module.app
    try:
        for start in range(0, len(order), PUBLISH_CHUNK):
            chunk = order[start : start + PUBLISH_CHUNK]
            app.publish_many([_message(module, kind, jid, spec) for kind, jid in chunk])
    finally:
        app.close()  # this process keeps no connection to the store


def _message(module: ModuleType, kind: str, jid: str, spec: WorkloadSpec) -> Any:
    if kind == "work":
        return module.work.options(jid=jid).message(jid, spec.sleep)
    task = getattr(module, f"poison_{kind}")
    return task.options(jid=jid).message(jid)


def check_poisons(kinds: Sequence[str]) -> tuple[str, ...]:
    """The poison kinds named, in order; ValueError naming an unknown one."""
    unknown = [kind for kind in kinds if kind not in POISONS]
    if unknown:
        raise ValueError(f"unknown poison {unknown[0]!r} (known: {', '.join(POISONS)}, or 'none')")
    return tuple(kinds)
