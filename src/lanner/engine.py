"""The job-engine contract: one method per qless command, each engine's capabilities.

Every engine (SQLite, Redis, SQS) is an `Engine`. The semantics are qless-core's,
described in docs/protocol.md; tests/conformance/ checks them against every engine. Each
method takes `now` (a Unix time in seconds) so that tests can drive the clock; `None`
means the current time. The methods here are the same for every engine: they check their
arguments (`lanner.checks`), refuse with `Unsupported` a command whose capability the
engine lacks (never a silent no-op), answer what needs no store (an empty list of jids),
and call the engine's hook for the command (`lanner.hooks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Final, Self

from lanner import checks, names, values
from lanner.errors import Unsupported
from lanner.events import EventStream
from lanner.hooks import EngineHooks
from lanner.job import Job
from lanner.records import (
    ConfigValue,
    Flow,
    FlowState,
    JobOutcome,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    QueueUsage,
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


LIMIT_SETTINGS: Final = (
    "max-items",
    "max-size",
    "max-item-size",
    "max-age",
    "discard-old-when-full",
)
"""LIMITS: config keys `<queue>-<setting>` that bound what a put may add (docs/kestrel.md).

`max-items` jobs and `max-size` bytes of data the queue may hold (not finished); a job whose
data is over `max-item-size` bytes is refused (`PayloadTooLarge`); `max-age` seconds caps
each job's `expires_at` at its put; `discard-old-when-full` 1 makes a put into a full queue
drop waiting jobs from its head, in pop order (`QueueFull` otherwise). 0 or unset: no bound."""


def limit_setting(key: str) -> tuple[str, str] | None:
    """(queue, setting) if `key` sets one of a queue's LIMIT_SETTINGS, else None."""
    for setting in LIMIT_SETTINGS:
        queue, dash, rest = key.rpartition("-" + setting)
        if dash and not rest and names.is_queue_name(queue):
            return queue, setting
    return None


def lease_queue(key: str) -> str | None:
    """The queue whose lock a config key sets (`<queue>-heartbeat`), or None."""
    queue, dash, setting = key.rpartition("-")
    if dash and setting == "heartbeat" and names.is_queue_name(queue):
        return queue
    return None


class Capability(StrEnum):
    """What an engine can do beyond the core commands every engine has.

    Core (no capability needed): put, put_many, pop, heartbeat, heartbeat_many, complete,
    complete_many, release, fail, retry, queues, queue_counts, length, config_*, close. What
    a message broker such as SQS cannot do (find a job by its id, list what it holds) is a
    capability.
    """

    PRIORITY = "priority"  # per-job priority ordering and the `priority` command
    DELAY = "delay"  # put/retry/complete with a delay
    TIMEOUT = "timeout"  # force a lock to expire
    PAUSE = "pause"  # pause/unpause queues
    MAX_CONCURRENCY = "max-concurrency"  # `<queue>-max-concurrency`
    BLOCKING_POP = "blocking-pop"  # pop(..., wait=s) without polling the store
    DEPENDENCIES = "dependencies"  # put(depends=...), complete(depends=...), depends_*
    # A job may depend on jobs of other queues (without it, only on jobs of its own queue
    # or fanout family: Redis Cluster keeps each queue in its own hash slot)
    CROSS_QUEUE_DEPENDENCIES = "cross-queue-dependencies"
    TAGS = "tags"  # put(tags=...), tag_add, tag_remove, tagged, tags_top
    TRACKING = "tracking"  # track, untrack, tracked
    LOG = "log"  # custom history entries
    STATS = "stats"  # per-day wait/run statistics with histograms
    # Worker registry: workers, worker_jobs, worker_deregister; with it, a worker's locks
    # live in the store, so any process can settle them in its name (a pool's supervisor
    # for a dead child). Without it only the process that popped a job can settle it.
    WORKERS = "workers"
    RECURRING = "recurring"  # recur, unrecur, recur_get, recur_update, recur_tag, recur_untag
    QUEUE_FORGET = "queue-forget"
    RESULTS = "results"  # complete(result=...), complete_many(results=...), Job.result
    WAIT = "wait"  # wait(jid): block until a job finishes, without polling the store
    UNIQUE = "unique"  # put(if_exists="keep" | "move-unless-running" | "once"), atomically
    # Jobs known by jid: get, multiget, requeue; a put of a live jid moves that job
    # (without it every put is a new message: a jid put twice runs twice).
    LOOKUP = "lookup"
    CANCEL = "cancel"  # cancel(jids)
    LISTING = "listing"  # jobs(state, queue), peek: what a queue holds, without taking it
    FAILURES = "failures"  # failed_groups, failed, unfail: failure groups counted and paged
    # config_set of any key; without it only a queue's lock, `<queue>-heartbeat`
    CONFIG = "config"
    # Kestrel's bounded queues: put(expires_at=...), the LIMIT_SETTINGS, queue_usage
    LIMITS = "limits"
    # Kestrel's fanout: a put to `q` also puts a copy into every `q+<child>` read so far
    FANOUT = "fanout"
    # events(): a live feed of what happens in the store (lanner.events, docs/events.md)
    EVENTS = "events"
    # put(flow=...): rate limits and concurrency keys, held in the store (docs/flow-control.md)
    FLOW = "flow"


