"""FLOW in the SQLite engine: rate limits and concurrency keys, checked by pops.

A job put with a flow gets a `flow_jobs` row (its concurrency key and cap, its rate
limits as JSON). A pop of a queue that has such rows chooses its waiting jobs here
(`choose`) instead of by one UPDATE: in pop order, it skips the jobs whose key has no free
slot (the SQL does, so a burst of one key costs an index walk, not a Python loop), takes a
slot (`flow_slots`) for each job it takes, spends a start in each of the job's rate
buckets (`flow_starts`: the start times of the last period), and reschedules a job a
bucket has no room for to when it has (spread over the period, so that the jobs held do
not all come back at once). A rate-limited job is taken alone, its start counted a slack
ahead and come back a lead early (`lanner.records.rate_start`; its worker holds it until
its start: `lanner.worker.rates`); given back unstarted, its start is freed (`unstarted`).
Nothing here costs a queue without flow rows more than the look `in_use` makes.

A slot belongs to its job, not to a worker: it is held while the job is running (or
stalled), through a dead worker's lock running out and the job going to another worker,
and it is freed once the job is anything else (`_prune_slots`, at each pop that needs the
count: no command that ends a run has to know about flows).
"""

from __future__ import annotations

import bisect
import json
import sqlite3
from collections.abc import Sequence
from typing import Final

from lanner.records import (
    FlowBucket,
    FlowKey,
    FlowState,
    NewJob,
    rate_lead,
    rate_start,
    rate_window,
)

FLOW_SCHEMA: Final = """
CREATE TABLE flow_jobs (
    jid   TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    ckey  TEXT,                                 -- concurrency key, or NULL
    cmax  INTEGER NOT NULL DEFAULT 0,           -- its cap
    rates TEXT,                                 -- JSON [[bucket, limit, period], ...], or NULL
    fpos  REAL                                  -- fairness: its turn among its queue's keys
) WITHOUT ROWID;
CREATE INDEX flow_jobs_queue ON flow_jobs(queue);

CREATE TABLE flow_slots (
    ckey TEXT NOT NULL,
    jid  TEXT NOT NULL,                         -- a job of the key popped, maybe still running
    PRIMARY KEY (ckey, jid)
) WITHOUT ROWID;

CREATE TABLE flow_fair (
    queue TEXT NOT NULL,
    fkey  TEXT NOT NULL,                        -- '' holds the turn of the last job popped
    last  REAL NOT NULL,                        -- the last turn given to a job of the key
    PRIMARY KEY (queue, fkey)
) WITHOUT ROWID;

CREATE TABLE flow_starts (
    bucket TEXT NOT NULL,
    at     REAL NOT NULL                        -- when a job of the bucket was popped
);
CREATE INDEX flow_starts_bucket ON flow_starts(bucket, at);

CREATE TRIGGER flow_jobs_deleted AFTER DELETE ON jobs
BEGIN DELETE FROM flow_jobs WHERE jid = old.jid; END;
"""

MAX_HELD_PER_POP: Final = 1000
"""Jobs one pop reschedules for their rate limits; the rest wait for the next pop."""

_MAX_ROUNDS: Final = 64

_CANDIDATES: Final = (
    "SELECT j.jid, f.ckey, f.cmax, f.rates, f.fpos FROM jobs j "
    "LEFT JOIN flow_jobs f ON f.jid = j.jid "
    "WHERE j.queue = :queue AND j.state = 'waiting' "
    "AND (j.expires_at IS NULL OR j.expires_at > :now) "
    "AND (f.ckey IS NULL OR (SELECT count(*) FROM flow_slots s WHERE s.ckey = f.ckey) < f.cmax) "
    "AND j.jid NOT IN (SELECT value FROM json_each(:chosen)) "
    "ORDER BY j.priority DESC, j.ready_at, j.seq LIMIT :n"
)
# Fairness: by turn (jobs without a fair key first), which sorts the queue's waiting jobs.
_CANDIDATES_FAIR: Final = _CANDIDATES.replace("j.priority DESC,", "j.priority DESC, f.fpos,")


