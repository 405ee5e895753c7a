"""Where a worker process's CPU goes per job: `scripts/noop-drain.py` with each step timed.

Usage: python scripts/job-steps.py URL|sqlite N [noop-drain options: --incr --batch B ...]

Runs noop-drain's pool of 2 processes (sync jobs, one at a time); in each worker process
the steps of the per-job path are wrapped to add up the CPU time of the thread that runs
them (`time.thread_time`, so a step waiting for the store costs nothing): the pop (the
engine's call and the reply's parsing), admission (size, task, payload decoding,
arguments), the task's run (its hooks and body: with --incr, one Redis INCR), the result,
the batch's completion, and the reports to the supervisor (each step's CPU
without the wrapped steps inside it; steps the keeper thread runs count with it). The process's other threads
(the keeper's heartbeats and batch duty, the engine's) are its CPU less the main
thread's. Printed per job, in µs, summed over both processes: each step, the main
thread's rest (the loop itself: time limit, keeper calls, context, bookkeeping), the other
threads, and the total. Each wrapped step costs about 1 µs more than it does unwrapped.

Like noop-drain, it runs on older commits with their `src` first on PYTHONPATH.
"""

import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path

import lanner.worker.child as child_mod
import lanner.worker.loop as loop_mod
import lanner.worker.pool as pool_mod
import lanner.worker.running as running_mod
from lanner.task import Task

HERE = Path(__file__).resolve().parent
OUT = Path(os.environ.get("JOB_STEPS_DIR", "/tmp")) / f"job-steps-{os.getpid()}"
STEPS = {}


NESTED = [0.0]  # CPU of wrapped steps inside the running one: counted there, not here


def timed(owner, name, label):
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return original(*args, **kwargs)  # counted with the other threads
        outer, NESTED[0] = NESTED[0], 0.0
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent = time.thread_time() - started
            STEPS[label] = STEPS.get(label, 0.0) + spent - NESTED[0]
            NESTED[0] = outer + spent

    setattr(owner, name, wrapper)


def child(*args, **kwargs):
    timed(loop_mod.WorkerLoop, "_pop", "pop")
    timed(running_mod, "admit", "admission")
    timed(Task, "run", "task run (hooks + body)")
    timed(loop_mod.WorkerLoop, "_result", "result")
    timed(loop_mod.WorkerLoop, "_complete", "complete (batched)")
    timed(child_mod.PipeReporter, "_send", "reports to the supervisor")
    main0, proc0 = time.thread_time(), time.process_time()
    try:
        original_child(*args, **kwargs)
    finally:
        STEPS["main thread"] = time.thread_time() - main0
        STEPS["process"] = time.process_time() - proc0
        with open(f"{OUT}-{os.getpid()}.json", "w") as out:
            json.dump(STEPS, out)


original_child = pool_mod.child_main
pool_mod.child_main = child
n = int(sys.argv[2])
sys.argv = [str(HERE / "noop-drain.py"), sys.argv[1], sys.argv[2], "sync", "1", *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
totals: dict[str, float] = {}
for path in Path(OUT).parent.glob(f"{Path(OUT).name}-*.json"):
    for label, seconds in json.loads(path.read_text()).items():
        totals[label] = totals.get(label, 0.0) + seconds
    path.unlink()
steps = {k: v for k, v in totals.items() if k not in ("main thread", "process")}
rest = totals["main thread"] - sum(steps.values())
rows = {**steps, "rest of the loop (main thread)": rest,
        "other threads (keeper, ...)": totals["process"] - totals["main thread"],
        "worker process total": totals["process"]}
print(json.dumps({k: round(v / n * 1e6, 1) for k, v in rows.items()}))
