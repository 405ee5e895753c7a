"""A 2-process pool drains N jobs over 6 queues, 2 per primary of a 3-primary Redis
Cluster it starts (tests/redis_cluster.py); with `kill`, each primary has a replica and
the one serving the first queue is killed (-9) once a third of the jobs ran. Prints the
rates, how many jobs were lost and how many ran twice.

Usage: python scripts/cluster-pool.py N [kill]      (docs/benchmarks.md, "Redis Cluster")
"""

import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conftest import RedisServer, _free_port  # noqa: E402
from redis_cluster import RedisCluster  # noqa: E402

from lanner.app import App  # noqa: E402
from lanner.queues import QueueConfig  # noqa: E402
from lanner.settings import Settings  # noqa: E402
from lanner.worker.pool import WorkerPool  # noqa: E402

JOBS = int(sys.argv[1])
KILL = sys.argv[2:] == ["kill"]


def write(path: str, n: int) -> None:
    with open(path, "a") as out:
        out.write(f"{n}\n")


def ran(out: Path) -> list[str]:
    return out.read_text().split() if out.exists() else []


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    out = folder / "out.txt"
    cluster = RedisCluster(folder, RedisServer, _free_port, 3, 1 if KILL else 0)
    cluster.start()
    try:
        names = cluster.spread_queues(per_primary=2)
        queues = [
            QueueConfig(name, visibility_timeout_sec=60, long_poll_time_sec=0.2, batch_size=10)
            for name in names
        ]
        app = App(cluster.url, settings=Settings(broker=cluster.url), queues=queues)
        tasks = [app.task(queue=name, time_limit=10, name=f"bench.write_{name}")(write)
                 for name in names]
        messages = [tasks[n % len(tasks)].message(str(out), n) for n in range(JOBS)]
        started = time.monotonic()
        for first in range(0, JOBS, 500):
            app.publish_many(messages[first : first + 500])
        published = time.monotonic()
        if KILL:
            cluster.wait_replicated()
        pool = WorkerPool(app, concurrency=2, queues=queues)
        pool.start()
        killed = False
        try:
            while len(set(ran(out))) < JOBS:
                pool.supervise(timeout=0.05)
                if KILL and not killed and len(ran(out)) > JOBS // 3:
                    victim, at = cluster.owner(names[0]), time.monotonic()
                    cluster.kill(victim)
                    killed = True
                    print(f"killed primary {victim}: replaced in {time.monotonic() - at:.1f} s")
            drained = time.monotonic()
        finally:
            pool.terminate(timeout=10)
        done = collections.Counter(int(n) for n in ran(out))
        print(f"{JOBS} jobs over {names} (primaries {[cluster.owner(n) for n in names]})")
        print(f"publish {JOBS / (published - started):.0f} jobs/s, drain "
              f"{JOBS / (drained - published):.0f} jobs/s; lost {JOBS - len(done)}, "
              f"ran twice {sum(count - 1 for count in done.values())}")
        app.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
