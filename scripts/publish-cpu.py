"""CPU per single publish: `.delay()` end to end, or the engine's `put` alone.

Usage: python scripts/publish-cpu.py [URL] [--calls N] [--put] [--profile]

Publishes one job first (opening the store, not counted), then N more (default 3,000)
one call at a time, and prints the CPU (`time.process_time`) and the wall time per call
in µs. By default each call is `.delay(i, "x")` of a two-argument task; with --put, the
engine's `put` of a job like it (the SQLite put path alone). With --profile, a cProfile on
the CPU clock of N more calls follows, by internal time. Without a URL: a new SQLite file
with `synchronous=off`, so the disk is left out. It uses only public names that older
commits have too: run it with a checkout's `src` first on PYTHONPATH, interleaved, to
compare two commits (docs/benchmarks.md, "Single publishes and group commit").
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from collections.abc import Callable

import lanner


def noop(a: int, b: str) -> None:
    """The task published (no worker runs it)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default=None)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--put", action="store_true", help="the engine's put, not .delay()")
    parser.add_argument("--profile", action="store_true")
    given = parser.parse_args()
    url = given.url or f"sqlite:///{tempfile.mkdtemp()}/publish.db?synchronous=off"
    app = lanner.App(broker=url)
    task = app.task(name="publish_cpu.noop")(noop)
    data = '{"args":[1,"x"],"kwargs":{}}'
    count = [0]

    def put(i: int) -> None:
        count[0] += 1
        app.engine.put("default", f"put-{count[0]}", "publish_cpu.noop", data)

    call: Callable[[int], object] = put if given.put else (lambda i: task.delay(i, "x"))
    call(0)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(given.calls):
        call(i)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    what = "engine.put" if given.put else ".delay()"
    print(f"{what}: {cpu / given.calls * 1e6:.1f} µs CPU, {wall / given.calls * 1e6:.1f} µs wall")
    if given.profile:
        profile = cProfile.Profile(time.process_time)
        profile.enable()
        for i in range(given.calls):
            call(i)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    app.close()


if __name__ == "__main__":
    main()
