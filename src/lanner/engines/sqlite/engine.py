"""The SQLite engine: lanner's job contract on one durable file, shared by local processes.

Every command is one transaction. Commands that change anything start with
BEGIN IMMEDIATE, which takes the database's write lock before the first read, so two
processes can never both see a job as waiting and both lock it. The data layout is in
`schema.py`; the semantics are docs/protocol.md.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from lanner import names
from lanner.engine import CONFIG_DEFAULTS, Capability
from lanner.engines.sqlite import stats
from lanner.engines.sqlite.options import SQLiteOptions
from lanner.engines.sqlite.recurring import due_runs
from lanner.engines.sqlite.schema import connect
from lanner.errors import (
    EngineUnavailable,
    InvalidState,
    JobNotFound,
    LockLost,
    MalformedArgument,
)
from lanner.job import Failure, Job, JobState
from lanner.records import (
    DEFAULT_RETRIES,
    ConfigValue,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    RecurringJob,
    WorkerCounts,
    WorkerJobs,
)

_JOB_COLUMNS: Final = (
    "jid, klass, queue, data, priority, tags, state, retries, remaining, worker, expires, "
    "failure, spawned_from_jid, tracked, history"
)
# Appends the event :event to a job's history, dropping the second entry once :cap is
# reached so that the first (the original put) is always kept.
_APPEND_HISTORY: Final = (
    "CASE WHEN json_array_length(history) >= :cap "
    "THEN json_insert(json_remove(history, '$[1]'), '$[#]', json(:event)) "
    "ELSE json_insert(history, '$[#]', json(:event)) END"
)
_STATES: Final = {state.value: state for state in JobState}
_LISTABLE_STATES: Final = ("complete", "waiting", "running", "stalled", "scheduled", "depends")


def _event(what: str, when: float, **details: object) -> str:
    return json.dumps({"what": what, "when": when, **details}, separators=(",", ":"))


def _json_list(values: Sequence[str]) -> str:
    return json.dumps(list(values), separators=(",", ":")) if values else "[]"


def _put_event(queue: str, now: float) -> str:
    # The hottest event: queue names need no JSON escaping (names.queue_name) and `now` is
    # finite, so plain formatting gives the same text as _event, several times faster.
    return f'{{"what":"put","when":{now!r},"q":"{queue}"}}'


@dataclass(frozen=True, slots=True)
class _Put:
    """A put whose arguments were checked; None means 'keep the job's value'."""

    queue: str
    jid: str
    klass: str
    data: str
    delay: float
    priority: int | None
    tags: list[str] | None
    retries: int | None
    depends: list[str] | None
    put_at: float | None = None  # when it counts as put (recurring runs); None: now
    spawned_from: str | None = None


