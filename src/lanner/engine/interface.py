"""What an engine implements: one hook per command, given the command's checked record.

`lanner.Engine` (engine.py) is the contract users call: each of its methods checks its
arguments (`lanner.checks`), refuses a command whose capability the engine lacks
(`Unsupported`), then calls the hook here. So a hook never sees a bad argument, a
command it did not declare, or an empty list of jids (those are answered before it).
Core hooks are abstract; the hooks of optional capabilities raise `Unsupported` unless
the engine overrides them (only an engine that declares the capability and forgets the
hook could reach that: still never a silent no-op).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

from lanner import checks
from lanner.errors import Unsupported
from lanner.job import Job
from lanner.records import (
    ConfigValue,
    FlowState,
    JobOutcome,
    JobPage,
    QueueCounts,
    QueueStats,
    QueueUsage,
    RecurringJob,
    WorkerCounts,
    WorkerJobs,
)

if TYPE_CHECKING:
    from lanner.engine import Capability, Engine
    from lanner.events import EventStream


class EngineHooks(abc.ABC):
    """The hooks of `lanner.Engine`; see the public method of the same name for semantics."""

    name: ClassVar[str]
    capabilities: ClassVar[frozenset[Capability]]
    follows_now: ClassVar[bool] = True
    """Whether locks run out and delays end by the `now` commands are given (tests drive the
    clock). False where the store keeps its own clock (SQS's visibility timeouts and
    delays): `now` then only dates what the engine reports (expiries, history)."""

    @property
    @abc.abstractmethod
    def max_data_bytes(self) -> int:
        """The largest job `data` (UTF-8 bytes) that `put` accepts."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def reopen(self, *, max_wait: float | None = None) -> Engine:
        """A new engine on the same store, with connections of its own. With `max_wait`, its
        commands give up after about that many seconds (`EngineUnavailable`) where the
        engine would wait or retry longer: for a caller that must not block (a supervisor)."""

    # -- core -----------------------------------------------------------------------------
    @abc.abstractmethod
    def _put(self, command: str, checked: checks.Put) -> list[str]:
        """put, requeue (one job, which must exist) and put_many; the jids put."""

    @abc.abstractmethod
    def _pop(self, command: checks.Pop) -> list[Job]: ...

    @abc.abstractmethod
    def _peek(self, command: checks.Peek) -> list[Job]: ...

    @abc.abstractmethod
    def _heartbeat(self, command: checks.Heartbeat) -> float: ...

    @abc.abstractmethod
    def _heartbeat_many(self, command: checks.Heartbeats) -> dict[str, float]:
        """jid -> new expiry of the locks extended, in one round trip; the others are lost."""

    @abc.abstractmethod
    def _complete(self, command: checks.Complete) -> str: ...

    @abc.abstractmethod
    def _complete_many(self, command: checks.Settle) -> list[str]: ...

    @abc.abstractmethod
    def _release(self, command: checks.Settle) -> list[str]: ...

    @abc.abstractmethod
    def _fail(self, command: checks.Fail) -> None: ...

    @abc.abstractmethod
    def _retry(self, command: checks.Retry) -> int: ...

    @abc.abstractmethod
    def _cancel(self, command: checks.Jids) -> list[str]: ...

    @abc.abstractmethod
    def _multiget(self, command: checks.Jids) -> list[Job]: ...

    @abc.abstractmethod
    def _queues(self, now: float) -> list[QueueCounts]: ...

    @abc.abstractmethod
    def _queue_counts(self, command: checks.QueueAt) -> QueueCounts: ...

    @abc.abstractmethod
    def _jobs(self, command: checks.Listing) -> list[str]:
        """The jids of one page of `jobs()` (a page of 0 jobs never reaches the hook)."""

    @abc.abstractmethod
    def _failed_groups(self, now: float) -> dict[str, int]: ...

    @abc.abstractmethod
    def _failed(self, command: checks.Page) -> JobPage: ...

    @abc.abstractmethod
    def _unfail(self, command: checks.Unfail) -> int: ...

    @abc.abstractmethod
    def _config_get(self, key: str) -> ConfigValue | None: ...

    @abc.abstractmethod
    def _config_all(self) -> dict[str, ConfigValue]: ...

    @abc.abstractmethod
    def _config_set(self, setting: checks.Setting, now: float) -> None: ...

    @abc.abstractmethod
    def _config_unset(self, key: str, now: float) -> None: ...

    # -- optional capabilities ------------------------------------------------------------
    def _missing(self, hook: str) -> Unsupported:
        return Unsupported(self.name, hook.lstrip("_"), "a hook this engine does not implement")

    def _timeout(self, command: checks.Jids) -> None:
        raise self._missing("_timeout")

    def _set_priority(self, command: checks.JobPriority) -> None:
        raise self._missing("_set_priority")

    def _set_paused(self, command: checks.Queues, paused: bool) -> None:
        raise self._missing("_set_paused")

    def _depends(self, command: checks.Depends, add: bool) -> None:
        raise self._missing("_depends")

    def _outcomes(self, command: checks.Jids) -> list[JobOutcome]:
        raise self._missing("_outcomes")

    def _retag(self, command: checks.Retag, add: bool) -> list[str]:
        raise self._missing("_retag")

    def _tagged(self, command: checks.Page) -> JobPage:
        raise self._missing("_tagged")

    def _tags_top(self, command: checks.Page) -> list[str]:
        raise self._missing("_tags_top")

    def _log(self, command: checks.Log) -> None:
        raise self._missing("_log")

    def _track(self, jid: str, tracked: bool, now: float) -> None:
        raise self._missing("_track")

    def _tracked(self, now: float) -> list[Job]:
        raise self._missing("_tracked")

    def _stats(self, command: checks.Stats, now: float) -> QueueStats:
        raise self._missing("_stats")

    def _queue_usage(self, command: checks.QueueAt) -> QueueUsage:
        raise self._missing("_queue_usage")

    def _flow_state(self, now: float) -> FlowState:
        raise self._missing("_flow_state")

    def _workers(self, now: float) -> list[WorkerCounts]:
        raise self._missing("_workers")

    def _worker_jobs(self, command: checks.WorkerAt) -> WorkerJobs:
        raise self._missing("_worker_jobs")

    def _worker_deregister(self, worker_names: list[str], now: float) -> None:
        raise self._missing("_worker_deregister")

    def _recur(self, command: checks.Recur) -> None:
        raise self._missing("_recur")

    def _unrecur(self, jid: str, now: float) -> None:
        raise self._missing("_unrecur")

    def _recur_get(self, jid: str, now: float) -> RecurringJob | None:
        raise self._missing("_recur_get")

    def _recur_update(self, command: checks.RecurUpdate) -> None:
        raise self._missing("_recur_update")

    def _recur_retag(self, command: checks.Retag, add: bool) -> list[str]:
        raise self._missing("_recur_retag")

    def _queue_forget(self, command: checks.Queues) -> None:
        raise self._missing("_queue_forget")

    def _wait(self, command: checks.Wait) -> Job | None:
        raise self._missing("_wait")

    def _events(self, worker: str | None) -> EventStream:
        """The stream of `events()`, live before it is returned; `worker`: its events only."""
        raise self._missing("_events")
