"""The soft time limit: SIGALRM raises TimeLimitExceeded inside the running task.

Only the main thread of a process can receive it, which is where a worker runs tasks;
in any other thread (a test running queued jobs, say) there is no soft limit. A task that
ignores it (or is stuck in C code) is killed by the pool's supervisor.
The handler is installed once per process; each task only arms and disarms the timer,
which keeps two system calls off every job instead of four.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from lanner.errors import TimeLimitExceeded

_armed_for = 0.0  # the limit of the task running now; 0 when none


def _expire(signum: int, frame: FrameType | None) -> None:
    if _armed_for:
        raise TimeLimitExceeded(f"time limit of {_armed_for:g} s exceeded")


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeLimitExceeded in this (main) thread if the block runs `seconds` or more."""
    global _armed_for
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGALRM) is not _expire:
        signal.signal(signal.SIGALRM, _expire)
    _armed_for = seconds
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _armed_for = 0.0
