-- The SQLite engine's schema version 3 (version 2 plus LIMITS and FANOUT), frozen as files
-- of that version hold it: tests/unit/test_sqlite_events.py migrates such files.
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

-- A put checks a queue's bounds against its usage, so usage is kept on every change of a
-- job's state, queue or size, whatever the command: it cannot drift from the jobs. The
-- WHEN clause leaves the common changes (waiting to running and back) without a write.
-- The two hot changes are counted by the one place that makes each, one row update per
-- command where a trigger would cost one per job: new jobs by put.store (an INSERT, which
-- no trigger counts; put.store also counts total_items), completions by jobs.finish.
-- One trigger, not one per direction: each costs a sub-program call per row updated,
-- even when its WHEN is false, and pops update the state of every job they take.
CREATE TRIGGER usage_moved AFTER UPDATE OF state, queue, size ON jobs
WHEN new.state != 'complete'
AND ((old.state IN ('complete', 'failed')) != (new.state IN ('complete', 'failed'))
    OR new.queue != old.queue OR new.size != old.size)
BEGIN
    UPDATE queue_usage SET items = items - 1, bytes = bytes - old.size
    WHERE queue = old.queue AND old.state NOT IN ('complete', 'failed');
    INSERT INTO queue_usage (queue, items, bytes)
    SELECT new.queue, 1, new.size WHERE new.state NOT IN ('complete', 'failed')
    ON CONFLICT(queue) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER usage_deleted AFTER DELETE ON jobs
WHEN old.state NOT IN ('complete', 'failed')
BEGIN
    UPDATE queue_usage SET items = items - 1, bytes = bytes - old.size WHERE queue = old.queue;
END;
