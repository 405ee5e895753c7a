"""Giving back the jobs of a worker process that died, at once rather than at lock expiry.

A dead worker's name still holds its locks in the engine. Its recovery, a supervisor
chore, is idempotent (run again after the store failed it halfway, it does nothing twice):

1. the jobs it finished and reported, but had not completed, are completed (a workflow's
   step is given back instead, to run again: its result died with the process);
2. the job it was running, if it ran one alone, is settled: the first time a process dies
   under it (most deaths are the process's, not the job's), given back at once to its place
   in the queue, a retry spent; with the retry backoff from its second death on, and after a
   time-limit kill (so a poison job still ends failed); failed when it has no retry left;
   given back untouched after a cold shutdown, which is nobody's fault;
3. jobs it ran side by side (a process running many at once) are not charged for a death
   that any of them may have caused: each gets the death's history entry and is given back
   at once, a retry kept, and runs alone from then on (`runs_alone`), so that a
   later death is its own. A kill for one job's time limit charges that job alone;
4. every other job the engine shows the worker holding is given back, in its queue,
   whether or not the process had reported it (it may have died just after a pop).

A pool that starts also looks for workers of its host whose process is gone without a
supervisor to see it (theirs was killed, then they died): `orphans_of_host` settles the
jobs they still hold as a death's, at once, instead of when their locks run out.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from lanner.engine import Capability, Engine
from lanner.errors import InvalidState
from lanner.job import Job, JobState

if TYPE_CHECKING:
    from lanner.worker.child import JobStarted

logger = logging.getLogger("lanner.pool")

WORKFLOW_MARK: Final = '"wf":'
"""What a workflow step's data holds (its envelope's `wf`, lanner.codec)."""

DEATH_ENTRY: Final = "worker-died"
"""The history entry a job gets each time a worker process dies running it."""


@dataclass(frozen=True, slots=True)
class DeadWorker:
    worker: str  # its name: the holder of its locks in the engine
    reported: tuple[str, ...]  # the jobs it popped and had not finished
    running: tuple[JobStarted, ...]  # the jobs it was running, as it reported them
    finished: tuple[tuple[str, str], ...]  # (queue, jid) of the jobs it ran, not known to
    # be completed
    cause: str  # why it died, for logs and failure messages
    culprit: str | None  # the supervisor killed it for this job (past its time limit)
    shutdown: bool  # killed by a cold shutdown


def recovery(dead: DeadWorker, backoff: Callable[[int], float]) -> Callable[[Engine], None]:
    """The chore that gives back `dead`'s jobs; `backoff(n)` is the delay of retry n."""

    def recover(engine: Engine) -> None:
        if Capability.WORKERS not in engine.capabilities:
            # Its locks live in its process's memory (SQS's receipt handles): they come
            # back by themselves when they run out, a retry spent for each.
            logger.info("the %s engine settles jobs only from the process that popped them: "
                        "those of %s come back when their locks run out", engine.name,
                        dead.worker)  # fmt: skip
            return
        for queue, finished in itertools.groupby(sorted(dead.finished), key=lambda f: f[0]):
            _complete_finished(engine, dead.worker, queue, [jid for _, jid in finished])
        alone = len(dead.running) == 1
        for running in dead.running:
            if dead.culprit is not None and running.jid != dead.culprit:
                continue  # an innocent neighbour: given back below, uncharged
            _settle_running(engine, dead, running, backoff, alone or dead.culprit is not None)
        given_back = _give_back_held(engine, dead)
        if given_back:
            logger.info("gave back %d job(s) of %s: %s", len(given_back), dead.worker, given_back)

    return recover


def _complete_finished(engine: Engine, worker: str, queue: str, jids: list[str]) -> None:
    """Complete the jobs a dead process ran but had not completed; a workflow's step is
    given back instead (no retry spent), to run again: its result, which the next step
    reads, died with the process."""
    steps = [job.jid for job in engine.multiget(jids) if _is_workflow_step(job.data)]
    if steps:
        engine.release(steps, worker, queue)
        logger.info("gave back %d workflow step(s) %s ran but could not complete, to run "
                    "again for their results: %s", len(steps), worker, steps)  # fmt: skip
    engine.complete_many([jid for jid in jids if jid not in steps], worker, queue)


def _is_workflow_step(data: str) -> bool:
    if WORKFLOW_MARK not in data:  # most jobs: no JSON parse
        return False
    try:
        envelope = json.loads(data)
    except ValueError:
        return False
    return isinstance(envelope, dict) and isinstance(envelope.get("wf"), dict)


