"""What every `lanner bench` command shares: progress bars on stderr, SIGTERM turned into
an exit that cleans up, errors as one line, the options several commands take (`--url`,
`--json`, `-c/--concurrency`, `--batch`, `--samples`), the warning that a given store
keeps the jobs run in it, and the footer naming the engine and machine a benchmark ran on.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from lanner import limits
from lanner.commands.bounded import BoundedInt
from lanner.errors import LannerError
from lanner.tools.bench.common import (
    DEFAULT_BATCH,
    DEFAULT_CONCURRENCY,
    DEFAULT_JOBS,
    DEFAULT_SAMPLES,
    BenchError,
    BenchProgress,
    MachineInfo,
)

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from lanner.tools.bench.stats import Percentiles


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
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

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


def measured(benchmark: Callable[[BenchProgress], R]) -> R:
    """Run `benchmark` with progress bars on stderr; its errors become one line, status 1."""
    try:
        with exit_on_sigterm(), progress_bar(Console(stderr=True)) as bar:
            return benchmark(RichProgress(bar))
    except (BenchError, LannerError) as error:
        raise click.ClickException(str(error)) from error


def about(url: str, machine: MachineInfo) -> Text:
    """The engine and machine a benchmark ran on, under its table."""
    return Text(f"engine: {url}\n{machine.platform}, {machine.cpu_count} CPUs\n"
                f"Python {machine.python}, lanner {machine.lanner}", style="dim")  # fmt: skip


def store_url_option(what: str) -> Callable[[F], F]:
    """`--url`: the store a benchmark uses, `what` it is; a temporary SQLite file if unset."""
    return click.option(
        "--url",
        default=None,
        metavar="URL",
        help=f"{what}; it should be empty. Default: SQLite (synchronous=full) on a new "
        "temporary file, deleted afterwards.",
    )


def json_option() -> Callable[[F], F]:
    """`--json`: the results as one JSON object instead of a table."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the results as one JSON object."
    )


def concurrency_option(bounds: click.IntRange | None = None) -> Callable[[F], F]:
    """`-c/--concurrency`: the worker processes of the pool a benchmark starts."""
    return click.option("-c", "--concurrency", type=bounds or click.IntRange(min=1),
                        default=DEFAULT_CONCURRENCY, show_default=True,
                        help="Worker processes in the pool.")  # fmt: skip


def jobs_option(what: str, default: int = DEFAULT_JOBS) -> Callable[[F], F]:
    """`--jobs`: how many jobs a benchmark runs, `what` they are."""
    return click.option("--jobs", type=BoundedInt(1, limits.MAX_RUN_JOBS), default=default,
                        show_default=True, help=what)  # fmt: skip


def batch_option(what: str) -> Callable[[F], F]:
    """`--batch`: jobs per batch, `what` they are."""
    return click.option("--batch", type=BoundedInt(1, limits.MAX_BATCH_SIZE),
                        default=DEFAULT_BATCH, show_default=True, help=what)  # fmt: skip


def samples_option() -> Callable[[F], F]:
    """`--samples`: how many pickup latencies are measured."""
    return click.option("--samples", type=BoundedInt(1, limits.MAX_RUN_JOBS),
                        default=DEFAULT_SAMPLES, show_default=True,
                        help="Pickup-latency samples.")  # fmt: skip


class _Results(Protocol):
    def to_json(self) -> dict[str, Any]: ...


def show(result: _Results, as_json: bool, view: Callable[[], RenderableType]) -> None:
    """Print a benchmark's `result`: as one JSON object, or as its `view`."""
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        Console().print(view())


def measurements(title: str) -> Table:
    """A results table: a measurement and its result a row."""
    table = Table(title=title)
    table.add_column("measurement")
    table.add_column("result", justify="right")
    return table


def add_pickup(table: Table, pickup: Percentiles) -> None:
    """The pickup latency's rows: p50, p95, p99 and the largest of its samples."""
    for label, ms in (("p50", pickup.p50), ("p95", pickup.p95), ("p99", pickup.p99)):
        table.add_row(f"pickup latency {label}", f"{ms:.2f} ms")
    table.add_row(f"pickup latency max ({pickup.count} samples)", f"{pickup.max:.2f} ms")


def warn_store_kept(url: str | None, left: int) -> None:
    """Say on stderr that a store the user named keeps the `left` jobs a benchmark ran."""
    if url is not None:
        Console(stderr=True).print(
            f"[yellow]warning:[/] measuring {url}: it should be an empty store; "
            f"the benchmark leaves {left} completed jobs in it.",
            highlight=False,
        )


def store_about(url: str, synchronous: str | None, settings: str, machine: MachineInfo) -> Text:
    """The footer of a store benchmark: its store, the `settings` it ran with, the machine."""
    tuned = "" if synchronous is None else f"synchronous={synchronous}  "
    return Text(f"{url}\n{tuned}{settings}\n{machine.platform}, {machine.cpu_count} CPUs\n"
                f"Python {machine.python}, SQLite {machine.sqlite}, lanner {machine.lanner}",
                style="dim")  # fmt: skip
