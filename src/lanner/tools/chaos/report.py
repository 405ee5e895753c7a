"""The accounting of a chaos run: what was lost, repeated, late or left behind.

    lost             normal jobs published that did not end (ledger) and complete (store),
                     nor fail
    innocent_failed  normal jobs (not poison) that ended failed, in a failure group
    dup              the sum over normal jobs of (starts - 1)
    dup_bound        what dup may be: a kill or a stop repeats at most the jobs its process
                     was running, up to tasks_per_process (N) of them; a poison job that hits
                     its neighbours (ends its process, or takes its memory) the N - 1 beside it
    kills, stops     kill -9s of worker processes and supervisors; SIGSTOPs past the lease
    in_flight_at_kills  for each kill of a worker process: the normal jobs it was inside
    redelivery       for each normal job a killed worker was inside: the kill to its next start
    respawn          for each worker killed: the kill to the supervisor's next new worker
    stop_redelivery  for the stopped worker: the stop to the next start of each job it held
    stop_blocked     no other worker was free to take them over when lease + grace ran out
                     (each inside a poison task): the bound on stop_redelivery does not apply
    poison           each poison job's end: its state, group and the reason in its message
    tracebacks       tracebacks in the worker log other than the poison tasks' own

`Report.problems()` lists the checks that failed (the targets of issue 10 among them);
`figure_line()` is the one line `engine n t lost dup kills stops innocent_failed
redelivery_p99 elapsed` (t: the jobs each worker process runs at once).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from lanner.tools.chaos.faults import Incident, Kill, Stop
from lanner.tools.chaos.ledger import Ledger, Running
from lanner.tools.chaos.workload import POISONS

REDELIVERY_TARGET: Final = 1.0
"""Seconds: the issue's bound on redelivery after a worker's death (p99)."""
STOP_SLACK: Final = 2.0
"""Seconds a stopped worker's jobs may take past lease + grace to be picked up again."""
FAILURES_SHOWN: Final = 10
"""How many innocent jobs' failures the report names."""
TRACEBACK: Final = "Traceback (most recent call last):"
FRAME: Final = re.compile(r'^\s*File "([^"]+)", line \d+')


@dataclass(frozen=True, slots=True)
class PoisonOutcome:
    jid: str
    kind: str
    state: str
    group: str
    reason: str  # the last line of the failure message
    ok: bool


