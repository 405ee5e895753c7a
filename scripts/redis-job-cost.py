"""Redis bytes and CPU per queued job: N single `.delay()` publishes of a no-op task (the
peer harness's job: one int argument) into an emptied Redis, then print one JSON line:

- bytes_per_job: `INFO memory` used_memory after minus before, over N (the job's hash,
  its history, its -work entry and every other key the put touches);
- job_keys_bytes: MEMORY USAGE of one job's keys (the hash, and the history list where
  the layout has one), and the hash's encoding (listpack while every value is small);
- server_cpu_us_per_put: the server's used_cpu_user + used_cpu_sys over N (all its work:
  network, parsing and the script);
- fcall_us_per_put: `INFO commandstats` time of the core's calls (FCALL / EVALSHA) over N.

With --drain, the N jobs are then taken one at a time as a worker of batch 1 does (a pop of
one job, then its complete), and the line also has server_cpu_us_per_pop_complete.

Usage: python scripts/redis-job-cost.py redis://HOST:PORT/DB [N] [--drain]

The server should be private (its whole CPU is counted). Free of newer APIs so that it runs
on older commits: put a checkout's `src` first on PYTHONPATH to measure it.
"""

import json
import sys

import redis

import lanner

drain = "--drain" in sys.argv
arguments = [argument for argument in sys.argv[1:] if argument != "--drain"]
url = arguments[0]
n = int(arguments[1]) if len(arguments) > 1 else 100_000
server = redis.Redis.from_url(url, decode_responses=True)
server.flushdb()
app = lanner.App(broker=url)


@app.task(queue="default")
def noop(x: int) -> None:
    """Never run: the jobs stay queued."""


noop.delay(-1)  # the connection, the script loaded, the queue known
server.config_resetstat()


def cpu() -> float:
    info = server.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


memory, cpu_before = int(server.info("memory")["used_memory"]), cpu()
for k in range(n):
    noop.delay(k)
cpu_after, memory_after = cpu(), int(server.info("memory")["used_memory"])
stats = server.info("commandstats")
fcall = sum(v["usec"] for key, v in stats.items() if key in ("cmdstat_fcall", "cmdstat_evalsha"))
sample = next(key for key in server.scan_iter("ql:j:*", count=1000) if not key.endswith("-history"))
keys = [sample] + ([sample + "-history"] if server.exists(sample + "-history") else [])
figures = {
    "jobs": n,
    "bytes_per_job": round((memory_after - memory) / n, 1),
    "job_keys_bytes": {key.rsplit("-", 1)[-1] if key.endswith("-history") else "hash":
                       server.memory_usage(key) for key in keys},
    "hash_encoding": server.object("encoding", sample),
    "server_cpu_us_per_put": round((cpu_after - cpu_before) / n * 1e6, 1),
    "fcall_us_per_put": round(fcall / n, 1),
}
if drain:
    engine = lanner.open_engine(url)
    engine.pop("default", "w", 1)  # the -1 job
    drain_before = cpu()
    for k in range(n):
        job = engine.pop("default", "w", 1)[0]
        engine.complete(job.jid, "w", "default")
    figures["server_cpu_us_per_pop_complete"] = round((cpu() - drain_before) / n * 1e6, 1)
print(json.dumps(figures))
