"""Faults, and those done to worker processes: what the harness does to a running pool.

Each fault is a small state machine that the harness ticks about 20 times a second from
one thread, so faults never race each other. One-shot faults fire when a fraction of the
normal jobs has ended (so they land mid-work whatever the machine's speed), one at a time
(a fault due while another is under way waits for its end); the periodic kill fires every
K seconds while work remains. Faults done to the supervisor and the
store are in `lanner.tools.chaos.outages`.

    KillEvery         kill -9 of a random worker process (a child of the supervisor) inside a
                      job, every K s while normal jobs remain
    StopChild         SIGSTOP of a worker process mid-batch, past its lease, then SIGCONT
"""

from __future__ import annotations

import random
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from lanner.tools.chaos import procs
from lanner.tools.chaos.ledger import Ledger
from lanner.tools.chaos.pool import StatusReader, Supervisor

STOP_ATTEMPTS = 50
"""How many workers a stop may try in one tick to catch one between two jobs of a batch."""
FINISHED = 2
"""Finished jobs a stopped worker must hold, not completed yet, for the worst moment (with
one, a pool that repeats what it finished would still meet one repeat per stop)."""
RELAX_AFTER = 3.0
"""Seconds of tries for a stop at one moment before a less harmful one will do."""


@dataclass
class Kill:
    """A kill -9 of a worker process (`pid`) by the harness."""

    pid: int
    when: float
    cause: str
    respawned: float | None = None  # when the supervisor had a new worker process


@dataclass
class Stop:
    pid: int
    when: float
    held: tuple[str, ...]  # jobs the store showed the stopped worker holding
    resumed: float | None = None
    killed_meanwhile: bool = False
    takeover_at: float = 0.0  # when its locks and the grace after them have run out
    # whether no other worker was free (each inside a poison task) from then until it was
    # continued, so that none could take its jobs over; None: not seen
    blocked: bool | None = None


@dataclass
class Incident:
    """A one-shot fault that happened: its name, when, and what the harness saw."""

    name: str
    started: float
    ended: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Harness(Protocol):
    """What faults may use of a running harness."""

    rng: random.Random
    ledger: Ledger
    kills: list[Kill]
    stops: list[Stop]
    incidents: list[Incident]

    @property
    def supervisor(self) -> Supervisor | None: ...

    def progress(self) -> float: ...

    def take_down_supervisor(self) -> Supervisor | None: ...

    def start_supervisor(self) -> None: ...

    def held_by(self, pids: list[int]) -> list[str]: ...

    def store_free(self) -> bool: ...

    def incomplete(self, jids: set[str]) -> set[str]: ...

    def grace(self) -> float: ...

    def lease(self) -> float: ...

    def reader(self) -> StatusReader: ...

    def note(self, text: str) -> None: ...


def worker_name(pid: int) -> str:
    """The name lanner gives a worker process: `<hostname>-<pid>` (docs/worker.md)."""
    return f"{socket.gethostname()}-{pid}"


class Fault:
    """A fault: `tick` does the next step when its time comes; `done` once it is over."""

    name = "fault"
    done = False

    def tick(self, run: Harness, now: float) -> None:
        raise NotImplementedError

    def end(self, run: Harness) -> None:
        """Undo what is still in force when a run ends early (the pool died, time ran out)."""


def pick_child(run: Harness, *, busy: bool | None, spare_repeats: bool = False) -> int | None:
    """A random live, running worker process that is not inside a poison task, nor the
    one a stop fault stopped (even once continued: one fault at a time on a process).

    `busy`: True, only one inside a normal job (None if there is none now); False, only
    one outside every task; None, any. With `spare_repeats`, a process inside no normal job
    but ones that run again (started before) is not busy.
    """
    supervisor = run.supervisor
    if supervisor is None:
        return None
    candidates = []
    stopped = {stop.pid for stop in run.stops}
    for pid in supervisor.children():
        proc = procs.info(pid)
        if proc is None or proc.state == "T" or pid in stopped or run.ledger.running_poison(pid):
            continue
        inside = any(
            not spare_repeats or len(run.ledger.starts_of(jid)) == 1
            for jid in run.ledger.running_jobs(pid)
        )
        if busy is None or busy == inside:
            candidates.append(pid)
    return run.rng.choice(candidates) if candidates else None


