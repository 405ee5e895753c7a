"""The SQLite engine's data layout, and opening a database file safely.

One database file holds everything; every process on the machine may open it.

    jobs            one row per job (see the column comments below)
    dependencies    (jid, on_jid): job `jid` waits for job `on_jid` to complete
    tags            (tag, jid, added): the index behind `tagged`; jobs.tags is the truth
    queues          every queue seen (put or paused), and whether it is paused
    workers         every worker that popped, with when it was last seen
    recurring       recurring job templates; recurring_due finds those due per queue
    timings         per (day, queue, kind): count, mean, vk of wait or run seconds
    histograms      per (day, queue, kind, bucket): how many values fell in the bucket
    daily           per (day, queue): failures, failed and retries counters
    config          config_set values, JSON-encoded; defaults live in lanner.engine
    counters        `seq` (insertion order of jobs) and `complete` (completed jobs kept)
    queue_usage     LIMITS, per queue: the jobs it holds (items, bytes of their `size`),
                    kept as jobs change (see its trigger); jobs put, expired, discarded
                    and, of the jobs held, the scheduled and the depends ones (version 6)
    failure_counts  the failed jobs of each failure group, kept by the same triggers
    fanout          FANOUT: (parent, child) for every `parent+child` popped or peeked
    events          EVENTS: what write transactions did, while a stream listens: id (in
                    commit order, never reused), at (Unix time of the commit), kind, jid,
                    queue, worker ('' where the kind has none), details (JSON object, or
                    NULL); kept RETENTION_SEC (eventlog.py)
    event_listeners EVENTS: one row per open stream, with when it expires unless refreshed;
                    writers store events only while one has not expired

A job's state picks the partial index it sits in, so each lookup of pop, retry or the
listings reads only the jobs in that state:

    jobs_work       waiting jobs: (queue, priority DESC, ready_at, seq) is pop order
    jobs_scheduled  scheduled jobs: (queue, ready_at) finds the due ones
    jobs_locks      running jobs: (queue, expires) finds expired locks
    jobs_stalled    jobs `timeout` stalled: popped first, oldest first
    jobs_depends    jobs waiting on dependencies
    jobs_failed     failed jobs: (failure_group, finished_at)
    jobs_complete   complete jobs: (finished_at) for retention
    jobs_worker     running jobs by worker, for the worker registry
    jobs_expiring   waiting jobs with an `expires_at`: (queue, expires_at) finds the expired

The schema version is PRAGMA user_version; a newer one is refused, never downgraded; an
older one is migrated on opening (`MIGRATIONS`: version 2 added `jobs.result`; version 3
added `jobs.expires_at`, `jobs.size`, `jobs_expiring`, `queue_usage` with its triggers,
and `fanout`; version 4 added `events` and `event_listeners`; version 5 the FLOW tables
of flow.py: `flow_jobs`, `flow_slots`, `flow_starts`; version 6 `failure_counts` and
`queue_usage.scheduled` and `.depends`, and the usage triggers made anew to keep them).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from typing import Final

from lanner.engines.sqlite.flow import FLOW_SCHEMA
from lanner.errors import SchemaError

SCHEMA_VERSION: Final = 6
MIN_SQLITE: Final = (3, 35, 0)  # RETURNING, and json_insert's '$[#]'

# What version 3 added beside the jobs' columns: created by SCHEMA and by the migration
# (and its usage triggers, which USAGE_SCHEMA holds since version 6 made them anew).
LIMITS_SCHEMA: Final = """
CREATE INDEX jobs_expiring ON jobs(queue, expires_at)
WHERE state = 'waiting' AND expires_at IS NOT NULL;

CREATE TABLE queue_usage (
    queue       TEXT PRIMARY KEY,
    items       INTEGER NOT NULL DEFAULT 0,     -- jobs held: neither complete nor failed
    bytes       INTEGER NOT NULL DEFAULT 0,     -- the sum of their size
    total_items INTEGER NOT NULL DEFAULT 0,     -- jobs put into the queue
    expired     INTEGER NOT NULL DEFAULT 0,     -- dropped by pops, their expires_at past
    discarded   INTEGER NOT NULL DEFAULT 0      -- dropped to make room; fanout copies refused
) WITHOUT ROWID;

