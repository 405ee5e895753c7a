"""What a simulation run found: per-queue waits, throughput, starvation, and worker use.

Waits are task-in-queue latencies: from the moment a task is ready to the pop that takes
it, which is what lanner's engines record as a queue's `wait` statistic. Only tasks that
arrive inside the scenario's measured window count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lanner.simulate.scenario import Window

__all__ = ["DepthSeries", "QueueResult", "RunResult", "WaitSummary", "quantile"]

# Where the wait distribution is sampled for plots: evenly, then densely into the tail.
_PLOT_PROBABILITIES = (
    *(i / 100 for i in range(100)),
    *(0.99 + i / 1000 for i in range(10)),
    *(0.999 + i / 10000 for i in range(10)),
    1.0,
)


def quantile(ordered: Sequence[float], probability: float) -> float:
    """The quantile of sorted values, linearly interpolated between ranks (numpy's default)."""
    rank = (len(ordered) - 1) * probability
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class WaitSummary:
    """Seconds. All zero when no task was measured."""

    count: int
    mean: float
    p50: float
    p99: float
    max: float
    curve: tuple[tuple[float, float], ...] = ()
    """(probability, wait) pairs of the distribution, for plots."""

    @classmethod
    def of(cls, waits: Sequence[float]) -> WaitSummary:
        if not waits:
            return cls(0, 0.0, 0.0, 0.0, 0.0)
        ordered = sorted(waits)
        return cls(
            count=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p50=quantile(ordered, 0.50),
            p99=quantile(ordered, 0.99),
            max=ordered[-1],
            curve=tuple((p, quantile(ordered, p)) for p in _PLOT_PROBABILITIES),
        )


@dataclass(frozen=True, slots=True)
class QueueResult:
    name: str
    priority: int
    workers: int | None
    """Workers pinned to this queue (the static baseline), else None."""
    wait: WaitSummary
    throughput: float
    """Tasks popped per second during the window."""
    starvation: float
    """The longest a non-empty queue went without a pop, among spells touching the window."""
    busy_share: float
    """The fraction of all workers' time in the window spent running this queue's tasks."""
    empty_polls: int
    """Long polls on this queue that ended with nothing (in the whole run)."""
    unserved: int
    """Tasks still waiting when the simulation stopped (only if it hit the drain limit)."""


@dataclass(frozen=True, slots=True)
class DepthSeries:
    """Tasks waiting in each queue, sampled at `times`."""

    times: tuple[float, ...]
    depths: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: str
    policy: str
    """A selector's name, or "static"."""
    workers: int
    seed: int
    window: Window
    offered_load: float
    """Demand in the window as a fraction of the workers' capacity."""
    queues: tuple[QueueResult, ...]
    utilisation: float
    """The fraction of the workers' time in the window spent running tasks."""
    tasks: int
    """Tasks popped in the whole run (the simulator's work, for its speed)."""
    simulated: float
    """Seconds of simulated time, up to the last pop."""
    elapsed: float
    """Wall-clock seconds the run took."""
    depth: DepthSeries

    @property
    def mean_wait(self) -> float:
        """The average wait over every measured task of every queue."""
        count = sum(q.wait.count for q in self.queues)
        if not count:
            return 0.0
        return sum(q.wait.mean * q.wait.count for q in self.queues) / count

    @property
    def tasks_per_second(self) -> float:
        """Simulated tasks per wall-clock second."""
        return self.tasks / self.elapsed if self.elapsed > 0 else math.inf

    def queue(self, name: str) -> QueueResult:
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "policy": self.policy,
            "workers": self.workers,
            "seed": self.seed,
            "window": [self.window.start, self.window.end],
            "offered_load": self.offered_load,
            "utilisation": self.utilisation,
            "mean_wait": self.mean_wait,
            "tasks": self.tasks,
            "simulated_seconds": self.simulated,
            "elapsed_seconds": self.elapsed,
            "tasks_per_second": self.tasks_per_second,
            "queues": [
                {
                    "name": q.name,
                    "priority": q.priority,
                    "workers": q.workers,
                    "tasks": q.wait.count,
                    "wait": {
                        "mean": q.wait.mean,
                        "p50": q.wait.p50,
                        "p99": q.wait.p99,
                        "max": q.wait.max,
                    },
                    "throughput": q.throughput,
                    "starvation": q.starvation,
                    "busy_share": q.busy_share,
                    "empty_polls": q.empty_polls,
                    "unserved": q.unserved,
                }
                for q in self.queues
            ],
        }
