"""When a recurring template's runs fall due: the schedule arithmetic, free of storage."""

from __future__ import annotations

import math
from typing import Final

MAX_RUNS_PER_POP: Final = 1000
"""Bounds the work of one pop after a long outage; the rest spawn on the next pops."""


def due_runs(
    next_at: float, interval: float, backlog: int, now: float
) -> tuple[list[float], float]:
    """The times of the runs due at `now`, and when the run after them is due.

    With `backlog > 0`, of the runs due strictly before `now` only the latest `backlog`
    are kept; the older ones are skipped.
    """
    if next_at > now:
        return [], next_at
    if backlog > 0:
        overdue = math.ceil((now - next_at) / interval)
        if overdue > backlog:
            next_at += (overdue - backlog) * interval
    runs: list[float] = []
    while next_at <= now and len(runs) < MAX_RUNS_PER_POP:
        runs.append(next_at)
        next_at += interval
    return runs, next_at
