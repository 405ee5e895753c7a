"""`lanner bench flow`: flow control measured with real pools (docs/flow-control.md).

    rate    a rate limit across pools: runs per 1-s window, and the total against the limit
    keys    max_concurrency 1 per key under kill -9: overlapping runs of a key, jobs lost
    fair    one key's burst queued before other keys' jobs: how much of the burst ran
            before the others were all done
    cron    a schedule fired by several pools over some ticks: runs per tick

Each writes a task module into a temporary folder, starts `lanner worker` pools on it as
subprocesses (each in its own session), publishes, and reads what the tasks wrote: one
line per run start and end (`start|end key jid pid time`).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import click

from lanner.tools.bench.common import BenchError

MODULE = """
import os, time
from datetime import timedelta
from lanner import App, QueueConfig

OUT = {out!r}
app = App({url!r}, queues=[QueueConfig("flow", batch_size={batch}, long_poll_time_sec=0.5,
                                       visibility_timeout_sec=30)])


def record(what, key):
    at = time.time()  # first: when the task got here, not when the file opened
    from lanner import current_job
    with open(OUT, "a") as out:
        out.write(f"{{what}} {{key}} {{current_job().jid}} {{os.getpid()}} {{at!r}}\\n")


@app.task(queue="flow", name="benchflow.limited", rate_limit={rate!r}, max_retries=10)
def limited(n):
    record("start", "rate")
    record("end", "rate")


@app.task(queue="flow", name="benchflow.keyed", concurrency_key=lambda key, n: key,
          max_concurrency=1, max_retries=10, time_limit=20)
def keyed(key, n):
    record("start", key)
    time.sleep({run_sec})
    record("end", key)


@app.task(queue="flow", name="benchflow.fair", fair_key=lambda key, n: key, max_retries=10)
def fair(key, n):
    record("start", key)
    time.sleep({run_sec})
    record("end", key)


@app.periodic(every={every})
@app.task(queue="flow", name="benchflow.tick", max_retries=0)
def tick():
    record("start", "tick")
    record("end", "tick")