def kill_child(run: Harness, cause: str, *, idle_too: bool = False) -> Kill | None:
    """kill -9 of a worker inside a normal job (or any worker, with `idle_too`).

    A job that runs again is spared: a process inside no other is not picked. A job in
    flight beside others when its process died runs alone afterwards, charged for each
    death then (docs/reliability.md); a harness that killed whatever ran (at the end of a
    run, often those jobs alone) would make them end failed, as a poison job does.
    """
    run.ledger.update()
    pid = pick_child(run, busy=None if idle_too else True, spare_repeats=True)
    if pid is None or not procs.send(pid, signal.SIGKILL):
        return None
    kill = Kill(pid, time.time(), cause)
    run.kills.append(kill)
    return kill


class KillEvery(Fault):
    """kill -9 of a worker inside a normal job every `every` s, while normal jobs remain.

    A tick with no worker inside a job tries again at the next tick. With `idle_too`,
    idle workers (blocked in a pop) are fair game as well.
    """

    name = "kill"

    def __init__(self, every: float, first: float | None = None, idle_too: bool = False) -> None:
        self.every = every
        self.next: float | None = None
        self.first = every if first is None else first
        self.idle_too = idle_too

    def tick(self, run: Harness, now: float) -> None:
        if self.next is None:
            self.next = now + self.first
        if now < self.next or run.supervisor is None or run.progress() >= 1:
            return  # not yet, between two supervisors, or no work left
        if kill_child(run, f"every {self.every:g} s", idle_too=self.idle_too) is not None:
            self.next = now + self.every


