"""The job-engine contract: one method per qless command, and each engine's capabilities.

Every engine (SQLite, Redis, SQS) implements `Engine`. The semantics are qless-core's,
described in docs/protocol.md; tests/conformance/ checks them against every engine.
Each method takes `now` (a Unix time in seconds) so that tests can drive the clock;
`None` means the current time. A command whose capability the engine lacks raises
`Unsupported`, never silently does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Final, Protocol

from lanner.job import Job
from lanner.records import (
    ConfigValue,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    RecurringJob,
    WorkerCounts,
    WorkerJobs,
)

CONFIG_DEFAULTS: Final[Mapping[str, ConfigValue]] = {
    "application": "lanner",
    "heartbeat": 60,
    "grace-period": 10,
    "stats-history": 30,
    "histogram-history": 7,
    "jobs-history": 604800,
    "jobs-history-count": 50000,
    "max-job-history": 100,
    "max-worker-age": 86400,
}
"""Defaults of `config_get`. Per-queue keys: `<queue>-heartbeat`, `<queue>-max-concurrency`."""


class Capability(StrEnum):
    """What an engine can do beyond the core commands every engine has.

    Core (no capability needed): put, put_many, requeue, pop, peek, heartbeat, complete,
    complete_many, release, fail, retry, cancel, get, multiget, queues, queue_counts, length,
    jobs, failed, failed_groups, unfail, config_*, close.
    """

    PRIORITY = "priority"  # per-job priority ordering and the `priority` command
    DELAY = "delay"  # put/retry/complete with a delay
    TIMEOUT = "timeout"  # force a lock to expire
    PAUSE = "pause"  # pause/unpause queues
    MAX_CONCURRENCY = "max-concurrency"  # `<queue>-max-concurrency`
    BLOCKING_POP = "blocking-pop"  # pop(..., wait=s) without polling the store
    DEPENDENCIES = "dependencies"  # put(depends=...), complete(depends=...), depends_*
    TAGS = "tags"  # tag_add, tag_remove, tagged, tags_top
    TRACKING = "tracking"  # track, untrack, tracked
    LOG = "log"  # custom history entries
    STATS = "stats"  # per-day wait/run statistics with histograms
    WORKERS = "workers"  # worker registry: workers, worker_jobs, worker_deregister
    RECURRING = "recurring"  # recur, unrecur, recur_get, recur_update, recur_tag, recur_untag
    QUEUE_FORGET = "queue-forget"


class Engine(Protocol):
    """A job engine. Implementations are safe to share between threads of one process."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> frozenset[Capability]: ...

    @property
    def max_data_bytes(self) -> int:
        """The largest job `data` (UTF-8 bytes) that `put` accepts."""
        ...

    def close(self) -> None: ...

    # -- putting work ---------------------------------------------------------------------
    def put(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        now: float | None = None,
    ) -> str:
        """Create the job, or move it if `jid` exists (its lock, failure and queue are dropped).

        On a move, `priority`, `tags`, `retries` and `depends` left as None keep their old
        values; a new job gets 0, no tags, `DEFAULT_RETRIES` and no dependencies. State
        afterwards: `depends` if some dependency is not complete, else `scheduled` if
        `delay > 0`, else `waiting`. `worker` names who is putting. Returns the jid.
        """
        ...

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        """`put` every job in one round trip and one transaction: all or none are stored."""
        ...

    def requeue(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        now: float | None = None,
    ) -> str:
        """Like `put`, but the job must exist (else `JobNotFound`)."""
        ...

    # -- taking work ----------------------------------------------------------------------
    def pop(
        self,
        queue: str,
        worker: str,
        count: int = 1,
        *,
        wait: float = 0.0,
        now: float | None = None,
    ) -> list[Job]:
        """Lock up to `count` jobs for `worker`, highest priority first, then oldest first.

        Expired locks are taken first (after the grace period), then due scheduled jobs
        join the waiting ones. Each job becomes `running` with `expires = now + heartbeat`.
        A paused queue gives nothing. With `wait > 0` and nothing to give, blocks up to
        `wait` seconds and returns as soon as work arrives.
        """
        ...

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        """The jobs `pop` would give next, without locking them (works on paused queues)."""
        ...

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        """Extend `worker`'s lock on a running job (and replace its data); return the new expiry."""
        ...

    # -- finishing work -------------------------------------------------------------------
    def complete(
        self,
        jid: str,
        worker: str,
        queue: str,
        data: str | None = None,
        *,
        next: str | None = None,
        delay: float = 0.0,
        depends: Sequence[str] | None = None,
        now: float | None = None,
    ) -> str:
        """Complete a job `worker` holds in `queue`, or advance it to `next`; return its state."""
        ...

    def complete_many(
        self, jids: Sequence[str], worker: str, queue: str, *, now: float | None = None
    ) -> list[str]:
        """Complete many jobs in one round trip; return the jids completed.

        A jid whose lock `worker` no longer holds is skipped (its job goes on elsewhere).
        """
        ...

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        now: float | None = None,
    ) -> list[str]:
        """Give back jobs `worker` holds in `queue` without running them; return the jids released.

        They become waiting again in their old place (or scheduled `delay` seconds ahead),
        with no retry spent (Kestrel's abort, SQS's visibility timeout set to `delay`).
        Jids whose lock `worker` no longer holds are skipped.
        """
        ...

    def fail(
        self,
        jid: str,
        worker: str,
        group: str,
        message: str,
        data: str | None = None,
        *,
        now: float | None = None,
    ) -> str:
        """Fail a running job into failure `group`. Returns the jid."""
        ...

    def retry(
        self,
        jid: str,
        queue: str,
        worker: str,
        delay: float = 0.0,
        group: str | None = None,
        message: str | None = None,
        *,
        now: float | None = None,
    ) -> int:
        """Give a running job back for another try; return the retries remaining.

        When none remain the job fails, into `group` (default `failed-retries-<queue>`).
        """
        ...

    # -- managing jobs --------------------------------------------------------------------
    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        """Delete jobs everywhere. Refuses (InvalidState) if another job depends on one of them."""
        ...

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        """Force running jobs' locks to expire: they become `stalled` and are popped first."""
        ...

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None: ...

    def get(self, jid: str, *, now: float | None = None) -> Job | None: ...

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        """The jobs that exist among `jids`, in the order asked."""
        ...

    # -- queues ---------------------------------------------------------------------------
    def queues(self, *, now: float | None = None) -> list[QueueCounts]:
        """Counts for every known queue, by name."""
        ...

    def queue_counts(self, queue: str, *, now: float | None = None) -> QueueCounts: ...

    def length(self, queue: str, *, now: float | None = None) -> int:
        """Running + waiting + scheduled jobs of `queue` (not `depends`, not recurring)."""
        ...

    def jobs(
        self,
        state: str,
        queue: str | None = None,
        offset: int = 0,
        count: int = 25,
        *,
        now: float | None = None,
    ) -> list[str]:
        """Jids by state: `complete` (newest first, no queue) or running, stalled, scheduled,
        depends, waiting, recurring (per queue)."""
        ...

    def pause(self, queues: Sequence[str], *, now: float | None = None) -> None: ...

    def unpause(self, queues: Sequence[str], *, now: float | None = None) -> None: ...

    # -- failures -------------------------------------------------------------------------
    def failed_groups(self, *, now: float | None = None) -> dict[str, int]:
        """Failure groups and how many jobs each holds."""
        ...

    def failed(
        self, group: str, start: int = 0, limit: int = 25, *, now: float | None = None
    ) -> JobPage:
        """The jobs of one failure group, newest first."""
        ...

    def unfail(self, queue: str, group: str, count: int = 25, *, now: float | None = None) -> int:
        """Put up to `count` of the oldest jobs of `group` back into `queue`; return how many."""
        ...

    # -- configuration --------------------------------------------------------------------
    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None: ...

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        """The defaults merged with what was set."""
        ...

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None: ...

    def config_unset(self, key: str, *, now: float | None = None) -> None: ...

    # -- optional capabilities ------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        """DEPENDENCIES: make a job in state `depends` also wait for `jids`."""
        ...

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        """DEPENDENCIES: drop some (None: all) dependencies; with none left the job is released."""
        ...

    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        """TAGS: add tags; return the job's tags."""
        ...

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        """TAGS: remove tags; return the job's tags."""
        ...

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        """TAGS: jobs carrying `tag` (total and a page of jobs), oldest tagging first."""
        ...

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        """LOG: append a custom entry to a job's history."""
        ...

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        """TAGS: the tags on at least two jobs, most used first."""
        ...

    def track(self, jid: str, *, now: float | None = None) -> None:
        """TRACKING: mark a job as tracked."""
        ...

    def untrack(self, jid: str, *, now: float | None = None) -> None: ...

    def tracked(self, *, now: float | None = None) -> list[Job]: ...

    def stats(self, queue: str, date: float, *, now: float | None = None) -> QueueStats:
        """STATS: wait and run statistics of `queue` on the (UTC) day containing `date`."""
        ...

    def workers(self, *, now: float | None = None) -> list[WorkerCounts]:
        """WORKERS: known workers, most recently seen first; idle past max-worker-age pruned."""
        ...

    def worker_jobs(self, worker: str, *, now: float | None = None) -> WorkerJobs: ...

    def worker_deregister(self, workers: Sequence[str], *, now: float | None = None) -> None: ...

    def recur(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str,
        interval: float,
        offset: float = 0.0,
        *,
        priority: int = 0,
        tags: Sequence[str] = (),
        retries: int = 0,
        backlog: int = 0,
        now: float | None = None,
    ) -> str:
        """RECURRING: a template that spawns job `<jid>-<n>` into `queue` every `interval` s."""
        ...

    def unrecur(self, jid: str, *, now: float | None = None) -> None: ...

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None: ...

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        """RECURRING: change priority, interval, retries, data, klass, queue or backlog."""
        ...

    def recur_tag(
        self, jid: str, tags: Sequence[str], *, now: float | None = None
    ) -> list[str]: ...

    def recur_untag(
        self, jid: str, tags: Sequence[str], *, now: float | None = None
    ) -> list[str]: ...

    def queue_forget(self, queues: Sequence[str], *, now: float | None = None) -> None:
        """QUEUE_FORGET: drop queues from the list of known queues."""
        ...
