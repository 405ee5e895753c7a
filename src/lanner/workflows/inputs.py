"""A workflow step's inputs, read by the worker as the step's job is admitted to run.

The engine made the job ready in the command that completed its last parent, so its
parents are complete: their results are read in one `outcomes` (kept with the jobs, as
every result is), and put before the job's own arguments: one result for a step after a
task, the list of results (nested as the groups are) after a group. A parent that is not
complete (it failed and the job was put back by hand, or retention removed it) fails the
job at once into `lanner-dependency-failed`, saying which and why; a chord that runs with
its failures (`failures="include"`) gets a `ParentFailed` in the failed parent's place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from lanner.job import DEPENDENCY_FAILED_GROUP, Job, JobState
from lanner.records import JobOutcome
from lanner.worker.admission import Rejected
from lanner.workflows.plan import Tree, expand, flatten

if TYPE_CHECKING:
    from lanner.app import App

eager_jobs: ContextVar[dict[str, Job] | None] = ContextVar("lanner_eager_jobs", default=None)
"""Eager mode (`App(eager=True)`): the jobs of the workflow being run, by jid, as they
settled in this process; None elsewhere (the parents are read from the engine)."""

FAILED_MARK: Final = "__lanner_failed__"
"""The key of the result a parent of a `failures="include"` chord completes with when its
task fails for good (`settle_by_completing`)."""


@dataclass(frozen=True, slots=True)
class ParentFailed:
    """In a `failures="include"` chord callback's list: the parent that failed for good."""

    jid: str
    group: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"jid": self.jid, "group": self.group, "message": self.message}


def failure_result(jid: str, group: str, details: str) -> str:
    """The result a parent settles a failure with, for a chord that includes failures."""
    last = details.strip().splitlines()[-1] if details.strip() else group
    mark = ParentFailed(jid, group, last[:1000]).to_json()
    return json.dumps({FAILED_MARK: mark}, separators=(",", ":"))


def settles_by_completing(data: str) -> bool:
    """Whether a job's data says it completes with its failure (a parent of such a chord)."""
    if '"settle"' not in data:  # most jobs: no JSON parse on a failure path
        return False
    try:
        envelope = json.loads(data)
    except ValueError:
        return False
    workflow = envelope.get("wf") if isinstance(envelope, dict) else None
    return isinstance(workflow, dict) and workflow.get("settle") == "complete"


def leading_arguments(job: Job, workflow: Mapping[str, Any], app: App) -> tuple[Any, ...]:
    """What goes before the job's own arguments: `(input,)`, or `()` for a step that takes
    none; `Rejected` if a parent did not complete."""
    tree = _tree(workflow, "in")
    parents = flatten(tree) if tree is not None else flatten(_tree(workflow, "after") or [])
    if not parents:
        return () if tree is None else (_resolve(tree, {}),)
    include = workflow.get("failures") == "include"
    settled = eager_jobs.get()
    found: dict[str, Job | JobOutcome]
    if settled is not None:  # eager mode: the parents ran in this process, just now
        found = {jid: settled[jid] for jid in parents if jid in settled}
    else:
        found = {parent.jid: parent for parent in app.engine.outcomes(parents)}
    values: dict[str, Any] = {}
    for jid in parents:
        values[jid] = _value(job, found.get(jid), jid, include)
    return () if tree is None else (_resolve(tree, values),)


def _value(job: Job, parent: Job | JobOutcome | None, jid: str, include: bool) -> Any:
    if parent is None:
        raise Rejected(
            DEPENDENCY_FAILED_GROUP,
            f"dependency {jid} is gone (cancelled, or removed by retention before "
            f"{job.jid} ran: see jobs-history in docs/workflows.md)",
        )
    if parent.state == JobState.FAILED and parent.failure is not None:
        failed = ParentFailed(jid, parent.failure.group, parent.failure.message[-1000:])
        if include:
            return failed
        raise Rejected(
            DEPENDENCY_FAILED_GROUP,
            f"dependency {jid} failed ({failed.group}): {failed.message}",
        )
    if parent.state != JobState.COMPLETE:
        raise Rejected(
            DEPENDENCY_FAILED_GROUP,
            f"dependency {jid} is {parent.state}, not complete: retry {job.jid} once it is",
        )
    value = None if parent.result is None else json.loads(parent.result)
    if isinstance(value, dict) and FAILED_MARK in value:
        mark = value[FAILED_MARK]
        failed = ParentFailed(jid, str(mark.get("group")), str(mark.get("message")))
        if include:
            return failed
        raise Rejected(
            DEPENDENCY_FAILED_GROUP, f"dependency {jid} failed ({failed.group}): {failed.message}"
        )
    return value


def _tree(workflow: Mapping[str, Any], key: str) -> Tree | None:
    """The envelope's tree at `key` as jids, None if absent (a malformed one is
    `Rejected`)."""
    if key not in workflow:
        return None
    try:
        return expand(str(workflow.get("id")), workflow[key])
    except ValueError as error:
        raise Rejected("lanner-undecodable", f"workflow {key}: {error}") from None


def _resolve(tree: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(tree, str):
        return values[tree]
    return [_resolve(branch, values) for branch in tree]
