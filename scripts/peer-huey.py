"""lanner beside Huey, the issue's peer harness (issue 28): the same jobs, interleaved runs.

Usage: python scripts/peer-huey.py [--engines redis,sqlite] [--rounds 3] [--jobs 20000]
                                   [--delays 2000] [--lanner SRC ...] [--json]
                                   [--sqlite-sync default|both|neither]

Huey is not a dependency of lanner: install it by hand into the venv for this only
(`pip install huey`, 3.5.x measured); without it the script says so in one line and exits.

The shape: 2 worker processes, N no-op jobs (default 20,000) whose body does one Redis
INCR, on a redis-server this script starts on a free loopback port (`--save ''
--appendonly no`, stopped at the end). Per run, in a fresh process: N − M jobs published
beforehand (lanner: `publish_many` by 1,000; Huey: one `enqueue` each, it has no batch),
then M (default 2,000) one `.delay()` at a time, timed; then the workers are started
(lanner: `lanner worker -A MODULE -c 2`, the command line with default queue settings;
Huey: `huey_consumer MODULE.huey -w 2 -k process`) and timed until the INCR counter
reaches N, the last job done. Worker CPU is the supervisor's children's user + system CPU
(`/proc/<pid>/stat`), read before the supervisor is stopped; the supervisor's is its own.
Huey's consumer has a third child, its scheduler (the one of the three with the least CPU:
it wakes once a second), counted with the supervisor. Both include the processes'
start-up (imports); the "from the first job" rows count only
the CPU spent after the first job was done, over the jobs done after it.

Engines: `redis` (Huey's `RedisHuey` on database 0 beside lanner's `redis://` engine, the
database flushed before each run; the INCR counter lives in database 15) and `sqlite`
(Huey's `SqliteHuey` beside lanner's default SQLite engine, a new file per run; the
counter still on the Redis server). Their defaults differ: lanner's SQLite syncs each
commit to disk, Huey's does not (`synchronous=0` unless `fsync=True`); `--sqlite-sync
both` makes Huey sync too, `--sqlite-sync neither` runs lanner with `?synchronous=off`.
Runs alternate Huey, lanner, Huey, ... for each engine, R rounds; the medians are printed
as a Markdown table per engine, every run's figure in brackets:

    single .delay() jobs/s          M calls in a row, one after the other
    publisher CPU µs per .delay()   the publishing process's CPU over those calls
    drain jobs/s                    N jobs, from the workers' start to the last one done
    worker CPU µs per job           the supervisor's children, over N
    supervisor CPU µs per job       the supervisor process, over N
    Redis CPU µs per enqueued job   INFO used_cpu_sys + used_cpu_user over the M calls
    Redis CPU µs per drained job    the same from the workers' start to the last job done, over N
    Redis bytes per queued job      INFO used_memory with all N queued, less before, over N

`--lanner SRC` (repeatable) measures the lanner whose package is under SRC (a checkout's
`src`: `git worktree add --detach /tmp/base COMMIT` makes one), put first on PYTHONPATH of
the publisher and the workers; each gets a column, and the runs go Huey, SRC1, SRC2, Huey,
... Without it: the lanner this Python imports.

The CPU figures are the ones to trust on a shared machine; the rates move with its load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COUNTER_DB = 15
COUNTER = "peer:count"

# The module both sides' workers import (and the publisher): its engine from the environment.
MODULE = """
import os

import redis

_counter = redis.Redis.from_url(os.environ["PEER_COUNTER_URL"])
ENGINE = os.environ["PEER_ENGINE"]
if os.environ["PEER_SIDE"] == "huey":
    import huey as _huey

    if ENGINE == "redis":
        huey = _huey.RedisHuey("peer", url=os.environ["PEER_REDIS_URL"])
    else:
        huey = _huey.SqliteHuey("peer", filename=os.environ["PEER_SQLITE"],
                                fsync=os.environ["PEER_SQLITE_SYNC"] == "both")

    @huey.task()
    def noop():
        _counter.incr("peer:count")
else:
    import lanner

    if ENGINE == "redis":
        app = lanner.App(broker=os.environ["PEER_REDIS_URL"])
    else:
        off = "?synchronous=off" if os.environ["PEER_SQLITE_SYNC"] == "neither" else ""
        app = lanner.App(broker="sqlite:///" + os.environ["PEER_SQLITE"] + off)

    @app.task()
    def noop():
        _counter.incr("peer:count")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("peer-huey: redis-server is not on PATH")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return server, port
        except OSError:
            pass
        time.sleep(0.05)
    server.kill()
    raise SystemExit("peer-huey: redis-server did not answer within 10 s")