class OneShot(Fault):
    """A fault that fires once, when `at` of the normal jobs have ended and no other
    one-shot fault is under way."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.phase = "armed"
        self.incident: Incident | None = None

    def begin(self, run: Harness, now: float, **details: Any) -> Incident:
        self.incident = Incident(self.name, now, details=dict(details))
        run.incidents.append(self.incident)
        run.note(f"{self.name} at {self.at:.0%} of the jobs")
        return self.incident

    def finish(self, now: float, **details: Any) -> None:
        assert self.incident is not None
        self.incident.ended = now
        self.incident.details.update(details)
        self.phase = "done"
        self.done = True

    def due(self, run: Harness) -> bool:
        """Armed, its moment come, and no other one-shot fault under way: one at a time,
        so that each costs only its own (a stop's jobs cannot be taken over while the store
        is away, for one)."""
        under_way = any(incident.ended is None for incident in run.incidents)
        return self.phase == "armed" and run.progress() >= self.at and not under_way


class StopChild(OneShot):
    """SIGSTOP of one worker between two jobs of a batch, for lease + grace + 2 s (or
    `seconds`), then SIGCONT.

    It aims at the worst moment for repeats: just past the end of a job, holding jobs it
    finished but has not completed yet (at least FINISHED) and jobs it has not started.
    The jobs a worker holds are read from the store before the stop, never while it is
    stopped (a stopped SQLite process may hold a lock that readers wait for); once
    stopped, its ledger must show it just past the end of a job. Between two jobs of a
    batch the loop makes no engine call; a process that runs many jobs at once makes them
    from threads of its own at any moment, so the stop must also find the store free (no
    SQLite write lock held) or it would stop every worker. A worker caught elsewhere is
    continued at once and another one tried. No stop starts while a worker is inside a
    poison task: one that ignores its time limit holds its process until the supervisor
    kills it, `TIME_LIMIT_GRACE_SEC` later (longer than the stop, see `run`), and a small
    pool would then have no worker left to take the stopped one's jobs at lease + grace.
    Such a task may still start during the stop: from lease + grace on, the stop notes
    whether any other worker was free to take the jobs over (`Stop.blocked`).

    What is asked for relaxes every RELAX_AFTER seconds without a catch (a pool that
    completes each job at once, or batches of one, never shows the worst moment):
    `finished` (the worst), `unstarted` (mid-batch, fewer finished jobs held), then
    `outside` (outside any task).
    A process that runs many jobs at once (`many`) is seldom outside every task, and the
    worst moment for it is `inside` them, holding them all: that is asked for first.
    The report says which it was.
    """

    name = "stop"

    def __init__(self, at: float, seconds: float | None = None, many: bool = False) -> None:
        super().__init__(at)
        self.levels: tuple[str, ...] = ("finished", "unstarted", "outside")
        if many:
            self.levels = ("inside", *self.levels)
        self.seconds = seconds
        self.stop: Stop | None = None
        self.until = 0.0
        self.trying_since: float | None = None

    def tick(self, run: Harness, now: float) -> None:
        if self.due(run):
            if self.trying_since is None:
                self.trying_since = now
            step = int((now - self.trying_since) / RELAX_AFTER)
            self._try_stops(run, now, self.levels[min(step, len(self.levels) - 1)])
        elif self.phase == "stopped" and self.stop is not None:
            if not procs.alive(self.stop.pid):
                self.stop.killed_meanwhile = True
            if time.time() >= self.stop.takeover_at and self.stop.blocked is not False:
                run.ledger.update()
                self.stop.blocked = not _free_worker(run, self.stop.pid)
            if now >= self.until or self.stop.killed_meanwhile:
                procs.send(self.stop.pid, signal.SIGCONT)
                self.stop.resumed = time.time()
                self.finish(now, resumed=self.stop.resumed, killed=self.stop.killed_meanwhile,
                            blocked=self.stop.blocked)  # fmt: skip

    def end(self, run: Harness) -> None:
        if self.phase == "stopped" and self.stop is not None:
            procs.send(self.stop.pid, signal.SIGCONT)
            self.stop.resumed = time.time()

    def _try_stops(self, run: Harness, now: float, level: str) -> None:
        run.ledger.update()
        if _poisoned(run):
            return  # the pool could not take the stopped worker's jobs over: next tick
        for _ in range(STOP_ATTEMPTS):
            run.ledger.update()
            pid = pick_child(run, busy=None)
            if pid is None:
                return  # no worker right now: try again next tick
            try:
                held = tuple(run.held_by([pid]))
            except Exception:  # the store cannot answer now: another tick
                return
            if not self._may_be(run, pid, held, level):
                time.sleep(0.001)  # not holding what this level asks for: another worker
                continue
            if procs.send(pid, signal.SIGSTOP) and _wait_stopped(pid):
                run.ledger.update()
                moment = self._moment(run, pid, held)
                wanted = moment in self.levels[: self.levels.index(level) + 1]
                if wanted and run.store_free():
                    self._stopped(run, now, Stop(pid, time.time(), held), moment)
                    return
            procs.send(pid, signal.SIGCONT)

    @classmethod
    def _may_be(cls, run: Harness, pid: int, held: tuple[str, ...], level: str) -> bool:
        """Whether a worker holding `held` could be stopped at `level`'s moment soon (the
        ledger shows where it is only once it is stopped)."""
        if level == "outside":
            return True
        if level == "inside":
            return bool(held)
        unstarted = cls._unstarted(run, pid, held)
        finished = sum(1 for jid in held if jid in run.ledger.ended)
        return unstarted and (finished >= FINISHED or level == "unstarted")

    @staticmethod
    def _unstarted(run: Harness, pid: int, held: tuple[str, ...]) -> bool:
        return any(
            jid not in run.ledger.ended
            and all(line.pid != pid for line in run.ledger.starts_of(jid))
            for jid in held
        )

    @classmethod
    def _moment(cls, run: Harness, pid: int, held: tuple[str, ...]) -> str:
        """`finished`, `unstarted` or `outside` (see the class), or `inside` a task."""
        if run.ledger.inside(pid):
            return "inside"
        last = run.ledger.last_line(pid)
        if last is None or last.what != "end" or not cls._unstarted(run, pid, held):
            return "outside"
        finished = sum(1 for jid in held if jid in run.ledger.ended)
        return "finished" if finished >= FINISHED else "unstarted"

    def _stopped(self, run: Harness, now: float, stop: Stop, moment: str) -> None:
        self.stop = stop
        run.stops.append(stop)
        seconds = self.seconds
        if seconds is None:
            seconds = run.lease() + run.grace() + 2.0
        self.until = time.time() + seconds
        stop.takeover_at = stop.when + run.lease() + run.grace()
        finished = sum(1 for jid in stop.held if jid in run.ledger.ended)
        self.begin(run, now, pid=stop.pid, seconds=seconds, held=len(stop.held),
                   finished_held=finished, moment=moment,
                   in_flight=len(run.ledger.running_jobs(stop.pid)))  # fmt: skip
        self.phase = "stopped"


def _poisoned(run: Harness) -> bool:
    """Whether a worker process of the pool is inside a poison task."""
    supervisor = run.supervisor
    return supervisor is not None and any(
        run.ledger.running_poison(pid) for pid in supervisor.children()
    )


def _free_worker(run: Harness, stopped: int) -> bool:
    """Whether a live worker process other than `stopped` is outside every poison task."""
    supervisor = run.supervisor
    if supervisor is None:
        return False
    others = [pid for pid in supervisor.children() if pid != stopped]
    return any(not run.ledger.running_poison(pid) for pid in others)


def _wait_stopped(pid: int, timeout: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = procs.info(pid)
        if proc is None:
            return False
        if proc.state == "T":
            return True
        time.sleep(0.0005)
    return False