@dataclass
class Report:
    engine: str
    n: int
    tasks_per_process: int = 1
    threads: int = 1
    kind: str = "sync"  # of the tasks: "async" or "sync"
    lost: int = 0
    unended: int = 0
    incomplete: int = 0
    innocent_failed: int = 0
    innocent_failures: list[str] = field(default_factory=list)  # "<jid> <group>: <reason>"
    dup: int = 0
    dup_jobs: int = 0
    kills: int = 0
    stops: int = 0
    in_flight_at_kills: list[int] = field(default_factory=list)  # normal jobs, each kill
    poison_hits: int = 0  # runs of poison jobs that hit their neighbours (see POISONS)
    redelivery: list[float] = field(default_factory=list)
    respawn: list[float] = field(default_factory=list)
    stop_redelivery: list[float] = field(default_factory=list)
    stop_blocked: bool = False
    lease: float = 0.0
    grace: float = 0.0
    elapsed: float = 0.0
    publish_seconds: float = 0.0
    timed_out: bool = False
    pool_exits: list[str] = field(default_factory=list)
    final_exit: int | None = None
    poison: list[PoisonOutcome] = field(default_factory=list)
    rogue_starts: int = 0  # normal jobs a forked copy of a worker started
    rogue_ends: int = 0  # and ended: a copy that ran on the jobs in flight beside the fork
    tracebacks: int = 0
    first_traceback: str = ""
    corrupt: bool = False
    log_lines: int = 0
    leaked_after_settle: int = 0
    leaked: int = 0
    stray: int = 0
    incidents: list[Incident] = field(default_factory=list)
    faults_not_done: list[str] = field(default_factory=list)
    store_error: str = ""  # the store could not be read at the end
    folder: str = ""

    # -- figures --------------------------------------------------------------------------
    @property
    def redelivery_p99(self) -> float | None:
        return percentile(self.redelivery, 0.99)

    @property
    def respawn_p99(self) -> float | None:
        return percentile(self.respawn, 0.99)

    @property
    def stop_redelivery_max(self) -> float | None:
        return max(self.stop_redelivery) if self.stop_redelivery else None

    @property
    def dup_bound(self) -> int:
        """The most jobs the faults may repeat: each kill or stop, the jobs its process
        was running (at most tasks_per_process); each poison run that hits its neighbours,
        those beside it (one fewer)."""
        per_process = self.tasks_per_process
        return per_process * (self.kills + self.stops) + (per_process - 1) * self.poison_hits

    @property
    def pool_alive(self) -> bool:
        return not self.pool_exits and self.final_exit == 0

    def incident(self, name: str) -> dict[str, Any]:
        """The details of the (first) one-shot fault called `name`."""
        for incident in self.incidents:
            if incident.name == name:
                return incident.details
        raise KeyError(f"no {name} fault happened in this run")

    def figure_line(self) -> str:
        return (
            f"{self.engine} n={self.n} t={self.tasks_per_process} lost={self.lost} "
            f"dup={self.dup} kills={self.kills} stops={self.stops} "
            f"innocent_failed={self.innocent_failed} "
            f"redelivery_p99={_seconds(self.redelivery_p99)} elapsed={self.elapsed:.1f}s"
        )

    def problems(self) -> list[str]:
        """Every check that failed, in words; empty if the run met every target."""
        return [
            *self._work_problems(),
            *self._process_problems(),
            *self._incident_problems(),
            *self._target_problems(),
        ]

    def _work_problems(self) -> list[str]:
        found = []
        if self.store_error:
            found.append(f"the store could not be read at the end: {self.store_error}")
        if self.lost:
            found.append(f"{self.lost} job(s) lost")
        if self.innocent_failed:
            found.append(f"{self.innocent_failed} innocent job(s) ended in a failure group: "
                         + "; ".join(self.innocent_failures))  # fmt: skip
        if self.timed_out:
            found.append("the work did not settle before the deadline")
        found.extend(f"the {name} fault did not finish" for name in self.faults_not_done)
        if self.dup > self.dup_bound:
            found.append(
                f"dup {self.dup} > {self.dup_bound}: each of {self.kills} kill(s) and "
                f"{self.stops} stop(s) may repeat the {self.tasks_per_process} job(s) a process "
                f"runs at once, each of {self.poison_hits} poison run(s) hitting its "
                f"neighbours the {self.tasks_per_process - 1} beside it"
            )
        found.extend(
            f"poison {p.kind} {p.jid}: {p.state} {p.group!r} {p.reason!r}"
            for p in self.poison
            if not p.ok
        )
        return found

    def _process_problems(self) -> list[str]:
        found = [f"the pool exited by itself: {exit}" for exit in self.pool_exits]
        if not self.pool_exits and self.final_exit != 0:
            found.append(f"the pool's exit status on SIGTERM was {self.final_exit}")
        if self.rogue_starts:
            found.append(f"a forked copy of a worker started {self.rogue_starts} job(s)")
        if self.rogue_ends:
            found.append(f"a forked copy of a worker ended {self.rogue_ends} job(s)")
        if self.tracebacks:
            found.append(f"{self.tracebacks} traceback(s) in the worker log not from a task")
        if self.corrupt:
            found.append("'database disk image is malformed' in a log")
        if self.leaked_after_settle or self.leaked:
            found.append(
                f"a task's subprocess outlived its task ({self.leaked_after_settle} after "
                f"the time-limit kill, {self.leaked} after shutdown)"
            )
        if self.stray:
            found.append(f"{self.stray} process(es) of the pool left after its shutdown")
        return found

    def _target_problems(self) -> list[str]:
        found = []
        p99 = self.redelivery_p99
        if p99 is not None and p99 > REDELIVERY_TARGET:
            found.append(f"redelivery p99 {p99:.2f} s > {REDELIVERY_TARGET:g} s")
        worst = self.stop_redelivery_max
        bound = self.lease + self.grace + STOP_SLACK
        if worst is not None and worst > bound and not self.stop_blocked:
            found.append(f"redelivery after the stop {worst:.1f} s > lease + grace")
        return found

    def _incident_problems(self) -> list[str]:
        found = []
        for incident in self.incidents:
            details = incident.details
            for key in ("orphan_commits_lost", "orphan_jobs_held", "orphans_stuck", "jobs_held"):
                if details.get(key, 0) != 0:
                    found.append(f"{incident.name}: {key} = {details[key]}")
            if incident.name == "stop" and details.get("killed"):
                found.append(
                    "stop: the supervisor killed the stopped worker (its hard time limit) "
                    "before the lease ran out; give a time-limit grace longer than the stop"
                )
            if "exit_status" in details and details["exit_status"] != 0:
                found.append(f"{incident.name}: exit status {details['exit_status']}")
        return found

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["redelivery_p99"] = self.redelivery_p99
        data["respawn_p99"] = self.respawn_p99
        data["stop_redelivery_max"] = self.stop_redelivery_max
        data["dup_bound"] = self.dup_bound
        data["pool_alive"] = self.pool_alive
        data["problems"] = self.problems()
        for key in ("redelivery", "respawn", "stop_redelivery"):
            data[key] = [round(value, 4) for value in data[key]]
        return data


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.2f}s"


