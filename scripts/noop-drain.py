"""Publish and drain no-op jobs with a 2-process pool; print rates and CPU per job.

Usage: python scripts/noop-drain.py URL|sqlite N sync|async TASKS_PER_PROCESS [options]

    --delays M     first publish M jobs one `.delay()` at a time (then they are drained
                   with the rest): single-publish jobs/s and the publisher's CPU per job
    --incr         each job's body does one Redis INCR (on the URL's Redis; the issue's
                   peer harness), instead of nothing
    --batch B      the queue's batch_size (default 100)
    --json         print one JSON object instead of a line

Reported: drain jobs/s (from the pool's start to an empty queue), the worker processes'
CPU per job (user + system from /proc/<pid>/stat, read before they are stopped), the
supervisor's (this process's CPU during the drain, its polling of the counts included)
and, with --delays, the single `.delay()` rate and CPU per call, and on Redis the
server's CPU per job (INFO cpu) while publishing and while draining.

Kept outside the package and free of newer APIs (`tasks_per_process` is passed only when
above 1), so that it runs on older commits too: put a checkout's `src` first on PYTHONPATH
to measure it; `scripts/ab.py` does that for two commits, interleaved (docs/benchmarks.md,
"A/B of two commits").
"""

import json
import os
import sys
import tempfile
import time

import lanner
from lanner.queues import QueueConfig
from lanner.worker.pool import WorkerPool

args = sys.argv[1:]
url, n, kind, t = args[0], int(args[1]), args[2], int(args[3])
options = args[4:]
delays = int(options[options.index("--delays") + 1]) if "--delays" in options else 0
batch = int(options[options.index("--batch") + 1]) if "--batch" in options else 100
incr = "--incr" in options
as_json = "--json" in options
if url == "sqlite":
    url = "sqlite:///" + tempfile.mkdtemp() + "/ab.db"
Q = [QueueConfig("ab", batch_size=batch, visibility_timeout_sec=60, long_poll_time_sec=0.25)]
app = lanner.App(url, queues=Q)
_counter = []


def _incr():
    if incr:
        if not _counter:
            import redis

            _counter.append(redis.Redis.from_url(url))
        _counter[0].incr("noop-drain:count")


@app.task(queue="ab", time_limit=30)
def noop() -> None:
    _incr()


@app.task(queue="ab", time_limit=30)
async def anoop() -> None:
    _incr()


def cpu(pid):
    with open(f"/proc/{pid}/stat") as stat:
        f = stat.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu():
    if not url.startswith("redis"):
        return 0.0
    import redis

    info = redis.Redis.from_url(url).info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


task = noop if kind == "sync" else anoop
out = {"commit_src": os.path.dirname(os.path.dirname(lanner.__file__)), "n": n, "kind": kind}
engine = app.engine
if delays:
    task.delay()  # the first publish opens the connection: not measured
    r0, c0, t0 = redis_cpu(), time.process_time(), time.perf_counter()
    for _ in range(delays - 1):
        task.delay()
    wall, used = time.perf_counter() - t0, time.process_time() - c0
    out["delay_per_s"] = (delays - 1) / wall
    out["delay_cpu_us"] = used / (delays - 1) * 1e6
    if url.startswith("redis"):
        out["delay_redis_cpu_us"] = (redis_cpu() - r0) / (delays - 1) * 1e6
for i in range(0, n - delays, 1000):
    app.publish_many([task.message() for _ in range(min(1000, n - delays - i))])

opts = {"tasks_per_process": t} if t > 1 else {}
pool = WorkerPool(app, concurrency=2, queues=Q, **opts)
r0 = redis_cpu()
pool.start()
c0, t0 = time.process_time(), time.monotonic()
while True:
    pool.supervise(0.02)
    c = engine.queue_counts("ab")
    if c.waiting == 0 and c.running == 0:
        break
elapsed = time.monotonic() - t0
supervisor = time.process_time() - c0
used = sum(cpu(pid) for pid in pool.children)
if url.startswith("redis"):
    out["drain_redis_cpu_us"] = (redis_cpu() - r0) / n * 1e6
pool.terminate(timeout=10)
out.update(drain_per_s=n / elapsed, worker_cpu_us=used / n * 1e6,
           supervisor_cpu_us=supervisor / n * 1e6)
if as_json:
    print(json.dumps(out))
else:
    extra = f", delay() {out['delay_per_s']:.0f}/s" if delays else ""
    print(f"{kind} t={t} {n / elapsed:.0f} jobs/s, worker cpu {used / n * 1e6:.0f} us/job"
          + extra)
