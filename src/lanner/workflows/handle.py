"""Publishing a workflow, and following it: its state, its results, its graph, its cancel.

    handle = lanner.chord([add.s(i, i) for i in range(10)], tsum.s()).delay()
    handle.state()            # JobState.WAITING, RUNNING, COMPLETE, or FAILED
    handle.result(timeout=30) # the workflow's result: the last step's, a group's list
    handle.cancel()           # every job that has not finished, in one engine call

A workflow is published in one `put_many` (one round trip, all or none). Its result is
read from the jobs of its output (the last step, or each member of a final group), each
waited for as `JobHandle.result` waits. `cancel()` cancels all its jobs together, so no
step is left depending on a job that is gone: what has not run never will, what runs is
stopped as `cancel` stops a job, and what completed stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lanner import instruments
from lanner.checks import names
from lanner.engine import Capability, Engine
from lanner.errors import ChubbyTaskException, JobNotFound, PayloadTooLarge, Unsupported
from lanner.handle import JobHandle
from lanner.job import Job, JobState
from lanner.workflows import inputs
from lanner.workflows.plan import Plan, Tree, expand, flatten, job_id, plan

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.prepared import Message
    from lanner.workflows.canvas import Canvas


class WorkflowHandle:
    """A published workflow (see the module docstring)."""

    def __init__(
        self,
        workflow_id: str,
        app: App,
        output: Tree,
        steps: Mapping[str, tuple[str, tuple[str, ...]]],
        settled: Mapping[str, JobHandle] | None = None,
    ) -> None:
        self.id = workflow_id
        self.app = app
        self.output = output
        self.steps = dict(steps)  # jid -> (task name, the jids it waits for), in put order
        self._settled = dict(settled or {})  # eager mode: every job ran at publish

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.id!r}, {len(self.steps)} jobs)"

    @classmethod
    def load(cls, workflow_id: str, app: App | None = None) -> WorkflowHandle:
        """The handle of a workflow published earlier (by this process or another), from
        its id (`handle.id`), through `app` (default: the default app). `JobNotFound` if
        its first job is gone (cancelled, or past retention)."""
        from lanner.app import default_app

        app = app or default_app()
        steps, output, _ = read_steps(app.engine, workflow_id)
        return cls(workflow_id, app, output, steps)

    @property
    def jids(self) -> list[str]:
        """Every job of the workflow, in put order (parents before their dependents)."""
        return list(self.steps)

    def handle(self, jid: str) -> JobHandle:
        """The handle of one of its jobs."""
        return self._settled.get(jid) or JobHandle(jid, self.app)

    def jobs(self) -> dict[str, Job | None]:
        """Every job as it is now (None: gone, cancelled or past retention), in put order."""
        if self._settled:
            return {jid: handle.job() for jid, handle in self._settled.items()}
        found = {job.jid: job for job in self.app.engine.multiget(self.jids)}
        return {jid: found.get(jid) for jid in self.steps}

    def state(self) -> JobState | None:
        """`COMPLETE` once every job completed; `FAILED` once one failed; `RUNNING` while
        one runs; else `WAITING`. None if every job is gone."""
        states = {job.state for job in self.jobs().values() if job is not None}
        if not states:
            return None
        if states == {JobState.COMPLETE}:
            return JobState.COMPLETE
        if JobState.FAILED in states:
            return JobState.FAILED
        if states & {JobState.RUNNING, JobState.STALLED}:
            return JobState.RUNNING
        return JobState.WAITING

    def result(self, timeout: float | None = None) -> Any:
        """The workflow's result, once its output jobs completed: the last step's result,
        or a final group's list (nested as its groups are). Waits up to `timeout` seconds
        for each (None: as long as it takes); raises as `JobHandle.result` does
        (`TaskFailed` for a failed step, the first in order)."""
        values = {jid: self.handle(jid).result(timeout) for jid in flatten(self.output)}
        return _resolve(self.output, values)

    def cancel(self) -> list[str]:
        """Cancel every job of the workflow that has not finished, in one engine call (a
        running one is stopped as `JobHandle.cancel` stops it); return the jids cancelled."""
        if self._settled:
            return []
        return self.app.engine.cancel(self.jids)

    def graph(self) -> list[tuple[str, str, tuple[str, ...], JobState | None]]:
        """(jid, task, the jids it waits for, its state now) of every job, in put order."""
        jobs = self.jobs()
        return [
            (jid, task, after, None if jobs[jid] is None else jobs[jid].state)  # type: ignore[union-attr]
            for jid, (task, after) in self.steps.items()
        ]

    async def aresult(self, timeout: float | None = None) -> Any:
        """`result()` for async code: the output jobs are awaited together."""
        jids = flatten(self.output)
        found = await asyncio.gather(*(self.handle(jid).aresult(timeout) for jid in jids))
        return _resolve(self.output, dict(zip(jids, found, strict=True)))

    async def astate(self) -> JobState | None:
        from lanner import offload

        return await offload.call(self.state)

    async def acancel(self) -> list[str]:
        from lanner import offload

        return await offload.call(self.cancel)


def read_steps(
    engine: Engine, workflow_id: str
) -> tuple[dict[str, tuple[str, tuple[str, ...]]], Tree, dict[str, JobState]]:
    """A published workflow's steps (jid -> its task and the jids it waits for, in put
    order), output tree, and the state of each job that exists, read from its jobs and
    their envelopes: `JobNotFound` if its first job is gone."""
    first = engine.get(job_id(names.label(workflow_id, "workflow id"), 0))
    workflow = _envelope_workflow(first) if first is not None else None
    if workflow is None or "jobs" not in workflow:
        raise JobNotFound(job_id(workflow_id, 0), "WorkflowHandle.load")
    jids = [job_id(workflow_id, n) for n in range(int(workflow["jobs"]))]
    found = {job.jid: job for job in engine.multiget(jids)}
    steps: dict[str, tuple[str, tuple[str, ...]]] = {}
    for jid in jids:
        job = found.get(jid)
        step = _envelope_workflow(job) if job is not None else None
        after = step.get("in", step.get("after", [])) if step is not None else []
        klass = job.klass if job is not None else ""
        steps[jid] = (klass, tuple(flatten(expand(workflow_id, after))))
    states = {jid: job.state for jid, job in found.items()}
    return steps, expand(workflow_id, workflow["out"]), states


def publish(canvas: Canvas) -> WorkflowHandle:
    """Put every job of `canvas` in one round trip; return the workflow's handle."""
    with contextlib.ExitStack() as publishing:

        def carried(app: App, messages: list[Message]) -> Mapping[str, str] | None:
            if not app.instruments or app.eager:
                return None
            publishing.enter_context(instruments.publishing(app, messages))
            return instruments.headers(app)

        with _collector_paused():
            planned = plan(canvas, carried)
            app = planned.app
            if not app.eager:
                _put(app.engine, planned)
        if app.eager:
            return _run_eagerly(planned)
    return WorkflowHandle(planned.workflow_id, app, planned.output, planned.steps)


