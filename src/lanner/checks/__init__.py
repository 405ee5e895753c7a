"""The argument checks of every engine command: one checker per command, for every engine.

An engine method hands its arguments to its command's checker, which returns them as one
record, or raises `MalformedArgument` (an `InvalidName`, a `PayloadTooLarge`) naming the
bad one before anything is stored. The engine then works only with the record. Records
carry the command's `now`, resolved here (None: the current time), so engines never read
the clock for a command on their own; `Pop.now` stays None for the clock, because a
blocking pop reads it again on each try. Records are NamedTuples: put_many and pop are hot
paths, and a frozen dataclass takes several times as long to build.

Commands of one argument check it with `names.label` or `names.queue_name` directly; the
value rules behind every check are in `lanner.checks.values`. The checkers sit by the contract's
nouns, as `lanner.engine` does, and are all re-exported here (callers write `checks.put`):

- `work`: put, put_many, requeue, pop, peek, heartbeat(s), complete(_many), release, fail,
  retry
- `jobs`: jobs named by jid: cancel, timeout, multiget, priority, wait, dependencies, tags,
  log (and a progress entry's data)
- `store`: queue counts, listings and pages, pause, unfail, stats, a worker's jobs
- `config`: config keys and values, the LIMITS and lease settings
- `recurring`: the recurring templates (`recur`, `recur_update`)
- `flow`: a put's `flow` option
"""

from __future__ import annotations

from lanner.checks.config import (
    LEASE_SETTINGS,
    Setting,
    config_key,
    config_set,
    lease_value,
    limit_value,
)
from lanner.checks.jobs import (
    Depends,
    Jids,
    JobPriority,
    Log,
    Retag,
    Wait,
    depends,
    jids,
    log,
    priority,
    progress,
    retag,
    wait,
)
from lanner.checks.recurring import RECUR_FIELDS, Recur, RecurUpdate, recur, recur_update
from lanner.checks.store import (
    LISTABLE_STATES,
    Listing,
    Page,
    QueueAt,
    Queues,
    Stats,
    Unfail,
    WorkerAt,
    failed_page,
    listing,
    queue_at,
    queues,
    stats,
    tagged_page,
    top_page,
    unfail,
    worker_at,
)
from lanner.checks.work import (
    MAX_HEARTBEAT_JIDS,
    Complete,
    Fail,
    Heartbeat,
    Heartbeats,
    Peek,
    Pop,
    Put,
    Retry,
    Settle,
    complete,
    fail,
    heartbeat,
    heartbeats,
    new_job,
    peek,
    pop,
    put,
    put_many,
    retry,
    settle,
)

__all__ = [
    "LEASE_SETTINGS",
    "LISTABLE_STATES",
    "MAX_HEARTBEAT_JIDS",
    "RECUR_FIELDS",
    "Complete",
    "Depends",
    "Fail",
    "Heartbeat",
    "Heartbeats",
    "Jids",
    "JobPriority",
    "Listing",
    "Log",
    "Page",
    "Peek",
    "Pop",
    "Put",
    "QueueAt",
    "Queues",
    "Recur",
    "RecurUpdate",
    "Retag",
    "Retry",
    "Setting",
    "Settle",
    "Stats",
    "Unfail",
    "Wait",
    "WorkerAt",
    "complete",
    "config_key",
    "config_set",
    "depends",
    "fail",
    "failed_page",
    "heartbeat",
    "heartbeats",
    "jids",
    "lease_value",
    "limit_value",
    "listing",
    "log",
    "new_job",
    "peek",
    "pop",
    "priority",
    "progress",
    "put",
    "put_many",
    "queue_at",
    "queues",
    "recur",
    "recur_update",
    "retag",
    "retry",
    "settle",
    "stats",
    "tagged_page",
    "top_page",
    "unfail",
    "wait",
    "worker_at",
]
