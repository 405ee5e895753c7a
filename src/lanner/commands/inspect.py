"""The commands that look at a store without changing it:

    lanner status [--json]                          every queue's counts, and the failure groups
    lanner jobs [QUEUE] [--state S] [--limit N] [--json]
    lanner job JID [--json]                         one job in detail: its progress, and
                                                    its workflow's graph if it is a step

Jobs are found by `lanner.operations.list_jobs`; this module turns them into tables and
JSON documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Final

import click
from rich.console import Console
from rich.json import JSON
from rich.table import Table
from rich.text import Text

from lanner.commands.common import connection_options, json_option, limit_option, session
from lanner.commands.known import require, require_queues
from lanner.commands.rendering import (
    groups_table,
    key_values,
    number,
    print_json,
    say,
    table,
    text,
    utc,
)
from lanner.engine import Capability, Engine
from lanner.job import Job
from lanner.operations import LISTABLE_STATES, list_jobs
from lanner.progress import Progress
from lanner.progress import of as progress_of
from lanner.records import QueueCounts, RecurringJob
from lanner.workflows import graph

__all__ = ["COMMANDS"]

COUNT_HEADERS: Final = {
    "waiting": "waiting",
    "scheduled": "sched",
    "running": "running",
    "stalled": "stalled",
    "depends": "deps",
    "recurring": "recur",
}
"""`QueueCounts` fields, in table order, with headers short enough for 80 columns."""


# -- status -------------------------------------------------------------------------------
def queues_table(queues: Sequence[QueueCounts]) -> Table:
    columns = [text("queue"), *(number(h) for h in COUNT_HEADERS.values()), text("paused")]
    rows = [
        [q.name, *(getattr(q, name) for name in COUNT_HEADERS), "yes" if q.paused else ""]
        for q in queues
    ]
    total = ["total", *(sum(getattr(q, name) for q in queues) for name in COUNT_HEADERS), ""]
    return table(columns, rows, title="queues", total=total)


@click.command("status")
@json_option
@connection_options
def status_command(app_path: str | None, broker: str | None, as_json: bool) -> None:
    """Every queue's job counts, and the failure groups."""
    with session(app_path, broker) as app:
        queues = app.engine.queues()
        countable = Capability.FAILURES in app.engine.capabilities
        groups = app.engine.failed_groups() if countable else None
        engine_name = app.engine.name
    if as_json:
        print_json({"queues": [asdict(q) for q in queues], "failed": groups})
        return
    console = Console()
    console.print(queues_table(queues) if queues else Text("no queues yet"))
    if groups is None:  # SQS: failed jobs are in dead-letter queues, which SQS cannot count
        console.print(Text(f"failed jobs: the {engine_name} engine cannot count them by group"))
    else:
        console.print(groups_table(groups) if groups else Text("no failed jobs"))


# -- jobs ---------------------------------------------------------------------------------
def job_summary(job: Job | RecurringJob, state: str) -> dict[str, Any]:
    """A line of `jobs`: a job, or a recurring job's template, under the state it was listed in."""
    return {
        "jid": job.jid,
        "queue": job.queue,
        "state": state,
        "klass": job.klass,
        "priority": job.priority,
        "due": job.due if isinstance(job, Job) else None,
    }


def jobs_table(found: Sequence[Mapping[str, Any]], state: str, queue: str | None) -> Table:
    """Jids, klasses and priorities; the queue too when listing every queue; when each
    scheduled job is due."""
    fields = ["jid", "klass", "priority"] if queue else ["jid", "queue", "klass", "priority"]
    columns = [text("jid", no_wrap=True), *(text(f) for f in fields[1:-1]), number("pri")]
    rows = [[j[f] for f in fields] for j in found]
    if state == "scheduled":
        columns.append(text("due (UTC)", no_wrap=True))
        for row, j in zip(rows, found, strict=True):
            row.append(utc(j["due"]) if j["due"] is not None else "")
    title = f"{state} jobs" + (f" in {queue!r}" if queue else "")
    return table(columns, rows, title=title)


@click.command("jobs")
@click.argument("queue", required=False)
@click.option(
    "--state",
    type=click.Choice(LISTABLE_STATES),
    default="waiting",
    show_default=True,
    help="Which jobs to list; complete ones belong to no queue.",
)
@limit_option("At most N jobs.")
@json_option
@connection_options
def jobs_command(
    app_path: str | None,
    broker: str | None,
    queue: str | None,
    state: str,
    limit: int,
    as_json: bool,
) -> None:
    """Jobs of QUEUE (default: every queue) in one state, in the order the engine keeps them."""
    if state == "complete" and queue:
        raise click.UsageError("complete jobs belong to no queue: leave QUEUE out")
    with session(app_path, broker) as app:
        if queue:
            require(app, Capability.LISTING, "jobs")
            require_queues(app, [queue])
        found = [
            job_summary(job, state)
            for job in list_jobs(app.engine, state, queue=queue or None, limit=limit)
        ]
    if as_json:
        print_json(found)
        return
    if not found:
        say(f"no {state} jobs" + (f" in queue {queue!r}" if queue else ""))
        return
    Console().print(jobs_table(found, state, queue))


