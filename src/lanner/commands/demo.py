"""`lanner demo`: a worker pool at work on a fresh SQLite database, start to finish.

`run_demo` publishes a mixed workload (demo_workload.py) to three queues with Kale's example
priorities (high_priority 100, default 40, low_priority 5), runs a 2-process pool with the Reduced
Lottery selector, shows progress per queue, and ends with what each queue got: jobs
done, retries spent, wait and run times, and how waits were distributed, then says which
failures were on purpose. The `demo` command is `run_demo` on the terminal.
"""

from __future__ import annotations

import logging
import random
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lanner.app import App, set_default_app
from lanner.commands.bounded import BoundedInt
from lanner.commands.rendering import groups_table
from lanner.job import Job
from lanner.limits import MAX_PROCESSES
from lanner.prepared import Message, PublishOptions
from lanner.settings import Settings
from lanner.worker import logs

if TYPE_CHECKING:
    from lanner.worker.pool import WorkerPool

__all__ = ["demo", "run_demo", "sparkline"]


@dataclass
class QueueReport:
    done: int = 0
    retried: int = 0
    waits: list[float] | None = None
    runs: list[float] | None = None


@click.command()
@click.option("-c", "--concurrency", default=2, show_default=True,
              type=BoundedInt(1, MAX_PROCESSES))  # fmt: skip
@click.option("--db", "database", type=click.Path(dir_okay=False),
              help="Keep the demo's database in FILE (new), to watch it with "
                   "`lanner web --broker sqlite:///FILE` while it runs, and after.")  # fmt: skip
def demo(concurrency: int, database: str | None) -> None:
    """Run a worker pool on a mixed workload in a fresh SQLite database, with live progress."""
    if database is not None and Path(database).exists():
        raise click.ClickException(f"{database} exists: the demo starts from a new database")
    logs.configure(logging.ERROR)
    if not run_demo(Console(), processes=concurrency, database=database):
        raise click.ClickException("some demo jobs did not complete")


def run_demo(
    console: Console,
    *,
    processes: int = 2,
    directory: str | None = None,
    database: str | None = None,
) -> bool:
    """Run the demo (in `database`, else a file of a new folder in `directory` that goes
    away after); True if every job completed."""
    from lanner.commands.demo_workload import QUEUES
    from lanner.worker.pool import WorkerPool  # here, so that `lanner --help` need not load it

    with tempfile.TemporaryDirectory(prefix="lanner-demo-", dir=directory) as folder:
        url = f"sqlite:///{Path(database).absolute() if database else Path(folder, 'demo.db')}"
        settings = Settings(broker=url, retry_delay_multiple_sec=0.2, retry_delay_max_sec=1.0)
        app = App(url, settings=settings, queues=QUEUES)
        set_default_app(app)
        console.print(f"[bold]lanner demo[/]: a {processes}-process pool on {url}")
        totals = _publish(app)
        console.print(
            "published " + ", ".join(f"{n} to {queue}" for queue, n in totals.items())
            + " in one call; the pool picks queues by Reduced Lottery (priorities 100/40/5)"
        )  # fmt: skip
        pool = WorkerPool(app, concurrency=processes, queues=QUEUES, selector="reduced-lottery")
        started = time.monotonic()
        try:
            _run_with_progress(console, app, pool, totals)
        finally:
            pool.terminate(timeout=10)
            set_default_app(None)
        elapsed = time.monotonic() - started
        reports = _collect(app, sum(totals.values()))
        _show(console, reports, totals, elapsed)
        failed = app.engine.failed_groups()
        app.close()
    if failed:
        console.print(Text("Some jobs failed for good, which the demo does not mean to:"))
        console.print(groups_table(failed))
    return not failed and all(reports[q].done == n for q, n in totals.items())


