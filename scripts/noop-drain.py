"""Drain N no-op jobs with a 2-process pool; print jobs/s and the workers' CPU per job.

Usage: python scripts/noop-drain.py URL|sqlite N sync|async TASKS_PER_PROCESS

Kept outside the package and free of newer APIs (`tasks_per_process` is passed only when
above 1), so that it runs on older commits too: put a checkout's `src` first on PYTHONPATH
to measure it (docs/benchmarks.md, "A/B: one job at a time, before and after the issue").
"""

import os
import sys
import tempfile
import time

import lanner
from lanner.queues import QueueConfig
from lanner.worker.pool import WorkerPool

url, n, kind, t = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if url == "sqlite":
    url = "sqlite:///" + tempfile.mkdtemp() + "/ab.db"
Q = [QueueConfig("ab", batch_size=100, visibility_timeout_sec=60, long_poll_time_sec=0.25)]
app = lanner.App(url, queues=Q)


@app.task(queue="ab", time_limit=30)
def noop() -> None:
    pass


@app.task(queue="ab", time_limit=30)
async def anoop() -> None:
    pass


task = noop if kind == "sync" else anoop
for i in range(0, n, 1000):
    app.publish_many([task.message() for _ in range(min(1000, n - i))])


def cpu(pid):
    with open(f"/proc/{pid}/stat") as stat:
        f = stat.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


opts = {"tasks_per_process": t} if t > 1 else {}
pool = WorkerPool(app, concurrency=2, queues=Q, **opts)
pool.start()
t0 = time.monotonic()
engine = app.engine
while True:
    pool.supervise(0.02)
    c = engine.queue_counts("ab")
    if c.waiting == 0 and c.running == 0:
        break
elapsed = time.monotonic() - t0
used = sum(cpu(pid) for pid in pool.children)
pool.terminate(timeout=10)
print(f"{kind} t={t} {n / elapsed:.0f} jobs/s, worker cpu {used / n * 1e6:.0f} us/job")