def cpu(pid: int) -> float:
    """A process's user + system CPU in seconds (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def cpu_split(side: str, supervisor: int) -> tuple[float, float, int]:
    """The CPU of the workers and of the supervisor, and how many workers: Huey's third
    child, its scheduler (idle but for its ticks: the least CPU), counts as supervisor."""
    used = sorted(cpu(child) for child in children(supervisor))
    own = cpu(supervisor)
    if side == "huey" and len(used) == 3:
        own += used.pop(0)
    return sum(used), own, len(used)


def run_one(side: str, engine: str, jobs: int, delays: int) -> dict[str, Any]:  # noqa: C901
    """One run, in this (fresh) process: publish, then drain with the side's workers."""
    import peerapp  # type: ignore[import-not-found]
    import redis

    server = redis.Redis.from_url(os.environ["PEER_REDIS_URL"])
    counter = redis.Redis.from_url(os.environ["PEER_COUNTER_URL"])
    task = peerapp.noop

    def redis_cpu() -> float:
        info = server.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    if side != "huey":
        peerapp.app.engine.queue_counts("default")  # the Lua core loaded: not a job's bytes
    memory0 = int(server.info("memory")["used_memory"])
    if side == "huey":
        for _ in range(jobs - delays):
            task()
    else:
        for i in range(0, jobs - delays, 1000):
            peerapp.app.publish_many([task.message() for _ in range(min(1000, jobs - delays - i))])
    r0, c0, t0 = redis_cpu(), time.process_time(), time.perf_counter()
    for _ in range(delays):
        task() if side == "huey" else task.delay()
    wall, used = time.perf_counter() - t0, time.process_time() - c0
    out: dict[str, Any] = {"delay_per_s": delays / wall, "delay_cpu_us": used / delays * 1e6}
    if side != "huey":
        out["lanner"] = os.path.dirname(os.path.dirname(peerapp.lanner.__file__))
    if engine == "redis":
        out["redis_cpu_us"] = (redis_cpu() - r0) / delays * 1e6
        out["redis_bytes"] = (int(server.info("memory")["used_memory"]) - memory0) / jobs

    if side == "huey":
        argv = [str(Path(sys.executable).parent / "huey_consumer"), "peerapp.huey", "-w", "2",
                "-k", "process", "-l", os.devnull]  # fmt: skip
    else:
        argv = [str(Path(sys.executable).parent / "lanner"), "worker", "-A", "peerapp", "-c", "2",
                "--log-level", "warning"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.environ["PYTHONPATH"])
    drain_r0 = redis_cpu() if engine == "redis" else 0.0
    t0 = time.monotonic()
    supervisor = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    first: tuple[int, float, float] | None = None  # (done, workers' CPU, supervisor's CPU)
    first_at = 0.0
    deadline = t0 + max(600.0, jobs / 20)
    try:
        while True:
            done = int(counter.get(COUNTER) or 0)
            if first is None and done:
                first = (done, *cpu_split(side, supervisor.pid)[:2])
                first_at = time.monotonic() - t0
            if done >= jobs:
                break
            if supervisor.poll() is not None:
                said = supervisor.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                raise SystemExit(f"{side} workers exited:\n{said}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{side}: {done} of {jobs} jobs done by the deadline")
            time.sleep(0.005)
        elapsed = time.monotonic() - t0
        workers, own, kids = cpu_split(side, supervisor.pid)
        if engine == "redis":
            out["redis_drain_cpu_us"] = (redis_cpu() - drain_r0) / jobs * 1e6
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        try:
            supervisor.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait()
    out.update(drain_per_s=jobs / elapsed, worker_cpu_us=workers / jobs * 1e6,
               supervisor_cpu_us=own / jobs * 1e6, workers=kids)  # fmt: skip
    if first is not None and jobs > first[0]:
        rest = jobs - first[0]
        out["worker_steady_us"] = (workers - first[1]) / rest * 1e6
        out["supervisor_steady_us"] = (own - first[2]) / rest * 1e6
        out["first_job_s"] = first_at
        out["drain_steady_per_s"] = rest / (elapsed - first_at)
    return out


FIGURES = [
    ("delay_per_s", "single `.delay()` jobs/s", "{:,.0f}"),
    ("delay_cpu_us", "publisher CPU µs per `.delay()`", "{:.0f}"),
    ("drain_per_s", "drain jobs/s", "{:,.0f}"),
    ("worker_cpu_us", "worker CPU µs per job", "{:.0f}"),
    ("supervisor_cpu_us", "supervisor CPU µs per job", "{:.0f}"),
    ("first_job_s", "seconds from the workers' start to the first job done", "{:.2f}"),
    ("drain_steady_per_s", "drain jobs/s, from the first job done", "{:,.0f}"),
    ("worker_steady_us", "worker CPU µs per job, from the first job", "{:.0f}"),
    ("supervisor_steady_us", "supervisor CPU µs per job, from the first job", "{:.0f}"),
    ("redis_cpu_us", "Redis CPU µs per enqueued job", "{:.0f}"),
    ("redis_drain_cpu_us", "Redis CPU µs per drained job", "{:.0f}"),
    ("redis_bytes", "Redis bytes per queued job", "{:.0f}"),
]