def _publish(app: App) -> dict[str, int]:
    from lanner.commands.demo_workload import WORKLOAD

    messages = [
        Message(task, (number,), options=PublishOptions())
        for task, count in WORKLOAD
        for number in range(1, count + 1)
    ]
    random.shuffle(messages)
    app.publish_many(messages)
    totals: dict[str, int] = defaultdict(int)
    for task, count in WORKLOAD:
        totals[str(task.queue)] += count
    return dict(totals)


def _run_with_progress(
    console: Console, app: App, pool: WorkerPool, totals: dict[str, int]
) -> None:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    # No refresh thread: the pool forks, and forking a process with threads is unsafe.
    with Progress(*columns, console=console, auto_refresh=False) as progress:
        bars = {queue: progress.add_task(queue, total=total) for queue, total in totals.items()}
        pool.start()
        remaining = sum(totals.values())
        while remaining:
            pool.supervise(timeout=0.1)
            progress.refresh()
            remaining = 0
            for queue, total in totals.items():
                counts = app.engine.queue_counts(queue)
                left = counts.waiting + counts.scheduled + counts.running + counts.stalled
                progress.update(bars[queue], completed=total - left)
                remaining += left


def _collect(app: App, expected: int) -> dict[str, QueueReport]:
    """Wait and run times of the completed jobs, from their histories."""
    engine = app.engine
    jids = engine.jobs("complete", count=expected)
    reports: dict[str, QueueReport] = defaultdict(lambda: QueueReport(0, 0, [], []))
    for start in range(0, len(jids), 500):
        for job in engine.multiget(jids[start : start + 500]):
            _add(reports, job)
    return reports


def _add(reports: dict[str, QueueReport], job: Job) -> None:
    events = job.history
    put = next(e for e in events if e.what == "put")
    pops = [e for e in events if e.what == "popped"]
    done = next((e for e in reversed(events) if e.what == "done"), None)
    report = reports[str(put.details.get("q", "?"))]
    report.done += 1
    # Retries spent, as the engine counts them: a job given back unstarted is popped
    # again without spending one, and was not retried.
    report.retried += job.retries - job.remaining
    assert report.waits is not None
    assert report.runs is not None
    if pops:
        report.waits.append(pops[0].when - put.when)
        if done is not None:
            report.runs.append(done.when - pops[-1].when)


def _show(
    console: Console, reports: dict[str, QueueReport], totals: dict[str, int], elapsed: float
) -> None:
    table = Table(title=f"done in {elapsed:.1f} s", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False)  # fmt: skip
    # Two-line headings, so that the table fits 80 columns.
    headings = ("queue (priority)", "done", "retries", "wait\np50", "wait\np99", "run\np50",
                "wait\nspread")  # fmt: skip
    for heading in headings:
        justify: Literal["left", "right"] = "left" if heading.startswith("queue") else "right"
        table.add_column(heading, justify=justify, no_wrap=True)
    from lanner.commands.demo_workload import ON_PURPOSE, QUEUES

    longest = max((max(r.waits or [0]) for r in reports.values()), default=0.0)
    for queue in QUEUES:
        report = reports.get(queue.name, QueueReport(0, 0, [], []))
        waits, runs = report.waits or [], report.runs or []
        table.add_row(
            f"{queue.name} ({queue.priority})", f"{report.done}/{totals.get(queue.name, 0)}",
            str(report.retried), _seconds(_percentile(waits, 50)), _seconds(_percentile(waits, 99)),
            _seconds(_percentile(runs, 50)), sparkline(waits, longest, width=10),
        )  # fmt: skip
    console.print(table)
    console.print()
    console.print(Text(ON_PURPOSE))


def _percentile(values: Sequence[float], percent: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(percent) - 1]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def sparkline(values: Sequence[float], top: float, width: int = 16) -> str:
    """A histogram in block characters: `width` equal buckets from 0 to `top`."""
    if not values or top <= 0:
        return ""
    counts = [0] * width
    for value in values:
        counts[min(width - 1, int(value / top * width))] += 1
    blocks = " ▁▂▃▄▅▆▇█"
    peak = max(counts)
    return "".join(blocks[round(count / peak * (len(blocks) - 1))] for count in counts)
