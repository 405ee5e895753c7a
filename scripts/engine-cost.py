"""Put N jobs (put_many of 100) and drain them (pop of 100, complete_many); print one JSON
line: wall and process CPU seconds of each phase, and on Redis the microseconds the server
spent in the Lua core's calls (INFO commandstats, reset first; the whole server's).

Usage: python scripts/engine-cost.py sqlite|redis://HOST:PORT/DB N

SQLite runs with synchronous=off on a new temporary file, so the disk does not hide the
CPU. Free of newer APIs, so that it runs on older commits too: put a checkout's `src`
first on PYTHONPATH to measure it, and interleave the two (docs/benchmarks.md, "Flow
control": the A/B of queues without it).
"""

import json
import sys
import tempfile
import time

import lanner
from lanner import NewJob

url, n = sys.argv[1], int(sys.argv[2])
if url == "sqlite":
    url = f"sqlite:///{tempfile.mkdtemp()}/cost.db?synchronous=off"
server = None
if url.startswith("redis"):
    import redis

    server = redis.Redis.from_url(url)
    server.flushdb()
engine = lanner.open_engine(url)
engine.put_many([NewJob("warm", "w0", "K")])
engine.pop("warm", "w", 1)
if server is not None:
    server.config_resetstat()
wall, cpu = time.perf_counter(), time.process_time()
for first in range(0, n, 100):
    engine.put_many([NewJob("q", f"j{k}", "K", '{"a":1}') for k in range(first, first + 100)])
put_wall, put_cpu = time.perf_counter() - wall, time.process_time() - cpu
wall, cpu = time.perf_counter(), time.process_time()
while jobs := engine.pop("q", "w", 100):
    engine.complete_many([job.jid for job in jobs], "w", "q")
out = {
    "put_wall": put_wall,
    "put_cpu": put_cpu,
    "drain_wall": time.perf_counter() - wall,
    "drain_cpu": time.process_time() - cpu,
}
if server is not None:
    stats = server.info("commandstats")
    out["server_usec"] = sum(
        value["usec"] for key, value in stats.items() if key in ("cmdstat_fcall", "cmdstat_evalsha")
    )
print(json.dumps(out))