CREATE TABLE fanout (
    parent TEXT NOT NULL,
    child  TEXT NOT NULL,                       -- queue `<parent>+<child>` gets copies
    PRIMARY KEY (parent, child)
) WITHOUT ROWID;
"""

# What version 6 added: the scheduled and depends jobs of each queue, and the jobs of each
# failure group, counted as the usage is, by the same two triggers (which version 6 made
# anew: a file of version 3 to 5 has them without these counts). Created by SCHEMA and by
# the migration.
USAGE_SCHEMA: Final = """
-- Of a queue's items (the jobs it holds): how many are scheduled, how many depends.
ALTER TABLE queue_usage ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue_usage ADD COLUMN depends INTEGER NOT NULL DEFAULT 0;

CREATE TABLE failure_counts (
    failure_group TEXT PRIMARY KEY,
    jobs          INTEGER NOT NULL              -- failed jobs of the group; no row: none
) WITHOUT ROWID;

-- A put checks a queue's bounds against its usage, so usage is kept on every change of a
-- job's state, queue or size, whatever the command: it cannot drift from the jobs. The
-- WHEN clause leaves the common changes (waiting to running and back, running to
-- complete) without a write.
-- The two hot changes are counted by the one place that makes each, one row update per
-- command where a trigger would cost one per job: new jobs by put.store (an INSERT, which
-- no trigger counts; put.store also counts total_items), completions by jobs.finish.
-- One trigger, not one per direction: each costs a sub-program call per row updated,
-- even when its WHEN is false, and pops update the state of every job they take.
-- Since version 6 the same statements count, for `lanner status`, the scheduled and
-- depends jobs among a queue's items, and the failed jobs of each group: a job enters or
-- leaves those states only through a change the WHEN lets in, and each statement is a
-- no-op (by its constant WHERE, or by adding 0) for a job in none of them.
CREATE TRIGGER usage_moved AFTER UPDATE OF state, queue, size ON jobs
WHEN (new.state != 'complete'
    AND ((old.state IN ('complete', 'failed')) != (new.state IN ('complete', 'failed'))
        OR new.queue != old.queue OR new.size != old.size
        OR (new.state != old.state
            AND (old.state IN ('scheduled', 'depends') OR new.state IN ('scheduled', 'depends')))))
OR (old.state = 'failed' AND new.state = 'complete')
BEGIN
    UPDATE queue_usage SET items = items - 1, bytes = bytes - old.size,
        scheduled = scheduled - (old.state = 'scheduled'),
        depends = depends - (old.state = 'depends')
    WHERE queue = old.queue AND old.state NOT IN ('complete', 'failed');
    INSERT INTO queue_usage (queue, items, bytes, scheduled, depends)
    SELECT new.queue, 1, new.size, new.state = 'scheduled', new.state = 'depends'
    WHERE new.state NOT IN ('complete', 'failed')
    ON CONFLICT(queue) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes,
        scheduled = scheduled + excluded.scheduled, depends = depends + excluded.depends;
    UPDATE failure_counts SET jobs = jobs - 1
    WHERE old.state = 'failed' AND failure_group = old.failure_group;
    DELETE FROM failure_counts
    WHERE old.state = 'failed' AND failure_group = old.failure_group AND jobs <= 0;
    INSERT INTO failure_counts (failure_group, jobs)
    SELECT new.failure_group, 1 WHERE new.state = 'failed' AND new.failure_group IS NOT NULL
    ON CONFLICT(failure_group) DO UPDATE SET jobs = jobs + 1;
END;
CREATE TRIGGER usage_deleted AFTER DELETE ON jobs
WHEN old.state != 'complete'
BEGIN
    UPDATE queue_usage SET items = items - 1, bytes = bytes - old.size,
        scheduled = scheduled - (old.state = 'scheduled'),
        depends = depends - (old.state = 'depends')
    WHERE queue = old.queue AND old.state != 'failed';
    UPDATE failure_counts SET jobs = jobs - 1
    WHERE old.state = 'failed' AND failure_group = old.failure_group;
    DELETE FROM failure_counts
    WHERE old.state = 'failed' AND failure_group = old.failure_group AND jobs <= 0;
