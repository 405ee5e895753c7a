"""The command line's start-up, two checkouts interleaved: what `lanner X` costs before X.

Usage: python scripts/cli-startup.py SRC_A SRC_B [RUNS]

SRC_A and SRC_B are checkouts' `src` directories (`git worktree add --detach DIR COMMIT`
makes one), each put first on PYTHONPATH of fresh processes of this venv's Python. Runs
alternate A, B, A, B, ... RUNS rounds (default 20); the medians are printed as a Markdown
table:

    import lanner.cli                 -X importtime's cumulative figure for lanner.cli
    lanner --help                     wall, and the process's user + system CPU
    lanner worker --help              the same: what `lanner worker` loads before it runs
    lanner status                     on an empty SQLite store (created beforehand)
    lanner worker -c 2, first job     (RUNS / 2 rounds) one job published beforehand on a new
                                      SQLite store; wall from the command's start until the
                                      job's body has written its marker file, and the
                                      supervisor's CPU (/proc/<pid>/stat) at that moment

Each command runs as `python -c "from lanner.cli import main; main()" ARGS`, which is what
the `lanner` script does. On a shared machine the CPU figures are the ones to trust.
"""

import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
TMP = Path(tempfile.mkdtemp(prefix="cli-startup-"))
STORE = f"sqlite:///{TMP}/status.db"
TICK = os.sysconf("SC_CLK_TCK")
LANNER = [PY, "-c", "from lanner.cli import main; main()"]
APP = """from pathlib import Path
import lanner
app = lanner.App()
@app.task(name="touchapp.touch")
def touch(path: str) -> None:
    Path(path).write_text("done")
"""


def env(src: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{src}:{TMP}", "COLUMNS": "80"}


def timed(src: str, args: list[str]) -> tuple[float, float]:
    """Wall and user + system CPU seconds of `lanner ARGS` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([*LANNER, *args], env=env(src), stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def importtime(src: str) -> float:
    done = subprocess.run([PY, "-X", "importtime", "-c", "import lanner.cli"], env=env(src),
                          capture_output=True, text=True, check=True)  # fmt: skip
    line = [row for row in done.stderr.splitlines() if row.rstrip().endswith("| lanner.cli")][-1]
    return int(line.split("|")[1]) / 1e6


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pool_first_job(src: str, run: str) -> tuple[float, float]:
    """Wall from `lanner worker` started to its first job done; the supervisor's CPU then."""
    url = f"sqlite:///{TMP}/pool{run}.db"
    marker = TMP / f"done{run}"
    publish = f"import touchapp as t; t.app.use_broker({url!r}); t.touch.delay({str(marker)!r})"
    subprocess.run([PY, "-c", publish], env=env(src), check=True)
    start = time.perf_counter()
    worker = subprocess.Popen([*LANNER, "worker", "-A", "touchapp", "--broker", url, "-c", "2",
                               "--log-level", "WARNING"], env=env(src), cwd=TMP)  # fmt: skip
    while not marker.exists():
        if time.perf_counter() > start + 60:
            worker.kill()
            raise SystemExit("no job done within 60 s")
        time.sleep(0.001)
    wall, cpu = time.perf_counter() - start, cpu_of(worker.pid)
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    return wall, cpu


def main() -> None:
    a, b = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    (TMP / "touchapp.py").write_text(APP)
    made = f"import lanner; lanner.App({STORE!r}).engine.queues()"
    subprocess.run([PY, "-c", made], env=env(b), check=True)
    figures: dict[str, dict[str, list[float]]] = {}

    def add(key: str, side: str, value: float) -> None:
        figures.setdefault(key, {"A": [], "B": []})[side].append(value)

    commands = [("lanner --help", ["--help"]), ("lanner worker --help", ["worker", "--help"]),
                ("lanner status", ["status", "--broker", STORE])]  # fmt: skip
    for round_ in range(runs):
        for side, src in (("A", a), ("B", b)):
            add("import lanner.cli (-X importtime)", side, importtime(src))
            for name, args in commands:
                wall, cpu = timed(src, args)
                add(f"{name}: wall", side, wall)
                add(f"{name}: CPU", side, cpu)
            if round_ < runs // 2:
                wall, cpu = pool_first_job(src, f"{side}{round_}")
                add("lanner worker -c 2: wall to the first job done", side, wall)
                add("lanner worker -c 2: supervisor CPU then", side, cpu)
    print(f"| median of {runs} runs ({runs // 2} for the pool) | A | B |\n|---|---|---|")
    for key, sides in figures.items():
        print(f"| {key} | {statistics.median(sides['A']) * 1000:.0f} ms "
              f"| {statistics.median(sides['B']) * 1000:.0f} ms |")  # fmt: skip


if __name__ == "__main__":
    main()
