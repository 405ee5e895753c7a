"""A worker process of the pool: its entry point, and what it reports to its supervisor.

A child leads its own process group (so a kill of the group takes its task's
subprocesses too), ignores Ctrl-C (the supervisor owns it), stops warm on SIGTERM (which
Linux also sends it when the supervisor dies, `stop_with_parent`), and
tells the supervisor over a pipe what its loop does: the batch it popped, the job it
started (with its deadline and retry plan), the jobs it finished (how, and how long they
ran) and completed, the engine's failures, and a store that refuses the configuration
(after which it exits). That is
all the supervisor needs to step in for it, and to count running and processed jobs.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, NamedTuple

from lanner.errors import StoreMisconfigured
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.worker.concurrent import ConcurrentLoop
from lanner.worker.loop import Limits, WorkerLoop
from lanner.worker.processes import kill_strays, lead_own_group, stop_with_parent
from lanner.worker.reporter import Outcome

if TYPE_CHECKING:
    from lanner.app import App

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


# What a child tells the supervisor over its pipe, in the order the loop does it.
class BatchPopped(NamedTuple):
    queue: str
    jids: list[str]


class JobStarted(NamedTuple):
    jid: str
    deadline: float  # when its time limit runs out (Unix time; inf: it has none)
    retry_delay: float | None  # None: no retry left


class JobStopping(NamedTuple):
    """The job is no longer the child's (cancelled, lock lost): its task was told to stop."""

    jid: str
    why: str


class JobFinished(NamedTuple):
    jid: str
    succeeded: bool  # True: it waits to be completed
    outcome: Outcome = ""  # completed, failed, retried, stopped (for the pool's metrics)
    klass: str = ""  # its task's name
    seconds: float = 0.0  # how long its task ran


class JobsCompleted(NamedTuple):
    jids: list[str]


class BatchSettled(NamedTuple):
    """The batch's completions are stored and its unstarted jobs given back."""


class WorkerExiting(NamedTuple):
    reason: str


class EngineFailed(NamedTuple):
    """An engine command failed; the loop waits and tries again (for the pool's metrics)."""


class StoreRefused(NamedTuple):
    """The store refuses the configuration (the loop ended): the pool must stop with it."""

    error: StoreMisconfigured


Report = (
    BatchPopped
    | JobStarted
    | JobStopping
    | JobFinished
    | JobsCompleted
    | BatchSettled
    | WorkerExiting
    | EngineFailed
    | StoreRefused
)


# On the pipe a report is a plain tuple, its kind's number first: pickling and unpickling
# a NamedTuple took 3 to 5 times as long, on every job's two or three reports.
_KINDS: tuple[type[Report], ...] = (
    BatchPopped, JobStarted, JobStopping, JobFinished, JobsCompleted, BatchSettled,
    WorkerExiting, EngineFailed, StoreRefused,
)  # fmt: skip
_KIND_NUMBERS: dict[type[Report], int] = {kind: number for number, kind in enumerate(_KINDS)}


def encode_report(report: Report) -> bytes:
    """What `send_report` writes on the pipe."""
    return pickle.dumps((_KIND_NUMBERS[type(report)], *report), pickle.HIGHEST_PROTOCOL)


def decode_report(data: bytes) -> Report:
    """A report as the child made it, from what `encode_report` wrote."""
    kind, *fields = pickle.loads(data)  # noqa: S301 - our own child, over our own pipe
    report: Report = _KINDS[kind]._make(fields)
    return report


# On the pipe each report is framed as multiprocessing's `Connection.send_bytes` frames
# it (a 4-byte big-endian length, then the bytes), but written and read here without a
# `Connection`: the supervisor reads what every report of a child's pipe holds in one
# `read` and splits it (`split_frames`), where `recv_bytes` took two reads and a
# `BytesIO` per report (half the supervisor's CPU per job).
_LENGTH = struct.Struct("!i")


def frame(data: bytes) -> bytes:
    """`data` as one frame on the pipe (reports are far below the 2 GiB a length holds)."""
    return _LENGTH.pack(len(data)) + data


