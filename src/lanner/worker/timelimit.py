"""The soft time limit: SIGALRM raises TimeLimitExceeded inside the running task.

Only the main thread of a process can receive it, which is where a worker runs tasks.
A task that ignores it (or is stuck in C code) is killed by the pool's supervisor.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from lanner.exceptions import TimeLimitExceeded


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeLimitExceeded in this (main) thread if the block runs `seconds` or more."""
    if seconds <= 0:
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeLimitExceeded(f"time limit of {seconds:g} s exceeded")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
