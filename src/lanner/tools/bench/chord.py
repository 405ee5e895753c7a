"""`lanner bench chord`: a chord of N no-op parents, measured where the engine does the work.

For each round, a chord of `parents` no-op jobs and one callback is published through the
public API (`lanner.chord(...).delay()`: one `put_many`), and timed. The parents are then
popped and completed in batches by engine calls, as a worker does (no task runs: the
benchmark measures the store, not Python calling a no-op), all but the last; no pop may
give the callback meanwhile. Then a pop waits (`wait=`, as an idle worker's does) while
the last parent is completed alone: that command's time, and the time from its end to
the waiting pop's answer, the callback, are the callback's ready latency (the engine
released it inside the completion; the pop only has to wake up).
Last, the callback's inputs are read as a worker reads them at admission (one `multiget`
of every parent), and timed.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from lanner.app import App
from lanner.job import Job, JobState
from lanner.settings import Settings
from lanner.task import Task
from lanner.tools.bench.common import IDLE_GAP, BenchError, BenchProgress, MachineInfo, bench_store
from lanner.workflows.canvas import Signature, chord
from lanner.workflows.inputs import leading_arguments

BATCH = 500
"""Parents popped and completed per engine call, as a worker's batch."""


class ChordNoop(Task):
    """A parent: nothing to do (no worker runs it in the benchmark)."""

    def run_task(self, *args: Any) -> None:
        return None


class ChordCount(Task):
    """The callback: how many results it got."""

    def run_task(self, results: list[Any]) -> int:
        return len(results)


@dataclass(frozen=True, slots=True)
class ChordBenchResult:
    url: str
    parents: int
    rounds: int
    publish_s: list[float]
    publish_cpu_s: list[float]  # this process's CPU during the publish
    last_complete_ms: list[float]  # the last parent's completion, which released the callback
    ready_ms: list[float]  # from its start to a blocked pop's answer: the callback
    inputs_ms: list[float]  # the callback's admission: every parent's result read
    machine: MachineInfo
    load: tuple[float, float, float]  # the load average at the end (1, 5, 15 minutes)

    def to_json(self) -> dict[str, Any]:
        def median(values: list[float]) -> float:
            return round(statistics.median(values), 3)

        return {
            "url": self.url,
            "parents": self.parents,
            "rounds": self.rounds,
            "publish_s": median(self.publish_s),
            "publish_cpu_s": median(self.publish_cpu_s),
            "last_complete_ms": median(self.last_complete_ms),
            "ready_ms": median(self.ready_ms),
            "inputs_ms": median(self.inputs_ms),
            "samples": {
                "publish_s": self.publish_s,
                "publish_cpu_s": self.publish_cpu_s,
                "last_complete_ms": self.last_complete_ms,
                "ready_ms": self.ready_ms,
                "inputs_ms": self.inputs_ms,
            },
            "machine": self.machine.to_json(),
            "load": list(self.load),
        }


def run_chord_benchmark(
    url: str | None, parents: int, rounds: int, progress: BenchProgress
) -> ChordBenchResult:
    publish: list[float] = []
    publish_cpu: list[float] = []
    last: list[float] = []
    ready: list[float] = []
    reads: list[float] = []
    with bench_store(url) as store:
        app = App(store, settings=Settings(broker=store))
        try:
            progress.phase(f"chords of {parents:,} parents", rounds)
            for number in range(rounds):
                seconds, cpu, last_ms, ready_ms, inputs_ms = _round(app, f"chord-{number}", parents)
                publish.append(seconds)
                publish_cpu.append(cpu)
                last.append(last_ms)
                ready.append(ready_ms)
                reads.append(inputs_ms)
                progress.advance()
        finally:
            app.close()
    return ChordBenchResult(
        store, parents, rounds, publish, publish_cpu, last, ready, reads, MachineInfo.current(),
        os.getloadavg(),
    )  # fmt: skip


def _round(app: App, queue: str, parents: int) -> tuple[float, float, float, float, float]:
    engine = app.engine
    options = {"queue": queue, "retries": 0}
    header = [Signature(ChordNoop, app, (i,)).set(**options) for i in range(parents)]
    started, cpu_started = time.perf_counter(), time.process_time()
    handle = chord(header, Signature(ChordCount, app).set(**options)).delay()
    published = time.perf_counter() - started
    publish_cpu = time.process_time() - cpu_started
    callback = handle.jids[-1]
    done = 0
    while done < parents - 1:  # all but the last parent, in worker-sized batches
        jobs = engine.pop(queue, "bench", min(BATCH, parents - 1 - done))
        _check_parents(queue, jobs, callback)
        jids = [job.jid for job in jobs]
        engine.complete_many(jids, "bench", queue, results=dict.fromkeys(jids, "null"))
        done += len(jids)
    (last_parent,) = engine.pop(queue, "bench", 1)
    _check_parents(queue, [last_parent], callback)
    # A worker blocked in a pop, as idle workers are, when the last parent completes.
    given: list[Job] = []
    answered = threading.Event()

    def blocked_pop() -> None:
        given.extend(engine.pop(queue, "bench-2", 1, wait=30))
        given_at.append(time.perf_counter())
        answered.set()

    given_at: list[float] = []
    popper = threading.Thread(target=blocked_pop, daemon=True)
    popper.start()
    time.sleep(random.uniform(*IDLE_GAP) + 0.05)  # the pop is blocked by now (bench engine)
    began = time.perf_counter()
    engine.complete(last_parent.jid, "bench", queue, result="null")
    finished = time.perf_counter()
    if not answered.wait(60):
        raise BenchError(f"{queue}: no worker got the callback within 60 s")
    popper.join()
    last_ms = (finished - began) * 1000
    ready_ms = (given_at[0] - began) * 1000
    if [job.jid for job in given] != [callback]:
        raise BenchError(f"{queue}: the callback was not ready after its last parent")
    began = time.perf_counter()
    (results,) = leading_arguments(given[0], json.loads(given[0].data)["wf"], app)
    inputs_ms = (time.perf_counter() - began) * 1000
    if len(results) != parents:
        raise BenchError(f"{queue}: the callback read {len(results)} results, not {parents}")
    engine.complete(callback, "bench-2", queue, result=str(len(results)))
    if handle.state() != JobState.COMPLETE:
        raise BenchError(f"{queue}: the chord did not complete")
    return published, publish_cpu, last_ms, ready_ms, inputs_ms


def _check_parents(queue: str, jobs: list[Job], callback: str) -> None:
    if not jobs or any(job.jid == callback for job in jobs):
        raise BenchError(f"{queue}: a pop gave no parent, or the callback before its parents")
