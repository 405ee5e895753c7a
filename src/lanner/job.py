"""The job model: what a job is, whichever engine stores it.

A job is qless's job: an id (`jid`), a task name (`klass`), a queue, JSON `data`, a
priority (higher runs first), tags, a state, a retry budget, the lock of the worker
running it, the failure that stopped it, and a capped history of what happened to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

CASCADE_TAG: Final = "lanner:fails-with-dependency"
"""A job in state `depends` carrying this tag fails when one of its dependencies fails
(into DEPENDENCY_FAILED_GROUP, in the same atomic command, and so on down its own
dependents); without it a dependent waits for a failed dependency, as in qless. Every job
of a workflow (`lanner.workflows`) carries it."""

DEPENDENCY_FAILED_GROUP: Final = "lanner-dependency-failed"
"""Where CASCADE_TAG jobs fail with their dependency: the message names the jid that
failed first, its group and its message."""


PROGRESS_ENTRY: Final = "progress"
"""The history entry a running task's progress is (`Job.progress`): `log(jid, "progress",
{"fraction": 0.4, "message": "step 2 of 5"})`. Engines keep only the latest of a run of
them (one replaces the last entry if that is a progress entry too) and announce each as a
`progress` event (docs/protocol.md)."""

MAX_PROGRESS_MESSAGE: Final = 1000
"""The longest progress message, in characters (`log` refuses a longer one)."""


class JobState(StrEnum):
    WAITING = "waiting"  # ready to be popped
    SCHEDULED = "scheduled"  # waiting for its delay to pass
    DEPENDS = "depends"  # waiting for jobs it depends on to complete
    RUNNING = "running"  # locked by a worker until `expires`
    STALLED = "stalled"  # its lock was forcibly expired (`timeout`), or ran out
    FAILED = "failed"  # in a failure group until unfailed, re-put or cancelled
    COMPLETE = "complete"  # done; kept for the retention period


@dataclass(frozen=True, slots=True)
class Failure:
    group: str
    message: str
    when: float
    worker: str


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One entry of a job's history: `what` happened `when`, with details.

    Engines write `put` (details: `q`), `popped` (`worker`), `done`, `failed` (`group`),
    `retried` (`worker`, `group` if given), `released`, `timed-out`, and whatever `log`
    is given. The first entry is kept when the history
    is capped at `max-job-history` entries.
    """

    what: str
    when: float
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Job:
    jid: str
    klass: str
    queue: str
    data: str
    priority: int
    tags: tuple[str, ...]
    state: JobState
    retries: int
    remaining: int
    worker: str
    expires: float
    failure: Failure | None
    dependencies: tuple[str, ...]
    dependents: tuple[str, ...]
    spawned_from_jid: str | None
    tracked: bool
    history_json: str = field(repr=False)
    result: str | None = None  # JSON text of what its task returned, if it was stored
    due: float | None = None  # waiting or scheduled: when it became, or becomes, ready

    @property
    def history(self) -> tuple[HistoryEvent, ...]:
        """The job's history, oldest first (decoded on each access; pop does not pay for it)."""
        events = []
        for entry in json.loads(self.history_json):
            what = entry.pop("what")
            when = entry.pop("when")
            events.append(HistoryEvent(what, when, entry))
        return tuple(events)

    def decoded_data(self) -> Any:
        return json.loads(self.data)

    def progress(self, fraction: float, message: str = "") -> None:
        """Report how far along this job's task is: `fraction` from 0 to 1, and a short
        `message`. Only from the task running the job (`lanner.current_job()`), in its own
        context; it never waits for the store: at most one write per job each
        `lanner.progress.WRITE_EVERY_SEC`, the latest kept pending meanwhile and written
        before the job settles (docs/tasks.md)."""
        from lanner.progress import report

        report(self.jid, fraction, message)

    @property
    def finished(self) -> bool:
        """Complete or failed: nothing more will happen to it unless someone acts."""
        return self.state in (JobState.COMPLETE, JobState.FAILED)
