"""The pool supervisor's CPU per job, its rounds alone: N no-op jobs drained by 2 processes.

Usage: python scripts/supervisor-cpu.py URL|sqlite [N] [--profile]

N no-op jobs (default 10,000) are published beforehand; a 2-process `WorkerPool` is
started, and this process then does what `lanner worker` does, `supervise(0.1)` rounds,
until the pool has counted N jobs processed (nothing else: no polling of the store, unlike
`scripts/noop-drain.py`, whose supervisor figure includes its polling of the counts). It
prints the supervisor's CPU (`time.process_time`) per job from the pool's start, its
rounds per job and the drain rate; `--profile` adds a cProfile (CPU clock) of the rounds.
Put a checkout's `src` first on PYTHONPATH to measure it, and alternate two checkouts.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time

import lanner
from lanner.worker.pool import WorkerPool


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    url = args[0]
    n = int(args[1]) if len(args) > 1 else 10_000
    if url == "sqlite":
        url = "sqlite:///" + tempfile.mkdtemp() + "/supervisor.db"
    app = lanner.App(url)

    @app.task(name="supervisor_cpu.noop")
    def noop() -> None:
        pass

    for i in range(0, n, 1000):
        app.publish_many([noop.message() for _ in range(min(1000, n - i))])
    pool = WorkerPool(app, concurrency=2)
    pool.start()
    profile = cProfile.Profile(time.process_time) if "--profile" in sys.argv else None
    cpu, wall, rounds = time.process_time(), time.monotonic(), 0
    if profile is not None:
        profile.enable()
    while pool.processed < n:
        pool.supervise(0.1)
        rounds += 1
    if profile is not None:
        profile.disable()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    pool.terminate(timeout=10)
    print(f"supervisor {cpu / n * 1e6:.1f} µs CPU/job, {rounds / n:.2f} rounds/job, "
          f"{n / wall:,.0f} jobs/s")  # fmt: skip
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