def _settle_running(
    engine: Engine,
    dead: DeadWorker,
    running: JobStarted,
    backoff: Callable[[int], float],
    charged: bool,
) -> None:
    """Settle a job the dead process was running; `charged`: the death may be its own."""
    job = engine.get(running.jid)
    if job is None or job.state != JobState.RUNNING or job.worker != dead.worker:
        return  # settled already, or handed to another worker
    timed_out = dead.culprit == job.jid
    if dead.shutdown:
        engine.release([job.jid], dead.worker, job.queue)
    elif not charged:
        _log_death(engine, job, dead.worker, dead.cause)
        engine.release([job.jid], dead.worker, job.queue)
    elif running.retry_delay is None:
        group = "TimeLimitExceeded" if timed_out else "lanner-worker-died"
        engine.fail(job.jid, dead.worker, group, f"job {job.jid}: {dead.cause}")
    elif timed_out:
        engine.retry(job.jid, job.queue, dead.worker, running.retry_delay)
    else:
        deaths = _deaths(job)
        _log_death(engine, job, dead.worker, dead.cause)
        if deaths == 0:  # back in its place in the queue, to run again now
            engine.release([job.jid], dead.worker, job.queue, spend_retry=True)
        else:
            engine.retry(job.jid, job.queue, dead.worker, backoff(deaths - 1))


def _log_death(engine: Engine, job: Job, worker: str, cause: str) -> None:
    if Capability.LOG in engine.capabilities:
        engine.log(job.jid, DEATH_ENTRY, {"worker": worker, "cause": cause})


def orphans_of_host(
    host: str, not_orphan: Callable[[int], bool], backoff: Callable[[int], float]
) -> Callable[[Engine], None]:
    """The chore that settles the jobs held by workers named `<host>-<pid>` whose process
    is gone (`not_orphan(pid)` false: the process is not alive, nor a child that the
    calling pool settles itself). Each held job counts as the running one of a death (a
    retry spent, the death's history entry; failed into `lanner-worker-died` with none
    left): which job was running is not known, and a job that brought a whole pool down
    must not loop."""

    def settle_orphans(engine: Engine) -> None:
        if Capability.WORKERS not in engine.capabilities:
            return  # the engine cannot say who holds what: the locks run out instead
        for counts in engine.workers():
            name, _, pid = counts.name.rpartition("-")
            holds = counts.jobs + counts.stalled
            if name != host or not pid.isdigit() or not holds or not_orphan(int(pid)):
                continue
            held = engine.worker_jobs(counts.name)
            cause = "its process was gone when a new pool started (its supervisor had died)"
            jobs = [job for job in engine.multiget([*held.jobs, *held.stalled])
                    if job.worker == counts.name]  # fmt: skip
            for job in jobs:
                try:
                    _settle_orphan(engine, job, cause, backoff, alone=len(jobs) == 1)
                except InvalidState as error:  # its own supervisor, alive after all, did it
                    logger.info("job %s: %s", job.jid, error)

    return settle_orphans


def _settle_orphan(
    engine: Engine, job: Job, cause: str, backoff: Callable[[int], float], *, alone: bool
) -> None:
    """Settle a job of a worker that died unseen; as a death's running job if it held it
    `alone`, else given back uncharged, to run alone (point 3 above)."""
    logger.warning("job %s: worker %s %s; settling it", job.jid, job.worker, cause)
    if not alone:
        _log_death(engine, job, job.worker, cause)
        engine.release([job.jid], job.worker, job.queue)
        return
    if job.remaining <= 0:
        engine.fail(job.jid, job.worker, "lanner-worker-died", f"job {job.jid}: worker {cause}")
        return
    deaths = _deaths(job)
    _log_death(engine, job, job.worker, cause)
    if deaths == 0:
        engine.release([job.jid], job.worker, job.queue, spend_retry=True)
    else:
        engine.retry(job.jid, job.queue, job.worker, backoff(deaths - 1))


def _deaths(job: Job) -> int:
    return sum(1 for event in job.history if event.what == DEATH_ENTRY)


def runs_alone(job: Job) -> bool:
    """Whether a worker process died with the job in flight: it then runs with no other
    job beside it (`concurrent.py`), so that a death under it is its own."""
    return _deaths(job) > 0


def _give_back_held(engine: Engine, dead: DeadWorker) -> list[str]:
    if Capability.WORKERS in engine.capabilities:
        held = engine.worker_jobs(dead.worker)
        jids = [*held.jobs, *held.stalled]
    else:
        jids = list(dead.reported)
    given_back: list[str] = []
    by_queue = sorted(engine.multiget(jids), key=lambda job: job.queue)
    for queue, jobs in itertools.groupby(by_queue, key=lambda job: job.queue):
        given_back += engine.release([job.jid for job in jobs], dead.worker, queue)
    return given_back
