"""The admin commands: look at queues, jobs and failures, retry, pause, publish.

    lanner status [--json]                      every queue's counts, and the failure groups
    lanner jobs [QUEUE] [--state S] [--limit N] [--json]
    lanner job JID [--json]                     one job in detail
    lanner failed [GROUP] [--limit N] [--json]  the failure groups, or one group's jobs
    lanner retry GROUP [--queue Q] [--count N]  put failed jobs back, oldest first
    lanner pause QUEUE... / lanner unpause QUEUE...
    lanner publish TASK [ARGS_JSON] [--kwargs JSON] [--queue Q] [--delay S] [--priority P]
                   [--tag T ...]

Every command takes `-A/--app` and `--broker`. With `--json` a command prints one JSON
document and nothing else on stdout; times there are Unix seconds, in tables UTC. Errors
lanner raises on purpose (a bad queue name, an engine without a capability) are reported
as one line and exit status 1, never as a traceback. `lanner.cli` adds the commands to its
group with `register`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import click
from rich import box
from rich.console import Console
from rich.json import JSON
from rich.table import Column, Table
from rich.text import Text

from lanner.app import App
from lanner.commands.common import app_option, broker_option, load_app
from lanner.engine import Engine
from lanner.errors import LannerError
from lanner.job import Job
from lanner.records import JobPage, QueueCounts, RecurringJob
from lanner.task import find_task

__all__ = ["register"]

F = TypeVar("F", bound=Callable[..., Any])

LISTABLE_STATES: Final = (
    "waiting",
    "running",
    "stalled",
    "scheduled",
    "depends",
    "complete",
    "recurring",
)
COUNT_HEADERS: Final = {
    "waiting": "waiting",
    "scheduled": "sched",
    "running": "running",
    "stalled": "stalled",
    "depends": "deps",
    "recurring": "recur",
}
"""`QueueCounts` fields, in table order, with headers short enough for 80 columns."""
RETRY_PAGE: Final = 500
"""Failed jobs read, or put back, per engine call when `retry` walks a group."""


# -- shared plumbing ----------------------------------------------------------------------
def connection_options(command: F) -> F:
    """`-A/--app` and `--broker`, which every admin command takes."""
    return app_option(broker_option(command))


def json_option(command: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of tables."
    )(command)


@contextmanager
def session(app_path: str | None, broker: str | None) -> Iterator[App]:
    """The App to work with; lanner's errors inside become one-line click errors."""
    try:
        app = load_app(app_path, broker)
        try:
            yield app
        finally:
            app.close()
    except LannerError as error:
        raise click.ClickException(str(error)) from None


def print_json(document: object) -> None:
    """One JSON document on stdout: not wrapped, not highlighted, nothing else."""
    Console().out(json.dumps(document, ensure_ascii=False), highlight=False)


def say(message: str) -> None:
    """A line of text, printed as is (no rich markup in names or messages)."""
    Console().print(Text(message))


