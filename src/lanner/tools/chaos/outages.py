"""Faults that take away what the workers stand on: their supervisor, or their store.

    KillSupervisor    kill -9 of the supervisor while `lanner status --json` reads the store;
                      its orphans are left to finish, then a new supervisor starts
    TermSupervisor    SIGTERM to the supervisor (a warm shutdown), then a new supervisor
    RestartRedis      kill -9 of redis-server, started again at once (same port, AOF)
    RedisOutage       redis-server killed and kept away for a while, then started again
    HoldWriteLock     another process holds the SQLite write lock; a worker is killed meanwhile

Like the worker faults (`lanner.tools.chaos.faults`), each is a state machine the harness ticks.
After a supervisor fault the harness reads the store for what the old workers left: jobs
they finished that are not complete, jobs they still hold; a read that fails is reported
as such, never as 0.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Collection
from typing import Final

from lanner.tools.chaos import procs
from lanner.tools.chaos.brokers import RestartableRedis, WriteLock
from lanner.tools.chaos.faults import Harness, Kill, OneShot, kill_child
from lanner.tools.chaos.pool import StatusReader, Supervisor

FRESH_JOB: Final = 0.2
"""Seconds: a supervisor is killed while one of its workers has just started a job."""
FRESH_WAIT: Final = 10.0
"""Seconds a supervisor kill waits for the reader's first run and a fresh job at most."""


class KillSupervisor(OneShot):
    """kill -9 of the supervisor while `lanner status --json` reads the store in a loop.

    The kill waits for the reader's first run and for a worker that started a normal job
    less than FRESH_JOB seconds ago, so that its orphan goes on working while the reader
    opens and closes the store. Orphans are left to finish (they stop by themselves once
    their parent is gone); then the harness checks that what they finished is complete and
    that they hold no job (but an orphan that died inside a poison job, whose jobs the
    next pool settles at its start), and starts a new supervisor.
    """

    name = "supervisor-kill"
    orphan_timeout = 60.0

    def __init__(self, at: float) -> None:
        super().__init__(at)
        self.orphans: list[int] = []
        self.deadline = 0.0
        self.reader: StatusReader | None = None

    def tick(self, run: Harness, now: float) -> None:
        if self.due(run):
            self.reader = run.reader()
            self.reader.start()
            self.begin(run, now)
            self.phase = "reading"
        elif self.phase == "reading" and self.reader is not None:
            began = self.incident.started if self.incident is not None else now
            waited_long = now - began > FRESH_WAIT
            if not waited_long and (self.reader.runs < 1 or not _fresh_job(run, now)):
                return
            supervisor = run.take_down_supervisor()
            if supervisor is None:
                return
            self.orphans = supervisor.children()
            supervisor.kill()
            run.kills.append(Kill(supervisor.pid, time.time(), "supervisor"))
            self.deadline = now + self.orphan_timeout
            self.phase = "orphaned"
        elif self.phase == "orphaned" and self.reader is not None:
            if any(procs.alive(pid) for pid in self.orphans) and now < self.deadline:
                return
            stuck = [pid for pid in self.orphans if procs.alive(pid)]
            run.ledger.update()
            ended = {line.jid for line in run.ledger.lines
                     if line.what == "end" and line.pid in self.orphans}  # fmt: skip
            lost = _count(lambda: run.incomplete(ended))
            # An orphan that died inside a poison job had no supervisor to give its jobs
            # back: the next pool settles them when it starts. The others must hold none.
            poisoned = [pid for pid in self.orphans if run.ledger.running_poison(pid)]
            clean = [pid for pid in self.orphans if pid not in poisoned]
            held = _count(lambda: run.held_by(clean))
            self.reader.stop()
            run.start_supervisor()
            self.finish(
                now,
                orphans=len(self.orphans),
                orphans_stuck=len(stuck),
                orphans_poisoned=len(poisoned),
                orphan_commits_lost=lost,
                orphan_jobs_held=held,
                reader_runs=self.reader.runs,
                reader_failures=self.reader.failures,
            )

    def end(self, run: Harness) -> None:
        if self.reader is not None and self.phase != "done":
            self.reader.stop()
            self.phase = "done"


class TermSupervisor(OneShot):
    """SIGTERM to the supervisor (a warm shutdown), then a new supervisor."""

    name = "supervisor-term"

    def __init__(self, at: float) -> None:
        super().__init__(at)
        self.supervisor: Supervisor | None = None
        self.workers: list[int] = []
        self.deadline = 0.0

    def tick(self, run: Harness, now: float) -> None:
        if self.due(run):
            self.supervisor = run.take_down_supervisor()
            if self.supervisor is None:
                return
            self.workers = self.supervisor.children()
            self.supervisor.expected_exit = True
            procs.send(self.supervisor.pid, signal.SIGTERM)
            self.deadline = now + 60.0
            self.begin(run, now, workers=len(self.workers))
            self.phase = "stopping"
        elif self.phase == "stopping" and self.supervisor is not None:
            code = self.supervisor.poll()
            if code is None and now < self.deadline:
                return
            if code is None:
                self.supervisor.kill()
            held = _count(lambda: run.held_by(self.workers))
            run.start_supervisor()
            self.finish(now, exit_status=code, jobs_held=held)


class RestartRedis(OneShot):
    """kill -9 of redis-server, kept down `down` seconds (0: started again at once)."""

    name = "redis-restart"

    def __init__(self, at: float, redis: RestartableRedis, down: float = 0.0) -> None:
        super().__init__(at)
        self.redis = redis
        self.down = down
        self.until = 0.0

    def tick(self, run: Harness, now: float) -> None:
        if self.due(run):
            self.redis.kill()
            self.until = now + self.down
            self.begin(run, now, down=self.down)
            self.phase = "down"
        elif self.phase == "down" and now >= self.until:
            self.redis.start()
            self.finish(time.time())

    def end(self, run: Harness) -> None:
        if self.phase == "down":
            self.redis.start()


class RedisOutage(RestartRedis):
    name = "redis-outage"


class HoldWriteLock(OneShot):
    """Another process holds the SQLite write lock; a worker is killed while it does."""

    name = "write-lock"

    def __init__(self, at: float, lock: WriteLock, kill_after: float | None = 0.3) -> None:
        super().__init__(at)
        self.lock = lock
        self.kill_after = kill_after
        self.locked_at = 0.0

    def tick(self, run: Harness, now: float) -> None:
        if self.due(run):
            self.lock.start()
            self.locked_at = self.lock.wait_locked()
            self.begin(run, now, seconds=self.lock.seconds)
            self.phase = "held"
        elif self.phase == "held":
            if self.kill_after is not None and now >= self.locked_at + self.kill_after:
                self.kill_after = None
                kill = kill_child(run, "during the write lock", idle_too=True)
                if kill is not None and self.incident is not None:
                    self.incident.details["killed"] = kill.pid
            if self.lock.done():
                self.lock.stop()
                self.finish(now)

    def end(self, run: Harness) -> None:
        self.lock.stop()


def _fresh_job(run: Harness, now: float) -> bool:
    """Whether a worker of the supervisor started a normal job less than FRESH_JOB s ago."""
    supervisor = run.supervisor
    if supervisor is None:
        return False
    for pid in supervisor.children():
        last = run.ledger.last_line(pid)
        if last is not None and last.what == "start" and now - last.when < FRESH_JOB:
            return True
    return False


def _count(read: Callable[[], Collection[str]]) -> int | str:
    """How many jobs `read()` finds in the store, or why it could not read them."""
    try:
        return len(read())
    except Exception as error:  # reported as the check's value: never passes for 0
        return f"unreadable: {type(error).__name__}: {error}"
