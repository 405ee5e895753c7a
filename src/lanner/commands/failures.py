"""The commands on failed jobs:

    lanner failed [GROUP] [--limit N] [--json]  the failure groups, or one group's jobs
    lanner retry GROUP [--queue Q] [--count N]  put failed jobs back, oldest first

Retrying is `lanner.operations.retry_failed`; this module renders the groups and jobs. A
group with no failed job, or a --queue that exists nowhere, is an error naming those that
exist (`lanner.commands.known`), not an empty answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lanner.commands.common import connection_options, json_option, limit_option, session
from lanner.commands.known import require_group, require_queues
from lanner.commands.rendering import groups_table, print_json, say, table, text, utc
from lanner.job import Job
from lanner.operations import retry_failed
from lanner.records import JobPage

__all__ = ["COMMANDS", "first_line"]


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
@limit_option("At most N jobs of GROUP, newest first.")
@json_option
@connection_options
def failed_command(
    app_path: str | None, broker: str | None, group: str | None, limit: int, as_json: bool
) -> None:
    """The failure groups and their counts, or with GROUP the jobs of that group."""
    with session(app_path, broker) as app:
        groups = app.engine.failed_groups()
        if group is None:
            show_groups(groups, as_json)
        else:
            require_group(groups, group)
            show_failed_jobs(group, app.engine.failed(group, 0, limit), as_json)


# -- retry --------------------------------------------------------------------------------
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
        require_group(app.engine.failed_groups(), group)
        if queue is not None:  # a typo would send the jobs where no worker looks
            require_queues(app, [queue])
        moved = retry_failed(app.engine, group, queue=queue, count=count)
    total = sum(moved.values())
    where = ", ".join(f"{n} into {q!r}" for q, n in moved.items())
    say(
        f"retried {total} job{'' if total == 1 else 's'} of group {group!r}"
        + (f": {where}" if where else "")
    )


COMMANDS: Final = (failed_command, retry_command)