"""


@dataclass(frozen=True)
class Line:
    what: str
    key: str
    jid: str
    pid: int
    when: float


class Bench:
    """A folder with the task module, the pools started on it, and what the tasks wrote."""

    def __init__(self, url: str | None, folder: Path, *, rate: str = "20/s",
                 run_sec: float = 0.0, batch: int = 10, every: float = 60.0) -> None:  # fmt: skip
        self.folder = folder
        self.url = url or f"sqlite:///{folder}/flow.db"
        self.out = folder / "runs.txt"
        self.module = f"benchflow_{os.getpid()}"
        text = MODULE.format(out=str(self.out), url=self.url, rate=rate, run_sec=run_sec,
                             batch=batch, every=every)  # fmt: skip
        (folder / f"{self.module}.py").write_text(text)
        self.pools: list[subprocess.Popen[bytes]] = []
        sys.path.insert(0, str(folder))
        self.tasks: Any = __import__(self.module)

    def start_pool(self, processes: int) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(self.folder))
        for name in ("LANNER_BROKER", "LANNER_SETTINGS_MODULE", "LANNER_QUEUE_CONFIG"):
            env.pop(name, None)
        with (self.folder / "pool.log").open("ab") as log:
            pool = subprocess.Popen(
                [sys.executable, "-c", "from lanner.cli import main; main()", "worker",
                 "-A", self.module, "-c", str(processes), "-Q", "flow"],
                cwd=self.folder, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.pools.append(pool)
        return pool

    def lines(self, *, ticks: bool = False) -> list[Line]:
        """What the tasks wrote: the runs of the schedule's `tick` if `ticks`, else the
        others' (every pool registers the schedule, so a tick may run in any measure)."""
        if not self.out.exists():
            return []
        found = []
        for text in self.out.read_text().splitlines():
            parts = text.split()
            if len(parts) == 5 and (parts[1] == "tick") == ticks:
                found.append(Line(parts[0], parts[1], parts[2], int(parts[3]), float(parts[4])))
        return found

    def wait(self, done: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.2)

    def close(self) -> None:
        for pool in self.pools:
            for pid in session_processes(pool.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            pool.wait(timeout=10)
        self.tasks.app.close()
        sys.path.remove(str(self.folder))
        sys.modules.pop(self.module, None)


def session_processes(sid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            if int(fields[3]) == sid and fields[0] != b"Z":
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def bench_in(url: str | None, **options: Any) -> Iterator[Bench]:
    with tempfile.TemporaryDirectory(prefix="lanner-bench-flow-") as folder:
        made = Bench(url, Path(folder), **options)
        try:
            yield made
        finally:
            made.close()


def done_jids(bench: Bench) -> set[str]:
    return {line.jid for line in bench.lines() if line.what == "end"}


# -- the four measurements ----------------------------------------------------------------
def measure_rate(
    url: str | None, limit: int, seconds: float, pools: int, processes: int
) -> dict[str, Any]:
    """Runs per 1-s window, by when the store handed each job out (what it enforces) and
    by when its task started (later by the worker's own delay, which varies)."""
    with bench_in(url, rate=f"{limit}/s") as bench:
        jobs = int(limit * seconds)
        app = bench.tasks.app
        handles = app.publish_many([bench.tasks.limited.message(n) for n in range(jobs)])
        for _ in range(pools):
            bench.start_pool(processes)
        bench.wait(lambda: len(done_jids(bench)) >= jobs, seconds * 3 + 60, "every run")
        started = {line.jid: line.when for line in bench.lines() if line.what == "start"}
        popped = {
            job.jid: max(event.when for event in job.history if event.what == "popped")
            for job in app.engine.multiget([str(handle) for handle in handles])
        }
    starts, pops = sorted(started.values()), sorted(popped.values())
    delays = sorted(started[jid] - popped[jid] for jid in started if jid in popped)
    span = pops[-1] - pops[0]
    return {
        "limit_per_s": limit, "jobs": jobs, "pools": pools, "processes_per_pool": processes,
        "max_popped_per_sliding_1s": most_in_a_second(pops),
        "max_started_per_sliding_1s": most_in_a_second(starts),
        "max_started_per_whole_second": max(Counter(int(at) for at in starts).values()),
        "start_after_pop_ms": {
            share: round(delays[min(len(delays) - 1, int(len(delays) * share))] * 1000, 1)
            for share in (0.5, 0.9, 0.99, 1.0)
        },
        "seconds_for_all": round(span, 2),
        "share_of_limit": round(jobs / (span + 1) / limit, 3),
    }  # fmt: skip


def most_in_a_second(times: Sequence[float]) -> int:
    """The most of `times` (sorted) in any window [t, t + 1)."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while times[first] <= at - 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def overlaps(lines: Sequence[Line], killed: dict[int, float]) -> int:
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    open_runs: dict[tuple[str, int, str], float] = {}
    for line in lines:
        if line.what == "start":
            open_runs[(line.key, line.pid, line.jid)] = line.when
        elif (line.key, line.pid, line.jid) in open_runs:
            runs[line.key].append((open_runs.pop((line.key, line.pid, line.jid)), line.when))
    for (key, pid, _), start in open_runs.items():
        runs[key].append((start, killed.get(pid, float("inf"))))
    count = 0
    for spans in runs.values():
        spans.sort()
        count += sum(1 for (_, end), (start, _) in pairwise(spans) if start < end)
    return count


def measure_keys(url: str | None, keys: int, per_key: int, processes: int, kill_every: float,
                 run_sec: float) -> dict[str, Any]:  # fmt: skip
    with bench_in(url, run_sec=run_sec, batch=4) as bench:
        messages = [
            bench.tasks.keyed.message(f"k{k}", n) for n in range(per_key) for k in range(keys)
        ]
        jids = {str(handle) for handle in bench.tasks.app.publish_many(messages)}
        pool = bench.start_pool(processes)
        killed: dict[int, float] = {}
        started = time.monotonic()
        next_kill = started + kill_every
        deadline = started + keys * per_key * run_sec * 3 + 120
        while not jids <= done_jids(bench):
            if time.monotonic() > deadline:
                raise BenchError(f"{len(jids - done_jids(bench))} jobs not done")
            if time.monotonic() >= next_kill:
                children = [p for p in session_processes(pool.pid) if p != pool.pid]
                if children:
                    victim = random.choice(children)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)
                    killed[victim] = time.time()
                next_kill += kill_every
            time.sleep(0.05)
        seconds = time.monotonic() - started
        engine = bench.tasks.app.engine
        complete = sum(1 for job in engine.multiget(sorted(jids)) if job.state == "complete")
        lines = bench.lines()
    return {
        "keys": keys, "jobs": len(jids), "processes": processes, "kills": len(killed),
        "overlapping_runs": overlaps(lines, killed), "lost": len(jids) - complete,
        "seconds": round(seconds, 1),
    }  # fmt: skip


def measure_fair(url: str | None, burst: int, others: int, per_other: int, processes: int,
                 run_sec: float) -> dict[str, Any]:  # fmt: skip
    with bench_in(url, run_sec=run_sec, batch=1) as bench:
        app, fair = bench.tasks.app, bench.tasks.fair
        for first in range(0, burst, 1000):
            app.publish_many(
                [fair.message("burst", n) for n in range(first, min(burst, first + 1000))]
            )
        messages = [fair.message(f"t{k}", n) for k in range(others) for n in range(per_other)]
        small = {str(handle) for handle in app.publish_many(messages)}
        bench.start_pool(processes)
        bench.wait(lambda: small <= done_jids(bench), 600, "the other keys' jobs")
        done = done_jids(bench)
    burst_done = len(done - small)
    return {
        "burst": burst, "other_jobs": len(small), "processes": processes,
        "burst_done_when_others_done": burst_done,
        "burst_share": round(burst_done / burst, 4),
    }  # fmt: skip


def measure_cron(url: str | None, every: float, ticks: int, pools: int) -> dict[str, Any]:
    with bench_in(url, every=every) as bench:
        for _ in range(pools):
            bench.start_pool(1)
        time.sleep(every * ticks + every / 2)
        starts = [line for line in bench.lines(ticks=True) if line.what == "start"]
    per_tick = Counter(line.jid for line in starts)
    return {
        "every_s": every, "pools": pools, "seconds": round(every * ticks + every / 2, 1),
        "runs": len(starts), "ticks": len(per_tick),
        "most_runs_of_one_tick": max(per_tick.values(), default=0),
    }  # fmt: skip


# -- the command --------------------------------------------------------------------------
url_option = click.option("--url", default=None, help="Store (default: a new SQLite file).")


@click.group("flow")
def flow_bench() -> None:
    """Flow control with real pools: rate limits, keys under kill -9, fairness, cron."""


def show(result: dict[str, Any]) -> None:
    import json

    click.echo(json.dumps(result, indent=2))


@flow_bench.command("rate")
@url_option
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--seconds", type=click.FloatRange(1, 600), default=30, show_default=True)
@click.option("--pools", type=click.IntRange(1, 8), default=2, show_default=True)
@click.option("-c", "--concurrency", type=click.IntRange(1, 16), default=2, show_default=True)
def rate_command(url: str | None, limit: int, seconds: float, pools: int, concurrency: int) -> None:
    """A rate limit across pools: runs per 1-s window."""
    show(measure_rate(url, limit, seconds, pools, concurrency))


@flow_bench.command("keys")
@url_option
@click.option("--keys", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--per-key", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("-c", "--concurrency", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--kill-every", type=click.FloatRange(0.1, 600), default=2.0, show_default=True)
@click.option("--run-ms", type=click.FloatRange(0, 10_000), default=20, show_default=True)
def keys_command(url: str | None, keys: int, per_key: int, concurrency: int, kill_every: float,
                 run_ms: float) -> None:  # fmt: skip
    """max_concurrency 1 per key, a worker process killed -9 every few seconds."""
    show(measure_keys(url, keys, per_key, concurrency, kill_every, run_ms / 1000))


@flow_bench.command("fair")
@url_option
@click.option("--burst", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
@click.option("--others", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--per-other", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("-c", "--concurrency", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--run-ms", type=click.FloatRange(0, 10_000), default=5, show_default=True)
def fair_command(url: str | None, burst: int, others: int, per_other: int, concurrency: int,
                 run_ms: float) -> None:  # fmt: skip
    """One key's burst queued first: how much of it ran before the others were done."""
    show(measure_fair(url, burst, others, per_other, concurrency, run_ms / 1000))


@flow_bench.command("cron")
@url_option
@click.option("--every", type=click.FloatRange(1, 3600), default=60, show_default=True)
@click.option("--ticks", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--pools", type=click.IntRange(1, 8), default=2, show_default=True)
def cron_command(url: str | None, every: float, ticks: int, pools: int) -> None:
    """A schedule fired by several pools: runs per tick (each should run once)."""
    show(measure_cron(url, every, ticks, pools))
