"""`lanner bench shards`: the Redis CPU each job costs each shard of a Redis Cluster.

Jobs are put (`put_many`), popped and completed (`complete_many`) over a few queues, laid
out two ways in turn: `spread` (each primary serves as many of the queues as the others)
and `one` (every queue served by one primary); with `--single`, first on one Redis, the
baseline. For each layout and each primary it reads Redis' own accounts before and after:
CPU time of the server process (`INFO cpu`, user + system: what the shard's core spends,
networking included) and time in commands (`INFO commandstats`: wall time of the main
thread in lanner's calls, which a loaded machine inflates). Divided by the jobs, these are the
figures that say how many jobs/s one shard can take (1 s / its CPU per job) and so how
many N shards take when queues are spread over them.

The client is one process: its own speed bounds the jobs/s printed, not the shards'.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

from lanner.engines import open_engine
from lanner.records import NewJob
from lanner.tools.bench.common import DEFAULT_BATCH, KLASS, BenchError, BenchProgress, MachineInfo

DEFAULT_SHARD_JOBS: Final = 20_000
LAYOUTS: Final = ("spread", "one")


@dataclass(frozen=True, slots=True)
class ShardFigures:
    """One primary's costs over one layout's run."""

    node: str
    queues: int
    cpu_us_per_job: float
    command_us_per_job: float


@dataclass(frozen=True, slots=True)
class LayoutResult:
    layout: str
    queues: tuple[str, ...]
    jobs: int
    jobs_per_s: float
    shards: tuple[ShardFigures, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "queues": list(self.queues),
            "jobs": self.jobs,
            "jobs_per_s": self.jobs_per_s,
            "shards": [
                {
                    "node": s.node,
                    "queues": s.queues,
                    "cpu_us_per_job": s.cpu_us_per_job,
                    "command_us_per_job": s.command_us_per_job,
                }
                for s in self.shards
            ],
        }


@dataclass(frozen=True, slots=True)
class ShardsBenchResult:
    url: str
    layouts: tuple[LayoutResult, ...]
    machine: MachineInfo

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "layouts": [layout.to_json() for layout in self.layouts],
            "machine": self.machine.to_json(),
        }


def _accounts(client: Any) -> tuple[float, float]:
    """CPU seconds of a server and microseconds spent in commands, so far."""
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    in_commands = sum(float(entry["usec"]) for entry in stats.values())
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), in_commands


def _queues(engine: Any, layout: str, count: int, run: str) -> list[str]:
    """`count` queue names laid out over the primaries as `layout` says."""
    primaries = sorted(node.name for node in engine.client.get_primaries())
    per_node = {name: 0 for name in primaries}
    wanted = primaries[:1] if layout == "one" else primaries
    chosen: list[str] = []
    for n in range(100_000):
        name = f"shards-{run}-{n}"
        owner = engine.client.get_node_from_key("ql:{q:" + name + "}").name
        if owner in wanted and per_node[owner] < -(-count // len(wanted)):
            per_node[owner] += 1
            chosen.append(name)
            if len(chosen) == count:
                return chosen
    raise BenchError("could not lay the queues out over the primaries")


def _workload(engine: Any, names: list[str], jobs: int, run: str, progress: BenchProgress) -> float:
    """Put `jobs` jobs over the queues, then pop and complete them all; the seconds taken."""
    started = time.perf_counter()
    progress.phase(f"put {jobs} jobs over {len(names)} queues", jobs)
    for start in range(0, jobs, DEFAULT_BATCH):
        batch = [
            NewJob(names[n % len(names)], f"{run}-{n}", KLASS, "{}")
            for n in range(start, min(start + DEFAULT_BATCH, jobs))
        ]
        engine.put_many(batch)
        progress.advance(len(batch))
    progress.phase("pop and complete", jobs)
    done = 0
    while done < jobs:
        before = done
        for name in names:
            popped = engine.pop(name, "bench-shards", 10)
            if popped:
                engine.complete_many([job.jid for job in popped], "bench-shards", name)
                done += len(popped)
                progress.advance(len(popped))
        if done == before:
            raise BenchError(f"the queues gave {done} of the {jobs} jobs put")
    return time.perf_counter() - started


def _run_layout(
    engine: Any, layout: str, queues: int, jobs: int, progress: BenchProgress
) -> LayoutResult:
    run = uuid.uuid4().hex[:8]
    names = _queues(engine, layout, queues, run)
    nodes = {node.name: node.redis_connection for node in engine.client.get_primaries()}
    before = {name: _accounts(client) for name, client in nodes.items()}
    elapsed = _workload(engine, names, jobs, run, progress)
    after = {name: _accounts(client) for name, client in nodes.items()}
    owners = [engine.client.get_node_from_key("ql:{q:" + q + "}").name for q in names]
    shards = tuple(
        ShardFigures(
            node=name,
            queues=owners.count(name),
            cpu_us_per_job=(after[name][0] - before[name][0]) * 1e6 / jobs,
            command_us_per_job=(after[name][1] - before[name][1]) / jobs,
        )
        for name in sorted(before)
    )
    return LayoutResult(layout, tuple(names), jobs, jobs / elapsed, shards)


def _run_single(url: str, queues: int, jobs: int, progress: BenchProgress) -> LayoutResult:
    """The same work on one Redis (`redis://`), the baseline a shard compares with."""
    import redis

    run = uuid.uuid4().hex[:8]
    names = [f"shards-{run}-{n}" for n in range(queues)]
    engine = open_engine(url)
    try:
        with redis.Redis.from_url(url.partition("?")[0], decode_responses=True) as client:
            before = _accounts(client)
            elapsed = _workload(engine, names, jobs, run, progress)
            after = _accounts(client)
    finally:
        engine.close()
    figures = ShardFigures(
        node=url.partition("?")[0].rpartition("@")[2],
        queues=queues,
        cpu_us_per_job=(after[0] - before[0]) * 1e6 / jobs,
        command_us_per_job=(after[1] - before[1]) / jobs,
    )
    return LayoutResult("single", tuple(names), jobs, jobs / elapsed, (figures,))


def run_shards_benchmark(
    url: str, jobs: int, queues: int, progress: BenchProgress, single: str | None = None
) -> ShardsBenchResult:
    """Both layouts in turn on the cluster `url` names; first the same work on the one
    Redis `single` names, if given."""
    if not url.startswith(("redis+cluster://", "rediss+cluster://")):
        raise BenchError(f"lanner bench shards measures a Redis Cluster, not {url!r}")
    engine = open_engine(url)
    try:
        if len(engine.client.get_primaries()) < 2:  # type: ignore[attr-defined]
            raise BenchError("the cluster has one primary: there is nothing to spread")
        layouts = tuple(_run_layout(engine, name, queues, jobs, progress) for name in LAYOUTS)
        if single is not None:
            layouts = (_run_single(single, queues, jobs, progress), *layouts)
    finally:
        engine.close()
    return ShardsBenchResult(url, layouts, MachineInfo.current())
