"""The commands on what the store holds beyond one job: queues (counts, listings, bounds,
flow state, pause, forget), failure groups, per-day statistics, the worker registry, and
the live feed of events.
"""

from __future__ import annotations

from collections.abc import Sequence

from lanner import checks
from lanner.checks import names, values
from lanner.engine.capabilities import Capability, Commands
from lanner.events import EventStream
from lanner.records import (
    FlowState,
    JobPage,
    QueueCounts,
    QueueStats,
    QueueUsage,
    WorkerCounts,
    WorkerJobs,
)


class StoreCommands(Commands):
    """The commands that read and manage queues, failure groups, statistics and workers."""

    # -- queues ---------------------------------------------------------------------------
    def queues(self, *, now: float | None = None) -> list[QueueCounts]:
        """Counts for every known queue, by name."""
        return self._queues(values.now(now))

    def queue_counts(self, queue: str, *, now: float | None = None) -> QueueCounts:
        return self._queue_counts(checks.queue_at(queue, now))

    def queue_usage(self, queue: str, *, now: float | None = None) -> QueueUsage:
        """LIMITS: what `queue` holds against its bounds, and what it dropped (`QueueUsage`)."""
        command = checks.queue_at(queue, now)
        self._require(Capability.LIMITS, "queue_usage")
        return self._queue_usage(command)

    def flow_state(self, *, now: float | None = None) -> FlowState:
        """FLOW: each concurrency key (running, cap, jobs held) and rate bucket (starts in
        the last period, jobs held, when it has room), as the store holds them now."""
        at = values.now(now)
        self._require(Capability.FLOW, "flow_state")
        return self._flow_state(at)

    def length(self, queue: str, *, now: float | None = None) -> int:
        """Running + stalled + waiting + scheduled jobs of `queue` (not depends, nor recurring)."""
        counts = self.queue_counts(queue, now=now)
        return counts.running + counts.stalled + counts.waiting + counts.scheduled

    def jobs(
        self,
        state: str,
        queue: str | None = None,
        offset: int = 0,
        count: int = 25,
        *,
        now: float | None = None,
    ) -> list[str]:
        """LISTING: jids by state: `complete` (newest first, no queue) or running, stalled,
        scheduled, depends, waiting, recurring (per queue)."""
        command = checks.listing(state, queue, offset, count, now)
        self._require(Capability.LISTING, "jobs")
        return self._jobs(command) if command.limit else []

    def pause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        self._pause(queues, True, now)

    def unpause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        self._pause(queues, False, now)

    def _pause(self, queues: Sequence[str], paused: bool, now: float | None) -> None:
        self._require(Capability.PAUSE, "pause" if paused else "unpause")
        command = checks.queues(queues, now)
        if command.queues:
            self._set_paused(command, paused)

    def queue_forget(self, queues: Sequence[str], *, now: float | None = None) -> None:
        """QUEUE_FORGET: drop queues from the list of known queues (FANOUT: a forgotten
        `q+<child>` is no longer a child of `q`: puts into `q` stop reaching it)."""
        self._require(Capability.QUEUE_FORGET, "queue_forget")
        command = checks.queues(queues, now)
        if command.queues:
            self._queue_forget(command)

    # -- failures -------------------------------------------------------------------------
    def failed_groups(self, *, now: float | None = None) -> dict[str, int]:
        """FAILURES: failure groups and how many jobs each holds."""
        checked_now = values.now(now)
        self._require(Capability.FAILURES, "failed_groups")
        return self._failed_groups(checked_now)

    def failed(
        self, group: str, start: int = 0, limit: int = 25, *, now: float | None = None
    ) -> JobPage:
        """FAILURES: the jobs of one failure group, newest first."""
        command = checks.failed_page(group, start, limit, now)
        self._require(Capability.FAILURES, "failed")
        return self._failed(command)

    def unfail(self, queue: str, group: str, count: int = 25, *, now: float | None = None) -> int:
        """FAILURES: put up to `count` of the oldest jobs of `group` back into `queue`;
        return how many."""
        command = checks.unfail(queue, group, count, now)
        self._require(Capability.FAILURES, "unfail")
        return self._unfail(command)

    def stats(self, queue: str, date: float, *, now: float | None = None) -> QueueStats:
        """STATS: wait and run statistics of `queue` on the (UTC) day containing `date`."""
        self._require(Capability.STATS, "stats")
        return self._stats(checks.stats(queue, date), values.now(now))

    def workers(self, *, now: float | None = None) -> list[WorkerCounts]:
        """WORKERS: known workers, most recently seen first; idle past max-worker-age pruned."""
        self._require(Capability.WORKERS, "workers")
        return self._workers(values.now(now))

    def worker_jobs(self, worker: str, *, now: float | None = None) -> WorkerJobs:
        self._require(Capability.WORKERS, "worker_jobs")
        return self._worker_jobs(checks.worker_at(worker, now))

    def worker_deregister(self, workers: Sequence[str], *, now: float | None = None) -> None:
        self._require(Capability.WORKERS, "worker_deregister")
        checked = names.labels(workers, "workers")
        if checked:
            self._worker_deregister(checked, values.now(now))

    # -- events ---------------------------------------------------------------------------
    def events(self, *, worker: str | None = None) -> EventStream:
        """EVENTS: a live feed of what happens in the store (docs/events.md).

        Returns once the feed is live: every command that starts afterwards is delivered,
        once, while the stream is open. With `worker`, only that worker's own events: a
        job it held was taken away (`lock_lost`, `canceled`).
        """
        checked = None if worker is None else names.label(worker, "worker")
        self._require(Capability.EVENTS, "events")
        return self._events(checked)
