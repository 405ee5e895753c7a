"""The tasks of `lanner bench chord-chaos`: chord parents and callbacks that write a ledger.

Each task appends `<what> <jid> <pid> <unix time> [detail]` lines to the file named by
LANNER_CHORD_LEDGER, with one `os.write` on an O_APPEND file (lines from many processes
never interleave): `pstart`/`pend` around a parent's work, `cstart` (with how many results
it got and whether they were every parent's, in order) and `cend` around a callback's.
The harness (`lanner.tools.bench.chord_chaos`) points `app` at its store before it forks.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from lanner.app import App

app = App("sqlite:///lanner-chord-chaos.db", results=True)

RETRIES = 100
"""Retries of every job: a kill -9 mid-run spends one; with a kill a second, no job of a
run of minutes is hit that often."""


def record(what: str, detail: str = "") -> None:
    from lanner import current_job

    job = current_job()
    jid = job.jid if job is not None else "-"
    line = f"{what} {jid} {os.getpid()} {time.time()!r} {detail}".rstrip() + "\n"
    fd = os.open(os.environ["LANNER_CHORD_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@app.task(queue="chords", max_retries=RETRIES)
def part(number: int, work_ms: float) -> int:
    """A parent: a little work, then its number (the callback checks it got them all)."""
    record("pstart")
    time.sleep(random.uniform(0, work_ms) / 1000)
    record("pend")
    return number


@app.task(queue="chords", max_retries=RETRIES)
def collect(results: list[Any], parents: int) -> int:
    """A callback: says whether it got every parent's number, in order; their sum."""
    whole = results == list(range(parents))
    record("cstart", f"{len(results)} {'all' if whole else 'wrong'}")
    total = sum(r for r in results if isinstance(r, int))
    record("cend")
    return total
