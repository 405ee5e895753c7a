"""Workflows: chain, group and chord (Celery's canvas) on the engine's own dependencies.

    canvas   signatures (`task.s(...)`, `.si(...)`) and `chain`, `group`, `chord`
    plan     a canvas as jobs: jids, dependencies, and each step's inputs in its envelope
    handle   publishing in one `put_many`; `WorkflowHandle`: state, results, graph, cancel
    inputs   the worker's side: a step's parents' results, read as its job is admitted

Nothing polls: a step's job exists from the publish, in state `depends`, and the engine
makes it ready in the command that completes its last parent (or fails it, with
`CASCADE_TAG`, in the command that fails one). docs/workflows.md has the whole story.
"""

from __future__ import annotations

from lanner.workflows.canvas import Canvas, Chain, Chord, Group, Signature, chain, chord, group
from lanner.workflows.handle import WorkflowHandle
from lanner.workflows.inputs import ParentFailed

__all__ = [
    "Canvas",
    "Chain",
    "Chord",
    "Group",
    "ParentFailed",
    "Signature",
    "WorkflowHandle",
    "chain",
    "chord",
    "group",
]