class SQLiteEngine:
    """The embedded engine. Safe to share between threads; reopens itself after fork."""

    name: Final = "sqlite"
    capabilities: Final = frozenset(
        {
            Capability.PRIORITY,
            Capability.DELAY,
            Capability.TIMEOUT,
            Capability.PAUSE,
            Capability.MAX_CONCURRENCY,
            Capability.BLOCKING_POP,
            Capability.DEPENDENCIES,
            Capability.TAGS,
            Capability.LOG,
            Capability.TRACKING,
            Capability.WORKERS,
            Capability.QUEUE_FORGET,
            Capability.STATS,
            Capability.RECURRING,
        }
    )

    def __init__(self, path: str | os.PathLike[str], options: SQLiteOptions | None = None) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.options = options or SQLiteOptions()
        self._lock = threading.Lock()
        # Commits of this engine's own connection do not change PRAGMA data_version for
        # it, so blocked pops of this process are woken by this condition instead.
        self._committed = threading.Condition(self._lock)
        self._commits = 0
        self._busy_timeout_pragma = f"PRAGMA busy_timeout = {int(self.options.busy_timeout * 1000)}"
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        # A connection inherited through fork must never be used or closed by the child
        # (SQLite's locks are per process); it is parked here instead of being collected.
        self._inherited: list[sqlite3.Connection] = []
        self._connection()  # fail now, not at the first command, if the file is unusable

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
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- transactions ---------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        pid = os.getpid()
        if self._conn is None or self._pid != pid:
            if self._conn is not None:
                self._inherited.append(self._conn)
            self._conn = connect(self.path, self.options.synchronous, self.options.busy_timeout)
            self._pid = pid
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            self._begin_immediate(conn)
            try:
                yield conn
                conn.execute("COMMIT")
                self._commits += 1
                self._committed.notify_all()
            except BaseException:
                # Also after a failed COMMIT: the connection must never stay mid-transaction.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the file's write lock, retrying in short steps while another process has it.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, so a process
        that keeps writing can starve another for seconds (measured: a pop waited 2.9 s
        behind two busy poppers). Retrying every 0.05 to 1 ms keeps waits short and fairer.
        The connection's busy timeout stays in force for every other statement.
        """
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            deadline = time.monotonic() + self.options.busy_timeout
            pause = 0.00005
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as error:
                    if error.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                        raise
                    if time.monotonic() >= deadline:
                        raise EngineUnavailable(
                            f"{self.path}: another process held the write lock for "
                            f"{self.options.busy_timeout:g} s (busy_timeout)"
                        ) from error
                time.sleep(pause)
                pause = min(pause * 2, 0.001)
        finally:
            conn.execute(self._busy_timeout_pragma)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read-only transaction: one consistent snapshot, no write lock."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    # -- configuration --------------------------------------------------------------------
    def _config(self, conn: sqlite3.Connection) -> dict[str, ConfigValue]:
        merged: dict[str, ConfigValue] = dict(CONFIG_DEFAULTS)
        for key, value in conn.execute("SELECT key, value FROM config"):
            merged[key] = json.loads(value)
        return merged

    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None:
        key = names.label(key, "config key")
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT value FROM config WHERE key = ?", (key,))
                .fetchone()
            )
        if row is not None:
            value: ConfigValue = json.loads(row[0])
            return value
        return CONFIG_DEFAULTS.get(key)

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        with self._lock:
            return self._config(self._connection())

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None:
        key = names.label(key, "config key")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise MalformedArgument(
                f"config value must be a str, int or float, not {type(value).__name__}"
            )
        with self._write() as conn:
            conn.execute(
                "INSERT INTO config (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def config_unset(self, key: str, *, now: float | None = None) -> None:
        key = names.label(key, "config key")
        with self._write() as conn:
            conn.execute("DELETE FROM config WHERE key = ?", (key,))

    @staticmethod
    def _number(config: Mapping[str, ConfigValue], key: str, default: float = 0.0) -> float:
        value = config.get(key, default)
        try:
            return float(value)
        except ValueError:
            raise MalformedArgument(f"config {key}={value!r} is not a number") from None

    def _heartbeat(self, config: Mapping[str, ConfigValue], queue: str) -> float:
        per_queue = f"{queue}-heartbeat"
        return self._number(config, per_queue if per_queue in config else "heartbeat")

    def _history_cap(self, config: Mapping[str, ConfigValue]) -> int:
        return max(2, int(self._number(config, "max-job-history")))

    # -- putting work ---------------------------------------------------------------------
    def _check_put(
        self,
        queue: object,
        jid: object,
        klass: object,
        data: object,
        delay: object,
        priority: object,
        tags: object,
        retries: object,
        depends: object,
    ) -> _Put:
        job = names.put_arguments(
            queue, jid, klass, data, delay, priority, tags, retries, depends,
            self.options.max_data_bytes,
        )  # fmt: skip
        return _Put(*job)

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
        job = self._check_put(queue, jid, klass, data, delay, priority, tags, retries, depends)
        return self._put_one("put", job, names.now(now))

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        if not isinstance(jobs, Sequence):
            raise MalformedArgument(f"jobs must be a list of NewJob, not {type(jobs).__name__}")
        checked = []
        for job in jobs:
            if not isinstance(job, NewJob):
                raise MalformedArgument(f"put_many() takes NewJob values, not {type(job).__name__}")
            checked.append(
                self._check_put(
                    job.queue, job.jid, job.klass, job.data, job.delay, job.priority,
                    job.tags, job.retries, job.depends,
                )
            )  # fmt: skip
        at = names.now(now)
        if checked:
            with self._write() as conn:
                self._store(conn, checked, at, self._config(conn))
        return [job.jid for job in checked]

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
        job = self._check_put(queue, jid, klass, data, delay, priority, tags, retries, depends)
        return self._put_one("requeue", job, names.now(now))

    def _put_one(self, command: str, job: _Put, now: float) -> str:
        with self._write() as conn:
            if (
                command == "requeue"
                and conn.execute("SELECT 1 FROM jobs WHERE jid = ?", (job.jid,)).fetchone() is None
            ):
                raise JobNotFound(job.jid, command)
            self._store(conn, [job], now, self._config(conn))
        return job.jid

    def _store(
        self,
        conn: sqlite3.Connection,
        jobs: Sequence[_Put],
        now: float,
        config: Mapping[str, ConfigValue],
    ) -> None:
        """Insert or move `jobs` (the shared body of put, put_many, advance and unfail)."""
        jids = _json_list([job.jid for job in jobs])
        existing = {}
        failed = []
        for jid, priority, tags, retries, state, queue, finished_at in conn.execute(
            "SELECT jid, priority, tags, retries, state, queue, finished_at FROM jobs "
            "WHERE jid IN (SELECT value FROM json_each(?))",
            (jids,),
        ):
            existing[jid] = (priority, tags, retries)
            if state == JobState.FAILED:
                failed.append((queue, finished_at))
        stats.uncount_failed(conn, failed)
        wanted = sorted({dep for job in jobs for dep in job.depends or ()})
        open_deps: set[str] = set()
        if wanted:
            open_deps = {
                row[0]
                for row in conn.execute(
                    "SELECT jid FROM jobs WHERE jid IN (SELECT value FROM json_each(?)) "
                    "AND state != 'complete'",
                    (_json_list(wanted),),
                )
            }
        kept_deps: dict[str, int] = {}
        if existing:
            kept_deps = dict(
                conn.execute(
                    "SELECT jid, count(*) FROM dependencies "
                    "WHERE jid IN (SELECT value FROM json_each(?)) GROUP BY jid",
                    (jids,),
                ).fetchall()
            )
        first_seq = self._take_seq(conn, len(jobs))
        cap = self._history_cap(config)
        rows = [
            self._job_row(job, existing.get(job.jid), kept_deps, open_deps, now, cap)
            | {"seq": first_seq + offset}
            for offset, job in enumerate(jobs)
        ]
        conn.executemany(
            "INSERT INTO jobs (jid, klass, queue, data, priority, tags, state, seq, ready_at, "
            "retries, remaining, worker, expires, grace, tracked, spawned_from_jid, history) "
            "VALUES (:jid, :klass, :queue, :data, :priority, :tags, :state, :seq, :ready_at, "
            ":retries, :retries, '', 0, 0, 0, :spawned_from, '[' || :event || ']') "
            "ON CONFLICT(jid) DO UPDATE SET klass = excluded.klass, queue = excluded.queue, "
            "data = excluded.data, priority = excluded.priority, tags = excluded.tags, "
            "state = excluded.state, seq = excluded.seq, ready_at = excluded.ready_at, "
            "retries = excluded.retries, remaining = excluded.retries, worker = '', "
            "expires = 0, grace = 0, failure = NULL, failure_group = NULL, "
            f"finished_at = NULL, history = {_APPEND_HISTORY}",
            rows,
        )
        replaced = [(job.jid,) for job in jobs if job.depends is not None and job.jid in existing]
        conn.executemany("DELETE FROM dependencies WHERE jid = ?", replaced)
        conn.executemany(
            "INSERT INTO dependencies VALUES (?, ?)",
            [(row["jid"], dep) for row in rows for dep in row["new_dependencies"]],
        )
        retagged = [(job.jid,) for job in jobs if job.tags is not None and job.jid in existing]
        conn.executemany("DELETE FROM tags WHERE jid = ?", retagged)
        conn.executemany(
            "INSERT OR IGNORE INTO tags VALUES (?, ?, ?)",
            [(tag, row["jid"], now) for row in rows for tag in row["new_tags"]],
        )
        conn.executemany(
            "INSERT OR IGNORE INTO queues (name, created) VALUES (?, ?)",
            [(queue, now) for queue in sorted({job.queue for job in jobs})],
        )

    @staticmethod
    def _job_row(
        job: _Put,
        old: tuple[Any, ...] | None,
        kept_deps: Mapping[str, int],
        open_deps: set[str],
        now: float,
        cap: int,
    ) -> dict[str, Any]:
        """The parameters of one job's upsert, plus the dependency and tag rows it needs.

        `old` is the (priority, tags, retries) of the job being moved, None for a new job.
        """
        at = now if job.put_at is None else job.put_at
        priority = job.priority if job.priority is not None else (old[0] if old else 0)
        retries = job.retries if job.retries is not None else (old[2] if old else DEFAULT_RETRIES)
        tags = job.tags if job.tags is not None else (json.loads(old[1]) if old else [])
        if job.depends is None:
            new_dependencies = []
            blocked = kept_deps.get(job.jid, 0) > 0
        else:
            new_dependencies = [d for d in job.depends if d in open_deps and d != job.jid]
            blocked = bool(new_dependencies)
        if blocked:
            state = JobState.DEPENDS
        elif job.delay > 0:
            state = JobState.SCHEDULED
        else:
            state = JobState.WAITING
        return {
            "jid": job.jid,
            "klass": job.klass,
            "queue": job.queue,
            "data": job.data,
            "priority": priority,
            "tags": _json_list(tags),
            "state": state.value,
            "ready_at": at + job.delay,
            "retries": retries,
            "event": _put_event(job.queue, at),
            "spawned_from": job.spawned_from,
            "cap": cap,
            # Not SQL parameters: what the caller stores beside the job row.
            "new_dependencies": new_dependencies,
            "new_tags": tags if job.tags is not None or old is None else [],
        }

    @staticmethod
    def _take_seq(conn: sqlite3.Connection, count: int) -> int:
        (last,) = conn.execute(
            "UPDATE counters SET value = value + ? WHERE name = 'seq' RETURNING value", (count,)
        ).fetchone()
        return int(last) - count + 1

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
        queue = names.queue_name(queue)
        worker = names.label(worker, "worker")
        count = names.integer(count, "count", 1)
        wait = names.seconds(wait, "wait")
        fixed_now = None if now is None else names.timestamp(now)
        jobs, versions, due = self._pop_once(queue, worker, count, fixed_now)
        if jobs or wait == 0:
            return jobs
        return self._pop_blocking(queue, worker, count, fixed_now, wait, versions, due)

    def _pop_blocking(
        self,
        queue: str,
        worker: str,
        count: int,
        fixed_now: float | None,
        wait: float,
        versions: tuple[int, int],
        due: float,
    ) -> list[Job]:
        """Wait for a commit (another process's, or this engine's) or for `due`, then pop.

        Other processes' commits change PRAGMA data_version, which SQLite reads from shared
        memory: a check costs microseconds and no disk I/O, so checking every few
        milliseconds keeps pickup latency low at little cost. The pause doubles from
        0.1 ms up to `poll_interval`; commits of this engine wake the wait at once.
        """
        deadline = time.monotonic() + wait
        pause = 0.0001
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            with self._lock:
                if self._commits == versions[1]:
                    self._committed.wait(min(pause, remaining))
                current = (
                    self._connection().execute("PRAGMA data_version").fetchone()[0],
                    self._commits,
                )
            pause = min(pause * 2, self.options.poll_interval)
            clock = time.time() if fixed_now is None else fixed_now
            if current == versions and clock < due:
                continue
            # A read first: an empty pop writing (and fsyncing) would wake every other
            # blocked worker, which would do the same, and so on.
            if not self._has_work(queue, clock):
                versions, due = current, self._next_due(queue)
                continue
            jobs, versions, due = self._pop_once(queue, worker, count, fixed_now)
            if jobs:
                return jobs
            pause = 0.0001

    def _pop_once(
        self, queue: str, worker: str, count: int, fixed_now: float | None
    ) -> tuple[list[Job], tuple[int, int], float]:
        """One pop transaction; also the commit versions after it and when something falls due."""
        with self._write() as conn:
            now = time.time() if fixed_now is None else fixed_now
            jobs = self._take(conn, queue, worker, count, now)
            # Read under the write lock, so no commit can slip in unseen; +1 is this one.
            versions = (conn.execute("PRAGMA data_version").fetchone()[0], self._commits + 1)
            due = float("inf") if jobs else self._next_due(queue, conn)
        return jobs, versions, due

    def _has_work(self, queue: str, now: float) -> bool:
        """Whether a pop of `queue` at `now` would take or change anything (a read only)."""
        with self._read() as conn:
            paused = conn.execute("SELECT paused FROM queues WHERE name = ?", (queue,)).fetchone()
            if paused is not None and paused[0]:
                return False
            if self._concurrency_room(conn, self._config(conn), queue, 1, now) <= 0:
                return False
            (found,) = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'waiting') "
                "OR EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'stalled') "
                "OR EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'scheduled' "
                "  AND ready_at <= :now) "
                "OR EXISTS (SELECT 1 FROM jobs WHERE queue = :q AND state = 'running' "
                "  AND expires <= :now) "
                "OR EXISTS (SELECT 1 FROM recurring WHERE queue = :q AND next_at <= :now)",
                {"q": queue, "now": now},
            ).fetchone()
            return bool(found)

    def _next_due(self, queue: str, conn: sqlite3.Connection | None = None) -> float:
        """When the queue's earliest scheduled job or lock falls due (inf: never)."""
        query = (
            "SELECT (SELECT min(ready_at) FROM jobs WHERE queue = :q AND state = 'scheduled'), "
            "       (SELECT min(expires) FROM jobs WHERE queue = :q AND state = 'running'), "
            "       (SELECT min(next_at) FROM recurring WHERE queue = :q)"
        )
        if conn is None:
            with self._lock:
                row = self._connection().execute(query, {"q": queue}).fetchone()
        else:
            row = conn.execute(query, {"q": queue}).fetchone()
        return min((value for value in row if value is not None), default=float("inf"))

    def _take(
        self, conn: sqlite3.Connection, queue: str, worker: str, count: int, now: float
    ) -> list[Job]:
        row = conn.execute("SELECT paused FROM queues WHERE name = ?", (queue,)).fetchone()
        if row is not None and row[0]:
            return []
        config = self._config(conn)
        # Refreshed at most once a second: an idle worker's empty pops must not write,
        # or each commit would wake every other blocked worker (see _pop_blocking).
        conn.execute(
            "INSERT INTO workers (name, last_seen) VALUES (?, ?) ON CONFLICT(name) "
            "DO UPDATE SET last_seen = excluded.last_seen "
            "WHERE excluded.last_seen >= last_seen + 1",
            (worker, now),
        )
        limit = self._concurrency_room(conn, config, queue, count, now)
        if limit <= 0:
            return []
        cap = self._history_cap(config)
        lock = {
            "worker": worker,
            "expires": now + self._heartbeat(config, queue),
            "event": _event("popped", now, worker=worker),
            "cap": cap,
            "now": now,
        }
        handed_over = self._expire_locks(conn, config, queue, limit, now)
        stalled = [
            row[0]
            for row in conn.execute(
                "SELECT jid FROM jobs WHERE queue = ? AND state = 'stalled' ORDER BY seq LIMIT ?",
                (queue, limit - len(handed_over)),
            )
        ]
        jobs = self._lock_jids(conn, handed_over + stalled, lock)
        if len(jobs) < limit:
            self._spawn_recurring(conn, config, queue, now)
            conn.execute(
                "UPDATE jobs SET state = 'waiting' "
                "WHERE queue = ? AND state = 'scheduled' AND ready_at <= ?",
                (queue, now),
            )
            rows = conn.execute(
                "UPDATE jobs SET state = 'running', worker = :worker, expires = :expires, "
                f"grace = 0, popped_at = :now, history = {_APPEND_HISTORY} "
                "WHERE jid IN (SELECT jid FROM jobs WHERE queue = :queue AND state = 'waiting' "
                "              ORDER BY priority DESC, ready_at, seq LIMIT :n) "
                f"RETURNING {_JOB_COLUMNS}, ready_at, seq",
                {**lock, "queue": queue, "n": limit - len(jobs)},
            ).fetchall()
            rows.sort(key=lambda row: (-row[4], row[-2], row[-1]))
            stats.record_timings(conn, "wait", queue, now, [now - row[-2] for row in rows])
            jobs.extend(self._jobs(conn, [row[:-2] for row in rows]))
        return jobs

    def _spawn_recurring(
        self, conn: sqlite3.Connection, config: Mapping[str, ConfigValue], queue: str, now: float
    ) -> None:
        """Put a job for every due run of the queue's recurring templates."""
        templates = conn.execute(
            "SELECT jid, klass, data, priority, tags, retries, interval, next_at, count, backlog "
            "FROM recurring WHERE queue = ? AND next_at <= ? ORDER BY next_at",
            (queue, now),
        ).fetchall()
        for (
            jid,
            klass,
            data,
            priority,
            tags,
            retries,
            interval,
            next_at,
            count,
            backlog,
        ) in templates:
            runs, next_at = due_runs(next_at, interval, backlog, now)
            puts = [
                _Put(
                    queue=queue,
                    jid=f"{jid}-{count + n}",
                    klass=klass,
                    data=data,
                    delay=0.0,
                    priority=priority,
                    tags=json.loads(tags),
                    retries=retries,
                    depends=None,
                    put_at=at,
                    spawned_from=jid,
                )
                for n, at in enumerate(runs, start=1)
            ]
            if puts:
                self._store(conn, puts, now, config)
            conn.execute(
                "UPDATE recurring SET count = ?, next_at = ? WHERE jid = ?",
                (count + len(runs), next_at, jid),
            )

    def _concurrency_room(
        self,
        conn: sqlite3.Connection,
        config: Mapping[str, ConfigValue],
        queue: str,
        count: int,
        now: float,
    ) -> int:
        maximum = int(self._number(config, f"{queue}-max-concurrency"))
        if maximum <= 0:
            return count
        # Expired locks do not count: their jobs are about to be handed over, and a dead
        # worker must not hold the queue's capacity forever.
        (running,) = conn.execute(
            "SELECT count(*) FROM jobs WHERE queue = ? AND state = 'running' AND expires > ?",
            (queue, now),
        ).fetchone()
        return min(count, maximum - int(running))

    def _expire_locks(
        self,
        conn: sqlite3.Connection,
        config: Mapping[str, ConfigValue],
        queue: str,
        limit: int,
        now: float,
    ) -> list[str]:
        """Apply qless's lock-loss rules to expired locks; return the jids to hand over.

        A lock seen expired for the first time is extended by the grace period (its worker
        may still finish); one expired again after its grace costs a retry and moves on.
        """
        grace_period = self._number(config, "grace-period")
        cap = self._history_cap(config)
        expired = {"queue": queue, "now": now, "cap": cap, "event": _event("timed-out", now)}
        noticed = conn.execute(
            f"UPDATE jobs SET history = {_APPEND_HISTORY}, grace = 1, "
            "expires = CASE WHEN :grace > 0 THEN :now + :grace ELSE expires END "
            "WHERE queue = :queue AND state = 'running' AND expires <= :now AND grace = 0",
            {**expired, "grace": grace_period},
        ).rowcount
        stats.count(conn, "retries", [(queue, now)] * noticed)
        rows = conn.execute(
            "UPDATE jobs SET remaining = remaining - 1 WHERE jid IN (SELECT jid FROM jobs "
            "  WHERE queue = :queue AND state = 'running' AND expires <= :now "
            "  ORDER BY expires LIMIT :limit) "
            "RETURNING jid, remaining, expires",
            {**expired, "limit": limit},
        ).fetchall()
        handed_over = []
        for jid, remaining, _ in sorted(rows, key=lambda row: row[2]):
            if remaining < 0:
                self._fail_job(
                    conn, jid, f"failed-retries-{queue}",
                    f'Job exhausted retries in queue "{queue}"', "", now, cap,
                )  # fmt: skip
            else:
                handed_over.append(jid)
        return handed_over

    def _lock_jids(
        self, conn: sqlite3.Connection, jids: list[str], lock: Mapping[str, object]
    ) -> list[Job]:
        if not jids:
            return []
        rows = conn.execute(
            "UPDATE jobs SET state = 'running', worker = :worker, expires = :expires, "
            f"grace = 0, popped_at = :now, history = {_APPEND_HISTORY} "
            f"WHERE jid IN (SELECT value FROM json_each(:jids)) RETURNING {_JOB_COLUMNS}",
            {**lock, "jids": _json_list(jids)},
        ).fetchall()
        order = {jid: index for index, jid in enumerate(jids)}
        rows.sort(key=lambda row: order[row[0]])
        return self._jobs(conn, rows)

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        queue = names.queue_name(queue)
        count = names.integer(count, "count", 1)
        at = names.now(now)
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM ("
                "  SELECT *, 0 AS rank FROM jobs WHERE queue = :q AND state = 'running' "
                "    AND expires <= :now "
                "  UNION ALL SELECT *, 1 FROM jobs WHERE queue = :q AND state = 'stalled' "
                "  UNION ALL SELECT *, 2 FROM jobs WHERE queue = :q AND state = 'waiting' "
                "  UNION ALL SELECT *, 2 FROM jobs WHERE queue = :q AND state = 'scheduled' "
                "    AND ready_at <= :now"
                ") ORDER BY rank, CASE rank WHEN 0 THEN expires ELSE 0 END, "
                "  CASE rank WHEN 2 THEN -priority ELSE 0 END, ready_at, seq LIMIT :n",
                {"q": queue, "now": at, "n": count},
            ).fetchall()
            return self._jobs(conn, rows)

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        jid = names.label(jid, "jid")
        worker = names.label(worker, "worker")
        if data is not None:
            data = names.json_text(data, "data", self.options.max_data_bytes)
        at = names.now(now)
        with self._write() as conn:
            queue = self._holder_queue(conn, "heartbeat", jid, worker)
            expires = at + self._heartbeat(self._config(conn), queue)
            conn.execute(
                "UPDATE jobs SET expires = ?, grace = 0, data = coalesce(?, data) WHERE jid = ?",
                (expires, data, jid),
            )
        return expires

    def _holder_queue(
        self,
        conn: sqlite3.Connection,
        command: str,
        jid: str,
        worker: str,
        queue: str | None = None,
    ) -> str:
        """Check that `worker` holds the lock of running job `jid`; return the job's queue."""
        row = conn.execute("SELECT state, worker, queue FROM jobs WHERE jid = ?", (jid,)).fetchone()
        if row is None:
            raise JobNotFound(jid, command)
        state, holder, job_queue = row
        if state != JobState.RUNNING:
            raise LockLost(f"{command}(): job {jid} is not currently running: {state}")
        if holder != worker:
            raise LockLost(f"{command}(): job {jid} has been given out to another worker: {holder}")
        if queue is not None and job_queue != queue:
            raise LockLost(
                f"{command}(): job {jid} is not currently running in queue {queue!r}: "
                f"it runs in {job_queue!r}"
            )
        return str(job_queue)

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
        jid = names.label(jid, "jid")
        worker = names.label(worker, "worker")
        queue = names.queue_name(queue)
        if data is not None:
            data = names.json_text(data, "data", self.options.max_data_bytes)
        delay = names.seconds(delay, "delay")
        if next is None:
            if delay or depends:
                raise MalformedArgument("complete(): delay and depends need a next queue")
        else:
            next = names.queue_name(next, "next queue")
        at = names.now(now)
        with self._write() as conn:
            self._holder_queue(conn, "complete", jid, worker, queue)
            config = self._config(conn)
            cap = self._history_cap(config)
            conn.execute(
                f"UPDATE jobs SET data = coalesce(:data, data), history = {_APPEND_HISTORY} "
                "WHERE jid = :jid",
                {"data": data, "jid": jid, "cap": cap, "event": _event("done", at)},
            )
            if next is None:
                self._finish(conn, [jid], worker, queue, at, config)
                return JobState.COMPLETE.value
            klass, job_data, popped_at = conn.execute(
                "SELECT klass, data, popped_at FROM jobs WHERE jid = ?", (jid,)
            ).fetchone()
            stats.record_timings(conn, "run", queue, at, [at - popped_at])
            advance = self._check_put(next, jid, klass, job_data, delay, None, None, None, depends)
            self._store(conn, [advance], at, config)
            (state,) = conn.execute("SELECT state FROM jobs WHERE jid = ?", (jid,)).fetchone()
            return str(state)

    def complete_many(
        self, jids: Sequence[str], worker: str, queue: str, *, now: float | None = None
    ) -> list[str]:
        checked = names.unique_labels(jids, "jids")
        worker = names.label(worker, "worker")
        queue = names.queue_name(queue)
        at = names.now(now)
        if not checked:
            return []
        with self._write() as conn:
            config = self._config(conn)
            conn.execute(
                f"UPDATE jobs SET history = {_APPEND_HISTORY} "
                "WHERE jid IN (SELECT value FROM json_each(:jids)) "
                "AND state = 'running' AND worker = :worker AND queue = :queue",
                {
                    "jids": _json_list(checked),
                    "worker": worker,
                    "queue": queue,
                    "cap": self._history_cap(config),
                    "event": _event("done", at),
                },
            )
            done = self._finish(conn, checked, worker, queue, at, config)
        order = {jid: index for index, jid in enumerate(checked)}
        return sorted(done, key=order.__getitem__)

    def _finish(
        self,
        conn: sqlite3.Connection,
        jids: list[str],
        worker: str,
        queue: str,
        now: float,
        config: Mapping[str, ConfigValue],
    ) -> list[str]:
        """Mark running jobs complete, release their dependents, apply retention."""
        rows = conn.execute(
            "UPDATE jobs SET state = 'complete', queue = '', worker = '', expires = 0, "
            "grace = 0, finished_at = :now "
            "WHERE jid IN (SELECT value FROM json_each(:jids)) "
            "AND state = 'running' AND worker = :worker AND queue = :queue "
            "RETURNING jid, popped_at",
            {"jids": _json_list(jids), "worker": worker, "queue": queue, "now": now},
        ).fetchall()
        done = [jid for jid, _ in rows]
        stats.record_timings(conn, "run", queue, now, [now - popped for _, popped in rows])
        if done:
            self._release_dependents(conn, done, now)
            self._apply_retention(conn, config, now)
        return done

    def _release_dependents(self, conn: sqlite3.Connection, done: list[str], now: float) -> None:
        dependents = [
            row[0]
            for row in conn.execute(
                "DELETE FROM dependencies WHERE on_jid IN (SELECT value FROM json_each(?)) "
                "RETURNING jid",
                (_json_list(done),),
            )
        ]
        if dependents:
            self._release(conn, sorted(set(dependents)), now)

    def _release(self, conn: sqlite3.Connection, jids: list[str], now: float) -> None:
        """Jobs in `depends` with no dependency left become scheduled or waiting."""
        conn.execute(
            "UPDATE jobs SET "
            "  state = CASE WHEN ready_at > :now THEN 'scheduled' ELSE 'waiting' END, "
            "  ready_at = max(ready_at, :now) "
            "WHERE jid IN (SELECT value FROM json_each(:jids)) AND state = 'depends' "
            "AND NOT EXISTS (SELECT 1 FROM dependencies d WHERE d.jid = jobs.jid)",
            {"jids": _json_list(jids), "now": now},
        )

    def _apply_retention(
        self, conn: sqlite3.Connection, config: Mapping[str, ConfigValue], now: float
    ) -> None:
        removed = [
            row[0]
            for row in conn.execute(
                "DELETE FROM jobs WHERE state = 'complete' AND finished_at < ? RETURNING jid",
                (now - self._number(config, "jobs-history"),),
            )
        ]
        (kept,) = conn.execute("SELECT value FROM counters WHERE name = 'complete'").fetchone()
        excess = int(kept) - int(self._number(config, "jobs-history-count"))
        if excess > 0:
            removed += [
                row[0]
                for row in conn.execute(
                    "DELETE FROM jobs WHERE jid IN (SELECT jid FROM jobs WHERE state = 'complete' "
                    "ORDER BY finished_at, seq LIMIT ?) RETURNING jid",
                    (excess,),
                )
            ]
        if removed:
            conn.execute(
                "DELETE FROM tags WHERE jid IN (SELECT value FROM json_each(?))",
                (_json_list(removed),),
            )

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        now: float | None = None,
    ) -> list[str]:
        checked = names.unique_labels(jids, "jids")
        worker = names.label(worker, "worker")
        queue = names.queue_name(queue)
        delay = names.seconds(delay, "delay")
        at = names.now(now)
        if not checked:
            return []
        with self._write() as conn:
            # Without a delay, ready_at and seq are untouched: the job keeps its place.
            released = {
                row[0]
                for row in conn.execute(
                    "UPDATE jobs SET worker = '', expires = 0, grace = 0, "
                    "state = CASE WHEN :delay > 0 THEN 'scheduled' ELSE 'waiting' END, "
                    "ready_at = CASE WHEN :delay > 0 THEN :now + :delay ELSE ready_at END, "
                    f"history = {_APPEND_HISTORY} "
                    "WHERE jid IN (SELECT value FROM json_each(:jids)) "
                    "AND state = 'running' AND worker = :worker AND queue = :queue RETURNING jid",
                    {
                        "jids": _json_list(checked),
                        "worker": worker,
                        "queue": queue,
                        "cap": self._history_cap(self._config(conn)),
                        "event": _event("released", at),
                        "delay": delay,
                        "now": at,
                    },
                )
            }
        return [jid for jid in checked if jid in released]

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
        jid = names.label(jid, "jid")
        worker = names.label(worker, "worker")
        group = names.label(group, "group")
        message = names.message(message)
        if data is not None:
            data = names.json_text(data, "data", self.options.max_data_bytes)
        at = names.now(now)
        with self._write() as conn:
            self._holder_queue(conn, "fail", jid, worker)
            if data is not None:
                conn.execute("UPDATE jobs SET data = ? WHERE jid = ?", (data, jid))
            self._fail_job(
                conn, jid, group, message, worker, at, self._history_cap(self._config(conn))
            )
        return jid

    @staticmethod
    def _fail_job(
        conn: sqlite3.Connection,
        jid: str,
        group: str,
        message: str,
        worker: str,
        now: float,
        cap: int,
    ) -> None:
        failure = {"group": group, "message": message, "when": now, "worker": worker}
        (queue,) = conn.execute(
            "UPDATE jobs SET state = 'failed', failure = :failure, failure_group = :group, "
            "finished_at = :now, worker = '', expires = 0, grace = 0, "
            f"history = {_APPEND_HISTORY} WHERE jid = :jid RETURNING queue",
            {
                "failure": json.dumps(failure),
                "group": group,
                "now": now,
                "jid": jid,
                "cap": cap,
                "event": _event("failed", now, group=group),
            },
        ).fetchone()
        stats.count(conn, "failures", [(queue, now)])
        stats.count(conn, "failed", [(queue, now)])

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
        jid = names.label(jid, "jid")
        queue = names.queue_name(queue)
        worker = names.label(worker, "worker")
        delay = names.seconds(delay, "delay")
        if group is not None:
            group = names.label(group, "group")
        if message is not None:
            message = names.message(message)
        at = names.now(now)
        with self._write() as conn:
            self._holder_queue(conn, "retry", jid, worker, queue)
            (remaining,) = conn.execute(
                "UPDATE jobs SET remaining = remaining - 1 WHERE jid = ? RETURNING remaining",
                (jid,),
            ).fetchone()
            if remaining < 0:
                self._fail_job(
                    conn,
                    jid,
                    group or f"failed-retries-{queue}",
                    message or f'Job exhausted retries in queue "{queue}"',
                    worker if group else "",
                    at,
                    self._history_cap(self._config(conn)),
                )
            else:
                conn.execute(
                    "UPDATE jobs SET state = ?, ready_at = ?, seq = ?, worker = '', expires = 0, "
                    "grace = 0 WHERE jid = ?",
                    (
                        JobState.SCHEDULED if delay > 0 else JobState.WAITING,
                        at + delay,
                        self._take_seq(conn, 1),
                        jid,
                    ),
                )
        return int(remaining)

    # -- managing jobs --------------------------------------------------------------------
    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        checked = names.unique_labels(jids, "jids")
        if not checked:
            return []
        wanted = _json_list(checked)
        with self._write() as conn:
            for on_jid, dependent in conn.execute(
                "SELECT on_jid, jid FROM dependencies "
                "WHERE on_jid IN (SELECT value FROM json_each(?))",
                (wanted,),
            ):
                if dependent not in checked:
                    raise InvalidState(
                        f"cancel(): job {on_jid} is a dependency of {dependent}, "
                        "which is not being cancelled"
                    )
            rows = conn.execute(
                "DELETE FROM jobs WHERE jid IN (SELECT value FROM json_each(?)) "
                "AND state != 'complete' RETURNING jid, state, queue, finished_at",
                (wanted,),
            ).fetchall()
            cancelled = {row[0] for row in rows}
            stats.uncount_failed(
                conn,
                [(q, failed_at) for _, state, q, failed_at in rows if state == JobState.FAILED],
            )
            gone = _json_list(sorted(cancelled))
            conn.execute(
                "DELETE FROM dependencies WHERE jid IN (SELECT value FROM json_each(:j)) "
                "OR on_jid IN (SELECT value FROM json_each(:j))",
                {"j": gone},
            )
            conn.execute("DELETE FROM tags WHERE jid IN (SELECT value FROM json_each(?))", (gone,))
        return [jid for jid in checked if jid in cancelled]

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        checked = names.unique_labels(jids, "jids")
        at = names.now(now)
        with self._write() as conn:
            cap = self._history_cap(self._config(conn))
            for jid in checked:
                row = conn.execute("SELECT state FROM jobs WHERE jid = ?", (jid,)).fetchone()
                if row is None:
                    raise JobNotFound(jid, "timeout")
                if row[0] != JobState.RUNNING:
                    raise InvalidState(f"timeout(): job {jid} is not running: {row[0]}")
                conn.execute(
                    "UPDATE jobs SET state = 'stalled', worker = '', expires = 0, grace = 0, "
                    f"history = {_APPEND_HISTORY} WHERE jid = :jid",
                    {"jid": jid, "cap": cap, "event": _event("timed-out", at)},
                )

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        priority = names.integer(priority, "priority")
        with self._write() as conn:
            if (
                conn.execute("UPDATE jobs SET priority = ? WHERE jid = ?", (priority, jid)).rowcount
                == 0
            ):
                raise JobNotFound(jid, "priority")

    def get(self, jid: str, *, now: float | None = None) -> Job | None:
        found = self.multiget([jid], now=now)
        return found[0] if found else None

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        checked = names.labels(jids, "jids")
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE jid IN (SELECT value FROM json_each(?))",
                (_json_list(checked),),
            ).fetchall()
            jobs = {job.jid: job for job in self._jobs(conn, rows)}
        return [jobs[jid] for jid in checked if jid in jobs]

    def _jobs(self, conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[Job]:
        """Build jobs from rows of _JOB_COLUMNS, with their dependencies and dependents."""
        if not rows:
            return []
        jids = _json_list([row[0] for row in rows])
        dependencies: dict[str, list[str]] = {}
        dependents: dict[str, list[str]] = {}
        for jid, on_jid in conn.execute(
            "SELECT jid, on_jid FROM dependencies WHERE jid IN (SELECT value FROM json_each(:j)) "
            "UNION SELECT jid, on_jid FROM dependencies "
            "WHERE on_jid IN (SELECT value FROM json_each(:j)) ORDER BY 1, 2",
            {"j": jids},
        ):
            dependencies.setdefault(jid, []).append(on_jid)
            dependents.setdefault(on_jid, []).append(jid)
        jobs = []
        for row in rows:
            (jid, klass, queue, data, priority, tags, state, retries, remaining, worker,
             expires, failure, spawned_from, tracked, history) = row  # fmt: skip
            jobs.append(
                Job(
                    jid=jid,
                    klass=klass,
                    queue=queue,
                    data=data,
                    priority=priority,
                    tags=() if tags == "[]" else tuple(json.loads(tags)),
                    state=_STATES[state],
                    retries=retries,
                    remaining=remaining,
                    worker=worker,
                    expires=expires,
                    failure=Failure(**json.loads(failure)) if failure else None,
                    dependencies=tuple(dependencies.get(jid, ())),
                    dependents=tuple(dependents.get(jid, ())),
                    spawned_from_jid=spawned_from,
                    tracked=bool(tracked),
                    history_json=history,
                )
            )
        return jobs

    # -- queues ---------------------------------------------------------------------------
    def queues(self, *, now: float | None = None) -> list[QueueCounts]:
        at = names.now(now)
        with self._read() as conn:
            known = conn.execute("SELECT name, paused FROM queues ORDER BY name").fetchall()
            return [self._counts(conn, name, bool(paused), at) for name, paused in known]

    def queue_counts(self, queue: str, *, now: float | None = None) -> QueueCounts:
        queue = names.queue_name(queue)
        at = names.now(now)
        with self._read() as conn:
            row = conn.execute("SELECT paused FROM queues WHERE name = ?", (queue,)).fetchone()
            return self._counts(conn, queue, bool(row and row[0]), at)

    @staticmethod
    def _counts(conn: sqlite3.Connection, queue: str, paused: bool, now: float) -> QueueCounts:
        # One count per partial index: each reads only the index of its state.
        waiting, due, scheduled, running, expired, stalled, depends, recurring = conn.execute(
            "SELECT "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'waiting'), "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'scheduled' "
            "  AND ready_at <= :now), "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'scheduled' "
            "  AND ready_at > :now), "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'running' "
            "  AND expires > :now), "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'running' "
            "  AND expires <= :now), "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'stalled'), "
            "(SELECT count(*) FROM jobs WHERE queue = :q AND state = 'depends'), "
            "(SELECT count(*) FROM recurring WHERE queue = :q)",
            {"q": queue, "now": now},
        ).fetchone()
        return QueueCounts(
            name=queue,
            waiting=waiting + due,
            stalled=expired + stalled,
            running=running,
            scheduled=scheduled,
            depends=depends,
            recurring=recurring,
            paused=paused,
        )

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
        if state not in (*_LISTABLE_STATES, "recurring"):
            raise MalformedArgument(
                f"jobs(): unknown state {state!r}; known: {', '.join(_LISTABLE_STATES)}, recurring"
            )
        offset = names.integer(offset, "offset", 0)
        count = names.integer(count, "count", 0)
        at = names.now(now)
        page: dict[str, object] = {"offset": offset, "count": count, "now": at}
        if state == "complete":
            sql = "state = 'complete' ORDER BY finished_at DESC, seq DESC"
        else:
            if queue is None:
                raise MalformedArgument(f"jobs(): state {state!r} needs a queue")
            page["queue"] = names.queue_name(queue)
            if state == "recurring":
                with self._lock:
                    rows = self._connection().execute(
                        "SELECT jid FROM recurring WHERE queue = :queue "
                        "ORDER BY next_at, jid LIMIT :count OFFSET :offset",
                        page,
                    )
                    return [row[0] for row in rows]
            sql = {
                "waiting": "(state = 'waiting' OR (state = 'scheduled' AND ready_at <= :now)) "
                "ORDER BY priority DESC, ready_at, seq",
                "running": "state = 'running' AND expires > :now ORDER BY expires, seq",
                "stalled": "((state = 'running' AND expires <= :now) OR state = 'stalled') "
                "ORDER BY expires, seq",
                "scheduled": "state = 'scheduled' AND ready_at > :now ORDER BY ready_at, seq",
                "depends": "state = 'depends' ORDER BY seq",
            }[state]
            sql = "queue = :queue AND " + sql
        with self._lock:
            rows = self._connection().execute(
                f"SELECT jid FROM jobs WHERE {sql} LIMIT :count OFFSET :offset", page
            )
            return [row[0] for row in rows]

    def pause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        self._set_paused(queues, True, names.now(now))

    def unpause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        self._set_paused(queues, False, names.now(now))

    def _set_paused(self, queues: Sequence[str], paused: bool, now: float) -> None:
        checked = names.queue_names(queues)
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO queues (name, created, paused) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET paused = excluded.paused",
                [(queue, now, int(paused)) for queue in checked],
            )

    # -- failures -------------------------------------------------------------------------
    def failed_groups(self, *, now: float | None = None) -> dict[str, int]:
        with self._lock:
            rows = self._connection().execute(
                "SELECT failure_group, count(*) FROM jobs WHERE state = 'failed' "
                "GROUP BY failure_group ORDER BY failure_group"
            )
            return dict(rows.fetchall())

    def failed(
        self, group: str, start: int = 0, limit: int = 25, *, now: float | None = None
    ) -> JobPage:
        group = names.label(group, "group")
        start = names.integer(start, "start", 0)
        limit = names.integer(limit, "limit", 0)
        with self._read() as conn:
            (total,) = conn.execute(
                "SELECT count(*) FROM jobs WHERE state = 'failed' AND failure_group = ?", (group,)
            ).fetchone()
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = 'failed' AND failure_group = ? "
                "ORDER BY finished_at DESC, seq DESC LIMIT ? OFFSET ?",
                (group, limit, start),
            ).fetchall()
            return JobPage(total=int(total), jobs=tuple(self._jobs(conn, rows)))

    def unfail(self, queue: str, group: str, count: int = 25, *, now: float | None = None) -> int:
        queue = names.queue_name(queue)
        group = names.label(group, "group")
        count = names.integer(count, "count", 0)
        at = names.now(now)
        with self._write() as conn:
            rows = conn.execute(
                "SELECT jid, klass, data FROM jobs WHERE state = 'failed' AND failure_group = ? "
                "ORDER BY finished_at, seq LIMIT ?",
                (group, count),
            ).fetchall()
            puts = [
                _Put(queue, jid, klass, data, 0.0, None, None, None, None)
                for jid, klass, data in rows
            ]
            if puts:
                self._store(conn, puts, at, self._config(conn))
        return len(puts)

    # -- dependencies ---------------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        wanted = names.unique_labels(jids, "jids")
        with self._write() as conn:
            self._require_depends_state(conn, "depends_add", jid)
            conn.execute(
                "INSERT OR IGNORE INTO dependencies (jid, on_jid) SELECT ?, jid FROM jobs "
                "WHERE jid IN (SELECT value FROM json_each(?)) AND state != 'complete' "
                "AND jid != ?",
                (jid, _json_list(wanted), jid),
            )

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        jid = names.label(jid, "jid")
        wanted = None if jids is None else names.unique_labels(jids, "jids")
        at = names.now(now)
        with self._write() as conn:
            self._require_depends_state(conn, "depends_remove", jid)
            if wanted is None:
                conn.execute("DELETE FROM dependencies WHERE jid = ?", (jid,))
            else:
                conn.execute(
                    "DELETE FROM dependencies WHERE jid = ? "
                    "AND on_jid IN (SELECT value FROM json_each(?))",
                    (jid, _json_list(wanted)),
                )
            self._release(conn, [jid], at)

    @staticmethod
    def _require_depends_state(conn: sqlite3.Connection, command: str, jid: str) -> None:
        row = conn.execute("SELECT state FROM jobs WHERE jid = ?", (jid,)).fetchone()
        if row is None:
            raise JobNotFound(jid, command)
        if row[0] != JobState.DEPENDS:
            raise InvalidState(f"{command}(): job {jid} is not in the depends state: {row[0]}")

    # -- tags and log ---------------------------------------------------------------------
    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._retag(jid, names.unique_labels(tags, "tags"), add=True, now=names.now(now))

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._retag(jid, names.unique_labels(tags, "tags"), add=False, now=names.now(now))

    def _retag(self, jid: str, tags: list[str], *, add: bool, now: float) -> list[str]:
        jid = names.label(jid, "jid")
        with self._write() as conn:
            row = conn.execute("SELECT tags FROM jobs WHERE jid = ?", (jid,)).fetchone()
            if row is None:
                raise JobNotFound(jid, "tag_add" if add else "tag_remove")
            current: list[str] = json.loads(row[0])
            if add:
                result = list(dict.fromkeys(current + tags))
                conn.executemany(
                    "INSERT OR IGNORE INTO tags VALUES (?, ?, ?)", [(t, jid, now) for t in tags]
                )
            else:
                result = [tag for tag in current if tag not in tags]
                conn.executemany(
                    "DELETE FROM tags WHERE tag = ? AND jid = ?", [(t, jid) for t in tags]
                )
            conn.execute("UPDATE jobs SET tags = ? WHERE jid = ?", (_json_list(result), jid))
        return result

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        tag = names.label(tag, "tag")
        offset = names.integer(offset, "offset", 0)
        count = names.integer(count, "count", 0)
        with self._read() as conn:
            (total,) = conn.execute("SELECT count(*) FROM tags WHERE tag = ?", (tag,)).fetchone()
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs JOIN tags USING (jid) WHERE tags.tag = ? "
                "ORDER BY tags.added, jobs.seq LIMIT ? OFFSET ?",
                (tag, count, offset),
            ).fetchall()
            return JobPage(total=int(total), jobs=tuple(self._jobs(conn, rows)))

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        offset = names.integer(offset, "offset", 0)
        count = names.integer(count, "count", 0)
        with self._lock:
            rows = self._connection().execute(
                "SELECT tag FROM tags GROUP BY tag HAVING count(*) >= 2 "
                "ORDER BY count(*) DESC, tag LIMIT ? OFFSET ?",
                (count, offset),
            )
            return [row[0] for row in rows]

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        jid = names.label(jid, "jid")
        message = names.label(message, "message")
        if data is not None and not isinstance(data, Mapping):
            raise MalformedArgument(f"log data must be a mapping, not {type(data).__name__}")
        details = {k: v for k, v in (data or {}).items() if k not in ("what", "when")}
        try:
            event = _event(message, names.now(now), **details)
        except TypeError as error:
            raise MalformedArgument(f"log data is not JSON-serialisable: {error}") from None
        with self._write() as conn:
            cap = self._history_cap(self._config(conn))
            updated = conn.execute(
                f"UPDATE jobs SET history = {_APPEND_HISTORY} WHERE jid = :jid",
                {"jid": jid, "cap": cap, "event": event},
            ).rowcount
            if not updated:
                raise JobNotFound(jid, "log")

    # -- tracking, statistics and workers --------------------------------------------------
    def track(self, jid: str, *, now: float | None = None) -> None:
        self._set_tracked(jid, True, "track")

    def untrack(self, jid: str, *, now: float | None = None) -> None:
        self._set_tracked(jid, False, "untrack")

    def _set_tracked(self, jid: str, tracked: bool, command: str) -> None:
        jid = names.label(jid, "jid")
        with self._write() as conn:
            updated = conn.execute(
                "UPDATE jobs SET tracked = ? WHERE jid = ?", (int(tracked), jid)
            ).rowcount
            if not updated:
                raise JobNotFound(jid, command)

    def tracked(self, *, now: float | None = None) -> list[Job]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tracked = 1 ORDER BY seq"
            ).fetchall()
            return self._jobs(conn, rows)

    def stats(self, queue: str, date: float, *, now: float | None = None) -> QueueStats:
        queue = names.queue_name(queue)
        date = names.timestamp(date)
        with self._read() as conn:
            return stats.read(conn, queue, date)

    def workers(self, *, now: float | None = None) -> list[WorkerCounts]:
        at = names.now(now)
        with self._write() as conn:
            max_age = self._number(self._config(conn), "max-worker-age")
            conn.execute("DELETE FROM workers WHERE last_seen < ?", (at - max_age,))
            rows = conn.execute(
                "SELECT name, "
                "  (SELECT count(*) FROM jobs WHERE worker = name AND state = 'running' "
                "   AND expires > :now), "
                "  (SELECT count(*) FROM jobs WHERE worker = name AND state = 'running' "
                "   AND expires <= :now) "
                "FROM workers ORDER BY last_seen DESC, name",
                {"now": at},
            ).fetchall()
        return [WorkerCounts(name, jobs, stalled) for name, jobs, stalled in rows]

    def worker_jobs(self, worker: str, *, now: float | None = None) -> WorkerJobs:
        worker = names.label(worker, "worker")
        at = names.now(now)
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT jid, expires > ? FROM jobs WHERE worker = ? AND state = 'running' "
                    "ORDER BY expires, jid",
                    (at, worker),
                )
                .fetchall()
            )
        return WorkerJobs(
            jobs=tuple(jid for jid, live in rows if live),
            stalled=tuple(jid for jid, live in rows if not live),
        )

    def worker_deregister(self, workers: Sequence[str], *, now: float | None = None) -> None:
        checked = names.labels(workers, "workers")
        with self._write() as conn:
            conn.executemany("DELETE FROM workers WHERE name = ?", [(w,) for w in checked])

    # -- recurring jobs --------------------------------------------------------------------
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
        template = {
            "queue": names.queue_name(queue),
            "jid": names.label(jid, "jid"),
            "klass": names.label(klass, "klass"),
            "data": names.json_text(data, "data", self.options.max_data_bytes),
            "interval": names.interval(interval),
            "next_at": names.now(now) + names.seconds(offset, "offset"),
            "priority": names.integer(priority, "priority"),
            "tags": _json_list(names.unique_labels(tags, "tags")),
            "retries": names.integer(retries, "retries", 0),
            "backlog": names.integer(backlog, "backlog", 0),
        }
        with self._write() as conn:
            conn.execute(
                "INSERT INTO recurring (jid, klass, queue, data, priority, tags, retries, "
                "interval, next_at, count, backlog) VALUES (:jid, :klass, :queue, :data, "
                ":priority, :tags, :retries, :interval, :next_at, 0, :backlog) "
                "ON CONFLICT(jid) DO UPDATE SET klass = excluded.klass, queue = excluded.queue, "
                "data = excluded.data, priority = excluded.priority, tags = excluded.tags, "
                "retries = excluded.retries, interval = excluded.interval, "
                "next_at = excluded.next_at, backlog = excluded.backlog",
                template,
            )
            self._register_queue(conn, str(template["queue"]), template["next_at"])
        return str(template["jid"])

    @staticmethod
    def _register_queue(conn: sqlite3.Connection, queue: str, now: object) -> None:
        conn.execute("INSERT OR IGNORE INTO queues (name, created) VALUES (?, ?)", (queue, now))

    def unrecur(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        with self._write() as conn:
            conn.execute("DELETE FROM recurring WHERE jid = ?", (jid,))

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None:
        jid = names.label(jid, "jid")
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT jid, klass, queue, data, priority, tags, retries, interval, count, "
                    "backlog FROM recurring WHERE jid = ?",
                    (jid,),
                )
                .fetchone()
            )
        if row is None:
            return None
        jid, klass, queue, data, priority, tags, retries, interval, count, backlog = row
        return RecurringJob(
            jid, klass, queue, data, priority, tuple(json.loads(tags)), retries, interval,
            count, backlog,
        )  # fmt: skip

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        jid = names.label(jid, "jid")
        checked = names.recur_changes(changes, self.options.max_data_bytes)
        with self._write() as conn:
            row = conn.execute("SELECT interval FROM recurring WHERE jid = ?", (jid,)).fetchone()
            if row is None:
                raise JobNotFound(jid, "recur_update")
            if "interval" in checked:
                # The next run keeps its distance from the last one, at the new interval.
                conn.execute(
                    "UPDATE recurring SET next_at = next_at - interval + ? WHERE jid = ?",
                    (checked["interval"], jid),
                )
            for key, value in checked.items():
                # `key` is one of names.RECUR_FIELDS, never other caller text.
                conn.execute(f"UPDATE recurring SET {key} = ? WHERE jid = ?", (value, jid))
            if "queue" in checked:
                self._register_queue(conn, str(checked["queue"]), names.now(now))

    def recur_tag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._recur_retag(jid, names.unique_labels(tags, "tags"), add=True)

    def recur_untag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._recur_retag(jid, names.unique_labels(tags, "tags"), add=False)

    def _recur_retag(self, jid: str, tags: list[str], *, add: bool) -> list[str]:
        jid = names.label(jid, "jid")
        with self._write() as conn:
            row = conn.execute("SELECT tags FROM recurring WHERE jid = ?", (jid,)).fetchone()
            if row is None:
                raise JobNotFound(jid, "recur_tag" if add else "recur_untag")
            current: list[str] = json.loads(row[0])
            result = (
                list(dict.fromkeys(current + tags))
                if add
                else [tag for tag in current if tag not in tags]
            )
            conn.execute("UPDATE recurring SET tags = ? WHERE jid = ?", (_json_list(result), jid))
        return result

    # -- forgetting queues -----------------------------------------------------------------
    def queue_forget(self, queues: Sequence[str], *, now: float | None = None) -> None:
        checked = names.queue_names(queues)
        with self._write() as conn:
            conn.executemany("DELETE FROM queues WHERE name = ?", [(q,) for q in checked])
