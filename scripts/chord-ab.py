"""A/B of a large chord's publish between two source trees: `lanner bench chord`'s publish
alone, measured where a shared machine's load moves it least.

Usage: python scripts/chord-ab.py SRC_A SRC_B [--url sqlite|redis://HOST:PORT/DB]
                                  [--pairs P] [--publishes R] [--parents N]

SRC_A and SRC_B are `src` directories (e.g. `git archive <commit> src | tar -x -C /tmp/a`).
Each run is a fresh process with that `src` first on PYTHONPATH (this venv's Python and
libraries for both) that publishes R chords of N no-op parents (`lanner.chord(...).delay()`,
one `put_many`) and reports each publish's wall time, its own CPU, and on Redis the
server's CPU (INFO cpu: use a server of your own; its database is flushed). Runs alternate
A, B, B, A, ... for P pairs, so that the load falls on both alike; the medians of every
publish are printed, with the range.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FIGURES = ("wall", "cpu", "server")


def child(url: str, publishes: int, parents: int) -> None:
    from lanner.app import App
    from lanner.tools.bench.chord import ChordCount, ChordNoop
    from lanner.settings import Settings
    from lanner.workflows.canvas import Signature, chord

    if url == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp()}/ab.db?synchronous=full"
    server = None
    if url.startswith("redis"):
        import redis

        server = redis.Redis.from_url(url)
        server.flushdb(asynchronous=True)

    def server_cpu() -> float:
        if server is None:
            return 0.0
        info = server.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    app = App(url, settings=Settings(broker=url))
    app.engine.put_many([])  # the store opened before the timing
    found: dict[str, list[float]] = {name: [] for name in FIGURES}
    for number in range(publishes):
        options = {"queue": f"ab-{number}", "retries": 0}
        header = [Signature(ChordNoop, app, (i,)).set(**options) for i in range(parents)]
        callback = Signature(ChordCount, app).set(**options)
        served, cpu, wall = server_cpu(), time.process_time(), time.perf_counter()
        chord(header, callback).delay()
        found["wall"].append(time.perf_counter() - wall)
        found["cpu"].append(time.process_time() - cpu)
        found["server"].append(server_cpu() - served)
    app.close()
    print(json.dumps(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--url", default="sqlite")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--publishes", type=int, default=3)
    parser.add_argument("--parents", type=int, default=10_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child(opts.url, opts.publishes, opts.parents)
        return
    found = {side: {name: [] for name in FIGURES} for side in "AB"}
    for pair in range(opts.pairs):
        order = ("A", "B") if pair % 2 == 0 else ("B", "A")
        for side in order:
            src = opts.a if side == "A" else opts.b
            sizes = ["--publishes", str(opts.publishes), "--parents", str(opts.parents)]
            command = [sys.executable, __file__, src, src, "--child", "--url", opts.url, *sizes]
            out = subprocess.run(command, env=dict(os.environ, PYTHONPATH=src), check=True,
                                 capture_output=True, text=True).stdout  # fmt: skip
            for name, values in json.loads(out).items():
                found[side][name] += values
    for side in "AB":
        shown = {
            name: f"{statistics.median(v):.3f} s ({min(v):.3f}-{max(v):.3f})"
            for name, v in found[side].items()
        }
        print(side, shown)
    print("load average", ", ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
