"""What every `lanner bench` command shares: progress bars on stderr, SIGTERM turned into
an exit that cleans up, errors as one line, the `--url` option, and the footer naming the
engine and machine a benchmark ran on.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from lanner.errors import LannerError
from lanner.tools.bench.common import BenchError, BenchProgress, MachineInfo

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


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