def table(engine: str, runs: dict[str, list[dict[str, float]]]) -> str:
    """One engine's medians: Huey, then each lanner, and each lanner's ratio to Huey."""
    ours = [side for side in runs if side != "huey"]
    head = "| | Huey | " + " | ".join(ours) + " | " + " | ".join(f"{o} ÷ Huey" for o in ours)
    lines = [f"{engine}: medians of {len(runs['huey'])} interleaved runs (each run in brackets)",
             "", head + " |", "|---" * (2 + 2 * len(ours)) + "|"]  # fmt: skip
    for key, label, fmt in FIGURES:
        if not all(key in r for rs in runs.values() for r in rs):
            continue
        median = {side: statistics.median(r[key] for r in runs[side]) for side in runs}
        cells = [f"{fmt.format(median[s])} ({' / '.join(fmt.format(r[key]) for r in runs[s])})"
                 for s in runs]  # fmt: skip
        ratios = [f"{median[o] / median['huey']:.2f}×" if median["huey"] else "–" for o in ours]
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def label_of(src: str) -> str:
    """A lanner column's name: its checkout's commit, else its path."""
    found = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True)  # fmt: skip
    return f"lanner {found.stdout.strip()}" if found.returncode == 0 else f"lanner {src}"


def main() -> None:  # noqa: C901
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="redis,sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--delays", type=int, default=2_000)
    parser.add_argument("--lanner", action="append", metavar="SRC", default=[])
    parser.add_argument("--json", action="store_true", help="print every run as JSON too")
    parser.add_argument(
        "--sqlite-sync", choices=("default", "both", "neither"), default="default",
        help="SQLite's fsync per commit: each side's default (lanner: on; Huey: off), both "
        "on (Huey's fsync=True), or neither (lanner's synchronous=off)",
    )  # fmt: skip
    parser.add_argument("--one", nargs=2, metavar=("SIDE", "ENGINE"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.one:
        print(json.dumps(run_one(opts.one[0], opts.one[1], opts.jobs, opts.delays)))
        return
    try:
        import huey  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        raise SystemExit("peer-huey: huey is not installed (pip install huey: it is measured "
                         "beside lanner, not a dependency)") from None  # fmt: skip
    if not 0 < opts.delays < opts.jobs:
        raise SystemExit("peer-huey: --delays must be above 0 and below --jobs")
    engines = opts.engines.split(",")
    if not set(engines) <= {"redis", "sqlite"}:
        raise SystemExit("peer-huey: --engines takes redis, sqlite or both")
    srcs = {label_of(src): str(Path(src).resolve()) for src in opts.lanner} or {"lanner": ""}
    if len(srcs) < len(opts.lanner):
        raise SystemExit("peer-huey: two --lanner checkouts of one commit")
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        e: {side: [] for side in ("huey", *srcs)} for e in engines
    }
    with tempfile.TemporaryDirectory(prefix="peer-huey-") as tmp:
        directory = Path(tmp)
        (directory / "peerapp.py").write_text(MODULE)
        server, port = start_redis(directory)
        try:
            import redis

            client = redis.Redis(port=port)
            for round_ in range(opts.rounds):
                for engine in engines:
                    for n, side in enumerate(("huey", *srcs)):
                        client.flushall()
                        sqlite = directory / f"{n}-{engine}-{round_}.db"
                        src = srcs.get(side, "")
                        path = os.pathsep.join(p for p in (src, str(directory)) if p)
                        env = dict(
                            os.environ,
                            PYTHONPATH=path,
                            PEER_SIDE="huey" if side == "huey" else "lanner",
                            PEER_ENGINE=engine,
                            PEER_REDIS_URL=f"redis://127.0.0.1:{port}/0",
                            PEER_COUNTER_URL=f"redis://127.0.0.1:{port}/{COUNTER_DB}",
                            PEER_SQLITE=str(sqlite),
                            PEER_SQLITE_SYNC=opts.sqlite_sync,
                        )
                        argv = [sys.executable, __file__, "--one", env["PEER_SIDE"], engine,
                                "--jobs", str(opts.jobs), "--delays", str(opts.delays)]  # fmt: skip
                        done = subprocess.run(argv, env=env, capture_output=True, text=True)
                        if done.returncode != 0:
                            said = done.stdout[-1000:] + done.stderr[-3000:]
                            raise SystemExit(f"peer-huey: {side} on {engine} failed:\n{said}")
                        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
                        came = result.pop("lanner", "")
                        if src and came != src:
                            raise SystemExit(f"peer-huey: {side} imported lanner from {came}")
                        workers = result.pop("workers")
                        if workers != 2:
                            print(f"note: {side} had {workers} worker processes", file=sys.stderr)
                        results[engine][side].append(result)
                        for leftover in directory.glob(f"{sqlite.name}*"):
                            leftover.unlink()
                        print(f"round {round_ + 1} {engine} {side}: " + ", ".join(
                            f"{k} {result[k]:.0f}" for k, _, _ in FIGURES if k in result
                        ), file=sys.stderr, flush=True)  # fmt: skip
        finally:
            server.terminate()
            server.wait(timeout=10)
    load = os.getloadavg()
    print(
        f"{opts.jobs} jobs ({opts.delays} by single .delay()), 2 worker processes, "
        f"load average {load[0]:.1f} at the end"
    )
    for engine in engines:
        print()
        print(table(engine, results[engine]))
    if opts.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
