"""The engine benchmark's latency phases: from a put to a `pop` blocked in another
process returning the job (`measure_pickup`), and on Redis the floor under it on this
machine, a bare LPUSH to a blocked BLPOP (`measure_redis_floor`).

Both send one sample at a time to an idle child of a `ChildGroup`, which reports how long
each took to reach it.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from lanner.engine import Engine
from lanner.engines import open_engine
from lanner.tools.bench.children import ChildContext, ChildGroup, parent_alive
from lanner.tools.bench.common import IDLE_GAP, KLASS, BenchProgress
from lanner.tools.bench.stats import Percentiles

if TYPE_CHECKING:  # redis is an optional extra, imported when a Redis URL is measured
    import redis

PICKUP_TIMEOUT: Final = 10.0
"""Seconds a put job may wait to be picked up before the latency phase fails."""

POP_WAIT: Final = 1.0
"""The latency child's `pop` wait; between two waits it checks that the parent still lives."""


# -- what the children run ----------------------------------------------------------------
def pickup_worker(context: ChildContext, url: str, queue: str, worker: str) -> None:
    """Child: block in `pop(wait=...)`, and for each job report (as a `sample`) the seconds
    since the `put_time` in its data. A job whose data has `stop` ends the loop."""
    engine = open_engine(url)
    try:
        context.send("ready")
        while True:
            jobs = engine.pop(queue, worker, 1, wait=POP_WAIT)
            popped = time.time()
            if not jobs:
                if not parent_alive():
                    return
                continue
            job = jobs[0]
            data = json.loads(job.data)
            # Complete before reporting: the parent's next put must find this child idle.
            engine.complete(job.jid, worker, queue)
            if data.get("stop"):
                context.send("finished")
                return
            context.send("sample", value=popped - float(data["put_time"]))
    finally:
        engine.close()


def _redis_client(url: str) -> redis.Redis:
    """The engine's kind of redis-py client for a lanner Redis URL, without the engine."""
    from lanner.engines.redis.connection import parse_url, redis_client

    address, options = parse_url(url)
    # A BLPOP's reply may take its whole timeout on top of a command's.
    return redis_client(address, options, options.socket_timeout + POP_WAIT)


def floor_worker(context: ChildContext, url: str, key: str) -> None:
    """Child: block in a bare `BLPOP key`, and for each value report (as a `sample`) the
    seconds since the time it holds. The value `stop` ends the loop."""
    client = _redis_client(url)
    try:
        context.send("ready")
        while True:
            woken = client.blpop([key], timeout=POP_WAIT)
            popped = time.time()
            if woken is None:
                if not parent_alive():
                    return
                continue
            if woken[1] == "stop":
                context.send("finished")
                return
            context.send("sample", value=popped - float(woken[1]))
    finally:
        client.close()


# -- measurements -------------------------------------------------------------------------
def _latency_samples(
    group: ChildGroup, samples: int, send: Callable[[float | None], None], progress: BenchProgress
) -> Percentiles:
    """Latency (ms) from `send(time.time())` to the child of `group` reporting that it
    received that time.

    Each sample follows the previous one's report and a short random idle gap, so it
    measures waking an idle, blocked receiver. `send(None)` ends the child.
    """
    rng = random.Random()
    latencies: list[float] = []
    group.wait_ready()
    for _ in range(samples):
        time.sleep(rng.uniform(*IDLE_GAP))
        send(time.time())
        latencies.append(group.expect("sample", PICKUP_TIMEOUT).value)
        progress.advance(1)
    send(None)
    group.expect("finished", PICKUP_TIMEOUT)
    group.join()
    return Percentiles.of(latencies, scale=1000.0)


def measure_pickup(
    engine: Engine, url: str, queue: str, samples: int, progress: BenchProgress
) -> Percentiles:
    """Latency (ms) from `put` to a blocked `pop` in another process returning the job.

    Jobs are put one at a time (see `_latency_samples`). The time includes the put's own
    commit, as a producer would see it.
    """
    progress.phase("pickup latency", samples)

    def put(put_time: float | None) -> None:
        data = {"stop": True} if put_time is None else {"put_time": put_time}
        engine.put(queue, uuid.uuid4().hex, KLASS, json.dumps(data))

    with ChildGroup() as group:
        group.spawn(pickup_worker, url, queue, "bench-pickup")
        return _latency_samples(group, samples, put, progress)


def measure_redis_floor(url: str, key: str, samples: int, progress: BenchProgress) -> Percentiles:
    """What pickup latency costs on this machine before lanner does anything: latency (ms)
    from a bare `LPUSH` to a `BLPOP` blocked in another process, with the engine's kind of
    client and the idle gaps of `measure_pickup`: a hop to Redis and one from it, and two
    idle processes woken."""
    progress.phase("pickup floor: bare LPUSH to a blocked BLPOP", samples)
    client = _redis_client(url)
    try:
        with ChildGroup() as group:
            group.spawn(floor_worker, url, key)

            def push(pushed: float | None) -> None:
                client.lpush(key, "stop" if pushed is None else repr(pushed))

            return _latency_samples(group, samples, push, progress)
    finally:
        client.delete(key)
        client.close()
