"""What a simulation runs: the queues, their arrivals and run times, the workers and the costs.

A `Scenario` is plain data (the YAML loader and `--from-engine` both build one). It also
answers the questions asked of a workload before simulating it: the load each queue offers
(tasks per second × mean run time, in busy workers), and the static assignment of workers
to queues that a Celery-style deployment would make from those loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from lanner.errors import ConfigError
from lanner.queues import QueueConfig
from lanner.selectors import DEFAULT_SELECTOR
from lanner.simulate.arrivals import ArrivalSpec
from lanner.simulate.distributions import RunTime
from lanner.worker.loop import READY_CACHE_SEC

__all__ = ["STATIC", "Costs", "Scenario", "SimQueue", "Window"]

STATIC: Final = "static"
"""The policy name of the baseline: every worker pinned to one queue."""

DEFAULT_DRAIN_LIMIT: Final = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class SimQueue:
    """One queue: its worker-side configuration, when its tasks arrive, how long they run."""

    config: QueueConfig
    arrivals: ArrivalSpec
    run_time: RunTime

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True, slots=True)
class Costs:
    """What the worker loop itself costs, in seconds.

    `pop_sec`: one pop, with or without jobs (a round trip to the engine); it must be more
    than 0, as it is in reality. `task_sec`: per task, outside its own run time (decoding,
    bookkeeping, its share of the batch's completion). `wake_sec`: from a task's arrival to
    the pop of a worker blocked on its queue (the engine's pickup latency). The defaults
    are lanner's SQLite engine on one machine (docs/benchmarks.md).
    """

    pop_sec: float = 0.002
    task_sec: float = 0.0005
    wake_sec: float = 0.002


@dataclass(frozen=True, slots=True)
class Window:
    """The time range whose arrivals the results describe (default: the whole run)."""

    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Scenario:
    """A workload and a worker fleet. `queues` are in priority order, highest first.

    `static`: the baseline's shares of workers per queue (normalised); None: in proportion
    to each queue's offered load over the whole run. Tasks arrive in [0, duration); the
    simulation then goes on until every task has been popped, or `drain_limit` more seconds.
    """

    name: str
    queues: tuple[SimQueue, ...]
    workers: int
    duration: float
    seed: int = 0
    selector: str = DEFAULT_SELECTOR
    window: Window | None = None
    static: Mapping[str, float] | None = None
    costs: Costs = field(default_factory=Costs)
    drain_limit: float = DEFAULT_DRAIN_LIMIT
    ready_cache_sec: float = READY_CACHE_SEC
    source: str | None = None

    @property
    def measured(self) -> Window:
        return self.window or Window(0.0, self.duration)

    def queue(self, name: str) -> SimQueue:
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise KeyError(name)

    def scaled(self, factor: float) -> Scenario:
        """The same scenario with every Poisson rate and burst multiplied by `factor`."""
        queues = tuple(replace(q, arrivals=q.arrivals.scaled(factor)) for q in self.queues)
        return replace(self, queues=queues)

    def with_overrides(
        self, *, workers: int | None = None, seed: int | None = None, duration: float | None = None
    ) -> Scenario:
        """The scenario with what the command line overrides (None keeps the value)."""
        changed = replace(
            self,
            workers=self.workers if workers is None else workers,
            seed=self.seed if seed is None else seed,
            duration=self.duration if duration is None else duration,
        )
        if changed.duration <= 0:
            raise ConfigError("the duration must be more than 0", source=self.source)
        if changed.window is not None and changed.window.end > changed.duration:
            raise ConfigError(
                f"the measured window ends at {changed.window.end:g} s, after the duration "
                f"({changed.duration:g} s)",
                source=self.source,
                field="measure",
            )
        return changed

    def with_static(self, shares: Mapping[str, float]) -> Scenario:
        """The same scenario with the static baseline's shares fixed to `shares`."""
        return replace(self, static=dict(shares))

    def offered_load(self, window: Window | None = None) -> dict[str, float]:
        """Busy workers each queue needs on average over `window` (default: the whole run):
        expected arrivals × mean run time / window length."""
        span = window or Window(0.0, self.duration)
        return {
            q.name: q.arrivals.expected(span.start, span.end) * q.run_time.mean / span.length
            for q in self.queues
        }

    def utilisation_offered(self, window: Window | None = None) -> float:
        """Offered load over `window` as a fraction of the workers (1.0: all busy)."""
        return sum(self.offered_load(window).values()) / self.workers

    def static_workers(self) -> dict[str, int]:
        """Workers per queue for the static baseline: shares rounded by largest remainder,
        at least one worker per queue."""
        count = len(self.queues)
        if self.workers < count:
            raise ConfigError(
                f"static assignment needs at least one worker per queue: {self.workers} "
                f"workers for {count} queues",
                source=self.source,
                field="workers",
            )
        shares = dict(self.static) if self.static is not None else self.offered_load()
        if sum(shares.values()) <= 0:
            shares = dict.fromkeys(shares, 1.0)
        return _largest_remainder(shares, self.workers)


def _largest_remainder(shares: Mapping[str, float], seats: int) -> dict[str, int]:
    total = sum(shares.values())
    order = list(shares)
    ideal = {name: seats * share / total for name, share in shares.items()}
    given = {name: math.floor(value) for name, value in ideal.items()}
    by_remainder = sorted(order, key=lambda name: (-(ideal[name] % 1), order.index(name)))
    for name in by_remainder[: seats - sum(given.values())]:
        given[name] += 1
    # A queue with a tiny share still gets one worker, taken from the queue with the most.
    for name in order:
        if given[name] == 0:
            richest = max(order, key=lambda other: given[other])
            given[richest] -= 1
            given[name] = 1
    return given