def utc(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S")


def number(header: str) -> Column:
    return Column(header, justify="right", no_wrap=True)


def text(header: str, *, no_wrap: bool = False) -> Column:
    """A text column; `no_wrap` ones (jids, times) are never broken, so they stay copyable."""
    return Column(header, no_wrap=no_wrap, overflow="ellipsis" if no_wrap else "fold")


def table(
    columns: Sequence[Column],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    total: Sequence[object] | None = None,
    show_lines: bool = False,
) -> Table:
    """A table in the admin commands' one style; cells are plain text, never markup."""
    result = Table(
        *columns,
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        header_style="bold",
        pad_edge=False,
        collapse_padding=True,
        show_lines=show_lines,
    )
    for row in rows:
        result.add_row(*cells(row))
    if total is not None:
        result.add_section()
        result.add_row(*cells(total), style="bold")
    return result


def cells(row: Sequence[object]) -> list[Text]:
    return [cell if isinstance(cell, Text) else Text(str(cell)) for cell in row]


def key_values(pairs: Iterable[tuple[str, object]]) -> Table:
    """Field names and values, two columns without a header."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in pairs:
        grid.add_row(key, Text(str(value)))
    return grid


# -- status -------------------------------------------------------------------------------
def queues_table(queues: Sequence[QueueCounts]) -> Table:
    columns = [text("queue"), *(number(h) for h in COUNT_HEADERS.values()), text("paused")]
    rows = [
        [q.name, *(getattr(q, name) for name in COUNT_HEADERS), "yes" if q.paused else ""]
        for q in queues
    ]
    total = ["total", *(sum(getattr(q, name) for q in queues) for name in COUNT_HEADERS), ""]
    return table(columns, rows, title="queues", total=total)


def groups_table(groups: Mapping[str, int]) -> Table:
    return table(
        [text("failure group"), number("jobs")],
        sorted(groups.items()),
        title="failed",
        total=["total", sum(groups.values())],
    )


@click.command("status")
@json_option
@connection_options
def status_command(app_path: str | None, broker: str | None, as_json: bool) -> None:
    """Every queue's job counts, and the failure groups."""
    with session(app_path, broker) as app:
        queues = app.engine.queues()
        groups = app.engine.failed_groups()
    if as_json:
        print_json({"queues": [asdict(q) for q in queues], "failed": groups})
        return
    console = Console()
    console.print(queues_table(queues) if queues else Text("no queues yet"))
    console.print(groups_table(groups) if groups else Text("no failed jobs"))


# -- jobs ---------------------------------------------------------------------------------
def job_summary(job: Job | RecurringJob, state: str) -> dict[str, Any]:
    """A line of `jobs`: a job, or a recurring job's template."""
    return {
        "jid": job.jid,
        "queue": job.queue,
        "state": state,
        "klass": job.klass,
        "priority": job.priority,
    }


def list_jobs(engine: Engine, state: str, queue: str | None, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` jobs in `state`, of `queue` or else of every queue in turn.

    The state shown is the one the engine lists them under (a due scheduled job is
    `waiting`, a running job whose lock ran out `stalled`), which is what a worker sees.
    """
    if state == "complete":
        return [
            job_summary(job, state) for job in engine.multiget(engine.jobs(state, None, 0, limit))
        ]
    found: list[dict[str, Any]] = []
    for name in [queue] if queue else [q.name for q in engine.queues()]:
        jids = engine.jobs(state, name, 0, limit - len(found))
        if state == "recurring":
            templates = (engine.recur_get(jid) for jid in jids)
            found += [job_summary(t, state) for t in templates if t is not None]
        else:
            found += [job_summary(job, state) for job in engine.multiget(jids)]
        if len(found) >= limit:
            break
    return found


def jobs_table(found: Sequence[Mapping[str, Any]], state: str, queue: str | None) -> Table:
    """Jids, klasses and priorities; the queue too when listing every queue."""
    fields = ["jid", "klass", "priority"] if queue else ["jid", "queue", "klass", "priority"]
    columns = [text("jid", no_wrap=True), *(text(f) for f in fields[1:-1]), number("pri")]
    title = f"{state} jobs" + (f" in {queue!r}" if queue else "")
    return table(columns, [[j[f] for f in fields] for j in found], title=title)


@click.command("jobs")
@click.argument("queue", required=False)
@click.option(
    "--state",
    type=click.Choice(LISTABLE_STATES),
    default="waiting",
    show_default=True,
    help="Which jobs to list; complete ones belong to no queue.",
)
@click.option(
    "--limit",
    metavar="N",
    type=click.IntRange(min=1),
    default=25,
    show_default=True,
    help="At most N jobs.",
)
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
        found = list_jobs(app.engine, state, queue, limit)
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
        "data": decoded(job.data),
        "failure": asdict(job.failure) if job.failure else None,
        "dependencies": list(job.dependencies),
        "dependents": list(job.dependents),
        "spawned_from_jid": job.spawned_from_jid,
        "tracked": job.tracked,
        "history": [{"what": e.what, "when": e.when, **e.details} for e in job.history],
    }


def job_fields(job: Job) -> Iterator[tuple[str, object]]:
    yield from (("jid", job.jid), ("klass", job.klass), ("queue", job.queue or "-"))
    yield from (("state", job.state), ("priority", job.priority))
    yield ("retries", f"{job.remaining} of {job.retries} left")
    optional: list[tuple[str, object]] = [
        ("tags", ", ".join(job.tags)),
        ("worker", job.worker),
        ("lock expires", f"{utc(job.expires)} UTC" if job.worker and job.expires else ""),
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
        when = f"{utc(failure.when)} UTC"
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


@click.command("job")
@click.argument("jid")
@json_option
@connection_options
def job_command(app_path: str | None, broker: str | None, jid: str, as_json: bool) -> None:
    """One job in detail: fields, data, failure and history."""
    with session(app_path, broker) as app:
        found = app.engine.get(jid)
    if found is None:
        raise click.ClickException(f"no job {jid!r}")
    if as_json:
        print_json(job_document(found))
    else:
        print_job(Console(), found)


# -- failed -------------------------------------------------------------------------------
def first_line(message: str) -> str:
    """What a failure says in one line: a traceback's last line (the exception), else the first."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if lines[0].startswith("Traceback (most recent call last)") else lines[0]


def failed_document(job: Job) -> dict[str, Any]:
    failure = job.failure
    return {
        "jid": job.jid,
        "klass": job.klass,
        "queue": job.queue,
        "when": failure.when if failure else None,
        "worker": failure.worker if failure else None,
        "message": failure.message if failure else None,
    }


def failed_jobs_table(group: str, total: int, jobs: Sequence[Job]) -> Table:
    """One row per job: its jid, klass and message stacked (to fit 80 columns), queue, when."""
    rows = []
    for job in jobs:
        message = first_line(job.failure.message) if job.failure else ""
        stacked = Text.assemble((job.jid, "bold"), "\n", job.klass, "\n", (message, "dim"))
        rows.append([stacked, job.queue, utc(job.failure.when) if job.failure else ""])
    columns = [text("jid / klass / message"), text("queue"), text("failed (UTC)", no_wrap=True)]
    title = f"{group}: {len(jobs)} of {total}, newest first"
    return table(columns, rows, title=title, show_lines=True)


def show_groups(groups: Mapping[str, int], as_json: bool) -> None:
    if as_json:
        print_json(groups)
    elif groups:
        Console().print(groups_table(groups))
    else:
        say("no failed jobs")


def show_failed_jobs(group: str, page: JobPage, as_json: bool) -> None:
    if as_json:
        jobs = [failed_document(job) for job in page.jobs]
        print_json({"group": group, "total": page.total, "jobs": jobs})
    elif page.jobs:
        Console().print(failed_jobs_table(group, page.total, page.jobs))
    else:
        say(f"no failed jobs in group {group!r}")


@click.command("failed")
@click.argument("group", required=False)
@click.option(
    "--limit",
    metavar="N",
    type=click.IntRange(min=1),
    default=25,
    show_default=True,
    help="At most N jobs of GROUP, newest first.",
)
@json_option
@connection_options
def failed_command(
    app_path: str | None, broker: str | None, group: str | None, limit: int, as_json: bool
) -> None:
    """The failure groups and their counts, or with GROUP the jobs of that group."""
    with session(app_path, broker) as app:
        if group is None:
            show_groups(app.engine.failed_groups(), as_json)
        else:
            show_failed_jobs(group, app.engine.failed(group, 0, limit), as_json)


# -- retry --------------------------------------------------------------------------------
def unfail_into(engine: Engine, group: str, queue: str, count: int | None) -> dict[str, int]:
    """Put up to `count` (None: all) of the oldest jobs of `group` into `queue`."""
    moved = 0
    while count is None or moved < count:
        step = RETRY_PAGE if count is None else min(RETRY_PAGE, count - moved)
        done = engine.unfail(queue, group, step)
        moved += done
        if done < step:
            break
    return {queue: moved} if moved else {}


def oldest_failed(engine: Engine, group: str, size: int) -> list[Job]:
    """The `size` oldest jobs of `group`, oldest first (the order `unfail` takes them in)."""
    total = engine.failed(group, 0, 0).total
    while True:
        page = engine.failed(group, max(0, total - size), size)
        if page.total == total:  # else jobs failed in between and shifted the page: again
            return list(reversed(page.jobs))
        total = page.total


def unfail_home(engine: Engine, group: str, count: int | None) -> dict[str, int]:
    """Put up to `count` (None: all) of the oldest jobs of `group` back into their own queues.

    `unfail` takes the oldest jobs of a group into one queue, so the oldest jobs are read
    first and each run of consecutive jobs of one queue is unfailed into that queue.
    """
    moved: dict[str, int] = {}
    total = 0
    while count is None or total < count:
        size = RETRY_PAGE if count is None else min(RETRY_PAGE, count - total)
        oldest = oldest_failed(engine, group, size)
        if not oldest:
            break
        for queue, run in itertools.groupby(oldest, key=lambda job: job.queue):
            wanted = len(list(run))
            done = engine.unfail(queue, group, wanted)
            moved[queue] = moved.get(queue, 0) + done
            total += done
            if done < wanted:  # someone else is emptying the group: stop guessing
                return moved
    return moved


@click.command("retry")
@click.argument("group")
@click.option(
    "--queue", metavar="Q", help="Queue to put the jobs in (default: each job's own queue)."
)
@click.option(
    "--count",
    metavar="N",
    type=click.IntRange(min=1),
    help="At most N jobs, oldest first (default: all).",
)
@connection_options
def retry_command(
    app_path: str | None, broker: str | None, group: str, queue: str | None, count: int | None
) -> None:
    """Put the failed jobs of GROUP back to be run again, oldest first."""
    with session(app_path, broker) as app:
        if queue is None:
            moved = unfail_home(app.engine, group, count)
        else:
            moved = unfail_into(app.engine, group, queue, count)
    total = sum(moved.values())
    where = ", ".join(f"{n} into {q!r}" for q, n in moved.items())
    say(
        f"retried {total} job{'' if total == 1 else 's'} of group {group!r}"
        + (f": {where}" if where else "")
    )


# -- pause / unpause ----------------------------------------------------------------------
def pausing_command(pause: bool) -> click.Command:
    """`pause` or `unpause`: one command body for both."""
    verb = "pause" if pause else "unpause"
    effect = "take none of their jobs until unpaused" if pause else "take their jobs again"

    @click.command(verb, help=f"{verb.capitalize()} QUEUES: workers {effect}.")
    @click.argument("queues", nargs=-1, required=True)
    @connection_options
    def command(app_path: str | None, broker: str | None, queues: tuple[str, ...]) -> None:
        with session(app_path, broker) as app:
            (app.engine.pause if pause else app.engine.unpause)(list(queues))
        say(f"{verb}d {', '.join(queues)}")

    return command


# -- publish ------------------------------------------------------------------------------
def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def json_value(kind: type, label: str) -> Callable[[click.Context, click.Parameter, str], Any]:
    """A click callback that parses a parameter as JSON of type `kind`."""

    def parse(ctx: click.Context, param: click.Parameter, value: str) -> Any:
        try:
            parsed = json.loads(value, parse_constant=_reject_constant)
        except ValueError as error:
            raise click.BadParameter(f"not valid JSON: {error}") from None
        if not isinstance(parsed, kind):
            raise click.BadParameter(f"must be a JSON {label}, not {value!r}")
        return parsed

    return parse


@click.command("publish")
@click.argument("task")
@click.argument(
    "args", metavar="[ARGS_JSON]", required=False, default="[]", callback=json_value(list, "array")
)
@click.option(
    "--kwargs",
    metavar="JSON",
    default="{}",
    callback=json_value(dict, "object"),
    help="Keyword arguments, a JSON object.",
)
@click.option("--queue", metavar="Q", help="Queue to publish to (default: the task's).")
@click.option(
    "--delay",
    metavar="S",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Run no sooner than S seconds.",
)
@click.option("--priority", metavar="P", type=int, help="Priority within the queue, higher first.")
@click.option("--tag", "tags", metavar="T", multiple=True, help="Tag the job (repeatable).")
@connection_options
def publish_command(
    app_path: str | None,
    broker: str | None,
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    queue: str | None,
    delay: float,
    priority: int | None,
    tags: tuple[str, ...],
) -> None:
    """Publish a run of TASK (its dotted name) with ARGS_JSON, a JSON array; print its jid."""
    with session(app_path, broker) as app:
        task_class = find_task(task)
        if task_class is None:
            raise click.ClickException(
                f"unknown task {task!r}: no lanner Task has that name "
                "(give its module with -A, or check the spelling)"
            )
        jid = app.publish(
            task_class,
            args,
            kwargs,
            queue=queue,
            delay=delay,
            priority=priority,
            tags=list(tags) or None,
        )
    Console().out(jid, highlight=False)


def register(group: click.Group) -> None:
    """Add the admin commands to `group` (the `lanner` command)."""
    for command in (
        status_command,
        jobs_command,
        job_command,
        failed_command,
        retry_command,
        pausing_command(pause=True),
        pausing_command(pause=False),
        publish_command,
    ):
        group.add_command(command)