# -- job ----------------------------------------------------------------------------------
def decoded(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data


def job_document(job: Job) -> dict[str, Any]:
    """Everything about a job, with its data decoded: what `job --json` prints."""
    return {
        "jid": job.jid,
        "klass": job.klass,
        "queue": job.queue,
        "state": str(job.state),
        "priority": job.priority,
        "tags": list(job.tags),
        "retries": job.retries,
        "remaining": job.remaining,
        "worker": job.worker,
        "expires": job.expires,
        "due": job.due,
        "data": decoded(job.data),
        "result": decoded(job.result) if job.result is not None else None,
        "failure": asdict(job.failure) if job.failure else None,
        "dependencies": list(job.dependencies),
        "dependents": list(job.dependents),
        "spawned_from_jid": job.spawned_from_jid,
        "tracked": job.tracked,
        "progress": asdict(found) if (found := progress_of(job)) is not None else None,
        "history": [{"what": e.what, "when": e.when, **e.details} for e in job.history],
    }


def workflow_document(shown: graph.Picture) -> dict[str, Any]:
    """A job's workflow, every job of it: what `job --json` prints under `workflow`."""
    return {
        "id": shown.workflow_id,
        "jobs": [
            {"jid": jid, "task": task, "after": list(after), "state": state and str(state)}
            for jid, task, after, state in shown.steps
        ],
    }


def progress_text(found: Progress) -> str:
    """`40% step 2 of 5`."""
    return f"{found.fraction:.0%} {found.message}".rstrip()


def job_fields(job: Job) -> Iterator[tuple[str, object]]:
    yield from (("jid", job.jid), ("klass", job.klass), ("queue", job.queue or "-"))
    yield from (("state", job.state), ("priority", job.priority))
    yield ("retries", f"{job.remaining} of {job.retries} left")
    optional: list[tuple[str, object]] = [
        ("tags", ", ".join(job.tags)),
        ("worker", job.worker),
        ("lock expires", utc(job.expires, " UTC") if job.worker and job.expires else ""),
        ("due", utc(job.due, " UTC") if job.due is not None else ""),
        ("progress", progress_text(found) if (found := progress_of(job)) else ""),
        ("result", job.result or ""),
        ("depends on", ", ".join(job.dependencies)),
        ("dependents", ", ".join(job.dependents)),
        ("spawned from", job.spawned_from_jid or ""),
        ("tracked", "yes" if job.tracked else ""),
    ]
    yield from ((key, value) for key, value in optional if value)


def print_job(console: Console, job: Job) -> None:
    console.print(key_values(job_fields(job)))
    console.print(Text("\ndata", style="bold"))
    console.print(JSON.from_data(decoded(job.data), indent=2))
    if job.failure is not None:
        failure = job.failure
        console.print(Text("\nfailure", style="bold"))
        when = utc(failure.when, " UTC")
        console.print(
            key_values([("group", failure.group), ("worker", failure.worker), ("when", when)])
        )
        console.print(Text(failure.message))
    history = [
        [utc(e.when), e.what, " ".join(f"{k}={v}" for k, v in e.details.items())]
        for e in job.history
    ]
    console.print()
    console.print(
        table(
            [text("when (UTC)", no_wrap=True), text("what"), text("details")],
            history,
            title="history",
        )
    )


def print_workflow(console: Console, shown: graph.Picture, focus: str) -> None:
    """The workflow's jobs by level (`>` marks the job asked for)."""
    columns = [text(""), text("job", no_wrap=True), text("task"), text("state"), text("waits for")]
    title = f"workflow {shown.workflow_id} ({graph.summary(shown)})"
    console.print()
    console.print(table(columns, graph.text_rows(shown, focus), title=title))


@click.command("job")
@click.argument("jid")
@json_option
@connection_options
def job_command(app_path: str | None, broker: str | None, jid: str, as_json: bool) -> None:
    """One job in detail: fields, progress, data, failure, history, and the graph of its
    workflow if it is a step of one."""
    with session(app_path, broker) as app:
        found = app.engine.get(jid)
        if found is None:
            raise click.ClickException(f"no job {jid!r}")
        workflow = _workflow(app.engine, found)
        if as_json:
            shown = job_document(found)
            shown["workflow"] = workflow_document(workflow) if workflow is not None else None
            print_json(shown)
            return
        console = Console()
        print_job(console, found)
        if workflow is not None:
            print_workflow(console, workflow, jid)


def _workflow(engine: Engine, job: Job) -> graph.Picture | None:
    """The workflow `job` is a step of, laid out around it; None: none, or its first job
    is gone."""
    workflow_id = graph.workflow_of(job)
    return None if workflow_id is None else graph.read(engine, workflow_id, job.jid)


COMMANDS: Final = (status_command, jobs_command, job_command)
