"""Running several simulations (policies to compare, load levels to sweep), on several cores.

Each run is independent and single-threaded, so runs go to separate processes (spawned,
so nothing of the caller's state is shared), reporting progress back through a queue.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from lanner.simulate.core import simulate
from lanner.simulate.results import RunResult
from lanner.simulate.scenario import Scenario

__all__ = ["Job", "RunProgress", "run_jobs"]

RunProgress = Callable[[int, int, int], None]
"""Called with (job index, tasks popped so far, tasks expected)."""


@dataclass(frozen=True, slots=True)
class Job:
    scenario: Scenario
    policy: str


_progress_queue: Any = None  # set in each child process by _init_child


def _init_child(progress: Any) -> None:
    global _progress_queue
    _progress_queue = progress


def _run_in_child(index: int, job: Job) -> RunResult:
    def report(done: int, total: int) -> None:
        _progress_queue.put((index, done, total))

    return simulate(job.scenario, job.policy, report)


def run_jobs(
    jobs: Sequence[Job], *, processes: int | None = None, progress: RunProgress | None = None
) -> list[RunResult]:
    """Run every job; results in the jobs' order. `processes`: default the CPU count, and
    never more than there are jobs; 1 runs them here, one after another."""
    count = min(processes or os.cpu_count() or 1, len(jobs))
    if count <= 1:
        return [
            simulate(job.scenario, job.policy, _bind(progress, index))
            for index, job in enumerate(jobs)
        ]
    context = multiprocessing.get_context("spawn")
    updates = context.Queue()
    with ProcessPoolExecutor(count, context, initializer=_init_child, initargs=(updates,)) as pool:
        futures = [pool.submit(_run_in_child, index, job) for index, job in enumerate(jobs)]
        while not all(future.done() for future in futures):
            _relay(updates, progress)
        _drain(updates, progress)
        return [future.result() for future in futures]


def _relay(updates: Any, progress: RunProgress | None) -> None:
    try:
        index, done, total = updates.get(timeout=0.1)
    except queue_module.Empty:
        return
    if progress is not None:
        progress(index, done, total)


def _drain(updates: Any, progress: RunProgress | None) -> None:
    while True:
        try:
            index, done, total = updates.get_nowait()
        except queue_module.Empty:
            return
        if progress is not None:
            progress(index, done, total)


def _bind(progress: RunProgress | None, index: int) -> Callable[[int, int], None] | None:
    if progress is None:
        return None
    return lambda done, total: progress(index, done, total)
