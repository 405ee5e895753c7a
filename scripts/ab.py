"""A/B of two commits on this machine: the way to measure a change to the hot path.

Usage: python scripts/ab.py A B [--url URL] [--jobs N] [--delays M] [--rounds R]
                                [--kind sync|async] [-t T] [--batch B] [--incr]

Each commit (anything `git rev-parse` takes; `WORKTREE` is the working tree as it is,
uncommitted changes included) is checked out into a temporary `git worktree`; each run is
`scripts/noop-drain.py` (this checkout's copy, the same harness for both sides) in a
fresh process with that checkout's `src` first on PYTHONPATH, so both sides use this
venv's Python and libraries (a commit that needs other dependencies must be measured in
its own venv). Runs alternate A, B, A, B, ... for R rounds, so that the machine's load
falls on both alike; the medians are printed, with every run's figure beside them:

    worker CPU µs/job   the 2 worker processes' user + system CPU (/proc), per job
    drain jobs/s        N jobs (published beforehand) drained from the pool's start
    publish jobs/s      M single `.delay()` calls, one after the other
    publish CPU µs/job  the publishing process's CPU per `.delay()`

and the supervisor's CPU per job, and on Redis the server's CPU per published and per
drained job. URL: `sqlite` (a new file per run) or a Redis URL (its database is flushed
between runs: use a server of your own). The CPU figures are the ones to trust on a
shared machine; the rates move with the load.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIGURES = [
    ("worker_cpu_us", "worker CPU µs/job", "{:.0f}"),
    ("drain_per_s", "drain jobs/s", "{:,.0f}"),
    ("delay_per_s", "publish jobs/s (.delay())", "{:,.0f}"),
    ("delay_cpu_us", "publish CPU µs/job", "{:.0f}"),
    ("supervisor_cpu_us", "supervisor CPU µs/job", "{:.0f}"),
    ("delay_redis_cpu_us", "Redis CPU µs/publish", "{:.0f}"),
    ("drain_redis_cpu_us", "Redis CPU µs/drained job", "{:.0f}"),
]


def checkout(rev: str, into: Path) -> Path:
    """The `src` directory of `rev` (WORKTREE: this checkout's own)."""
    if rev == "WORKTREE":
        return REPO / "src"
    path = into / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), rev],
                   check=True)  # fmt: skip
    return path / "src"


def run_once(src: Path, opts: argparse.Namespace) -> dict[str, float]:
    if opts.url.startswith("redis"):
        import redis

        redis.Redis.from_url(opts.url).flushdb()
    argv = [sys.executable, str(HERE / "noop-drain.py"), opts.url, str(opts.jobs), opts.kind,
            str(opts.t), "--batch", str(opts.batch), "--delays", str(opts.delays), "--json"]
    if opts.incr:
        argv.append("--incr")
    env = dict(os.environ, PYTHONPATH=str(src))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=opts.timeout)
    if done.returncode != 0:
        raise SystemExit(f"run failed ({src}):\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["commit_src"].startswith(str(src)):
        raise SystemExit(f"the run imported lanner from {result['commit_src']}, not {src}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--url", default="sqlite")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--delays", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", choices=["sync", "async"], default="sync")
    parser.add_argument("-t", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--incr", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", action="store_true", help="print every run as JSON too")
    opts = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {opts.a: [], opts.b: []}
    with tempfile.TemporaryDirectory(prefix="lanner-ab-") as tmp:
        srcs = {rev: checkout(rev, Path(tmp)) for rev in dict.fromkeys((opts.a, opts.b))}
        try:
            for round_ in range(opts.rounds):
                for rev in (opts.a, opts.b) if round_ % 2 == 0 else (opts.b, opts.a):
                    result = run_once(srcs[rev], opts)
                    runs[rev].append(result)
                    print(f"round {round_ + 1} {rev}: " + ", ".join(
                        f"{key} {result[key]:.0f}" for key, _, _ in FIGURES if key in result
                    ), file=sys.stderr, flush=True)  # fmt: skip
        finally:
            for src in srcs.values():
                if src != REPO / "src":
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                    str(src.parent)], check=False)  # fmt: skip
    print(f"{opts.url}, {opts.jobs} jobs ({opts.kind}, -t {opts.t}, batch {opts.batch}"
          f"{', INCR' if opts.incr else ''}), {opts.delays} .delay(); medians of "
          f"{opts.rounds} interleaved runs (each run in brackets)")
    print(f"| | {opts.a} | {opts.b} | B ÷ A |")
    print("|---|---|---|---|")
    for key, label, fmt in FIGURES:
        if not all(key in r for rs in runs.values() for r in rs):
            continue
        a, b = (statistics.median(r[key] for r in runs[rev]) for rev in (opts.a, opts.b))
        each = {rev: " / ".join(fmt.format(r[key]) for r in runs[rev]) for rev in runs}
        print(f"| {label} | {fmt.format(a)} ({each[opts.a]}) | {fmt.format(b)} ({each[opts.b]})"
              f" | {b / a:.2f} |")
    if opts.json:
        print(json.dumps(runs))


if __name__ == "__main__":
    main()
