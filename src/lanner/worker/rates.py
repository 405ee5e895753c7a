"""FLOW in the worker: a rate-limited run starts within the window its pop gave it.

The store counts a rate-limited run's start when a pop hands the job out, and hands it out
alone, up to a lead before that start (`lanner.records.rate_lead`). The pop notes in the
job's `popped` history entry when the start was counted (`start`) and how late the run may
still start (`by`: the start and a slack, `rate_slack`): a start anywhere in that window
keeps every period's starts within the limit. The worker holds the job until `start`, and
gives it back unspent if it could not start by `by` (its process was slow: the machine is
loaded, a fresh process's first job); the pop that takes it again counts it again. Both
sides read one clock: `now` is the popping process's (this one's) `time.time()`.
"""

from __future__ import annotations

import asyncio
import time

from lanner.job import Job

Window = tuple[float, float]
"""When a rate-limited run may start, and the latest it may (Unix times)."""

LATE = "its rate limit's start window passed before it could start"
"""Why a job is given back when it could not start in time."""


def start_window(job: Job) -> Window | None:
    """The start window its pop gave a rate-limited job; None for any other job."""
    for entry in reversed(job.history):
        if entry.what == "popped":
            start, by = entry.details.get("start"), entry.details.get("by")
            if isinstance(start, int | float) and isinstance(by, int | float):
                return float(start), float(by)
            return None
    return None


def hold(window: Window) -> bool:
    """Wait for the window's start; whether the run may start now (not past `by`)."""
    start, by = window
    early = start - time.time()
    if early > 0:
        time.sleep(early)
    return time.time() <= by


async def ahold(window: Window) -> bool:
    """`hold`, awaited (the process's other jobs go on meanwhile)."""
    start, by = window
    early = start - time.time()
    if early > 0:
        await asyncio.sleep(early)
    return time.time() <= by
