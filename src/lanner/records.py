"""Values that engine commands take and return, other than jobs themselves."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NamedTuple, TypeAlias

from lanner.job import Failure, Job, JobState

ConfigValue: TypeAlias = str | int | float

DEFAULT_RETRIES: Final = 5


IF_EXISTS: Final = ("move", "keep", "move-unless-running", "once", "keep-waiting")
"""What a put does to a job of the same jid that is live (waiting, scheduled, depends,
running or stalled): `move` it (qless's put: its lock is dropped), `keep` it as it is and
store nothing (a unique job), or move it unless it is running (`InvalidState` then);
`once` keeps a job of the jid in any state, complete and failed included (a schedule's
tick runs once while the store remembers it); `keep-waiting` keeps a waiting, scheduled or
depends one and refuses to move a running one (a debounce that keeps the first)."""


class RateLimit(NamedTuple):
    """FLOW: at most `limit` runs start in any `period` seconds among the jobs naming `bucket`."""

    bucket: str
    limit: int
    period: float


RATE_SLACK_SHARE: Final = 0.02
RATE_SLACK_MAX_SEC: Final = 0.02
RATE_LEAD_SHARE: Final = 0.1
RATE_LEAD_MAX_SEC: Final = 0.1
RATE_LATE_SHARE: Final = 0.5
"""Of the slack, how late a run may start by its worker's clock check: the rest is for the
few instructions between that check and the task's first."""


def rate_slack(period: float) -> float:
    """How late after its start time a rate-limited run may still start (RATE_SLACK_SHARE
    of the period, at most RATE_SLACK_MAX_SEC): a start counts in its bucket for the period
    and this slack (`rate_window`), so that runs that start anywhere in their slack never
    put more than the limit in one period. Every engine counts by these numbers (the Lua
    core too)."""
    return min(RATE_SLACK_MAX_SEC, period * RATE_SLACK_SHARE)


def rate_start(now: float, due: float, periods: Sequence[float]) -> tuple[float, float]:
    """A rate-limited run handed out `now` whose buckets have room at `due`: when its start
    counts (no sooner than a slack from now, for its worker to reach it) and how late it
    may start (its worker gives it back past that)."""
    slack = min(rate_slack(period) for period in periods)
    start = max(due, now + slack)
    return start, start + slack * RATE_LATE_SHARE


def rate_window(period: float) -> float:
    """How long a start counts in its bucket: the period and the slack."""
    return period + rate_slack(period)


def rate_lead(period: float) -> float:
    """How long before its start time a rate-limited job may be handed out (RATE_LEAD_SHARE
    of the period, at most RATE_LEAD_MAX_SEC): its worker holds it until then, so that the
    pop's own delay is not lost from every period."""
    return min(RATE_LEAD_MAX_SEC, period * RATE_LEAD_SHARE)


class Flow(NamedTuple):
    """FLOW: what holds a job back before it runs (docs/flow-control.md).

    At most `max_concurrency` jobs naming `concurrency_key` run at once, anywhere (0: no
    cap); and each of `rates` lets it start only while its bucket has room. The store
    checks both when a pop reaches the job: a job over a rate waits, scheduled for when
    the bucket has room again; one over its key's cap waits aside until a job of the key
    stops running. Jobs of a queue with different `fair_key`s take turns: one key's
    burst does not hold the others back for its whole length.
    """

    concurrency_key: str | None = None
    max_concurrency: int = 0
    rates: tuple[RateLimit, ...] = ()
    fair_key: str | None = None  # its queue's jobs of different fair keys take turns

    def encoded(self) -> str:
        """The JSON text engines store with the job: {"c": key, "m": cap, "r": [[bucket,
        limit, period], ...], "f": fair key}, members left out when empty."""
        spec: dict[str, object] = {}
        if self.concurrency_key is not None and self.max_concurrency > 0:
            spec["c"], spec["m"] = self.concurrency_key, self.max_concurrency
        if self.rates:
            spec["r"] = [list(rate) for rate in self.rates]
        if self.fair_key is not None:
            spec["f"] = self.fair_key
        return json.dumps(spec, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class FlowKey:
    """FLOW: a concurrency key: its jobs running now, its cap, and the waiting jobs it holds
    back (those of its jobs that wait while it is at its cap)."""

    key: str
    running: int
    cap: int
    held: int


@dataclass(frozen=True, slots=True)
class FlowBucket:
    """FLOW: a rate bucket: its limit per period, the runs started in the last period, the
    jobs it holds back (scheduled for when it has room), and when it has room next."""

    bucket: str
    limit: int
    period: float
    recent: int
    held: int
    next_at: float  # the `now` asked about, when it has room now


@dataclass(frozen=True, slots=True)
class FlowState:
    """FLOW: what the store's controls hold back now (`Engine.flow_state`)."""

    keys: tuple[FlowKey, ...]
    buckets: tuple[FlowBucket, ...]


class NewJob(NamedTuple):
    """The arguments of one `put`, for `put_many` (and how engines carry a checked put)."""

    queue: str
    jid: str
    klass: str
    data: str = "{}"
    delay: float = 0.0
    priority: int | None = None
    tags: Sequence[str] | None = None
    retries: int | None = None
    depends: Sequence[str] | None = None
    if_exists: str = "move"  # one of IF_EXISTS
    expires_at: float | None = None  # LIMITS: dropped, never handed out, from this Unix time
    flow: Flow | None = None  # FLOW: rate limits and a concurrency key


NO_DETAILS: Final[Mapping[str, str]] = MappingProxyType({})


class Event(NamedTuple):
    """EVENTS: one thing that happened in the store, as `Engine.events()` delivers it.

    `kind` is qless-core's event name (docs/events.md lists them, and which fields each
    fills); a field the kind does not carry is "". `details` holds the kind's extras
    (`failed`: group, message; `advanced`: to; `config_set`: option, value; `config_unset`:
    option), empty for the others. `Event("gap")`: events may have been missed here.
    """

    kind: str
    jid: str = ""
    queue: str = ""
    worker: str = ""
    details: Mapping[str, str] = NO_DETAILS


@dataclass(frozen=True, slots=True)
class QueueCounts:
    name: str
    waiting: int
    stalled: int
    running: int
    scheduled: int
    depends: int
    recurring: int
    paused: bool


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """LIMITS: what a queue holds against its bounds, and what it turned away.

    `items` and `bytes` count the jobs in the queue that are not finished (waiting,
    scheduled, depends, running, stalled), each job's data as it was put (UTF-8 bytes).
    The counters count since the queue was first used: `total_items` jobs put into it,
    `expired` dropped at read because their time was up, `discarded` dropped to make room
    (`discard-old-when-full`) or fanout copies a full child could not take.
    """

    name: str
    items: int
    bytes: int
    total_items: int
    expired: int
    discarded: int


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What `Engine.outcomes` gives of a job: its state, result (JSON text, if kept) and
    failure; the rest of the job (history, dependencies) is not read."""

    jid: str
    state: JobState
    result: str | None
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class JobPage:
    total: int
    jobs: tuple[Job, ...]


@dataclass(frozen=True, slots=True)
class TimingStats:
    """Count, mean and standard deviation (seconds) and a 148-bucket histogram.

    Buckets: 60 of one second, 59 of one minute (from 1 min), 23 of one hour (from 1 h),
    then 6 of one day (from 1 day).
    """

    count: int
    mean: float
    std: float
    histogram: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class QueueStats:
    retries: int
    failed: int
    failures: int
    wait: TimingStats
    run: TimingStats


@dataclass(frozen=True, slots=True)
class WorkerCounts:
    name: str
    jobs: int
    stalled: int


@dataclass(frozen=True, slots=True)
class WorkerJobs:
    jobs: tuple[str, ...]
    stalled: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecurringJob:
    jid: str
    klass: str
    queue: str
    data: str
    priority: int
    tags: tuple[str, ...]
    retries: int
    interval: float
    count: int
    backlog: int
