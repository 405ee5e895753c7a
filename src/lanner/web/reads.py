"""What each dashboard page reads from the engine, as plain values for the templates.

Every read asks the engine only for what its capabilities allow (SQS keeps no listings,
statistics nor workers): a page shows what is missing as missing, never as an error.
The engine calls each read makes are counted in docs/benchmarks.md ("The dashboard").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from lanner.engine import Capability, Engine
from lanner.histograms import percentile
from lanner.job import Job
from lanner.records import (
    FlowState,
    JobPage,
    QueueCounts,
    QueueStats,
    RecurringJob,
    WorkerCounts,
)

DAY: Final = 86400.0
PAGE_SIZE: Final = 25
HISTORY_DAYS: Final = 14
"""Days of throughput a queue's page draws."""
MAX_STATS_QUEUES: Final = 50
"""Queues whose statistics the overview reads (the first by name): one command each."""

QUEUE_STATES: Final = ("waiting", "running", "stalled", "scheduled", "depends", "recurring")


@dataclass(frozen=True, slots=True)
class Timing:
    """Today's wait or run time of a queue: how many, and percentiles (seconds)."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class QueueRow:
    counts: QueueCounts
    max_concurrency: int | None
    wait: Timing | None  # None: the engine keeps no statistics
    run: Timing | None
    failed_today: int | None


@dataclass(frozen=True, slots=True)
class Overview:
    queues: list[QueueRow]
    failed_groups: dict[str, int] | None
    workers: int | None


@dataclass(frozen=True, slots=True)
class JobList:
    """One page of jobs, and where the next one starts (None: this is the last)."""

    title: str
    jobs: list[Job]
    offset: int
    next_offset: int | None
    total: int | None = None  # when the engine can tell
    recurring: list[RecurringJob] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DayStats:
    day: float  # the day's start, Unix time (UTC)
    stats: QueueStats


def has(engine: Engine, capability: Capability) -> bool:
    return capability in engine.capabilities


def timing(stats: QueueStats, which: str) -> Timing:
    part = stats.wait if which == "wait" else stats.run
    if not part.count:
        return Timing(0, None, None, None)
    hist = part.histogram
    return Timing(part.count, percentile(hist, 50), percentile(hist, 95), percentile(hist, 99))


def overview(engine: Engine, now: float | None = None) -> Overview:
    """The front page: 1 call for the queues, 1 for the config, 1 per queue for today's
    statistics (MAX_STATS_QUEUES at most), 1 for the failure groups and 1 for the workers."""
    at = time.time() if now is None else now
    counts = engine.queues(now=at)
    config = engine.config_all(now=at) if has(engine, Capability.CONFIG) else {}
    rows = []
    for n, queue in enumerate(counts):
        with_stats = has(engine, Capability.STATS) and n < MAX_STATS_QUEUES
        stats = engine.stats(queue.name, at, now=at) if with_stats else None
        limit = config.get(f"{queue.name}-max-concurrency")
        rows.append(
            QueueRow(
                counts=queue,
                max_concurrency=int(limit) if limit else None,
                wait=timing(stats, "wait") if stats else None,
                run=timing(stats, "run") if stats else None,
                failed_today=stats.failed if stats else None,
            )
        )
    groups = engine.failed_groups(now=at) if has(engine, Capability.FAILURES) else None
    workers = len(engine.workers(now=at)) if has(engine, Capability.WORKERS) else None
    return Overview(rows, groups, workers)


def queue_history(
    engine: Engine, queue: str, day: float, days: int = HISTORY_DAYS
) -> list[DayStats]:
    """The statistics of `days` days up to the one containing `day`, oldest first."""
    start = day - day % DAY
    return [
        DayStats(start - n * DAY, engine.stats(queue, start - n * DAY))
        for n in range(days - 1, -1, -1)
    ]


def queue_jobs(engine: Engine, queue: str, state: str, offset: int) -> JobList:
    """A page of `queue`'s jobs in `state` (one of QUEUE_STATES)."""
    jids = engine.jobs(state, queue, offset, PAGE_SIZE + 1)
    more = len(jids) > PAGE_SIZE
    jids = jids[:PAGE_SIZE]
    title = f"{state} jobs of {queue}"
    if state == "recurring":
        found = [engine.recur_get(jid) for jid in jids]
        templates = [template for template in found if template is not None]
        return JobList(title, [], offset, offset + PAGE_SIZE if more else None, None, templates)
    return JobList(title, engine.multiget(jids), offset, offset + PAGE_SIZE if more else None)


def complete_jobs(engine: Engine, offset: int) -> JobList:
    jids = engine.jobs("complete", None, offset, PAGE_SIZE + 1)
    more = len(jids) > PAGE_SIZE
    return JobList(
        "complete jobs (newest first)",
        engine.multiget(jids[:PAGE_SIZE]),
        offset,
        offset + PAGE_SIZE if more else None,
    )


def tagged_jobs(engine: Engine, tag: str, offset: int) -> JobList:
    return _counted(f"jobs tagged {tag}", engine.tagged(tag, offset, PAGE_SIZE), offset)


def failed_jobs(engine: Engine, group: str, offset: int) -> JobList:
    page = engine.failed(group, offset, PAGE_SIZE)
    return _counted(f"failure group {group} (newest first)", page, offset)


def _counted(title: str, page: JobPage, offset: int) -> JobList:
    """A page of a listing whose total the engine tells."""
    following = offset + PAGE_SIZE
    return JobList(
        title, list(page.jobs), offset, following if following < page.total else None, page.total
    )


def recurring(engine: Engine, queues: Sequence[QueueCounts]) -> list[RecurringJob]:
    """Every recurring job's template, queue by queue (1 listing + 1 read per template)."""
    found: list[RecurringJob] = []
    for queue in queues:
        if queue.recurring:
            for jid in engine.jobs("recurring", queue.name, 0, queue.recurring):
                template = engine.recur_get(jid)
                if template is not None:
                    found.append(template)
    return found


@dataclass(frozen=True, slots=True)
class ScheduleView:
    name: str
    task: str
    when: str
    next_run: float | None


@dataclass(frozen=True, slots=True)
class FlowView:
    now: float
    state: FlowState
    schedules: list[ScheduleView]


def flow(engine: Engine) -> FlowView:
    """What flow control holds back (1 command), and the schedules the store has registered
    (the config: 1 command), each with its next run."""
    from lanner import schedules

    now = time.time()
    state = engine.flow_state(now=now) if has(engine, Capability.FLOW) else FlowState((), ())
    views = []
    if has(engine, Capability.CONFIG):
        for name, entry in sorted(schedules.stored(engine).items()):
            views.append(
                ScheduleView(
                    name,
                    str(schedules.spec_of(entry).get("task", "")),
                    schedules.describe(entry),
                    schedules.next_of(name, entry, now),
                )
            )
    return FlowView(now, state, views)


@dataclass(frozen=True, slots=True)
class WorkerView:
    counts: WorkerCounts
    jobs: list[Job]
    stalled: list[Job]


def worker(engine: Engine, name: str) -> WorkerView | None:
    known = {w.name: w for w in engine.workers()}
    if name not in known:
        return None
    held = engine.worker_jobs(name)
    jobs = engine.multiget(held.jobs) if has(engine, Capability.LOOKUP) else []
    stalled = engine.multiget(held.stalled) if has(engine, Capability.LOOKUP) else []
    return WorkerView(known[name], jobs, stalled)
