"""A scenario built from what an engine recorded: `lanner simulate --from-engine URL`.

Lanner's engines keep, per queue and day, qless's statistics: how many jobs were popped and
how long they waited and ran (count, mean, standard deviation and a 148-bucket histogram).
From one day of them this module builds a scenario: Poisson arrivals at the day's average
rate (jobs popped ÷ the seconds of the day that had passed), and run times drawn from the
recorded histogram when its one-second buckets can resolve them (a mean of 5 s or more),
else from the lognormal with the recorded mean and standard deviation. The engine keeps
no time of day, so a daily peak is a matter of `--rate-scale`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import yaml

from lanner.engine import Engine
from lanner.errors import ConfigError
from lanner.histograms import bucket_bounds
from lanner.queues import QueueConfig
from lanner.records import TimingStats
from lanner.simulate.arrivals import ArrivalSpec
from lanner.simulate.distributions import Empirical, Exponential, Fixed, LogNormal, RunTime
from lanner.simulate.scenario import Scenario, SimQueue

__all__ = ["histogram_edges", "run_time_from", "scenario_from_engine", "scenario_yaml"]

DAY: Final = 86400.0
EMPIRICAL_FROM_SEC: Final = 5.0


def histogram_edges() -> tuple[float, ...]:
    """The 149 edges of the engines' 148 buckets (`lanner.histograms.bucket_bounds`)."""
    bounds = bucket_bounds()
    return (*(low for low, _ in bounds), bounds[-1][1])


def run_time_from(stats: TimingStats) -> RunTime:
    """A run-time distribution matching recorded statistics (see the module's docstring)."""
    if stats.count == 0 or stats.mean <= 0:
        return Fixed(1.0)  # nothing ran: the queue gets no arrivals either
    if stats.std <= 0:
        return Fixed(stats.mean)
    filled = [n for n, count in enumerate(stats.histogram) if count]
    if stats.mean >= EMPIRICAL_FROM_SEC and len(filled) > 1:
        last = filled[-1] + 1
        edges = histogram_edges()[: last + 1]
        return Empirical(edges, tuple(float(c) for c in stats.histogram[:last]))
    return LogNormal.from_moments(stats.mean, stats.std)


def scenario_from_engine(
    engine: Engine,
    queues: Sequence[QueueConfig],
    *,
    workers: int,
    duration: float,
    date: float | None = None,
    seed: int = 0,
    name: str = "recorded workload",
) -> Scenario:
    """Queues as configured, with arrivals and run times from the statistics of the day
    containing `date` (default: today, UTC)."""
    now = time.time()
    when = now if date is None else date
    day_start = when - when % DAY
    covered = min(DAY, max(1.0, now - day_start))
    built = []
    for queue in queues:
        stats = engine.stats(queue.name, when)
        rate = stats.wait.count / covered
        built.append(SimQueue(queue, ArrivalSpec((0.0,), (rate,)), run_time_from(stats.run)))
    if not any(q.arrivals.rates[0] > 0 for q in built):
        day = time.strftime("%Y-%m-%d", time.gmtime(day_start))
        raise ConfigError(f"the engine recorded no popped jobs on {day} in these queues")
    return Scenario(
        name=name,
        queues=tuple(sorted(built, key=lambda q: -q.config.priority)),
        workers=workers,
        duration=duration,
        seed=seed,
    )


def scenario_yaml(scenario: Scenario) -> str:
    """The scenario as a YAML document `lanner simulate` reads back (replays not included)."""
    return yaml.safe_dump(_document(scenario), sort_keys=False)


def _document(scenario: Scenario) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": scenario.name,
        "seed": scenario.seed,
        "workers": scenario.workers,
        "duration": scenario.duration,
        "selector": scenario.selector,
        "costs": {
            "pop_sec": scenario.costs.pop_sec,
            "task_sec": scenario.costs.task_sec,
            "wake_sec": scenario.costs.wake_sec,
        },
    }
    if scenario.window is not None:
        document["measure"] = {"start": scenario.window.start, "end": scenario.window.end}
    if scenario.static is not None:
        document["static"] = dict(scenario.static)
    document["queues"] = [_queue(queue) for queue in scenario.queues]
    return document


def _queue(queue: SimQueue) -> dict[str, Any]:
    config = queue.config
    entry: dict[str, Any] = {
        "name": config.name,
        "priority": config.priority,
        "batch_size": config.batch_size,
        "visibility_timeout_sec": config.visibility_timeout_sec,
        "long_poll_time_sec": config.long_poll_time_sec,
        "num_iterations": config.num_iterations,
    }
    arrivals = queue.arrivals
    rates: Any = arrivals.rates[0]
    if len(arrivals.rates) > 1:
        rates = dict(zip(arrivals.changes, arrivals.rates, strict=True))
    entry["arrivals"] = {"rate": rates}
    if arrivals.bursts:
        entry["arrivals"]["bursts"] = [
            {"at": b.at, "count": b.count, "over": b.over} for b in arrivals.bursts
        ]
    entry["run_time"] = _run_time(queue.run_time)
    return entry


def _run_time(run_time: RunTime) -> dict[str, Any]:
    if isinstance(run_time, Fixed):
        return {"distribution": "fixed", "seconds": run_time.seconds}
    if isinstance(run_time, Exponential):
        return {"distribution": "exponential", "mean": run_time.mean_seconds}
    if isinstance(run_time, LogNormal):
        return {"distribution": "lognormal", "mean": run_time.mean_seconds, "sigma": run_time.sigma}
    if isinstance(run_time, Empirical):
        return {"distribution": "empirical", "edges": list(run_time.edges),
                "counts": list(run_time.counts)}  # fmt: skip
    raise TypeError(f"cannot write a {type(run_time).__name__} run time")