END;
"""

# What version 4 added: created by SCHEMA and by the migration.
EVENTS_SCHEMA: Final = """
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a listener reads id > seen
    at      REAL NOT NULL,
    kind    TEXT NOT NULL,
    jid     TEXT NOT NULL,
    queue   TEXT NOT NULL,
    worker  TEXT NOT NULL,
    details TEXT                                -- JSON object of str, NULL: none
);
CREATE TABLE event_listeners (
    id         INTEGER PRIMARY KEY,
    expires_at REAL NOT NULL                    -- Unix time; refreshed while it listens
);
"""

SCHEMA: Final = (
    """
CREATE TABLE jobs (
    jid              TEXT PRIMARY KEY,
    klass            TEXT NOT NULL,
    queue            TEXT NOT NULL,             -- '' once complete
    data             TEXT NOT NULL,             -- JSON text
    priority         INTEGER NOT NULL,          -- higher pops first
    tags             TEXT NOT NULL,             -- JSON array of str
    state            TEXT NOT NULL,             -- lanner.job.JobState values
    seq              INTEGER NOT NULL,          -- insertion order, from counters.seq
    ready_at         REAL NOT NULL,             -- waiting: since when; scheduled: when due;
                                                -- depends: when its delay ends
    popped_at        REAL,                      -- when the current lock was taken
    retries          INTEGER NOT NULL,
    remaining        INTEGER NOT NULL,
    worker           TEXT NOT NULL,             -- lock holder while running, else ''
    expires          REAL NOT NULL,             -- lock expiry while running, else 0
    grace            INTEGER NOT NULL,          -- 1 once this lock's grace period was granted
    failure          TEXT,                      -- JSON {group, message, when, worker}
    failure_group    TEXT,                      -- copy of failure.group, for jobs_failed
    finished_at      REAL,                      -- when it failed or completed
    tracked          INTEGER NOT NULL,
    spawned_from_jid TEXT,
    history          TEXT NOT NULL,             -- JSON array of {what, when, ...}
    result           TEXT,                      -- JSON text its task returned (version 2)
    expires_at       REAL,                      -- dropped, not popped, from then on; NULL:
                                                -- never (version 3)
    size             INTEGER NOT NULL DEFAULT 0 -- UTF-8 bytes of data at its put (version 3)
);
CREATE INDEX jobs_work ON jobs(queue, priority DESC, ready_at, seq) WHERE state = 'waiting';
CREATE INDEX jobs_scheduled ON jobs(queue, ready_at) WHERE state = 'scheduled';
CREATE INDEX jobs_locks ON jobs(queue, expires) WHERE state = 'running';
CREATE INDEX jobs_stalled ON jobs(queue, seq) WHERE state = 'stalled';
CREATE INDEX jobs_depends ON jobs(queue, seq) WHERE state = 'depends';
CREATE INDEX jobs_failed ON jobs(failure_group, finished_at) WHERE state = 'failed';
CREATE INDEX jobs_complete ON jobs(finished_at) WHERE state = 'complete';
CREATE INDEX jobs_worker ON jobs(worker, expires) WHERE state = 'running';

CREATE TABLE dependencies (
    jid    TEXT NOT NULL,
    on_jid TEXT NOT NULL,
    PRIMARY KEY (jid, on_jid)
) WITHOUT ROWID;
CREATE INDEX dependencies_on ON dependencies(on_jid);

CREATE TABLE tags (
    tag   TEXT NOT NULL,
    jid   TEXT NOT NULL,
    added REAL NOT NULL,
    PRIMARY KEY (tag, jid)
) WITHOUT ROWID;
CREATE INDEX tags_jid ON tags(jid);

