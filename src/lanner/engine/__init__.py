"""The job-engine contract: one method per qless command, each engine's capabilities.

Every engine (SQLite, Redis, SQS) is an `Engine`. The semantics are qless-core's,
described in docs/protocol.md; tests/conformance/ checks them against every engine. Each
method takes `now` (a Unix time in seconds) so that tests can drive the clock; `None`
means the current time. The methods here are the same for every engine: they check their
arguments (`lanner.checks`), refuse with `Unsupported` a command whose capability the
engine lacks (never a silent no-op), answer what needs no store (an empty list of jids),
and call the engine's hook for the command (`lanner.engine.interface`).

`Engine` is assembled here from one part per noun of the contract:

- `work.py`: put, put_many, requeue, pop, peek, heartbeat, heartbeat_many, complete,
  complete_many, release, fail, retry
- `jobs.py`: cancel, timeout, priority, get, wait, multiget, outcomes, depends_add,
  depends_remove, tag_add, tag_remove, tagged, tags_top, log, track, untrack, tracked
- `store.py`: queues, queue_counts, queue_usage, flow_state, length, jobs, pause, unpause,
  queue_forget, failed_groups, failed, unfail, stats, workers, worker_jobs,
  worker_deregister, events
- `recurring.py`: recur, unrecur, recur_get, recur_update, recur_tag, recur_untag
- `config.py`: config_get, config_all, config_set, config_unset (and `CONFIG_DEFAULTS`)
- `capabilities.py`: `Capability`, and the refusal every part shares
"""

from __future__ import annotations

from typing import Self

from lanner.engine.capabilities import Capability
from lanner.engine.config import (
    CONFIG_DEFAULTS,
    LIMIT_SETTINGS,
    ConfigCommands,
    lease_queue,
    limit_setting,
)
from lanner.engine.jobs import JobCommands
from lanner.engine.recurring import RecurringCommands
from lanner.engine.store import StoreCommands
from lanner.engine.work import WorkCommands

__all__ = [
    "CONFIG_DEFAULTS",
    "LIMIT_SETTINGS",
    "Capability",
    "Engine",
    "lease_queue",
    "limit_setting",
]


class Engine(WorkCommands, JobCommands, StoreCommands, RecurringCommands, ConfigCommands):
    """A job engine. Implementations are safe to share between threads of one process;
    `with engine:` closes it at the end."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
