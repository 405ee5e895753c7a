"""When a run's work has settled, and how each poison job ended.

Work has settled when every normal job has ended (ledger) and is complete (store), or has
failed (an innocent job in a failure group: the report counts it), and every poison job
is failed (or, for the fork poison, complete). The store is asked at most twice a second,
and only once the ledger shows at most LOOK_AT_UNENDED normal jobs not ended; a store that
cannot answer (Redis away) means "not yet".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import lanner
from lanner.tools.chaos import procs
from lanner.tools.chaos.report import PoisonOutcome
from lanner.tools.chaos.workload import POISONS, Workload

if TYPE_CHECKING:
    from lanner.tools.chaos.run import Run

CHECK_EVERY: Final = 0.5
LOOK_AT_UNENDED: Final = 1000
"""Normal jobs not ended that the store is asked about, to see whether they failed."""
SUBPROCESS_GRACE: Final = 3.0
"""Seconds a poison task's subprocess may take to die after its job settled."""
FINAL: Final = (lanner.JobState.COMPLETE, lanner.JobState.FAILED)


class Settler:
    def __init__(self, run: Run, work: Workload) -> None:
        self.run = run
        self.work = work
        self._final: set[str] = set()  # normal jobs ended and complete, or failed
        self._checked = 0.0

    def settled(self) -> bool:
        ledger = self.run.ledger
        if len(self.work.normal) - len(ledger.ended) > LOOK_AT_UNENDED:
            return False
        if time.monotonic() - self._checked < CHECK_EVERY:
            return False
        self._checked = time.monotonic()
        try:
            waiting = [jid for jid in self.work.normal if jid not in self._final]
            for job in self.run.jobs(waiting):
                ended = job.state == lanner.JobState.COMPLETE and job.jid in ledger.ended
                if ended or job.state == lanner.JobState.FAILED:
                    self._final.add(job.jid)
            if len(self._final) < len(self.work.normal):
                return False
            jobs = self.run.jobs(sorted(self.work.poison))
        except Exception:  # the store is away: not settled yet
            return False
        return len(jobs) == len(self.work.poison) and all(job.state in FINAL for job in jobs)

    def leaked_after_settle(self, marker: str) -> int:
        """How many marked subprocesses are alive a few seconds after the work settled."""
        if "overrun" not in self.work.poison.values():
            return 0
        deadline = time.monotonic() + SUBPROCESS_GRACE
        while procs.with_argument(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(procs.with_argument(marker))


def account_poison(run: Run, work: Workload) -> list[PoisonOutcome]:
    """How each poison job ended, and whether that is how it must end."""
    try:
        jobs = {job.jid: job for job in run.jobs(sorted(work.poison))}
    except Exception as error:  # reported as every poison job's outcome
        return [PoisonOutcome(jid, kind, "unknown", "", str(error), False)
                for jid, kind in work.poison.items()]  # fmt: skip
    killed = {kill.pid for kill in run.kills}
    # A worker stopped past its lease, or left without a supervisor, loses its jobs' locks;
    # a job whose lock runs out with no retry left fails as qless says: failed-retries-<q>.
    supervisor_killed = any(incident.name == "supervisor-kill" for incident in run.incidents)
    locks_ran_out = bool(run.stops) or supervisor_killed
    outcomes = []
    for jid, kind in sorted(work.poison.items()):
        job = jobs.get(jid)
        expected = POISONS[kind]
        if job is None:
            outcomes.append(PoisonOutcome(jid, kind, "missing", "", "", False))
            continue
        failure = job.failure
        group = failure.group if failure is not None else ""
        message = failure.message if failure is not None else ""
        lines = [line for line in message.splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else ""
        if not expected.fails:
            ok = job.state == lanner.JobState.COMPLETE
        else:
            ok = job.state == lanner.JobState.FAILED and _group_matches(group, expected.group)
            ok = ok and any(words in message for words in expected.reasons)
            runners = {line.pid for line in run.ledger.lines
                       if line.what == "pstart" and line.jid == jid}  # fmt: skip
            # A kill can land after its worker popped the job and before the task wrote its
            # start to the ledger: the job's history names that worker (host-pid).
            runners |= _popped_by(job)
            if not ok and runners & killed:
                # The harness itself killed it on its last try: that is its reason, given by
                # the supervisor, or by qless's rule when the job's lock ran out first (a
                # supervisor slowed by a loaded machine, seen at a load of 8).
                ok = job.state == lanner.JobState.FAILED and (
                    group == "lanner-worker-died" or group.startswith("failed-retries-")
                )
            if not ok and locks_ran_out:
                ok = job.state == lanner.JobState.FAILED and group.startswith("failed-retries-")
            if not ok and supervisor_killed and expected.group == "lanner-worker-died":
                # An orphan of the killed supervisor died of it: nobody saw its exit status,
                # and the next pool fails the job with the reason it can know.
                ok = job.state == lanner.JobState.FAILED and group == "lanner-worker-died"
                ok = ok and "supervisor had died" in message
        outcomes.append(PoisonOutcome(jid, kind, str(job.state), group, reason[:200], ok))
    return outcomes


def _popped_by(job: lanner.Job) -> set[int]:
    """The pids of the workers the job's history says popped it."""
    pids = set()
    for event in job.history:
        worker = str(event.details.get("worker", "")) if event.what == "popped" else ""
        pid = worker.rpartition("-")[2]
        if pid.isdigit():
            pids.add(int(pid))
    return pids


def _group_matches(group: str, expected: str) -> bool:
    return group.endswith(expected) if expected.startswith(".") else group == expected
