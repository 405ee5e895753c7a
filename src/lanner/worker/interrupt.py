"""Stopping the running task from outside it: at its time limit, or when its job is gone.

A task runs in the main thread of its worker process. `running(time_limit)` arms SIGALRM
for the task's time limit: when it fires, the handler raises `TimeLimitExceeded` inside the
task. `stop(jid, error)`, called from another thread (the keeper, when it learns the job was
cancelled or its lock lost), sends SIGALRM at once with `error` to raise instead, if that
job's task is still the one running; an alarm that arrives once it is not is ignored. An
async task is not interrupted mid-statement: its asyncio task is cancelled
(`lanner.inprocess.coroutines` says how), and the error is raised where it awaits. A task
that ignores all this, stuck in C code or catching the error, is killed by the pool's
supervisor.

Only the main thread of a process receives signals: in any other thread (a test draining
queues, say) there is no interruption. The handler is installed once per process; each
task only arms and disarms the timer, which keeps two system calls off every job.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from lanner.errors import TimeLimitExceeded

ALARM_EARLY_SEC = 0.005
ALARM_RETRY_SEC = 0.01
"""How soon an alarm that found the task inside `logging` comes again..."""
ALARM_RETRY_FOR_SEC = 1.0
"""...for at most this long past the deadline: then it raises wherever the task is."""
_LOGGING_DIR = os.path.dirname(logging.__file__) + os.sep
"""An alarm this much before the time limit is not the timer's: a late stop()'s, ignored."""


@dataclass
class _Running:
    jid: str
    limit: float
    deadline: float  # monotonic
    error: BaseException | None = None  # what stop() asked to raise instead
    cancel: Callable[[BaseException], None] | None = None  # while an awaitable runs


_running: _Running | None = None  # the task running in this process's main thread

# The handler as the C module keeps it: `signal.getsignal` turns it into an enum member
# where it can, by way of a ValueError for any function, which cost more than the rest of
# `running` together (2 to 25 µs a job, with the machine's load).
_handler_of: Callable[[int], object] = getattr(
    importlib.import_module("_signal"), "getsignal", signal.getsignal
)


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    running = _running
    if running is None:
        return
    error = running.error
    if error is None:
        if time.monotonic() < running.deadline - ALARM_EARLY_SEC:
            return  # meant for a task that has ended since
        error = TimeLimitExceeded(f"time limit of {running.limit:g} s exceeded")
    if running.cancel is not None:
        running.cancel(error)
        return
    late = time.monotonic() - running.deadline
    if late < ALARM_RETRY_FOR_SEC and _inside_logging(frame):
        # logging's handlers catch every error of a record's formatting and print it as a
        # "Logging error": raised there, the stop would be swallowed. Come back just after.
        signal.setitimer(signal.ITIMER_REAL, ALARM_RETRY_SEC)
        return
    raise error


def _inside_logging(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(_LOGGING_DIR):
            return True
        frame = frame.f_back
    return False


@contextmanager
def running(jid: str, time_limit: float | None) -> Iterator[None]:
    """Run the block as job `jid`'s task, interruptible, stopped after `time_limit` seconds
    (None, or 0: no time limit; it can still be stopped)."""
    armed = arm(jid, time_limit)
    try:
        yield
    finally:
        if armed:
            disarm(time_limit)


def arm(jid: str, time_limit: float | None) -> bool:
    """What `running` does before its block, without a generator per job (the worker's
    hot path): call `disarm(time_limit)` in a `finally` after the task if it returns True
    (False: not the main thread, nothing was armed)."""
    global _running
    if threading.current_thread() is not threading.main_thread():
        return False
    if _handler_of(signal.SIGALRM) is not _on_alarm:
        signal.signal(signal.SIGALRM, _on_alarm)
    limit = time_limit or 0.0
    deadline = time.monotonic() + limit if limit > 0 else float("inf")
    _running = _Running(jid, limit, deadline)
    if limit > 0:
        signal.setitimer(signal.ITIMER_REAL, limit)
    return True


def disarm(time_limit: float | None) -> None:
    """The task armed by `arm(jid, time_limit)` has ended."""
    global _running
    if time_limit:
        signal.setitimer(signal.ITIMER_REAL, 0)
    _running = None


def stop(jid: str, error: BaseException) -> bool:
    """Raise `error` in job `jid`'s task now (from any thread); False if it is not running."""
    running = _running
    if running is None or running.jid != jid or running.error is not None:
        return False
    running.error = error
    ident = threading.main_thread().ident
    assert ident is not None
    signal.pthread_kill(ident, signal.SIGALRM)
    return True


@contextmanager
def cancelling(cancel: Callable[[BaseException], None]) -> Iterator[None]:
    """While the block runs an awaitable, an interruption calls `cancel(error)` instead of
    raising `error` in the middle of the event loop."""
    running = _running
    if running is None:
        yield
        return
    running.cancel = cancel
    try:
        yield
    finally:
        running.cancel = None


def raise_in_thread(ident: int, error: type[BaseException]) -> None:
    """Raise `error` in thread `ident` at its next Python instruction (a task running in a
    thread of a worker that runs many at once); a thread blocked in C code sees it only
    once it is back in Python."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(error))


def forget_in_thread(ident: int) -> None:
    """Withdraw an error `raise_in_thread` sent that the thread has not raised yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
