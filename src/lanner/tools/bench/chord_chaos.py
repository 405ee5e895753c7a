"""`lanner bench chord-chaos`: chords run by a real pool whose workers are killed (kill -9)
every second; an account of every callback.

The chords (`chords` of `parents` each, `lanner.tools.bench.chord_tasks`) are published first,
then a `WorkerPool` runs them while this process, its supervisor, kills one of its worker
processes at random every `kill_every` seconds (the pool forks a new one, and gives the
dead one's jobs back). When every callback has finished (or `deadline` passes) the
account is made from the store and the tasks' ledger:

    lost          jobs not complete at the end (a parent or a callback)
    callbacks     callbacks complete, each completed once (its `done` history entries)
    wrong         callback runs that did not get every parent's result, in order
    early         callback runs that started before one of their parents ended its run
    repeats       callback runs beyond one each (only a kill during the callback's own run,
                  between its start and its completion, can cause one)

The run passes when nothing is lost, wrong or early, every callback completed once with
the sum of its parents' results, and repeats are no more than the kills.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lanner.job import Job, JobState
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.worker.pool import WorkerPool
from lanner.workflows.canvas import chord
from lanner.workflows.handle import WorkflowHandle


@dataclass
class ChordChaosReport:
    url: str
    chords: int
    parents: int
    kills: int = 0
    seconds: float = 0.0
    callbacks_complete: int = 0
    callbacks_done_once: int = 0
    callback_runs: int = 0
    repeats: int = 0
    parent_repeats: int = 0
    lost: int = 0
    wrong: int = 0
    early: int = 0
    bad_results: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            not self.lost
            and not self.wrong
            and not self.early
            and not self.bad_results
            and self.callbacks_done_once == self.chords
            and self.repeats <= self.kills
        )

    def to_json(self) -> dict[str, Any]:
        shown = {k: v for k, v in vars(self).items() if k != "problems"}
        return {**shown, "passed": self.passed, "problems": self.problems[:20]}


def run_chord_chaos(
    url: str,
    chords: int,
    parents: int,
    *,
    concurrency: int = 2,
    tasks_per_process: int | None = None,
    kill_every: float = 1.0,
    work_ms: float = 5.0,
    deadline: float = 600.0,
) -> ChordChaosReport:
    """Run the chords under kills; return the account (see the module docstring)."""
    from lanner.tools.bench import chord_tasks

    app = chord_tasks.app
    app.use_broker(url)
    app.settings = Settings(broker=url, retry_delay_multiple_sec=0.05)
    report = ChordChaosReport(url, chords, parents)
    with tempfile.TemporaryDirectory(prefix="lanner-chord-chaos-") as directory:
        ledger = Path(directory) / "ledger.txt"
        os.environ["LANNER_CHORD_LEDGER"] = str(ledger)
        handles = [
            chord(
                [chord_tasks.part.s(number, work_ms) for number in range(parents)],
                chord_tasks.collect.s(parents),
            ).delay()
            for _ in range(chords)
        ]
        started = time.monotonic()
        # Short locks: a job a killed process held that no recovery gave back (its pop's
        # answer lost with the process) comes back within seconds, not minutes.
        app.engine.config_set("grace-period", 1)
        queue = QueueConfig("chords", batch_size=5, visibility_timeout_sec=5,
                            long_poll_time_sec=0.5)  # fmt: skip
        pool = WorkerPool(
            app, concurrency=concurrency, tasks_per_process=tasks_per_process, queues=[queue]
        )
        pool.start()
        try:
            report.kills = _run_killing(pool, app, handles, kill_every, started + deadline)
        finally:
            pool.terminate(timeout=10)
        report.seconds = time.monotonic() - started
        _account(report, app, handles, ledger.read_text() if ledger.exists() else "")
    app.close()
    return report


def _run_killing(
    pool: WorkerPool, app: Any, handles: list[WorkflowHandle], every: float, until: float
) -> int:
    callbacks = [handle.jids[-1] for handle in handles]
    kills = 0
    next_kill = time.monotonic() + every
    next_check = 0.0
    while time.monotonic() < until:
        pool.supervise(0.05)
        now = time.monotonic()
        if now >= next_kill and pool.children:
            os.kill(random.choice(pool.children), signal.SIGKILL)
            kills += 1
            next_kill = now + every
        if now >= next_check:
            next_check = now + 0.5
            jobs = app.engine.multiget(callbacks)
            if len(jobs) == len(callbacks) and all(job.finished for job in jobs):
                return kills
    return kills


def _account(report: ChordChaosReport, app: Any, handles: list[WorkflowHandle], text: str) -> None:
    starts: dict[str, list[tuple[float, str]]] = defaultdict(list)
    parent_ends: dict[str, list[float]] = defaultdict(list)
    for line in text.splitlines():
        what, jid, _pid, when, *detail = line.split()
        if what == "cstart":
            starts[jid].append((float(when), " ".join(detail)))
        elif what == "pend":
            parent_ends[jid].append(float(when))
    for handle in handles:
        jobs = handle.jobs()
        callback = handle.jids[-1]
        for jid, job in jobs.items():
            if job is None or job.state != JobState.COMPLETE:
                report.lost += 1
                state = None if job is None else (job.state, job.failure)
                report.problems.append(f"{jid}: {state}")
            elif jid != callback:
                report.parent_repeats += max(0, len(parent_ends[jid]) - 1)
        job = jobs[callback]
        if job is not None and job.state == JobState.COMPLETE:
            last_parent = max(max(parent_ends[jid], default=0.0) for jid in handle.jids[:-1])
            _account_callback(report, job, starts[callback], last_parent)


def _account_callback(
    report: ChordChaosReport, job: Job, runs: list[tuple[float, str]], last_parent: float
) -> None:
    """One completed callback: done once, its result, and each of its runs."""
    expected = sum(range(report.parents))
    report.callbacks_complete += 1
    if sum(1 for event in job.history if event.what == "done") == 1:
        report.callbacks_done_once += 1
    if job.result != str(expected):
        report.bad_results += 1
        report.problems.append(f"{job.jid}: result {job.result}, not {expected}")
    report.callback_runs += len(runs)
    report.repeats += max(0, len(runs) - 1)
    for when, detail in runs:
        if not detail.endswith(" all"):
            report.wrong += 1
            report.problems.append(f"{job.jid}: got {detail}")
        if when < last_parent:
            report.early += 1
            report.problems.append(f"{job.jid}: started before a parent ended")
