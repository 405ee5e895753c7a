"""Turning a canvas into jobs: a jid for every signature, what each waits for, where its
inputs come from.

Each step of a workflow is one job, put in one `put_many` with the rest, parents before
the jobs that depend on them (so the engine links them: docs/protocol.md). A step's
*input* is a tree of jids: one jid (the previous step's result), or a list of trees (a
group's results, in order). A job that takes an input depends on every jid of it, carries
the tree in its envelope (`"wf": {"in": ...}`, lanner.codec), and `CASCADE_TAG`: the
engine makes it ready in the command that completes its last parent, or fails it in the
command that fails one (`lanner.workflows.inputs` reads the results when it runs).

A workflow's jobs are `<workflow id>-<n>`, n from 0 in put order. The envelope's `"wf"`
object, all of it lanner's, names them by n alone:

    id        the workflow's id (the handle's)
    in        the input tree, when the step takes the previous result (absent: `.si()`,
              or the first step), each leaf an n
    after     with `in` absent: the n of the jobs it waits for (to tell a failed one)
    jobs, out on job 0: how many jobs the workflow has, and its output tree
              (`WorkflowHandle.load` rebuilds a handle from them)
    failures  `include` when the step is a chord callback that runs with its parents'
              failures (`lanner.workflows.canvas.FailurePolicy`)
    settle    `complete` on a parent of such a chord: failing for good, it completes with
              the failure as its result, so that the callback still runs
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from lanner.errors import MalformedArgument
from lanner.job import CASCADE_TAG
from lanner.prepared import Message, PublishOptions
from lanner.records import NewJob
from lanner.workflows.canvas import Canvas, Chain, Chord, Group, Signature

if TYPE_CHECKING:
    from lanner.app import App

Tree: TypeAlias = str | list["Tree"]
"""Where a value comes from: one job's result (its jid), or a list of trees, in order."""
Headers: TypeAlias = "Callable[[App, list[Message]], Mapping[str, str] | None]"
"""What every job of a workflow carries for the app's instruments, given its messages."""


@dataclass
class Plan:
    """A workflow as jobs: what `put_many` is given, and what the handle follows."""

    workflow_id: str
    app: App
    jobs: list[NewJob] = field(default_factory=list)
    output: Tree = field(default_factory=list)
    # jid -> (task name, the jids it depends on), in put order: the workflow's graph
    steps: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # jid -> its message and envelope object, until every job is placed
    messages: dict[str, tuple[Message, dict[str, Any]]] = field(default_factory=dict)


def plan(canvas: Canvas, headers: Headers | None = None) -> Plan:
    """The jobs of `canvas`, in an order the engine can link (parents first); `headers`,
    given the app and every message, returns what each job carries (`lanner.instruments`)."""
    signatures = canvas.signatures()
    if not signatures:
        raise MalformedArgument("a workflow needs at least one task (an empty group is none)")
    apps = {id(s.app): s.app for s in signatures}
    if len(apps) > 1:
        raise MalformedArgument("every task of a workflow must publish through the same App")
    result = Plan(uuid.uuid4().hex, signatures[0].app)
    result.output = _place(result, canvas, None)
    first = result.messages[job_id(result.workflow_id, 0)][1]
    first["jobs"], first["out"] = len(result.messages), compact(result.output)
    new_job = result.app._new_job
    messages = [message for message, _ in result.messages.values()]
    carried = headers(result.app, messages) if headers is not None else None
    result.jobs = [
        new_job(message, carried, workflow) for message, workflow in result.messages.values()
    ]
    result.messages.clear()
    return result


def job_id(workflow_id: str, number: int) -> str:
    """The jid of a workflow's job `number`."""
    return f"{workflow_id}-{number}"


def compact(tree: Tree) -> Any:
    """`tree` with each jid as its job's number (what envelopes carry)."""
    if isinstance(tree, str):
        return int(tree.rpartition("-")[2])
    return [compact(branch) for branch in tree]


def expand(workflow_id: str, compacted: Any) -> Tree:
    """A compacted tree back to jids; `ValueError` if it is not one."""
    if isinstance(compacted, int) and not isinstance(compacted, bool) and compacted >= 0:
        return job_id(workflow_id, compacted)
    if isinstance(compacted, list):
        return [expand(workflow_id, branch) for branch in compacted]
    raise ValueError(f"not a workflow tree: {compacted!r}")


def flatten(tree: Tree) -> list[str]:
    """Every jid of `tree`, in order."""
    if isinstance(tree, str):
        return [tree]
    return [jid for branch in tree for jid in flatten(branch)]


def _place(into: Plan, node: Canvas, given: Tree | None, include: bool = False) -> Tree:
    """Add the jobs of `node`, each entry step fed `given`; return `node`'s output tree.
    `include`: the entry steps are callbacks of a chord that runs with failures."""
    if isinstance(node, Signature):
        return _job(into, node, given, include)
    if isinstance(node, Chain):
        current = given
        for number, step in enumerate(node.steps):
            current = _place(into, step, current, include and number == 0)
        assert current is not None  # a chain has at least one step
        return current
    if isinstance(node, Chord):
        results = _place(into, node.header, given, include)
        if node.failures == "include":
            # The callback's own parents settle a failure by completing with it; a failure
            # further up one of their chains fails the chord (docs/workflows.md).
            for jid in flatten(results):
                into.messages[jid][1]["settle"] = "complete"
        return _place(into, node.body, results, node.failures == "include")
    if isinstance(node, Group):
        return [_place(into, member, given, include) for member in node.members]
    raise MalformedArgument(f"not a workflow step: {type(node).__name__}")


def _job(into: Plan, sig: Signature, given: Tree | None, include: bool) -> str:
    # `<workflow id>-<n>`: a job's jid names its workflow, and costs no random bytes
    jid = job_id(into.workflow_id, len(into.messages))
    after = flatten(given) if given is not None else []
    workflow: dict[str, Any] = {"id": into.workflow_id}
    if include:
        workflow["failures"] = "include"
    if given is not None and not sig.immutable:
        workflow["in"] = compact(given)
    elif after:
        workflow["after"] = [compact(jid) for jid in after]
    tags = list(sig.options.tags or ())
    if after:
        tags.append(CASCADE_TAG)
    given_options = sig.options  # built whole: dataclasses.replace costs 20 µs a job
    options = PublishOptions(
        given_options.queue, given_options.delay, given_options.priority, tags or None,
        after or None, jid, given_options.retries, False,
    )  # fmt: skip
    message = Message(sig.task, sig.args, sig.kwargs, sig.app_data, options)
    into.messages[jid] = (message, workflow)
    into.steps[jid] = (sig.task.name, tuple(after))
    return jid