class Engine(EngineHooks):
    """A job engine. Implementations are safe to share between threads of one process;
    `with engine:` closes it at the end."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _require(self, capability: Capability, command: str) -> None:
        if capability not in self.capabilities:
            raise Unsupported(self.name, command, capability.value)

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
        if_exists: str = "move",
        expires_at: float | None = None,
        flow: Flow | None = None,
        now: float | None = None,
    ) -> str:
        """Create the job, or move it if `jid` exists (its lock, failure and queue are dropped).

        On a move, `priority`, `tags`, `retries` and `depends` left as None keep their old
        values; a new job gets 0, no tags, `DEFAULT_RETRIES` and no dependencies. State
        afterwards: `depends` if some dependency is not complete, else `scheduled` if
        `delay > 0`, else `waiting`. `worker` names who is putting. `if_exists` (UNIQUE):
        `keep` leaves a live job of that jid as it is (nothing stored); `move-unless-running`
        refuses (`InvalidState`) to move a running one. Returns the jid.

        LIMITS: the job is dropped, never handed out, once `expires_at` (a Unix time) is past
        while it waits; the queue's `max-age` caps it. A put into a queue at its `max-items`
        or `max-size` drops waiting jobs from the queue's head (pop order) if it discards
        old ones when full, else raises `QueueFull`; data over `max-item-size` raises
        `PayloadTooLarge`.
        FLOW: `flow` holds the job back at pops while its concurrency key is at its cap (it
        waits aside until one of the key's jobs stops running) or a rate limit has no room
        (it is scheduled for when there is), without spending a retry.
        FANOUT: a put into `q` also puts the job into every `q+<child>` popped or peeked at
        least once, as jid `<jid>+<child>` (without `depends`; a child that is full and does
        not discard drops its copy, counted as discarded).
        """
        given = NewJob(
            queue,
            jid,
            klass,
            data,
            delay,
            priority,
            tags,
            retries,
            depends,
            if_exists,
            expires_at,
            flow,
        )
        return self._put_checked("put", checks.put(given, worker, now, self.max_data_bytes))[0]

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        """`put` every job in one round trip and one transaction: all or none are stored."""
        return self._put_checked("put_many", checks.put_many(jobs, now, self.max_data_bytes))

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
        if_exists: str = "move",
        expires_at: float | None = None,
        flow: Flow | None = None,
        now: float | None = None,
    ) -> str:
        """LOOKUP: like `put`, but the job must exist (else `JobNotFound`)."""
        given = NewJob(
            queue,
            jid,
            klass,
            data,
            delay,
            priority,
            tags,
            retries,
            depends,
            if_exists,
            expires_at,
            flow,
        )
        checked = checks.put(given, worker, now, self.max_data_bytes)
        self._require(Capability.LOOKUP, "requeue")
        return self._put_checked("requeue", checked)[0]

    def _put_checked(self, command: str, checked: checks.Put) -> list[str]:
        if len(self.capabilities) < len(Capability):  # nothing to refuse on most engines
            for job in checked.jobs:
                self._gate_put(job)
        return self._put(command, checked) if checked.jobs else []

    def _gate_put(self, job: NewJob) -> None:
        if job.delay:
            self._require(Capability.DELAY, "put(delay=...)")
        if job.priority:  # 0 is every job's priority where there is no ordering by it
            self._require(Capability.PRIORITY, "put(priority=...)")
        if job.tags:
            self._require(Capability.TAGS, "put(tags=...)")
        if job.depends:
            self._require(Capability.DEPENDENCIES, "put(depends=...)")
        if job.if_exists != "move":
            self._require(Capability.UNIQUE, f"put(if_exists={job.if_exists!r})")
        if job.expires_at is not None:
            self._require(Capability.LIMITS, "put(expires_at=...)")
        if job.flow is not None:
            self._require(Capability.FLOW, "put(flow=...)")
        self._gate_fanout(job.queue, "put")

    def _gate_fanout(self, queue: str, command: str) -> None:
        if "+" in queue:
            self._require(Capability.FANOUT, f"{command} of a fanout queue {queue!r}")

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
        `wait` seconds and returns as soon as work arrives. LIMITS: waiting jobs whose
        `expires_at` is past are dropped (counted `expired`), not given. FANOUT: a pop of
        `q+<child>` makes it a child of `q` from then on (a peek too).
        """
        command = checks.pop(queue, worker, count, wait, now)
        if command.wait:
            self._require(Capability.BLOCKING_POP, "pop(wait=...)")
        if len(self.capabilities) < len(Capability):
            self._gate_fanout(command.queue, "pop")
        return self._pop(command)

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        """LISTING: the jobs `pop` would give next, without locking them (works on paused
        queues)."""
        command = checks.peek(queue, count, now)
        self._require(Capability.LISTING, "peek")
        self._gate_fanout(command.queue, "peek")
        return self._peek(command)

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        """Extend `worker`'s lock on a running job (and replace its data); return the new expiry."""
        return self._heartbeat(checks.heartbeat(jid, worker, data, now, self.max_data_bytes))

    def heartbeat_many(
        self, jids: Sequence[str], worker: str, *, now: float | None = None
    ) -> dict[str, float]:
        """Extend `worker`'s locks on many running jobs in one round trip (a process's jobs
        in flight, at most `checks.MAX_HEARTBEAT_JIDS`); return jid -> new expiry for each
        lock extended, in the order asked.

        A jid left out is a job `worker` no longer holds (cancelled, finished, timed out,
        handed to another worker, or unknown): lost to it, never an error of the call.
        """
        command = checks.heartbeats(jids, worker, now)
        return self._heartbeat_many(command) if command.jids else {}

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
        result: str | None = None,
        now: float | None = None,
    ) -> str:
        """Complete a job `worker` holds in `queue`, or advance it to `next`; return its state.

        `result` (RESULTS): JSON text kept with the completed job (`Job.result`) until
        retention removes it.
        """
        command = checks.complete(
            jid, worker, queue, data, next, delay, depends, result, now, self.max_data_bytes
        )
        if command.result is not None:
            self._require(Capability.RESULTS, "complete(result=...)")
        if command.delay:
            self._require(Capability.DELAY, "complete(delay=...)")
        if command.depends:
            self._require(Capability.DEPENDENCIES, "complete(depends=...)")
        return self._complete(command)

    def complete_many(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        results: Mapping[str, str] | None = None,
        now: float | None = None,
    ) -> list[str]:
        """Complete many jobs in one round trip; return the jids completed.

        A jid whose lock `worker` no longer holds is skipped (its job goes on elsewhere).
        `results` (RESULTS) maps jids to the JSON text each keeps.
        """
        command = checks.settle(jids, worker, queue, 0.0, now, results, self.max_data_bytes)
        if command.results:
            self._require(Capability.RESULTS, "complete_many(results=...)")
        return self._complete_many(command) if command.jids else []

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        spend_retry: bool = False,
        now: float | None = None,
    ) -> list[str]:
        """Give back jobs `worker` holds in `queue` without running them; return the jids released.

        They become waiting again in their old place (or scheduled `delay` seconds ahead),
        with no retry spent (Kestrel's abort, SQS's visibility timeout set to `delay`), or
        with one spent each (`spend_retry`: they were tried, by a worker that died running
        them). Jids whose lock `worker` no longer holds are skipped.
        """
        command = checks.settle(jids, worker, queue, delay, now, spend_retry=spend_retry)
        if command.delay:
            self._require(Capability.DELAY, "release(delay=...)")
        return self._release(command) if command.jids else []

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
        command = checks.fail(jid, worker, group, message, data, now, self.max_data_bytes)
        self._fail(command)
        return command.jid

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
        command = checks.retry(jid, queue, worker, delay, group, message, now)
        if command.delay:
            self._require(Capability.DELAY, "retry(delay=...)")
        return self._retry(command)

    # -- managing jobs --------------------------------------------------------------------
    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        """CANCEL: delete jobs everywhere. Refuses (InvalidState) if another job depends on
        one of them."""
        command = checks.jids(jids, now)
        self._require(Capability.CANCEL, "cancel")
        return self._cancel(command) if command.jids else []

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        """Force running jobs' locks to expire: they become `stalled` and are popped first."""
        self._require(Capability.TIMEOUT, "timeout")
        command = checks.jids(jids, now)
        if command.jids:
            self._timeout(command)

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None:
        self._require(Capability.PRIORITY, "priority")
        self._set_priority(checks.priority(jid, priority, now))

    def get(self, jid: str, *, now: float | None = None) -> Job | None:
        """LOOKUP: the job, or None if there is none of that jid."""
        command = checks.Jids([names.label(jid, "jid")], values.now(now))
        self._require(Capability.LOOKUP, "get")
        found = self._multiget(command)
        return found[0] if found else None

    def wait(self, jid: str, *, timeout: float, now: float | None = None) -> Job | None:
        """WAIT: block until the job is complete or failed, at most `timeout` seconds.

        Returns the job (finished, or as it is when the wait ends), or None if there is no
        such job (never was, or cancelled, or removed by retention). Waits on the store's
        own signal (commits, or a list the finishing command pushes to), not by polling.
        """
        self._require(Capability.WAIT, "wait")
        return self._wait(checks.wait(jid, timeout, now))

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        """LOOKUP: the jobs that exist among `jids`, in the order asked."""
        command = checks.jids(jids, now, unique=False)
        self._require(Capability.LOOKUP, "multiget")
        return self._multiget(command) if command.jids else []

    def outcomes(self, jids: Sequence[str], *, now: float | None = None) -> list[JobOutcome]:
        """LOOKUP: the state, result and failure of the jobs that exist among `jids`, in
        the order asked: `multiget` without the rest of each job (history, dependencies),
        for reading many results at once (a workflow's step, its parents')."""
        command = checks.jids(jids, now, unique=False)
        self._require(Capability.LOOKUP, "outcomes")
        return self._outcomes(command) if command.jids else []

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

    # -- configuration --------------------------------------------------------------------
    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None:
        return self._config_get(checks.config_key(key))

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        """The defaults merged with what was set."""
        return self._config_all()

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None:
        setting = checks.config_set(key, value)
        if setting.key.endswith("-max-concurrency"):
            self._require(Capability.MAX_CONCURRENCY, "config_set(<queue>-max-concurrency)")
        limit = limit_setting(setting.key)
        if limit is not None:
            self._require(Capability.LIMITS, f"config_set({setting.key!r})")
            checks.limit_value(limit[1], setting.value)
        if lease_queue(setting.key) is None:
            self._require(Capability.CONFIG, f"config_set({setting.key!r})")
        if lease_queue(setting.key) is not None or setting.key in checks.LEASE_SETTINGS:
            checks.lease_value(setting.key, setting.value)
        self._config_set(setting, values.now(now))

    def config_unset(self, key: str, *, now: float | None = None) -> None:
        self._config_unset(checks.config_key(key), values.now(now))

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

    # -- optional capabilities ------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        """DEPENDENCIES: make a job in state `depends` also wait for `jids`."""
        self._require(Capability.DEPENDENCIES, "depends_add")
        self._depends(checks.depends(jid, jids, now), add=True)

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        """DEPENDENCIES: drop some (None: all) dependencies; with none left the job is released."""
        self._require(Capability.DEPENDENCIES, "depends_remove")
        self._depends(checks.depends(jid, jids, now), add=False)

    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        """TAGS: add tags; return the job's tags."""
        self._require(Capability.TAGS, "tag_add")
        return self._retag(checks.retag(jid, tags, now), add=True)

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        """TAGS: remove tags; return the job's tags."""
        self._require(Capability.TAGS, "tag_remove")
        return self._retag(checks.retag(jid, tags, now), add=False)

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        """TAGS: jobs carrying `tag` (total and a page of jobs), oldest tagging first."""
        self._require(Capability.TAGS, "tagged")
        return self._tagged(checks.tagged_page(tag, offset, count, now))

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        """TAGS: the tags on at least two jobs, most used first."""
        self._require(Capability.TAGS, "tags_top")
        command = checks.top_page(offset, count, now)
        return self._tags_top(command) if command.limit else []

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        """LOG: append a custom entry to a job's history."""
        self._require(Capability.LOG, "log")
        self._log(checks.log(jid, message, data, now))

    def track(self, jid: str, *, now: float | None = None) -> None:
        """TRACKING: mark a job as tracked."""
        self._require(Capability.TRACKING, "track")
        self._track(names.label(jid, "jid"), True, values.now(now))

    def untrack(self, jid: str, *, now: float | None = None) -> None:
        self._require(Capability.TRACKING, "untrack")
        self._track(names.label(jid, "jid"), False, values.now(now))

    def tracked(self, *, now: float | None = None) -> list[Job]:
        self._require(Capability.TRACKING, "tracked")
        return self._tracked(values.now(now))

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
        self._require(Capability.RECURRING, "recur")
        command = checks.recur(
            queue, jid, klass, data, interval, offset, priority, tags, retries, backlog, now,
            self.max_data_bytes,
        )  # fmt: skip
        self._recur(command)
        return command.jid

    def unrecur(self, jid: str, *, now: float | None = None) -> None:
        self._require(Capability.RECURRING, "unrecur")
        self._unrecur(names.label(jid, "jid"), values.now(now))

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None:
        self._require(Capability.RECURRING, "recur_get")
        return self._recur_get(names.label(jid, "jid"), values.now(now))

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        """RECURRING: change priority, interval, retries, data, klass, queue or backlog."""
        self._require(Capability.RECURRING, "recur_update")
        self._recur_update(checks.recur_update(jid, changes, now, self.max_data_bytes))

    def recur_tag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        self._require(Capability.RECURRING, "recur_tag")
        return self._recur_retag(checks.retag(jid, tags, now), add=True)

    def recur_untag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        self._require(Capability.RECURRING, "recur_untag")
        return self._recur_retag(checks.retag(jid, tags, now), add=False)
