"""What an engine can do beyond the core commands (`Capability`), and the refusal of the rest.

`Commands` is the base of every part of `lanner.Engine` (engine/__init__.py): it refuses with
`Unsupported` a command whose capability the engine lacks, never a silent no-op.
"""

from __future__ import annotations

from enum import StrEnum

from lanner.engine.interface import EngineHooks
from lanner.errors import Unsupported


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
    # put(flow=...) with rate limits or a concurrency key, held in the store, and
    # flow_state() (docs/flow-control.md)
    FLOW = "flow"
    # A concurrency key or rate bucket shared by jobs of several queues, enforced over all
    # of them (without it, a key stays with the queues of one partition: Redis Cluster
    # keeps a control's state in the hash slot of its queue; `Unsupported` otherwise)
    CROSS_QUEUE_FLOW = "cross-queue-flow"
    # put(flow=Flow(fair_key=...)): a queue's jobs of different fair keys take turns (in the
    # store's pop order; on SQS, its fair queues: a MessageGroupId per key)
    FAIRNESS = "fairness"


class Commands(EngineHooks):
    """What every part of `lanner.Engine` shares: refusing what the engine lacks."""

    def _require(self, capability: Capability, command: str) -> None:
        if capability not in self.capabilities:
            raise Unsupported(self.name, command, capability.value)

    def _gate_fanout(self, queue: str, command: str) -> None:
        if "+" in queue:
            self._require(Capability.FANOUT, f"{command} of a fanout queue {queue!r}")
