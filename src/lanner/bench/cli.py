"""The `lanner bench` command group: runs benchmarks and shows their results."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click
from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from lanner.bench.engine import (
    DEFAULT_BATCH,
    DEFAULT_JOBS,
    DEFAULT_SAMPLES,
    BenchError,
    EngineBenchResult,
    run_engine_benchmark,
)
from lanner.errors import LannerError


class RichProgress:
    """A `BenchProgress` drawing one bar per phase with rich."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def phase(self, description: str, total: int) -> None:
        self._task = self._progress.add_task(description, total=total)

    def advance(self, amount: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, amount)


def progress_bar(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into `SystemExit`, so that a benchmark killed by `timeout` or a
    supervisor still stops its children and deletes its temporary store."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.group()
def bench() -> None:
    """Measure lanner's performance on this machine."""


@bench.command("engine")
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="Engine to measure; it should be empty. Default: SQLite (synchronous=full) "
    "on a new temporary file, deleted afterwards.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=DEFAULT_JOBS,
    show_default=True,
    help="Jobs per throughput phase.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Jobs per put_many, and per pop in the drain phases.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=DEFAULT_SAMPLES,
    show_default=True,
    help="Pickup-latency samples.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
def engine_command(url: str | None, jobs: int, batch: int, samples: int, as_json: bool) -> None:
    """Measure the job engine: put and drain throughput, and pickup latency.

    Phases: N single puts; N jobs by put_many; draining N jobs with pop + complete_many in
    1 and then 2 processes; and the latency from a put to a blocked pop in another process
    returning it. Progress goes to stderr, results to stdout.
    """
    errors = Console(stderr=True)
    if url is not None:
        errors.print(
            f"[yellow]warning:[/] measuring {url}: it should be an empty store; "
            f"the benchmark leaves {2 * jobs + samples + 1} completed jobs in it.",
            highlight=False,
        )
    try:
        with exit_on_sigterm(), progress_bar(errors) as bar:
            result = run_engine_benchmark(url, jobs, batch, samples, RichProgress(bar))
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        Console().print(results_view(result))


def results_table(result: EngineBenchResult) -> Table:
    table = Table(title=f"lanner engine benchmark, {result.jobs:,} jobs")
    table.add_column("measurement")
    table.add_column("result", justify="right")
    rates = [
        ("put, 1 job per call", result.put_single_per_s),
        (f"put_many, {result.batch} jobs per call", result.put_batch_per_s),
        (f"pop + complete_many ({result.batch}), 1 process", result.drain_1proc_per_s),
        (f"pop + complete_many ({result.batch}), 2 processes", result.drain_2proc_per_s),
    ]
    for label, rate in rates:
        table.add_row(label, f"{rate:,.0f} jobs/s")
    pickup = result.pickup_ms
    for label, ms in (("p50", pickup.p50), ("p95", pickup.p95), ("p99", pickup.p99)):
        table.add_row(f"pickup latency {label}", f"{ms:.2f} ms")
    table.add_row(f"pickup latency max ({pickup.count} samples)", f"{pickup.max:.2f} ms")
    return table


def results_view(result: EngineBenchResult) -> Group:
    """The results table, then what was measured, on what."""
    machine = result.machine
    synchronous = "" if result.synchronous is None else f"synchronous={result.synchronous}  "
    about = Text(
        f"engine: {result.url}\n{synchronous}batch: {result.batch}  samples: {result.samples}\n"
        f"{machine.platform}, {machine.cpu_count} CPUs\n"
        f"Python {machine.python}, SQLite {machine.sqlite}, lanner {machine.lanner}",
        style="dim",
    )
    return Group(results_table(result), about)
