"""The SQLite engine: lanner's job contract on one durable file, shared by local processes.

This class is the engine's face: each command checks its arguments (`lanner.checks`),
opens one transaction (`connection.py`) and calls the module that owns its noun:
`put.py` (putting jobs), `pop.py` (taking them), `jobs.py` (a job's life after that),
`queues.py` (counts, listings, failure groups), `tags.py`, `workers.py`,
`recurring.py`, `config.py` and `stats.py`. The data layout is in `schema.py`; the
semantics are docs/protocol.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Final

from lanner import checks, names
from lanner.engine import Capability
from lanner.engines.sqlite import config as settings
from lanner.engines.sqlite import jobs, pop, put, recurring, rows, stats

# Aliased: the contract's parameters `queues`, `tags` and `workers` would shadow them.
from lanner.engines.sqlite import queues as queue_ops
from lanner.engines.sqlite import tags as tag_ops
from lanner.engines.sqlite import workers as worker_ops
from lanner.engines.sqlite.connection import Database
from lanner.engines.sqlite.options import SQLiteOptions
from lanner.errors import JobNotFound
from lanner.job import Job
from lanner.records import (
    ConfigValue,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    RecurringJob,
    WorkerCounts,
    WorkerJobs,
)


class SQLiteEngine:
    """The embedded engine. Safe to share between threads; reopens itself after fork."""

    name: Final = "sqlite"
    capabilities: Final = frozenset(Capability)

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

    def __enter__(self) -> SQLiteEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.database.close()

    # -- configuration --------------------------------------------------------------------
    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None:
        key = checks.config_key(key)
        with self.database.statement() as conn:
            return settings.read(conn, key)

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        with self.database.statement() as conn:
            return settings.read_all(conn)

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None:
        setting = checks.config_set(key, value)
        with self.database.write() as conn:
            settings.write(conn, setting.key, setting.value)

    def config_unset(self, key: str, *, now: float | None = None) -> None:
        key = checks.config_key(key)
        with self.database.write() as conn:
            settings.unset(conn, key)

    # -- putting work ---------------------------------------------------------------------
    def put(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        now: float | None = None,
    ) -> str:
        return self._put("put", checks.put(
            queue, jid, klass, data, delay, priority, tags, retries, depends, worker, now,
            self.max_data_bytes,
        ))[0]  # fmt: skip

    def requeue(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        now: float | None = None,
    ) -> str:
        return self._put("requeue", checks.put(
            queue, jid, klass, data, delay, priority, tags, retries, depends, worker, now,
            self.max_data_bytes,
        ))[0]  # fmt: skip

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        return self._put("put_many", checks.put_many(jobs, now, self.max_data_bytes))

    def _put(self, command: str, checked: checks.Put) -> list[str]:
        """The one path of put, requeue and put_many: one transaction for all the jobs."""
        if checked.jobs:
            with self.database.write() as conn:
                if command == "requeue":
                    jid = checked.jobs[0].jid
                    if conn.execute("SELECT 1 FROM jobs WHERE jid = ?", (jid,)).fetchone() is None:
                        raise JobNotFound(jid, command)
                put.store(conn, checked.jobs, checked.now, settings.read_all(conn))
        return [job.jid for job in checked.jobs]

    # -- taking work ----------------------------------------------------------------------
    def pop(
        self,
        queue: str,
        worker: str,
        count: int = 1,
        *,
        wait: float = 0.0,
        now: float | None = None,
    ) -> list[Job]:
        command = checks.pop(queue, worker, count, wait, now)
        taken, versions, due = self._pop_once(command)
        if taken or command.wait == 0:
            return taken
        return self._pop_blocking(command, versions, due)

    def _pop_once(self, command: checks.Pop) -> tuple[list[Job], tuple[int, int], float]:
        """One pop transaction; also the commit versions after it and when something falls due."""
        with self.database.write() as conn:
            at = time.time() if command.now is None else command.now
            taken = pop.take(conn, command.queue, command.worker, command.limit, at)
            # Read under the write lock, so no commit can slip in unseen.
            versions = self.database.versions(conn)
            due = float("inf") if taken else pop.next_due(conn, command.queue)
        return taken, versions, due

    def _pop_blocking(
        self, command: checks.Pop, versions: tuple[int, int], due: float
    ) -> list[Job]:
        """Wait for a commit (another process's, or this engine's) or for `due`, then pop.

        Other processes' commits change PRAGMA data_version, which SQLite reads from shared
        memory: a check costs microseconds and no disk I/O, so checking every few
        milliseconds keeps pickup latency low at little cost. The pause doubles from
        0.1 ms up to `poll_interval`; commits of this engine wake the wait at once.
        """
        deadline = time.monotonic() + command.wait
        pause = 0.0001
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            current = self.database.wait_for_commit(versions, min(pause, remaining))
            pause = min(pause * 2, self.options.poll_interval)
            clock = time.time() if command.now is None else command.now
            if current == versions and clock < due:
                continue
            # A read first: an empty pop writing (and fsyncing) would wake every other
            # blocked worker, which would do the same, and so on.
            with self.database.read() as conn:
                if not pop.has_work(conn, command.queue, clock):
                    versions, due = current, pop.next_due(conn, command.queue)
                    continue
            taken, versions, due = self._pop_once(command)
            if taken:
                return taken
            pause = 0.0001

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        command = checks.peek(queue, count, now)
        with self.database.read() as conn:
            return pop.peek(conn, command.queue, command.limit, command.now)

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        command = checks.heartbeat(jid, worker, data, now, self.max_data_bytes)
        with self.database.write() as conn:
            return jobs.heartbeat(conn, command)

    # -- finishing work -------------------------------------------------------------------
    def complete(
        self,
        jid: str,
        worker: str,
        queue: str,
        data: str | None = None,
        *,
        next: str | None = None,
        delay: float = 0.0,
        depends: Sequence[str] | None = None,
        now: float | None = None,
    ) -> str:
        command = checks.complete(
            jid, worker, queue, data, next, delay, depends, now, self.max_data_bytes
        )
        with self.database.write() as conn:
            return jobs.complete(conn, command)

    def complete_many(
        self, jids: Sequence[str], worker: str, queue: str, *, now: float | None = None
    ) -> list[str]:
        command = checks.settle(jids, worker, queue, 0.0, now)
        if not command.jids:
            return []
        with self.database.write() as conn:
            done = set(jobs.complete_many(conn, command))
        return [jid for jid in command.jids if jid in done]

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        now: float | None = None,
    ) -> list[str]:
        command = checks.settle(jids, worker, queue, delay, now)
        if not command.jids:
            return []
        with self.database.write() as conn:
            released = jobs.release(conn, command)
        return [jid for jid in command.jids if jid in released]

    def fail(
        self,
        jid: str,
        worker: str,
        group: str,
        message: str,
        data: str | None = None,
        *,
        now: float | None = None,
    ) -> str:
        command = checks.fail(jid, worker, group, message, data, now, self.max_data_bytes)
        with self.database.write() as conn:
            jobs.fail(conn, command)
        return command.jid

    def retry(
        self,
        jid: str,
        queue: str,
        worker: str,
        delay: float = 0.0,
        group: str | None = None,
        message: str | None = None,
        *,
        now: float | None = None,
    ) -> int:
        command = checks.retry(jid, queue, worker, delay, group, message, now)
        with self.database.write() as conn:
            return jobs.retry(conn, command)

    # -- managing jobs --------------------------------------------------------------------
    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        command = checks.jids(jids, now)
        if not command.jids:
            return []
        with self.database.write() as conn:
            cancelled = jobs.cancel(conn, command.jids)
        return [jid for jid in command.jids if jid in cancelled]

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        command = checks.jids(jids, now)
        with self.database.write() as conn:
            jobs.timeout(conn, command)

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None:
        command = checks.priority(jid, priority, now)
        with self.database.write() as conn:
            jobs.set_priority(conn, command)

    def get(self, jid: str, *, now: float | None = None) -> Job | None:
        found = self.multiget([jid], now=now)
        return found[0] if found else None

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        command = checks.jids(jids, now, unique=False)
        with self.database.read() as conn:
            return rows.multiget(conn, command.jids)

    # -- queues ---------------------------------------------------------------------------
    def queues(self, *, now: float | None = None) -> list[QueueCounts]:
        at = checks.now(now)
        with self.database.read() as conn:
            return queue_ops.all_counts(conn, at)

    def queue_counts(self, queue: str, *, now: float | None = None) -> QueueCounts:
        command = checks.queue_at(queue, now)
        with self.database.read() as conn:
            return queue_ops.counts_of(conn, command.queue, command.now)

    def length(self, queue: str, *, now: float | None = None) -> int:
        counts = self.queue_counts(queue, now=now)
        return counts.running + counts.stalled + counts.waiting + counts.scheduled

    def jobs(
        self,
        state: str,
        queue: str | None = None,
        offset: int = 0,
        count: int = 25,
        *,
        now: float | None = None,
    ) -> list[str]:
        command = checks.listing(state, queue, offset, count, now)
        with self.database.statement() as conn:
            return queue_ops.listing(conn, command)

    def pause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        self._set_paused(checks.queues(queues, now), True)

    def unpause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        self._set_paused(checks.queues(queues, now), False)

    def _set_paused(self, command: checks.Queues, paused: bool) -> None:
        with self.database.write() as conn:
            queue_ops.set_paused(conn, command, paused)

    def queue_forget(self, queues: Sequence[str], *, now: float | None = None) -> None:
        command = checks.queues(queues, now)
        with self.database.write() as conn:
            queue_ops.forget(conn, command.queues)

    # -- failures -------------------------------------------------------------------------
    def failed_groups(self, *, now: float | None = None) -> dict[str, int]:
        with self.database.statement() as conn:
            return queue_ops.failed_groups(conn)

    def failed(
        self, group: str, start: int = 0, limit: int = 25, *, now: float | None = None
    ) -> JobPage:
        command = checks.failed_page(group, start, limit, now)
        with self.database.read() as conn:
            return queue_ops.failed(conn, command)

    def unfail(self, queue: str, group: str, count: int = 25, *, now: float | None = None) -> int:
        command = checks.unfail(queue, group, count, now)
        with self.database.write() as conn:
            return queue_ops.unfail(conn, command)

    # -- dependencies ---------------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        command = checks.depends(jid, jids, now)
        with self.database.write() as conn:
            jobs.depends_add(conn, command)

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        command = checks.depends(jid, jids, now)
        with self.database.write() as conn:
            jobs.depends_remove(conn, command)

    # -- tags, tracking and log -----------------------------------------------------------
    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        command = checks.retag(jid, tags, now)
        with self.database.write() as conn:
            return tag_ops.retag(conn, command, add=True)

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        command = checks.retag(jid, tags, now)
        with self.database.write() as conn:
            return tag_ops.retag(conn, command, add=False)

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        command = checks.tagged_page(tag, offset, count, now)
        with self.database.read() as conn:
            return tag_ops.tagged(conn, command)

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        command = checks.top_page(offset, count, now)
        with self.database.statement() as conn:
            return tag_ops.top(conn, command)

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        command = checks.log(jid, message, data, now)
        with self.database.write() as conn:
            tag_ops.log(conn, command)

    def track(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        with self.database.write() as conn:
            tag_ops.set_tracked(conn, jid, True)

    def untrack(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        with self.database.write() as conn:
            tag_ops.set_tracked(conn, jid, False)

    def tracked(self, *, now: float | None = None) -> list[Job]:
        with self.database.read() as conn:
            return tag_ops.tracked(conn)

    # -- statistics and workers -----------------------------------------------------------
    def stats(self, queue: str, date: float, *, now: float | None = None) -> QueueStats:
        command = checks.stats(queue, date)
        with self.database.read() as conn:
            return stats.read(conn, command.queue, command.date)

    def workers(self, *, now: float | None = None) -> list[WorkerCounts]:
        at = checks.now(now)
        with self.database.write() as conn:
            return worker_ops.registered(conn, at)

    def worker_jobs(self, worker: str, *, now: float | None = None) -> WorkerJobs:
        command = checks.worker_at(worker, now)
        with self.database.statement() as conn:
            return worker_ops.held(conn, command.worker, command.now)

    def worker_deregister(self, workers: Sequence[str], *, now: float | None = None) -> None:
        checked = names.labels(workers, "workers")
        with self.database.write() as conn:
            worker_ops.deregister(conn, checked)

    # -- recurring jobs -------------------------------------------------------------------
    def recur(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str,
        interval: float,
        offset: float = 0.0,
        *,
        priority: int = 0,
        tags: Sequence[str] = (),
        retries: int = 0,
        backlog: int = 0,
        now: float | None = None,
    ) -> str:
        command = checks.recur(
            queue, jid, klass, data, interval, offset, priority, tags, retries, backlog, now,
            self.max_data_bytes,
        )  # fmt: skip
        with self.database.write() as conn:
            recurring.recur(conn, command)
        return command.jid

    def unrecur(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        with self.database.write() as conn:
            recurring.unrecur(conn, jid)

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None:
        jid = names.label(jid, "jid")
        with self.database.statement() as conn:
            return recurring.get(conn, jid)

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        command = checks.recur_update(jid, changes, now, self.max_data_bytes)
        with self.database.write() as conn:
            recurring.update(conn, command)

    def recur_tag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        command = checks.retag(jid, tags, now)
        with self.database.write() as conn:
            return recurring.retag(conn, command, add=True)

    def recur_untag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        command = checks.retag(jid, tags, now)
        with self.database.write() as conn:
            return recurring.retag(conn, command, add=False)
