"""A workflow as a picture: which workflow a job is part of, and its jobs laid out in
levels, for `lanner job` (text) and the dashboard's job page (SVG, `lanner.web.graphs`).

A job's level is one below the deepest job it waits for (the first steps are level 0),
its column its place among its level's jobs in put order. A workflow of many jobs (a
chord of 10,000 parents) is shown in part: at most MAX_PER_LEVEL jobs of each level,
the job looked at and its parents and children first, and how many more each level has.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from lanner.errors import JobNotFound, MalformedArgument
from lanner.job import Job, JobState
from lanner.workflows.handle import read_steps

if TYPE_CHECKING:
    from lanner.engine import Engine

Step: TypeAlias = tuple[str, str, tuple[str, ...], JobState | None]
"""(jid, task, the jids it waits for, its state now): a row of `WorkflowHandle.graph()`."""
MAX_PER_LEVEL: Final = 12
"""The most jobs of one level shown; the rest are counted."""


@dataclass(frozen=True, slots=True)
class Node:
    """One job of the picture: `level` and `column` place it; `after` are its parents."""

    jid: str
    number: int  # its n in `<workflow id>-<n>`
    task: str
    after: tuple[str, ...]
    state: JobState | None  # None: gone (cancelled, or past retention)
    level: int
    column: int


@dataclass(frozen=True, slots=True)
class Picture:
    """What is shown of a workflow: its nodes, and per level how many are left out."""

    workflow_id: str
    nodes: tuple[Node, ...]
    hidden: tuple[int, ...]  # per level, jobs not shown
    states: dict[str, int]  # every job's state (`gone` for None), counted
    total: int
    steps: tuple[Step, ...]  # every job, in put order, shown or not


def workflow_of(job: Job) -> str | None:
    """The id of the workflow `job` is a step of (its envelope's `wf`), or None."""
    if '"wf"' not in job.data:
        return None
    try:
        envelope = json.loads(job.data)
    except ValueError:
        return None
    found = envelope.get("wf") if isinstance(envelope, dict) else None
    ident = found.get("id") if isinstance(found, dict) else None
    return ident if isinstance(ident, str) else None


def read(engine: Engine, workflow_id: str, focus: str | None = None) -> Picture | None:
    """The workflow `workflow_id` as it is now, laid out (None: its first job is gone)."""
    try:
        steps, _, found = read_steps(engine, workflow_id)  # one get, one multiget
    except (JobNotFound, MalformedArgument, ValueError):  # not (or no longer) a workflow
        return None
    rows = [(jid, task, after, found.get(jid)) for jid, (task, after) in steps.items()]
    return picture(workflow_id, rows, focus)


def picture(workflow_id: str, graph: Sequence[Step], focus: str | None = None) -> Picture:
    """A workflow's graph (`WorkflowHandle.graph()`) laid out, centred on job `focus`
    where it is too big."""
    levels: dict[str, int] = {}
    for jid, _, after, _ in graph:  # put order: parents come before their dependents
        levels[jid] = 1 + max((levels.get(parent, -1) for parent in after), default=-1)
    near = _neighbours(graph, focus)
    by_level: dict[int, list[Step]] = {}
    for step in graph:
        by_level.setdefault(levels[step[0]], []).append(step)
    nodes: list[Node] = []
    hidden: list[int] = []
    for level in range(len(by_level)):
        steps = by_level.get(level, [])
        shown = sorted(steps, key=lambda step: step[0] not in near)[:MAX_PER_LEVEL]
        keep = {step[0] for step in shown}
        placed = [step for step in steps if step[0] in keep]  # back in put order
        for column, (jid, task, after, state) in enumerate(placed):
            number = int(jid.rpartition("-")[2])
            nodes.append(Node(jid, number, task, after, state, level, column))
        hidden.append(len(steps) - len(placed))
    states = Counter("gone" if state is None else state.value for _, _, _, state in graph)
    return Picture(workflow_id, tuple(nodes), tuple(hidden), dict(states), len(graph), tuple(graph))


def _neighbours(graph: Sequence[Step], focus: str | None) -> set[str]:
    if focus is None:
        return set()
    near = {focus}
    for jid, _, after, _ in graph:
        if jid == focus:
            near.update(after)
        elif focus in after:
            near.add(jid)
    return near


def summary(shown: Picture) -> str:
    """`7 jobs: 5 complete, 1 running, 1 depends`."""
    counts = ", ".join(f"{count} {state}" for state, count in sorted(shown.states.items()))
    return f"{shown.total} job{'s' * (shown.total != 1)}: {counts}"


def text_rows(shown: Picture, focus: str | None = None) -> list[list[str]]:
    """One row a job shown, by level: marker, `#n`, task (indented by level), state, the
    numbers of the jobs it waits for; and a row for each level's jobs left out."""
    rows: list[list[str]] = []
    for level in range(len(shown.hidden)):
        for node in (node for node in shown.nodes if node.level == level):
            waits = " ".join(f"#{parent.rpartition('-')[2]}" for parent in node.after)
            state = "gone" if node.state is None else node.state.value
            marker = ">" if node.jid == focus else ""
            rows.append([marker, f"#{node.number}", "  " * level + node.task, state, waits])
        if shown.hidden[level]:
            rows.append(["", "", "  " * level + f"… {shown.hidden[level]} more", "", ""])
    return rows