# -- from the ledger ----------------------------------------------------------------------
def duplicates(ledger: Ledger, normal: Sequence[str]) -> tuple[int, int]:
    """(sum of starts - 1, how many jobs started more than once)."""
    extra = [len(ledger.starts_of(jid)) - 1 for jid in normal]
    return sum(n for n in extra if n > 0), sum(1 for n in extra if n > 0)


def poison_hits(ledger: Ledger, poison: dict[str, str]) -> int:
    """How many times a poison job that hits its neighbours (`POISONS`) started; `poison`
    maps the run's poison jids to their kinds."""
    return sum(
        1
        for line in ledger.lines
        if line.what == "pstart" and POISONS[poison.get(line.jid, "raise")].hits_neighbours
    )


def in_flight_at_kills(ledger: Ledger, kills: Sequence[Kill]) -> list[tuple[Kill, list[str]]]:
    """For each kill of a worker process (not of a supervisor), in time order: the normal
    jobs it was inside. The ledger is replayed in time order up to each kill."""
    victims = sorted((kill for kill in kills if kill.cause != "supervisor"),
                     key=lambda kill: kill.when)  # fmt: skip
    running = Running()
    lines = sorted(ledger.lines, key=lambda line: line.when)
    index = 0
    found = []
    for kill in victims:
        while index < len(lines) and lines[index].when <= kill.when:
            running.add(lines[index])
            index += 1
        found.append((kill, running.jobs(kill.pid)))
    return found


def redeliveries(ledger: Ledger, in_flight: Sequence[tuple[Kill, list[str]]]) -> list[float]:
    """For each normal job a killed worker was inside (`in_flight_at_kills`): seconds
    until that job started again (infinity if it never did)."""
    found = []
    for kill, jids in in_flight:
        for jid in jids:
            later = [line.when for line in ledger.starts_of(jid) if line.when > kill.when]
            found.append(min(later) - kill.when if later else math.inf)
    return found


def stop_redeliveries(ledger: Ledger, stops: Sequence[Stop], normal: set[str]) -> list[float]:
    """For each normal job a stopped worker held: seconds from the stop until another
    worker started it (infinity if nobody ever started it)."""
    found = []
    for stop in stops:
        for jid in stop.held:
            if jid not in normal:
                continue
            later = [
                line.when
                for line in ledger.starts_of(jid)
                if line.when > stop.when and line.pid != stop.pid
            ]
            if later:
                found.append(min(later) - stop.when)
            elif not any(line.pid == stop.pid for line in ledger.starts_of(jid)):
                found.append(math.inf)  # never started by anyone
    return found


def foreign_tracebacks(log: str, task_files: Sequence[str]) -> tuple[int, str]:
    """Tracebacks in `log` whose innermost frame is not in one of `task_files`; the count
    and the first one's text."""
    count, first = 0, ""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if TRACEBACK not in line:
            continue
        frames: list[str] = []
        end = index + 1
        while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
            match = FRAME.match(lines[end])
            if match:
                frames.append(match.group(1))
            end += 1
        if frames and frames[-1] in task_files:
            continue
        count += 1
        if not first:
            first = "\n".join(lines[max(0, index - 1) : end + 1])
    return count, first