def write_whole(fd: int, framed: bytes) -> None:
    """Write a frame whole: at most PIPE_BUF bytes in one write, which the kernel writes
    whole; more in as many as it takes (a signal may cut such a write short)."""
    if len(framed) <= select.PIPE_BUF:
        os.write(fd, framed)
        return
    view = memoryview(framed)
    while view:
        view = view[os.write(fd, view) :]


def split_frames(buffer: bytearray) -> list[bytes]:
    """The whole frames at the start of `buffer`, taken out of it (a frame whose end has
    not come yet stays for the next read)."""
    frames: list[bytes] = []
    start, size = 0, len(buffer)
    while size - start >= 4:
        (length,) = _LENGTH.unpack_from(buffer, start)
        end = start + 4 + length
        if length < 0 or end > size:
            break
        frames.append(bytes(buffer[start + 4 : end]))
        start = end
    del buffer[:start]
    return frames


def send_report(conn: Connection, report: Report) -> None:
    write_whole(conn.fileno(), frame(encode_report(report)))


class PipeReporter:
    """The child's side of the pipe (the loop and its keeper thread both report)."""

    def __init__(self, conn: Connection) -> None:
        self._fd = conn.fileno()
        self._lock = threading.Lock()

    def _send(self, report: Report) -> None:
        data = frame(encode_report(report))
        with self._lock:
            write_whole(self._fd, data)

    def batch(self, queue: str, jids: Sequence[str]) -> None:
        self._send(BatchPopped(queue, list(jids)))

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None:
        self._send(JobStarted(jid, deadline, retry_delay))

    def stopping(self, jid: str, why: str) -> None:
        self._send(JobStopping(jid, why))

    def finished(
        self,
        jid: str,
        succeeded: bool,
        outcome: Outcome = "",
        klass: str = "",
        seconds: float = 0.0,
    ) -> None:
        self._send(JobFinished(jid, succeeded, outcome, klass, seconds))

    def completed(self, jids: Sequence[str]) -> None:
        self._send(JobsCompleted(list(jids)))

    def flushed(self) -> None:
        self._send(BatchSettled())

    def engine_error(self) -> None:
        self._send(EngineFailed())


def child_main(
    app: App,
    queues: Sequence[QueueConfig],
    selector: str,
    limits: Limits,
    conn: Connection,
    supervisor: int,
    stop_with_supervisor: bool,
    tasks_per_process: int = 1,
    threads: int = 1,
) -> None:
    """The body of a worker process (forked by the supervisor, whose pid is `supervisor`);
    it runs one job at a time (`WorkerLoop`) or up to `tasks_per_process` at once
    (`ConcurrentLoop`).

    `stop_with_supervisor`: have Linux send SIGTERM when the supervisor dies; only for a
    fork by the supervisor's main thread, as Linux sends it when the forking thread ends.
    """
    lead_own_group()
    if stop_with_supervisor:
        stop_with_parent(signal.SIGTERM)
    # The supervisor owns Ctrl-C: a terminal's SIGINT reaches the whole process group,
    # and children must not die of it mid-task; they stop when the supervisor says so.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reporter = PipeReporter(conn)
    # configure=False: the supervisor stores the queues' settings, once for all children.
    # supervisor: its pid from before the fork, as it may be gone already.
    loop = (
        ConcurrentLoop(app, queues, resolve_selector(selector), reporter=reporter,
                       limits=limits, configure=False, supervisor=supervisor,
                       tasks_per_process=tasks_per_process, threads=threads)
        if tasks_per_process > 1
        else WorkerLoop(app, queues, resolve_selector(selector), reporter=reporter,
                        limits=limits, configure=False, supervisor=supervisor)
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda signum, frame: loop.stop())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if app.settings.on_worker_startup:
        app.settings.on_worker_startup()
    try:
        reason = loop.run()
    except StoreMisconfigured as error:
        send_report(conn, StoreRefused(error))
        reason = "the store refuses the configuration"
    if app.settings.on_worker_shutdown:
        app.settings.on_worker_shutdown()
    kill_strays()  # nothing a task started outlives the process that ran it
    send_report(conn, WorkerExiting(reason))
    conn.close()