def _put(engine: Engine, planned: Plan) -> None:
    if any(job.depends for job in planned.jobs) and (
        Capability.DEPENDENCIES not in engine.capabilities
    ):
        raise Unsupported(engine.name, "a workflow whose steps wait for others", "dependencies")
    try:
        engine.put_many(planned.jobs)
    except PayloadTooLarge as error:
        raise ChubbyTaskException(str(error)) from None
    planned.jobs = []  # freed before the collector runs again: it would only walk them


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector held off while a workflow's jobs are built and put, then
    turned back on if it was. Those are many new objects at once (a dozen per job: 10,000
    jobs for a chord of 10,000), which start collections that walk every object of the
    process and free none: the jobs hold no cycles, and their counts free them. Measured:
    12-17% of the publish's CPU for a chord of 10,000 (docs/benchmarks.md, "Workflows").
    The tasks of an eager publish run with it on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _run_eagerly(planned: Plan) -> WorkflowHandle:
    """Eager mode: every job runs now, in put order, parents' results read from the jobs
    just settled in this process."""
    from lanner.inprocess.eager import run_eagerly

    settled: dict[str, JobHandle] = {}
    jobs: dict[str, Job] = {}
    token = inputs.eager_jobs.set(jobs)
    try:
        for new in planned.jobs:
            handle = run_eagerly(planned.app, new)
            settled[new.jid] = handle
            job = handle.job()
            assert job is not None  # an eager handle holds its settled job
            jobs[new.jid] = job
    finally:
        inputs.eager_jobs.reset(token)
    return WorkflowHandle(planned.workflow_id, planned.app, planned.output, planned.steps, settled)


def _envelope_workflow(job: Job) -> dict[str, Any] | None:
    """The `wf` object of a job's envelope (JSON in both codecs' envelopes), or None."""
    try:
        envelope = json.loads(job.data)
    except ValueError:
        return None
    found = envelope.get("wf") if isinstance(envelope, dict) else None
    return found if isinstance(found, dict) else None


def _resolve(tree: Tree, values: Mapping[str, Any]) -> Any:
    if isinstance(tree, str):
        value = values[tree]
        if isinstance(value, dict) and inputs.FAILED_MARK in value:
            mark = value[inputs.FAILED_MARK]
            return inputs.ParentFailed(tree, str(mark.get("group")), str(mark.get("message")))
        return value
    return [_resolve(branch, values) for branch in tree]