def store(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> None:
    """Remember the flows of the `jobs` just put (a job put again gets its new flow); a
    job with a fair key takes the turn after its key's last one, and not before the
    queue's current turn."""
    rows = []
    turns: dict[tuple[str, str], float] = {}
    for job in jobs:
        flow = job.flow
        if flow is None:
            continue
        turn = None
        if flow.fair_key is not None:
            turn = max(
                _turn(conn, turns, job.queue, ""), _turn(conn, turns, job.queue, flow.fair_key)
            )
            turn += 1
            turns[(job.queue, flow.fair_key)] = turn
        rates = json.dumps([list(rate) for rate in flow.rates]) if flow.rates else None
        rows.append((job.jid, job.queue, flow.concurrency_key, flow.max_concurrency, rates, turn))
    if rows:
        conn.executemany("INSERT OR REPLACE INTO flow_jobs VALUES (?, ?, ?, ?, ?, ?)", rows)
    if turns:
        conn.executemany(
            "INSERT OR REPLACE INTO flow_fair VALUES (?, ?, ?)",
            [(queue, key, last) for (queue, key), last in turns.items()],
        )


def _turn(
    conn: sqlite3.Connection, turns: dict[tuple[str, str], float], queue: str, key: str
) -> float:
    if (queue, key) not in turns:
        row = conn.execute(
            "SELECT last FROM flow_fair WHERE queue = ? AND fkey = ?", (queue, key)
        ).fetchone()
        turns[(queue, key)] = 0.0 if row is None else float(row[0])
    return turns[(queue, key)]


def in_use(conn: sqlite3.Connection, queue: str) -> bool:
    """Whether jobs of `queue` were put with a flow (their pops go through `choose`)."""
    found = conn.execute("SELECT 1 FROM flow_jobs WHERE queue = ? LIMIT 1", (queue,)).fetchone()
    return found is not None


def choose(
    conn: sqlite3.Connection, queue: str, want: int, now: float, first: bool = True
) -> tuple[list[str], tuple[float, float] | None]:
    """The jids, in pop order, of up to `want` waiting jobs of `queue` that their flows let
    run now; their slots and starts are taken, and jobs held by a rate are rescheduled.
    A rate-limited job is taken alone (and only `first`: before any other job of the
    pop); then also when its run may start and by when it must have (else None)."""
    _prune_slots(conn)
    choice = _Choice(conn, now)
    fair = conn.execute("SELECT last FROM flow_fair WHERE queue = ? AND fkey = ''", (queue,))
    clock = fair.fetchone()
    fair_queue = (
        clock is not None
        or conn.execute("SELECT 1 FROM flow_fair WHERE queue = ? LIMIT 1", (queue,)).fetchone()
        is not None
    )
    turn = 0.0 if clock is None else float(clock[0])
    for _ in range(_MAX_ROUNDS):
        requested = want - len(choice.chosen)
        rows = conn.execute(
            _CANDIDATES_FAIR if fair_queue else _CANDIDATES,
            {"queue": queue, "now": now, "chosen": json.dumps(choice.chosen), "n": requested},
        ).fetchall()
        skipped = held = 0
        alone = False
        for jid, key, cap, rates, fpos in rows:
            if rates is not None and (choice.chosen or not first):
                alone = True  # popped alone, by the next pop
                break
            outcome = choice.consider(jid, key, cap, rates)
            skipped += outcome == "skipped"
            held += outcome == "held"
            if outcome == "chosen" and fpos is not None:
                turn = max(turn, fpos)
            if outcome == "chosen" and rates is not None:
                alone = True  # it starts at once, behind no other job of its batch
                break
        choice.write()
        if alone or len(choice.chosen) >= want or not rows or choice.held_count >= MAX_HELD_PER_POP:
            break
        if not skipped and not held and len(rows) < requested:
            break
    if fair_queue:
        conn.execute("INSERT OR REPLACE INTO flow_fair VALUES (?, '', ?)", (queue, turn))
    return choice.chosen, choice.start


class _Choice:
    """What one pop has chosen so far, and what it knows of the keys and buckets."""

    def __init__(self, conn: sqlite3.Connection, now: float) -> None:
        self.conn, self.now = conn, now
        self.chosen: list[str] = []
        self.used: dict[str, int] = {}  # slots taken, per key
        self.buckets: dict[str, list[float]] = {}  # starts (and holds), per bucket
        self.held_count = 0
        self.slots: list[tuple[str, str]] = []
        self.starts: list[tuple[str, float]] = []
        self.held: list[tuple[float, str]] = []
        self.start: tuple[float, float] | None = None  # a rate-limited job's start window

    def consider(self, jid: str, key: str | None, cap: int, rates: str | None) -> str:
        """Take the job (`chosen`), pass it (`skipped`: its key was filled by this pop; the
        next round's SQL leaves it out) or hold it for its rates (`held`)."""
        if key is not None:
            if key not in self.used:
                self.used[key] = _slots(self.conn, key)
            if self.used[key] >= cap:
                return "skipped"
        if rates is not None:
            limits = json.loads(rates)
            dues = [self._room_at(bucket, limit, period) for bucket, limit, period in limits]
            due = max(dues)
            lead = min(rate_lead(period) for _, _, period in limits)
            if due > self.now + lead:
                # Held: it counts as a start at `due` in the buckets that hold it, so that
                # the next job held here comes back after it, not with it; it comes back
                # `lead` early, to be handed out by its start time.
                for (bucket, _, _), at in zip(limits, dues, strict=True):
                    if at == due:
                        bisect.insort(self.buckets[bucket], due)
                if self.held_count < MAX_HELD_PER_POP:
                    self.held.append((due - lead, jid))
                    self.held_count += 1
                return "held"
            self.start = rate_start(self.now, due, [period for _, _, period in limits])
            for bucket, _, _ in limits:
                bisect.insort(self.buckets[bucket], self.start[0])
                self.starts.append((bucket, self.start[0]))
        if key is not None:
            self.used[key] += 1
            self.slots.append((key, jid))
        self.chosen.append(jid)
        return "chosen"

    def write(self) -> None:
        """Store the slots and starts taken, and reschedule the jobs held, so far."""
        self.conn.executemany("INSERT OR IGNORE INTO flow_slots VALUES (?, ?)", self.slots)
        self.conn.executemany("INSERT INTO flow_starts VALUES (?, ?)", self.starts)
        self.conn.executemany(
            "UPDATE jobs SET state = 'scheduled', ready_at = ? WHERE jid = ? AND state = 'waiting'",
            self.held,
        )
        self.slots, self.starts, self.held = [], [], []

    def _room_at(self, bucket: str, limit: int, period: float) -> float:
        """When `bucket` has room for one more start (`now` if it has): the starts of the
        last `period` are fewer than `limit`."""
        window = rate_window(period)
        starts = self.buckets.get(bucket)
        if starts is None:
            self.conn.execute(
                "DELETE FROM flow_starts WHERE bucket = ? AND at <= ?", (bucket, self.now - window)
            )
            starts = [
                at
                for (at,) in self.conn.execute(
                    "SELECT at FROM flow_starts WHERE bucket = ? ORDER BY at", (bucket,)
                )
            ]
            self.buckets[bucket] = starts
        if len(starts) < limit:
            return self.now
        return starts[len(starts) - limit] + window


def unstarted(conn: sqlite3.Connection, jids: Sequence[str]) -> None:
    """Rate-limited jobs given back before their runs started: the starts their pops
    counted (their popped entries' `start`) leave their buckets, for other runs to take."""
    rows = conn.execute(
        "SELECT f.rates, j.history FROM flow_jobs f JOIN jobs j ON j.jid = f.jid "
        "WHERE f.jid IN (SELECT value FROM json_each(?)) AND f.rates IS NOT NULL",
        (json.dumps(list(jids)),),
    ).fetchall()
    for rates, history in rows:
        popped = [entry for entry in json.loads(history) if entry.get("what") == "popped"]
        start = popped[-1].get("start") if popped else None
        if not isinstance(start, int | float):
            continue
        for bucket, _, _ in json.loads(rates):
            conn.execute(
                "DELETE FROM flow_starts WHERE rowid = (SELECT rowid FROM flow_starts "
                "WHERE bucket = ? AND at = ? LIMIT 1)",
                (bucket, start),
            )


def has_ready(conn: sqlite3.Connection, queue: str, now: float) -> bool:
    """Whether a waiting job of `queue` has a free slot for its key (a read only; a job a
    rate holds counts: the pop that finds it reschedules it)."""
    row = conn.execute(_CANDIDATES, {"queue": queue, "now": now, "chosen": "[]", "n": 1})
    return row.fetchone() is not None


def _prune_slots(conn: sqlite3.Connection) -> None:
    conn.execute(
        "DELETE FROM flow_slots WHERE NOT EXISTS (SELECT 1 FROM jobs j "
        "WHERE j.jid = flow_slots.jid AND j.state IN ('running', 'stalled'))"
    )


def _slots(conn: sqlite3.Connection, key: str) -> int:
    (count,) = conn.execute("SELECT count(*) FROM flow_slots WHERE ckey = ?", (key,)).fetchone()
    return int(count)


def state(conn: sqlite3.Connection, now: float) -> FlowState:
    """What the controls hold back now (`Engine.flow_state`)."""
    _prune_slots(conn)
    keys = []
    for key, cap, waiting in conn.execute(
        "SELECT f.ckey, max(f.cmax), sum(j.state = 'waiting') FROM flow_jobs f "
        "JOIN jobs j ON j.jid = f.jid WHERE f.ckey IS NOT NULL "
        "AND j.state IN ('waiting', 'running', 'stalled') GROUP BY f.ckey ORDER BY f.ckey"
    ).fetchall():
        running = _slots(conn, key)
        keys.append(FlowKey(key, running, int(cap), int(waiting) if running >= cap else 0))
    limits: dict[str, tuple[int, float]] = {}
    for (rates,) in conn.execute("SELECT DISTINCT rates FROM flow_jobs WHERE rates IS NOT NULL"):
        for bucket, limit, period in json.loads(rates):
            limits[bucket] = (int(limit), float(period))
    buckets = []
    for bucket, (limit, period) in sorted(limits.items()):
        starts = [
            at
            for (at,) in conn.execute(
                "SELECT at FROM flow_starts WHERE bucket = ? AND at > ? ORDER BY at",
                (bucket, now - rate_window(period)),
            )
        ]
        (held,) = conn.execute(
            "SELECT count(*) FROM flow_jobs f JOIN jobs j ON j.jid = f.jid "
            "WHERE j.state = 'scheduled' AND f.rates LIKE '%' || json_quote(?) || '%'",
            (bucket,),
        ).fetchone()
        next_at = now if len(starts) < limit else starts[len(starts) - limit] + rate_window(period)
        buckets.append(FlowBucket(bucket, limit, period, len(starts), int(held), next_at))
    return FlowState(tuple(keys), tuple(buckets))