CREATE TABLE queues (
    name    TEXT PRIMARY KEY,
    created REAL NOT NULL,
    paused  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE workers (
    name      TEXT PRIMARY KEY,
    last_seen REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE recurring (
    jid      TEXT PRIMARY KEY,
    klass    TEXT NOT NULL,
    queue    TEXT NOT NULL,
    data     TEXT NOT NULL,
    priority INTEGER NOT NULL,
    tags     TEXT NOT NULL,                     -- JSON array of str
    retries  INTEGER NOT NULL,
    interval REAL NOT NULL,
    next_at  REAL NOT NULL,                     -- when the next run is due
    count    INTEGER NOT NULL,                  -- runs spawned so far: jids <jid>-1 ...
    backlog  INTEGER NOT NULL
);
CREATE INDEX recurring_due ON recurring(queue, next_at);

-- Statistics, per UTC day (`day` = start of the day, Unix seconds). vk is Welford's
-- running sum of squared deviations: the sample variance is vk / (count - 1).
CREATE TABLE timings (
    day   INTEGER NOT NULL,
    queue TEXT NOT NULL,
    kind  TEXT NOT NULL,                        -- 'wait' or 'run'
    count INTEGER NOT NULL,
    mean  REAL NOT NULL,
    vk    REAL NOT NULL,
    PRIMARY KEY (day, queue, kind)
) WITHOUT ROWID;
CREATE TABLE histograms (
    day    INTEGER NOT NULL,
    queue  TEXT NOT NULL,
    kind   TEXT NOT NULL,
    bucket INTEGER NOT NULL,                    -- see lanner.engines.sqlite.stats.bucket
    count  INTEGER NOT NULL,
    PRIMARY KEY (day, queue, kind, bucket)
) WITHOUT ROWID;
CREATE TABLE daily (
    day      INTEGER NOT NULL,
    queue    TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,
    failed   INTEGER NOT NULL DEFAULT 0,
    retries  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, queue)
) WITHOUT ROWID;

CREATE TABLE config (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters VALUES ('seq', 0), ('complete', 0);

-- Retention by count needs the number of completed jobs on every completion; a counter
-- kept by triggers costs a row update where COUNT(*) would walk the whole index.
CREATE TRIGGER complete_in AFTER UPDATE OF state ON jobs
WHEN new.state = 'complete' AND old.state != 'complete'
BEGIN UPDATE counters SET value = value + 1 WHERE name = 'complete'; END;
CREATE TRIGGER complete_out AFTER UPDATE OF state ON jobs
WHEN old.state = 'complete' AND new.state != 'complete'
BEGIN UPDATE counters SET value = value - 1 WHERE name = 'complete'; END;
CREATE TRIGGER complete_deleted AFTER DELETE ON jobs
WHEN old.state = 'complete'
BEGIN UPDATE counters SET value = value - 1 WHERE name = 'complete'; END;
"""
    + LIMITS_SCHEMA
    + EVENTS_SCHEMA
    + FLOW_SCHEMA
    + USAGE_SCHEMA
)

MIGRATIONS: Final = (
    "ALTER TABLE jobs ADD COLUMN result TEXT;",
    """
ALTER TABLE jobs ADD COLUMN expires_at REAL;
ALTER TABLE jobs ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET size = length(CAST(data AS BLOB));
"""
    + LIMITS_SCHEMA
    # A file keeps no count of past puts: total_items starts at the jobs it holds.
    + """
INSERT INTO queue_usage (queue, items, bytes, total_items)
SELECT queue, sum(state NOT IN ('complete', 'failed')),
       sum(CASE WHEN state NOT IN ('complete', 'failed') THEN size ELSE 0 END), count(*)
FROM jobs WHERE queue != '' GROUP BY queue;
""",
    EVENTS_SCHEMA,
    FLOW_SCHEMA,
    # Version 6: the usage triggers made anew (they count failure groups too). Version 3's
    # migration made no triggers (USAGE_SCHEMA has them): only files of versions 3 to 5
    # have the old ones.
    "DROP TRIGGER IF EXISTS usage_moved;\nDROP TRIGGER IF EXISTS usage_deleted;\n"
    + USAGE_SCHEMA
    + """
INSERT INTO failure_counts (failure_group, jobs)
SELECT failure_group, count(*) FROM jobs WHERE state = 'failed' AND failure_group IS NOT NULL
GROUP BY failure_group;
UPDATE queue_usage SET
    scheduled = (SELECT count(*) FROM jobs WHERE queue = queue_usage.queue
                 AND state = 'scheduled'),
    depends = (SELECT count(*) FROM jobs WHERE queue = queue_usage.queue AND state = 'depends');
""",
)
"""MIGRATIONS[n], SQL statements, takes a file of schema version n + 1 to n + 2."""

SYNCHRONOUS_MODES: Final = ("off", "normal", "full", "extra")


def connect(
    path: str, synchronous: str, busy_timeout: float, *, shared: bool = False
) -> sqlite3.Connection:
    """Open (creating if needed, mode 0600) and check the database at `path`. `shared`:
    the file may be an application's database, to which lanner adds its tables."""
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise SchemaError(
            f"lanner needs SQLite >= {'.'.join(map(str, MIN_SQLITE))}; "
            f"this Python has {sqlite3.sqlite_version}"
        )
    _create_private(path)
    # isolation_level=None: lanner issues BEGIN IMMEDIATE itself, so that a transaction
    # takes the write lock before reading and two poppers can never read the same job.
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        # A file not yet in WAL mode (a new one, which another process may be switching
        # too) is switched under its write lock, which SQLite does not wait for: the
        # switch reads first, and a reader that asks for the write lock while another
        # holds it gets SQLITE_BUSY at once (waiting could deadlock). So lanner waits.
        execute_when_free(conn, "PRAGMA journal_mode = WAL", busy_timeout)
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute("PRAGMA foreign_keys = OFF")
        _ensure_schema(conn, path, shared)
    except BaseException:
        conn.close()
        raise
    return conn


def execute_when_free(conn: sqlite3.Connection, statement: str, busy_timeout: float) -> None:
    """Execute `statement`, trying again every 0.05 to 1 ms while another connection holds
    a lock it needs, for up to `busy_timeout` seconds (then SQLite's SQLITE_BUSY error).

    SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, so a process
    that keeps writing can starve another for seconds (measured: a pop waited 2.9 s behind
    two busy poppers); and SQLite skips it where waiting could deadlock. Retrying in short
    steps keeps waits short and fair. The connection's busy timeout is off meanwhile, and
    in force again after, for every other statement.
    """
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        retry_while_busy(conn, statement, busy_timeout)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")


def retry_while_busy(conn: sqlite3.Connection, statement: str, busy_timeout: float) -> None:
    """`execute_when_free`'s tries, on a connection whose busy timeout is off already (a
    connection that keeps it off between its write transactions saves two statements per
    transaction: `connection.Database`)."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.00005
    while True:
        try:
            conn.execute(statement)
            return
        except sqlite3.OperationalError as error:
            busy = error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY  # and BUSY_*
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.001)


def _create_private(path: str) -> None:
    # SQLite creates files with the process umask; jobs may carry secrets, so the file is
    # created 0600 first. SQLite gives the -wal and -shm files the database file's mode.
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _ensure_schema(conn: sqlite3.Connection, path: str, shared: bool = False) -> None:
    if _up_to_date(conn):
        # Only reads: an application's connection may hold the write lock now, in the
        # transaction that publishes (`put_within`), and waiting for it would never end.
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        (objects,) = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        has_jobs = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
        ).fetchone()
        # Every version of lanner's schema has `jobs`; a file without it, whatever its
        # user_version says, is another application's.
        if shared and not version:
            _refuse_clashes(conn, path)
        elif not has_jobs if version else objects:
            raise SchemaError(
                f"{path} is an SQLite database that lanner did not create: name another "
                "file in the broker URL (sqlite:///PATH), or move this one away"
            )
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"{path} uses lanner schema version {version}, but this lanner knows only "
                f"up to {SCHEMA_VERSION}: upgrade lanner to use this database"
            )
        if version == 0:
            for statement in _statements(SCHEMA):
                conn.execute(statement)
        elif version < SCHEMA_VERSION:
            for script in MIGRATIONS[version - 1 :]:
                for statement in _statements(script):
                    conn.execute(statement)
        if version != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _up_to_date(conn: sqlite3.Connection) -> bool:
    """Whether the file has this lanner's schema already."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version != SCHEMA_VERSION:
        return False
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")
    return found.fetchone() is not None


def _refuse_clashes(conn: sqlite3.Connection, path: str) -> None:
    """In an application's database (`shared`), refuse to make lanner's tables where one
    of their names is taken."""
    ours = {
        found.group(1)
        for found in re.finditer(
            r"CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX|TRIGGER|VIEW)\s+(\w+)", SCHEMA, re.I
        )
    }
    taken = sorted(ours & {name for (name,) in conn.execute("SELECT name FROM sqlite_master")})
    if taken:
        raise SchemaError(
            f"{path} already has {', '.join(taken)}: lanner cannot add its tables beside the "
            "application's (shared=1); name another file in the broker URL"
        )


def _statements(script: str) -> list[str]:
    """Split the schema into statements (triggers contain ';' inside BEGIN ... END)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements
