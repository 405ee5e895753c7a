"""The SQLite engine: lanner's job contract on one durable file, shared by local processes.

`lanner.Engine` checks each command's arguments; the hooks here open one transaction
(`connection.py`) and call the module that owns the command's noun: `put.py` (putting
jobs), `pop.py` (taking them), `jobs.py` (a job's life after that), `queues.py` (counts,
listings, failure groups), `tags.py`, `workers.py`, `recurring.py`, `config.py` and
`stats.py`; LIMITS and FANOUT in `limits.py` and `fanout.py`; EVENTS in `eventlog.py`
(what writers store) and `events.py` (the streams that read it). The data layout is in
`schema.py`; the semantics are docs/protocol.md.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import replace

from lanner import checks
from lanner.engine import Capability, Engine
from lanner.engines.sqlite import (
    eventlog,
    fanout,
    flow,
    jobs,
    limits,
    pop,
    put,
    queues,
    recurring,
    rows,
    settings,
    stats,
    tags,
    within,
    workers,
)
from lanner.engines.sqlite.connection import Database
from lanner.engines.sqlite.events import SQLiteEventStream
from lanner.engines.sqlite.options import SQLiteOptions
from lanner.errors import JobNotFound
from lanner.events import EventStream
from lanner.job import Job
from lanner.records import (
    ConfigValue,
    FlowState,
    JobOutcome,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    QueueUsage,
    RecurringJob,
    WorkerCounts,
    WorkerJobs,
)


class SQLiteEngine(Engine):
    """The embedded engine. Safe to share between threads; reopens itself after fork."""

    name = "sqlite"
    capabilities = frozenset(Capability)

    def __init__(self, path: str | os.PathLike[str], options: SQLiteOptions | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.options = options or SQLiteOptions()
        self.database = Database(self.path, self.options)
        self.database.open()  # fail now, not at the first command, if the file is unusable

    @property
    def max_data_bytes(self) -> int:
        return self.options.max_data_bytes

    def __repr__(self) -> str:
        return f"SQLiteEngine({self.path!r}, synchronous={self.options.synchronous!r})"

    def close(self) -> None:
        self.database.close()

    def reopen(self, *, max_wait: float | None = None) -> SQLiteEngine:
        options = self.options
        if max_wait is not None:
            options = replace(options, busy_timeout=min(options.busy_timeout, max_wait))
        return SQLiteEngine(self.path, options)

    def _events(self, worker: str | None) -> EventStream:
        return SQLiteEventStream(self.path, self.options, worker)

    # -- configuration --------------------------------------------------------------------
    def _config_get(self, key: str) -> ConfigValue | None:
        with self.database.statement() as conn:
            return settings.read(conn, key)

    def _config_all(self) -> dict[str, ConfigValue]:
        with self.database.statement() as conn:
            return settings.read_all(conn)

    def _config_set(self, setting: checks.Setting, now: float) -> None:
        with self.database.write() as conn:
            settings.write(conn, setting.key, setting.value)

    def _config_unset(self, key: str, now: float) -> None:
        with self.database.write() as conn:
            settings.unset(conn, key)

    # -- putting work ---------------------------------------------------------------------
    def _put(self, command: str, checked: checks.Put) -> list[str]:
        with self.database.write() as conn:
            if command == "requeue":
                jid = checked.jobs[0].jid
                if conn.execute("SELECT 1 FROM jobs WHERE jid = ?", (jid,)).fetchone() is None:
                    raise JobNotFound(jid, command)
            config = settings.read_all(conn)
            copies = fanout.copies(conn, checked.jobs)
            admitted = limits.admit(conn, checked.jobs, copies, config, checked.now)
            put.store(conn, admitted.jobs, checked.now, config, announce=checked.worker)
            flow.store(conn, admitted.jobs)
            limits.drop_own(conn, admitted, checked.now)
        return [job.jid for job in checked.jobs]

    def put_within(
        self, conn: sqlite3.Connection, jobs: Sequence[NewJob], *, now: float | None = None
    ) -> list[str]:
        """`put_many` on the caller's own connection, inside the caller's transaction
        (docs/integrations.md): the jobs show when the caller commits, and never if it
        rolls back. `conn` must be open on this engine's file (the application's database
        holding lanner's tables) and in a transaction, or about to begin one at its next
        write (sqlite3's default, implicit transactions). Its commit wakes blocked pops as
        any commit does: it writes the file's WAL (`connection.py`)."""
        checked = checks.put_many(jobs, now, self.max_data_bytes)
        within.check_connection(conn, self.path)
        if not checked.jobs:
            return []
        eventlog.begin(conn)  # EVENTS: they commit with the caller's transaction
        try:
            config = settings.read_all(conn)
            copies = fanout.copies(conn, checked.jobs)
            admitted = limits.admit(conn, checked.jobs, copies, config, checked.now)
            put.store(conn, admitted.jobs, checked.now, config, announce="")
            limits.drop_own(conn, admitted, checked.now)
            eventlog.flush(conn)
        finally:
            eventlog.end()
        return [job.jid for job in checked.jobs]

    # -- taking work ----------------------------------------------------------------------
    def _pop(self, command: checks.Pop) -> list[Job]:
        taken, versions, due = self._pop_once(command)
        if taken or command.wait == 0:
            return taken
        return self._pop_blocking(command, versions, due)

    def _pop_once(self, command: checks.Pop) -> tuple[list[Job], tuple[int, int], float]:
        """One pop transaction; also the commit versions after it and when something falls
        due (`_due`)."""
        # Not synced: a pop undone by a power cut is a job popped again (see `write`).
        with self.database.write(synced=False) as conn:
            at = _clock(command)
            taken = pop.take(conn, command.queue, command.worker, command.limit, at)
            # Read under the write lock, so no commit can slip in unseen.
            versions = self.database.versions(conn, committing=True)
            due = float("inf") if taken else _due(conn, command.queue, at)
        return taken, versions, due

    def _pop_blocking(
        self, command: checks.Pop, versions: tuple[int, int], due: float
    ) -> list[Job]:
        """Wait for a commit (another process's, or this engine's) or for `due`, then pop.

        A commit wakes the wait at once (`Database.wait_for_commit`).
        """
        deadline = time.monotonic() + command.wait
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            # A pop at a given `now` waits for commits only: its clock stands still.
            timed = command.now is None
            wait = min(remaining, max(0.0, due - time.time())) if timed else remaining
            current = self.database.wait_for_commit(versions, wait)
            clock = _clock(command)
            if current == versions and not (timed and clock >= due):
                continue
            # A read first: an empty pop writing (and fsyncing) would wake every other
            # blocked worker, which would do the same, and so on.
            with self.database.read() as conn:
                if not pop.has_work(conn, command.queue, clock):
                    versions, due = current, _due(conn, command.queue, clock)
                    continue
            taken, versions, due = self._pop_once(command)
            if taken:
                return taken

    def _peek(self, command: checks.Peek) -> list[Job]:
        if "+" in command.queue:  # a fanout child: registered by its first peek, a write
            with self.database.write() as conn:
                fanout.register(conn, command.queue)
                return pop.peek(conn, command.queue, command.limit, command.now)
        with self.database.read() as conn:
            return pop.peek(conn, command.queue, command.limit, command.now)

    def _heartbeat(self, command: checks.Heartbeat) -> float:
        with self.database.write() as conn:
            return jobs.heartbeat(conn, command)

    def _heartbeat_many(self, command: checks.Heartbeats) -> dict[str, float]:
        with self.database.write() as conn:
            return jobs.extend(conn, command.jids, command.worker, command.now)

    # -- finishing work -------------------------------------------------------------------
    def _complete(self, command: checks.Complete) -> str:
        with self.database.write() as conn:
            return jobs.complete(conn, command)

    def _complete_many(self, command: checks.Settle) -> list[str]:
        with self.database.write() as conn:
            done = set(jobs.complete_many(conn, command))
        return [jid for jid in command.jids if jid in done]

    def _release(self, command: checks.Settle) -> list[str]:
        with self.database.write() as conn:
            released = jobs.release(conn, command)
        return [jid for jid in command.jids if jid in released]

    def _fail(self, command: checks.Fail) -> None:
        with self.database.write() as conn:
            jobs.fail(conn, command)

    def _retry(self, command: checks.Retry) -> int:
        with self.database.write() as conn:
            return jobs.retry(conn, command)

    # -- managing jobs --------------------------------------------------------------------
    def _cancel(self, command: checks.Jids) -> list[str]:
        with self.database.write() as conn:
            cancelled = jobs.cancel(conn, command.jids)
        return [jid for jid in command.jids if jid in cancelled]

    def _timeout(self, command: checks.Jids) -> None:
        with self.database.write() as conn:
            jobs.timeout(conn, command)

    def _set_priority(self, command: checks.JobPriority) -> None:
        with self.database.write() as conn:
            jobs.set_priority(conn, command)

    def _multiget(self, command: checks.Jids) -> list[Job]:
        with self.database.read() as conn:
            return rows.multiget(conn, command.jids)

    def _outcomes(self, command: checks.Jids) -> list[JobOutcome]:
        with self.database.read() as conn:
            return rows.outcomes(conn, command.jids)

    def _wait(self, command: checks.Wait) -> Job | None:
        """Read the job after each commit (of any process) until it is finished, waiting
        for commits as the blocking pop does."""
        deadline = time.monotonic() + command.timeout
        while True:
            with self.database.read() as conn:
                found = rows.multiget(conn, [command.jid])
                versions = self.database.versions(conn)
            if not found or found[0].finished or time.monotonic() >= deadline:
                return found[0] if found else None
            self.database.wait_for_commit(versions, deadline - time.monotonic())

    # -- queues ---------------------------------------------------------------------------
    def _queues(self, now: float) -> list[QueueCounts]:
        with self.database.read() as conn:
            return queues.all_counts(conn, now)

    def _queue_counts(self, command: checks.QueueAt) -> QueueCounts:
        with self.database.read() as conn:
            return queues.counts_of(conn, command.queue, command.now)

    def _jobs(self, command: checks.Listing) -> list[str]:
        with self.database.statement() as conn:
            return queues.listing(conn, command)

    def _set_paused(self, command: checks.Queues, paused: bool) -> None:
        with self.database.write() as conn:
            queues.set_paused(conn, command, paused)

    def _queue_forget(self, command: checks.Queues) -> None:
        with self.database.write() as conn:
            queues.forget(conn, command.queues)
            fanout.forget(conn, command.queues)

    def _flow_state(self, now: float) -> FlowState:
        with self.database.write() as conn:  # slots of finished jobs are pruned first
            return flow.state(conn, now)

    def _queue_usage(self, command: checks.QueueAt) -> QueueUsage:
        with self.database.statement() as conn:
            return limits.usage(conn, command.queue)

    # -- failures -------------------------------------------------------------------------
    def _failed_groups(self, now: float) -> dict[str, int]:
        with self.database.statement() as conn:
            return queues.failed_groups(conn)

    def _failed(self, command: checks.Page) -> JobPage:
        with self.database.read() as conn:
            return queues.failed(conn, command)

    def _unfail(self, command: checks.Unfail) -> int:
        with self.database.write() as conn:
            return queues.unfail(conn, command)

    # -- dependencies, tags, tracking and log ---------------------------------------------
    def _depends(self, command: checks.Depends, add: bool) -> None:
        with self.database.write() as conn:
            (jobs.depends_add if add else jobs.depends_remove)(conn, command)

    def _retag(self, command: checks.Retag, add: bool) -> list[str]:
        with self.database.write() as conn:
            return tags.retag(conn, command, add=add)

    def _tagged(self, command: checks.Page) -> JobPage:
        with self.database.read() as conn:
            return tags.tagged(conn, command)

    def _tags_top(self, command: checks.Page) -> list[str]:
        with self.database.statement() as conn:
            return tags.top(conn, command)

    def _log(self, command: checks.Log) -> None:
        with self.database.write() as conn:
            tags.log(conn, command)

    def _track(self, jid: str, tracked: bool, now: float) -> None:
        with self.database.write() as conn:
            tags.set_tracked(conn, jid, tracked)

    def _tracked(self, now: float) -> list[Job]:
        with self.database.read() as conn:
            return tags.tracked(conn)

    # -- statistics and workers -----------------------------------------------------------
    def _stats(self, command: checks.Stats, now: float) -> QueueStats:
        with self.database.read() as conn:
            return stats.read(conn, command.queue, command.date)

    def _workers(self, now: float) -> list[WorkerCounts]:
        with self.database.write() as conn:  # a write: the long idle are forgotten
            return workers.registered(conn, now)

    def _worker_jobs(self, command: checks.WorkerAt) -> WorkerJobs:
        with self.database.statement() as conn:
            return workers.held(conn, command.worker, command.now)

    def _worker_deregister(self, worker_names: list[str], now: float) -> None:
        with self.database.write() as conn:
            workers.deregister(conn, worker_names)

    # -- recurring jobs -------------------------------------------------------------------
    def _recur(self, command: checks.Recur) -> None:
        with self.database.write() as conn:
            recurring.recur(conn, command)

    def _unrecur(self, jid: str, now: float) -> None:
        with self.database.write() as conn:
            recurring.unrecur(conn, jid)

    def _recur_get(self, jid: str, now: float) -> RecurringJob | None:
        with self.database.statement() as conn:
            return recurring.get(conn, jid)

    def _recur_update(self, command: checks.RecurUpdate) -> None:
        with self.database.write() as conn:
            recurring.update(conn, command)

    def _recur_retag(self, command: checks.Retag, add: bool) -> list[str]:
        with self.database.write() as conn:
            return recurring.retag(conn, command, add=add)


def _clock(command: checks.Pop) -> float:
    return time.time() if command.now is None else command.now


def _due(conn: sqlite3.Connection, queue: str, now: float) -> float:
    """When something of `queue` falls due for a pop after `now` (inf: never). What is due
    already and was not taken (the queue paused, or at its concurrency) waits for the
    commit that changes that."""
    due = pop.next_due(conn, queue)
    return due if due > now else float("inf")
