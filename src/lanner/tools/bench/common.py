"""What the benchmarks share: default sizes, errors, progress reporting, the store they
measure, and the record of the machine they ran on.

Kept light (no multiprocessing, no engine), so that `lanner bench`'s options can take
their defaults from here without loading a benchmark at `lanner --help`.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlsplit

from lanner import __version__

DEFAULT_JOBS: Final = 20_000
DEFAULT_BATCH: Final = 100
DEFAULT_SAMPLES: Final = 200
DEFAULT_CONCURRENCY: Final = 2
"""Worker processes of `lanner bench pool`."""
DEFAULT_IO_JOBS: Final = 5_000
DEFAULT_SLEEP_MS: Final = 10.0
DEFAULT_TASKS_PER_PROCESS: Final = 100
"""Jobs each worker process of `lanner bench io` runs at once."""

KLASS: Final = "lanner.tools.bench.Noop"
"""The klass of the jobs the engine benchmark puts (no worker ever runs them)."""

IDLE_GAP: Final = (0.005, 0.020)
"""Random pause (seconds) before each latency sample's put, so the popper is really blocked
in `pop(wait=...)`, and so puts do not phase-lock with a polling engine's check interval."""


class BenchError(RuntimeError):
    """A benchmark could not run, or its results failed verification."""


class BenchProgress(Protocol):
    """Where a benchmark reports its phases and how far each has got."""

    def phase(self, description: str, total: int) -> None: ...

    def advance(self, amount: int = 1) -> None: ...


class NoProgress:
    """A `BenchProgress` that shows nothing."""

    def phase(self, description: str, total: int) -> None:
        pass

    def advance(self, amount: int = 1) -> None:
        pass


def require_counts(**counts: int) -> None:
    """A benchmark's counts (jobs, processes, batch...) are each at least 1 (`ValueError`
    naming the first that is not)."""
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")


def rate(count: int, seconds: float) -> float:
    """`count` jobs in `seconds`, per second; `BenchError` if no time passed."""
    if seconds <= 0:
        raise BenchError(f"a phase of {count} jobs took no measurable time")
    return count / seconds


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """What a benchmark ran on, printed and kept with its figures."""

    platform: str
    cpu_count: int | None
    python: str
    sqlite: str
    lanner: str

    @classmethod
    def current(cls) -> MachineInfo:
        return cls(
            platform=platform.platform(),
            cpu_count=os.cpu_count(),
            python=platform.python_version(),
            sqlite=sqlite3.sqlite_version,
            lanner=__version__,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "cpu_count": self.cpu_count,
            "python": self.python,
            "sqlite": self.sqlite,
            "lanner": self.lanner,
        }


def synchronous_of(url: str) -> str | None:
    """The SQLite `synchronous` mode a URL asks for (its default if unset); None if not SQLite."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        return None
    from lanner.engines.sqlite.options import SQLiteOptions

    return SQLiteOptions.from_query(dict(parse_qsl(parts.query))).synchronous


@contextmanager
def bench_store(url: str | None) -> Iterator[str]:
    """`url`, or the URL of a new SQLite file (synchronous=full) deleted afterwards."""
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="lanner-bench-") as directory:
        path = (Path(directory) / "bench.db").as_posix()
        yield f"sqlite:///{path}?synchronous=full"
