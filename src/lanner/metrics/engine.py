"""`EngineCollector`: a store's state as Prometheus metrics, read from its engine at scrape time.

Every metric is a gauge (or, for timings, a summary) of what the store holds now; the
collector keeps nothing between scrapes. What the engine cannot tell (see its
`capabilities`) is left out, never an error:

    lanner_engine_up                      1, or 0 if the store could not be reached (then
                                          nothing else this scrape)
    lanner_queue_jobs{queue,state}        waiting, running, stalled, scheduled, depends,
                                          recurring                       (every engine)
    lanner_queue_paused{queue}            1 if paused                     (capability pause)
    lanner_failed_jobs{group}             failed jobs per failure group   (failures)
    lanner_workers                        workers the registry knows      (workers)
    lanner_queue_wait_seconds{queue}      today's (UTC) wait and run times of each queue:
    lanner_queue_run_seconds{queue}       summaries with _count, _sum and the 0.5, 0.95 and
                                          0.99 quantiles from qless's histograms (stats)

A scrape costs at most 3 + min(queues, max_stats_queues) engine calls: `queues()`, then
`failed_groups()` and `workers()` if the engine has them, then one `stats()` per queue
(the first `max_stats_queues` by name, 50 unless told; 0 turns the timings off).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric, SummaryMetricFamily

from lanner.engine import Capability, Engine
from lanner.errors import EngineUnavailable
from lanner.histograms import percentile
from lanner.records import QueueCounts, TimingStats

__all__ = ["QUANTILES", "STATES", "EngineCollector", "render"]

STATES: Final = ("waiting", "running", "stalled", "scheduled", "depends", "recurring")
"""The `state` label of lanner_queue_jobs: the `QueueCounts` fields of that name."""

QUANTILES: Final = (0.5, 0.95, 0.99)


class EngineCollector:
    """A prometheus_client collector of one engine's state: register it in a registry, or
    call `render(engine)` for one scrape. `clock` gives the time (of "today" too)."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_stats_queues: int = 50,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.max_stats_queues = max_stats_queues
        self.clock = clock

    def describe(self) -> list[Metric]:
        """Nothing: registering the collector must not call the engine."""
        return []

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        up = GaugeMetricFamily("lanner_engine_up", "1 if the store answered this scrape")
        try:
            families = list(self._families(now))
        except EngineUnavailable:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self, now: float) -> Iterator[Metric]:
        engine, capabilities = self.engine, self.engine.capabilities
        queues = engine.queues(now=now)
        yield queue_jobs(queues)
        if Capability.PAUSE in capabilities:
            paused = GaugeMetricFamily(
                "lanner_queue_paused", "1 if the queue is paused", labels=["queue"]
            )
            for counts in queues:
                paused.add_metric([counts.name], 1 if counts.paused else 0)
            yield paused
        if Capability.FAILURES in capabilities:
            failed = GaugeMetricFamily(
                "lanner_failed_jobs", "Failed jobs of each failure group", labels=["group"]
            )
            for group, count in sorted(engine.failed_groups(now=now).items()):
                failed.add_metric([group], count)
            yield failed
        if Capability.WORKERS in capabilities:
            yield GaugeMetricFamily(
                "lanner_workers",
                "Workers the store's registry knows (seen within max-worker-age)",
                value=len(engine.workers(now=now)),
            )
        if Capability.STATS in capabilities and self.max_stats_queues > 0:
            yield from self._timings(sorted(q.name for q in queues), now)

    def _timings(self, names: list[str], now: float) -> Iterator[Metric]:
        wait = SummaryMetricFamily(
            "lanner_queue_wait_seconds",
            "Today's (UTC) waits of the queue's jobs, put or due to popped",
            labels=["queue"],
        )
        run = SummaryMetricFamily(
            "lanner_queue_run_seconds",
            "Today's (UTC) runs of the queue's jobs, popped to completed",
            labels=["queue"],
        )
        for name in names[: self.max_stats_queues]:
            stats = self.engine.stats(name, now, now=now)
            add_timing(wait, name, stats.wait)
            add_timing(run, name, stats.run)
        yield wait
        yield run


def queue_jobs(queues: list[QueueCounts]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "lanner_queue_jobs", "Jobs of the queue in each state", labels=["queue", "state"]
    )
    for counts in queues:
        for state in STATES:
            family.add_metric([counts.name, state], getattr(counts, state))
    return family


def add_timing(family: SummaryMetricFamily, queue: str, timing: TimingStats) -> None:
    """A queue's count, sum and quantiles (from its histogram) into a summary family."""
    for quantile in QUANTILES:
        value = percentile(timing.histogram, quantile * 100)
        family.add_sample(family.name, {"queue": queue, "quantile": str(quantile)}, value)
    family.add_metric([queue], timing.count, timing.count * timing.mean)


def render(engine: Engine, *, max_stats_queues: int = 50) -> tuple[bytes, str]:
    """One scrape of `engine`'s metrics: the body, and its content type (Prometheus' text
    format, as prometheus_client writes it). What the web dashboard's `/metrics` answers."""
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine, max_stats_queues=max_stats_queues))
    return generate_latest(registry), CONTENT_TYPE_LATEST
