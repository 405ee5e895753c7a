"""What the integrations' end-to-end tests share: a real `lanner worker` in a subprocess,
its stderr in `worker.log` of its directory, stopped by SIGTERM at the end (killed if it
has not gone after 30 s)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def lanner_worker(
    arguments: list[str], cwd: Path, environment: Mapping[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m lanner worker <arguments>`, run in `cwd`, for the `with` block."""
    with (cwd / "worker.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "lanner", "worker", *arguments],
            cwd=cwd, env=dict(environment), stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
