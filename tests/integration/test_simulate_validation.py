"""The simulator against the real thing: one small workload, simulated and run by a real pool.

Two queues (priorities 10 and 1, batches of 2, 2 batches a round, long polls of 0.2 s) get
Poisson arrivals for 10 s at 60 % of two workers' capacity (about 120 and 60 tasks); their
tasks sleep 50 ms and 100 ms. The same arrival times are published to a SQLite engine as
delayed jobs (so no publisher's timing gets in the way), run by a `WorkerPool` of two
processes, and replayed in the simulator with lanner's default costs. A task's wait is from
the moment it is due to its pop, read from the job's history, which is also what the
simulator measures.

Tolerance: each queue's simulated mean wait (averaged over 20 seeds, as the real pool's
selector draws are random too) must be within 40 % or 15 ms of the measured mean, whichever
is larger. Simulated means of single seeds spread by about ±4 ms (one standard deviation)
around their average, and the measured waits carry a shared machine's scheduling noise, so
the tolerance leaves room for the real run's own luck; on this machine the two agreed
within about 20 %.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

import pytest

from lanner import JobState
from lanner.app import App
from lanner.messages import Message, PublishOptions
from lanner.queues import QueueConfig
from lanner.simulate import Costs, Scenario, SimQueue, simulate
from lanner.simulate.arrivals import ArrivalSpec
from lanner.simulate.distributions import Fixed
from lanner.worker.pool import WorkerPool

from .conftest import Workspace, wait_until

pytestmark = pytest.mark.slow

SECONDS = 10.0
RATES = {"hi": 12.0, "lo": 6.0}
SLEEPS = {"hi": 0.05, "lo": 0.1}
WORKERS = 2
SEEDS = 20
RELATIVE_TOLERANCE = 0.40
ABSOLUTE_TOLERANCE = 0.015

QUEUES = """
    QueueConfig("hi", priority=10, batch_size=2, num_iterations=2,
                visibility_timeout_sec=10, long_poll_time_sec=0.2),
    QueueConfig("lo", priority=1, batch_size=2, num_iterations=2,
                visibility_timeout_sec=10, long_poll_time_sec=0.2),
"""

TASKS = """
class Hi(Task):
    app = app
    queue = "hi"
    time_limit = 5
    max_retries = 0

    def run_task(self, seconds):
        time.sleep(seconds)


class Lo(Task):
    app = app
    queue = "lo"
    time_limit = 5
    max_retries = 0

    def run_task(self, seconds):
        time.sleep(seconds)
"""

CONFIGS = (
    QueueConfig("hi", priority=10, batch_size=2, num_iterations=2, visibility_timeout_sec=10,
                long_poll_time_sec=0.2),
    QueueConfig("lo", priority=1, batch_size=2, num_iterations=2, visibility_timeout_sec=10,
                long_poll_time_sec=0.2),
)  # fmt: skip


def poisson(rate: float, rng: random.Random) -> list[float]:
    times, at = [], rng.expovariate(rate)
    while at < SECONDS:
        times.append(at)
        at += rng.expovariate(rate)
    return times


def measured_waits(ws: Workspace, jids: Sequence[str], delays: Sequence[float]) -> list[float]:
    waits = []
    for jid, delay in zip(jids, delays, strict=True):
        history = ws.job(jid).history
        put = next(event.when for event in history if event.what == "put")
        popped = next(event.when for event in history if event.what == "popped")
        waits.append(popped - (put + delay))
    return waits


def simulated_mean_waits(arrivals: dict[str, list[float]]) -> dict[str, float]:
    queues = tuple(
        SimQueue(config, ArrivalSpec(replay=tuple(arrivals[config.name])),
                 Fixed(SLEEPS[config.name]))
        for config in CONFIGS
    )  # fmt: skip
    means: dict[str, list[float]] = {name: [] for name in RATES}
    for seed in range(SEEDS):
        scenario = Scenario(
            "validation", queues, workers=WORKERS, duration=SECONDS, seed=seed, costs=Costs()
        )
        result = simulate(scenario, "reduced-lottery")
        for queue in result.queues:
            means[queue.name].append(queue.wait.mean)
    return {name: statistics.fmean(values) for name, values in means.items()}


def test_simulated_waits_match_a_real_pool(workspace: Workspace) -> None:
    ws = workspace
    tasks = ws.write_module(TASKS, queues=QUEUES)
    app: App = tasks.app
    rng = random.Random(2026)
    arrivals = {name: poisson(rate, rng) for name, rate in RATES.items()}
    classes = {"hi": tasks.Hi, "lo": tasks.Lo}

    pool = WorkerPool(app, concurrency=WORKERS, selector="reduced-lottery")
    pool.start()
    try:
        # Both processes pop (and so register) before the workload's clock starts.
        wait_until(lambda: len(ws.engine.workers()) >= WORKERS, 10, "the workers to start",
                   step=lambda: pool.supervise(0.05))  # fmt: skip
        start = time.time() + 0.5
        jids: dict[str, Sequence[str]] = {}
        delays: dict[str, list[float]] = {}
        for name, times in arrivals.items():
            now = time.time()
            delays[name] = [start + at - now for at in times]
            messages = [
                Message(classes[name], (SLEEPS[name],), options=PublishOptions(delay=delay))
                for delay in delays[name]
            ]
            jids[name] = app.publish_many(messages)
        everything = [jid for name in jids for jid in jids[name]]
        wait_until(
            lambda: all(ws.job(jid).state == JobState.COMPLETE for jid in everything),
            SECONDS + 15,
            "every job to complete",
            step=lambda: pool.supervise(0.05),
            details=ws.log,
        )
    finally:
        pool.terminate(timeout=5)

    measured = {
        name: statistics.fmean(measured_waits(ws, jids[name], delays[name])) for name in jids
    }
    simulated = simulated_mean_waits(arrivals)
    for name in RATES:
        allowed = max(RELATIVE_TOLERANCE * measured[name], ABSOLUTE_TOLERANCE)
        assert abs(simulated[name] - measured[name]) <= allowed, (
            f"queue {name}: simulated mean wait {simulated[name] * 1000:.1f} ms, measured "
            f"{measured[name] * 1000:.1f} ms (allowed ±{allowed * 1000:.1f} ms); "
            f"all: simulated {simulated}, measured {measured}"
        )
