"""LIMITS and FANOUT in the SQLite engine, where the conformance suite does not reach: the
usage its triggers keep (never drifting from the jobs, whatever the commands, nor the
waiting counts derived from it, nor the failed counts of each group), the migration of a
version 2 file and of a version 5 one, and choices of this engine (put order, bounded
expiry)."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from lanner import (
    InvalidState,
    JobNotFound,
    LockLost,
    NewJob,
    PayloadTooLarge,
    QueueFull,
)
from lanner.engines.sqlite import SQLiteEngine, SQLiteOptions, limits
from lanner.engines.sqlite.schema import SCHEMA_VERSION

T0 = 1000.0
VERSION_2_SCHEMA = (Path(__file__).parent / "sqlite_schema_v2.sql").read_text()
HELD = "state NOT IN ('complete', 'failed')"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "jobs.db", SQLiteOptions(synchronous="off")) as opened:
        yield opened


def recounted(engine: SQLiteEngine) -> dict[str, tuple[int, int]]:
    """(items, bytes) per queue, counted from the jobs themselves."""
    with engine.database.statement() as conn:
        found = conn.execute(
            f"SELECT queue, count(*), sum(size), sum(length(CAST(data AS BLOB))) FROM jobs "
            f"WHERE {HELD} GROUP BY queue"
        ).fetchall()
    for queue, _, size, data_bytes in found:
        assert size == data_bytes, f"queue {queue}: the size column is not its data's bytes"
    return {queue: (items, size) for queue, items, size, _ in found}


def kept(engine: SQLiteEngine) -> dict[str, tuple[int, int]]:
    """(items, bytes) per queue, as the triggers kept them (queues holding something)."""
    with engine.database.statement() as conn:
        found = conn.execute("SELECT queue, items, bytes FROM queue_usage").fetchall()
    return {queue: (items, size) for queue, items, size in found if (items, size) != (0, 0)}


def assert_no_drift(engine: SQLiteEngine, now: float) -> None:
    counted = recounted(engine)
    assert kept(engine) == counted
    for queue, (items, size) in counted.items():
        usage = engine.queue_usage(queue, now=now)
        assert (usage.items, usage.bytes) == (items, size)
    # The waiting count is derived from the usage (queues.counts): exact as long as it is.
    with engine.database.statement() as conn:
        waiting = dict(
            conn.execute(
                "SELECT queue, sum(state = 'waiting' OR (state = 'scheduled' AND ready_at <= ?)) "
                "FROM jobs GROUP BY queue",
                (now,),
            ).fetchall()
        )
    for queue_counts in engine.queues(now=now):
        assert queue_counts.waiting == waiting.get(queue_counts.name, 0), queue_counts.name
    # And the scheduled and depends jobs, counted the same way.
    with engine.database.statement() as conn:
        by_state = {
            (queue, state): jobs
            for queue, state, jobs in conn.execute(
                "SELECT queue, CASE WHEN state = 'scheduled' AND ready_at <= ? THEN 'due' "
                "ELSE state END, count(*) FROM jobs GROUP BY 1, 2",
                (now,),
            )
        }
        stored_states = conn.execute(
            "SELECT queue, scheduled, depends FROM queue_usage WHERE scheduled OR depends"
        ).fetchall()
    for queue_counts in engine.queues(now=now):
        name = queue_counts.name
        assert queue_counts.scheduled == by_state.get((name, "scheduled"), 0), name
        assert queue_counts.depends == by_state.get((name, "depends"), 0), name
    assert {(q, s, d) for q, s, d in stored_states} == {
        (q, by_state.get((q, "scheduled"), 0) + by_state.get((q, "due"), 0),
         by_state.get((q, "depends"), 0))
        for q in {q for q, state in by_state if state in ("scheduled", "due", "depends")}
    }  # fmt: skip
    # The failed jobs of each group, kept by the same triggers (failure_counts); a failed
    # job without a group (only in the version 2 file below, written by hand) is in none.
    with engine.database.statement() as conn:
        failed = dict(
            conn.execute(
                "SELECT failure_group, count(*) FROM jobs WHERE state = 'failed' "
                "AND failure_group IS NOT NULL GROUP BY failure_group"
            ).fetchall()
        )
        stored = dict(conn.execute("SELECT failure_group, jobs FROM failure_counts").fetchall())
    assert engine.failed_groups(now=now) == failed
    assert stored == failed  # no row left at 0
    for group, jobs in failed.items():
        assert engine.failed(group, limit=1, now=now).total == jobs


# -- usage never drifts -------------------------------------------------------------------
QUEUES = ("a", "b", "c", "a+x")
JIDS = [f"j{n}" for n in range(24)]
DATA = ['"x"', '{"n": 12345}', '"ü€"', '"' + "y" * 40 + '"', '["€", "ß", 1]']


class RandomWorld:
    """A random mix of every command that moves jobs in or out of a queue."""

    def __init__(self, engine: SQLiteEngine, seed: int) -> None:
        self.engine = engine
        self.rng = random.Random(seed)
        self.now = T0
        self.held: list[tuple[str, str, str]] = []  # (jid, queue, worker) popped

    def setup(self) -> None:
        e = self.engine
        e.pop("a+x", "w0", now=self.now)  # a child of `a`: puts into `a` are copied
        e.config_set("a-max-age", 15)
        e.config_set("a+x-max-items", 3)
        e.config_set("b-max-size", 60)
        e.config_set("c-max-items", 4)
        e.config_set("c-discard-old-when-full", 1)
        e.config_set("c-max-item-size", 30)
        e.config_set("jobs-history-count", 4)  # retention deletes completed jobs
        e.recur("a", "rec", "Task", '"r"', 7.0, now=self.now)

    def step(self) -> None:
        self.now += self.rng.random() * 3
        operation = self.rng.choice(
            [
                self.put, self.put, self.put, self.put_many, self.requeue, self.pop, self.pop,
                self.pop, self.complete, self.complete, self.complete_many, self.fail,
                self.retry, self.release, self.cancel, self.timeout, self.unfail,
                self.depends_remove, self.heartbeat,
            ]
        )  # fmt: skip
        with contextlib.suppress(QueueFull, PayloadTooLarge, InvalidState, JobNotFound):
            operation()

    def new_job(self) -> NewJob:
        r = self.rng
        return NewJob(
            r.choice(QUEUES),
            r.choice(JIDS),
            "Task",
            r.choice(DATA),
            delay=r.choice([0.0, 0.0, 2.0]),
            priority=r.choice([None, 0, 3]),
            tags=r.choice([None, ["t"], ["t", "u"]]),
            depends=r.choice([None, None, None, [r.choice(JIDS)]]),
            if_exists=r.choice(["move", "move", "keep", "move-unless-running"]),
            expires_at=r.choice([None, None, self.now + r.random() * 8]),
        )

    def put(self) -> None:
        job = self.new_job()
        self.engine.put(
            job.queue, job.jid, job.klass, job.data, delay=job.delay, priority=job.priority,
            tags=job.tags, depends=job.depends, if_exists=job.if_exists,
            expires_at=job.expires_at, now=self.now,
        )  # fmt: skip

    def put_many(self) -> None:
        self.engine.put_many([self.new_job() for _ in range(self.rng.randint(1, 4))], now=self.now)

    def requeue(self) -> None:
        job = self.new_job()
        self.engine.requeue(job.queue, job.jid, job.klass, job.data, now=self.now)

    def pop(self) -> None:
        queue, worker = self.rng.choice(QUEUES), self.rng.choice(["w1", "w2"])
        for job in self.engine.pop(queue, worker, self.rng.randint(1, 3), now=self.now):
            self.held.append((job.jid, queue, worker))

    def _held(self) -> tuple[str, str, str] | None:
        return self.held.pop(self.rng.randrange(len(self.held))) if self.held else None

    def complete(self) -> None:
        if held := self._held():
            jid, queue, worker = held
            next_queue = self.rng.choice([None, None, *QUEUES])
            data = self.rng.choice([None, '"done"'])
            with contextlib.suppress(LockLost):
                self.engine.complete(jid, worker, queue, data, next=next_queue, now=self.now)

    def complete_many(self) -> None:
        if held := self._held():
            self.engine.complete_many([held[0]], held[2], held[1], now=self.now)

    def fail(self) -> None:
        if held := self._held():
            with contextlib.suppress(LockLost):
                self.engine.fail(held[0], held[2], "boom", "it broke", '"f"', now=self.now)

    def retry(self) -> None:
        if held := self._held():
            with contextlib.suppress(LockLost):
                self.engine.retry(held[0], held[1], held[2], delay=1.0, now=self.now)

    def release(self) -> None:
        if held := self._held():
            self.engine.release([held[0]], held[2], held[1], now=self.now)

    def cancel(self) -> None:
        self.engine.cancel(self.rng.sample(JIDS, 2), now=self.now)

    def timeout(self) -> None:
        if held := self._held():
            self.engine.timeout([held[0]], now=self.now)

    def unfail(self) -> None:
        self.engine.unfail(self.rng.choice(QUEUES), "boom", 2, now=self.now)

    def depends_remove(self) -> None:
        self.engine.depends_remove(self.rng.choice(JIDS), None, now=self.now)

    def heartbeat(self) -> None:
        if self.held:
            jid, _, worker = self.rng.choice(self.held)
            with contextlib.suppress(LockLost):
                self.engine.heartbeat(jid, worker, now=self.now)

    def end(self) -> None:
        """Cancel every job left: the queues then hold nothing."""
        self.engine.unrecur("rec", now=self.now)
        with self.engine.database.statement() as conn:
            left = [row[0] for row in conn.execute(f"SELECT jid FROM jobs WHERE {HELD}")]
        self.engine.cancel(left, now=self.now)


def _run(engine: SQLiteEngine, seed: int, steps: int) -> RandomWorld:
    world = RandomWorld(engine, seed)
    world.setup()
    for _ in range(steps):
        world.step()
        assert_no_drift(engine, world.now)
    world.end()
    assert_no_drift(engine, world.now)
    assert kept(engine) == {}
    return world


@pytest.mark.parametrize("seed", range(8))
def test_usage_never_drifts_from_the_jobs(engine: SQLiteEngine, seed: int) -> None:
    world = _run(engine, seed, 300)
    totals = {q: engine.queue_usage(q, now=world.now) for q in QUEUES}
    assert sum(u.total_items for u in totals.values()) > 100
    assert totals["a"].expired + totals["a+x"].expired > 0
    assert totals["c"].discarded + totals["a+x"].discarded > 0
    assert engine.failed_groups(now=world.now)  # the mix leaves failed jobs to count


def test_usage_never_drifts_in_a_migrated_file(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_2_file(path)
    with SQLiteEngine(path, SQLiteOptions(synchronous="off")) as engine:
        assert_no_drift(engine, T0)
        _run(engine, 7, 150)


# -- migration ----------------------------------------------------------------------------
V2_JOBS = [  # jid, queue, state, data
    ("w", "q", "waiting", '"ü€"'),
    ("r", "q", "running", '{"n": 1}'),
    ("s", "q", "scheduled", '"abc"'),
    ("f", "q", "failed", '"failed data"'),
    ("d", "r", "depends", "[]"),
    ("c", "", "complete", '"done"'),
]


def _version_2_file(path: Path) -> None:
    """A file as lanner wrote it at schema version 2, holding a job in every state."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(VERSION_2_SCHEMA + "PRAGMA user_version = 2;")
    for seq, (jid, queue, state, data) in enumerate(V2_JOBS, 1):
        conn.execute(
            "INSERT INTO jobs (jid, klass, queue, data, priority, tags, state, seq, ready_at, "
            "popped_at, retries, remaining, worker, expires, grace, tracked, history) "
            "VALUES (?, 'Task', ?, ?, 0, '[]', ?, ?, ?, ?, 5, 5, ?, ?, 0, 0, '[]')",
            (
                jid, queue, data, state, seq, T0 + (50 if state == "scheduled" else 0), T0,
                "w1" if state == "running" else "", T0 + 60 if state == "running" else 0,
            ),
        )  # fmt: skip
    conn.execute("INSERT INTO dependencies VALUES ('d', 's')")
    conn.close()


def test_a_version_2_file_is_migrated_with_the_usage_of_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _version_2_file(path)
    with SQLiteEngine(path) as engine:
        with engine.database.statement() as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        q = engine.queue_usage("q", now=T0)
        # waiting 7 bytes, running 8, scheduled 5; the failed job counts only as put
        assert (q.items, q.bytes, q.total_items, q.expired, q.discarded) == (3, 20, 4, 0, 0)
        r = engine.queue_usage("r", now=T0)
        assert (r.items, r.bytes, r.total_items) == (1, 2, 1)
        with engine.database.statement() as conn:  # complete jobs are in no queue
            assert conn.execute("SELECT queue FROM queue_usage").fetchall() == [("q",), ("r",)]

        engine.complete("r", "w1", "q", now=T0 + 1)  # the triggers keep it from now on
        engine.put("q", "new", "Task", '"12"', expires_at=T0 + 5, now=T0 + 1)
        assert engine.queue_usage("q", now=T0 + 1).items == 3
        assert [job.jid for job in engine.pop("q", "w2", 5, now=T0 + 6)] == ["w"]
        assert engine.queue_usage("q", now=T0 + 6).expired == 1
        assert_no_drift(engine, T0 + 6)


def test_a_version_5_file_gets_the_counts_of_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    with SQLiteEngine(path, SQLiteOptions(synchronous="off")) as engine:
        engine.put_many([NewJob("q", f"j{n}", "Task", "1") for n in range(5)], now=T0)
        for n, job in enumerate(engine.pop("q", "w", 5, now=T0)):
            engine.fail(job.jid, "w", ["boom", "bang"][n % 2], "it broke", now=T0)
        engine.put("q", "later", "Task", "1", delay=50, now=T0)
        engine.put("q", "after", "Task", "1", depends=["later"], now=T0)
        engine.put("q", "now", "Task", "1", now=T0)
    conn = sqlite3.connect(path, isolation_level=None)  # as version 5 left it
    conn.executescript(
        "DROP TABLE failure_counts; DROP TRIGGER usage_moved; DROP TRIGGER usage_deleted;"
        "ALTER TABLE queue_usage DROP COLUMN scheduled; "
        "ALTER TABLE queue_usage DROP COLUMN depends; PRAGMA user_version = 5;"
    )
    conn.close()
    with SQLiteEngine(path, SQLiteOptions(synchronous="off")) as engine:
        assert engine.failed_groups(now=T0) == {"bang": 2, "boom": 3}
        q = engine.queue_counts("q", now=T0)
        assert (q.waiting, q.scheduled, q.depends) == (1, 1, 1)
        assert_no_drift(engine, T0)
        engine.unfail("q", "boom", 2, now=T0 + 1)  # the new triggers keep it from now on
        engine.cancel(["j1"], now=T0 + 1)
        assert engine.failed_groups(now=T0 + 1) == {"bang": 1, "boom": 1}
        q = engine.queue_counts("q", now=T0 + 60)  # `later` is due: counted as waiting
        assert (q.waiting, q.scheduled, q.depends) == (4, 0, 1)
        assert_no_drift(engine, T0 + 60)


# -- what a put may add -------------------------------------------------------------------
def usage(engine: SQLiteEngine, queue: str = "q") -> tuple[int, int, int, int, int]:
    u = engine.queue_usage(queue, now=T0)
    return u.items, u.bytes, u.total_items, u.expired, u.discarded


def test_a_move_that_adds_nothing_goes_into_a_queue_over_its_bound(engine: SQLiteEngine) -> None:
    for jid in ["j1", "j2", "j3"]:
        engine.put("q", jid, "Task", '"ab"', now=T0)
    engine.config_set("q-max-items", 2)
    engine.config_set("q-max-size", 8)
    engine.put("q", "j1", "Task", '"xy"', now=T0)  # moved within the queue: no more of it
    with pytest.raises(QueueFull, match="max-items"):
        engine.put("q", "j4", "Task", '"ab"', now=T0)
    with pytest.raises(QueueFull, match="max-size"):
        engine.put("q", "j1", "Task", '"abc"', now=T0)  # one byte more
    assert usage(engine)[:3] == (3, 12, 4)


def test_a_job_moved_out_makes_room_for_the_next_of_the_same_put(engine: SQLiteEngine) -> None:
    engine.config_set("q-max-items", 1)
    engine.put("q", "j1", "Task", now=T0)
    engine.put_many([NewJob("r", "j1", "Task"), NewJob("q", "j2", "Task")], now=T0)
    assert usage(engine)[:3] == (1, 2, 2)
    assert usage(engine, "r")[:3] == (1, 2, 1)


def test_a_refused_put_many_stores_nothing_and_discards_nothing(engine: SQLiteEngine) -> None:
    engine.config_set("q-max-items", 2)
    engine.config_set("q-discard-old-when-full", 1)
    engine.config_set("r-max-item-size", 4)
    engine.put("q", "old", "Task", now=T0)
    with pytest.raises(PayloadTooLarge, match="max-item-size 4 of queue 'r'"):
        engine.put_many(
            [
                NewJob("q", "j1", "Task"),
                NewJob("q", "j2", "Task"),
                NewJob("r", "j3", "Task", "[1, 2]"),
            ],
            now=T0,
        )
    assert engine.get("old", now=T0) is not None
    assert usage(engine) == (1, 2, 1, 0, 0)


def test_discard_old_drops_from_the_head_for_every_job_of_a_put(engine: SQLiteEngine) -> None:
    engine.config_set("q-max-items", 3)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put("q", "urgent", "Task", priority=5, now=T0)
    engine.put("q", "old1", "Task", now=T0 + 1)
    engine.put("q", "old2", "Task", now=T0 + 2)
    engine.put("q", "new1", "Task", now=T0 + 3)  # drops urgent: what a pop gives next
    engine.put_many([NewJob("q", "new2", "Task"), NewJob("q", "new3", "Task")], now=T0 + 4)
    assert [job.jid for job in engine.pop("q", "w1", 5, now=T0 + 5)] == ["new1", "new2", "new3"]
    assert usage(engine)[4] == 3


def test_discard_old_reads_few_jobs_of_a_long_queue(engine: SQLiteEngine) -> None:
    for n in range(3):  # more than one chunk of each priority
        engine.put_many([NewJob("q", f"j{n}-{k}", "Task", priority=n) for k in range(40)], now=T0)
    engine.config_set("q-max-items", 120)
    engine.config_set("q-discard-old-when-full", 1)
    engine.put_many([NewJob("q", f"new{k}", "Task", priority=9) for k in range(50)], now=T0 + 1)
    left = [job.jid for job in engine.pop("q", "w1", 200, now=T0 + 2)]
    assert left == [f"new{k}" for k in range(50)] + [f"j1-{k}" for k in range(10, 40)] + [
        f"j0-{k}" for k in range(40)
    ]


def test_total_items_counts_every_put_moves_too(engine: SQLiteEngine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.put("q", "j1", "Task", now=T0)
    engine.put("r", "j1", "Task", now=T0)
    assert usage(engine)[:3] == (0, 0, 2)
    assert usage(engine, "r")[:3] == (1, 2, 1)


def test_a_jid_twice_in_one_put_is_held_once(engine: SQLiteEngine) -> None:
    engine.put_many([NewJob("new", "j", "Task", "[1, 2]"), NewJob("new", "j", "Task", "[]")])
    assert usage(engine, "new")[:3] == (1, 2, 2)


def test_usage_counts_the_data_as_put_not_as_a_heartbeat_replaced_it(
    engine: SQLiteEngine,
) -> None:
    engine.put("q", "j1", "Task", '"ab"', now=T0)
    engine.pop("q", "w1", now=T0)
    engine.heartbeat("j1", "w1", '"a much longer text"', now=T0)
    assert usage(engine)[:2] == (1, 4)
    engine.complete("j1", "w1", "q", now=T0)
    assert usage(engine)[:2] == (0, 0)


# -- expiry -------------------------------------------------------------------------------
def test_an_expired_job_frees_its_dependents_and_its_tags(engine: SQLiteEngine) -> None:
    engine.put("q", "first", "Task", tags=["t"], expires_at=T0 + 1, now=T0)
    engine.put("q", "then", "Task", depends=["first"], now=T0)
    assert [job.jid for job in engine.pop("q", "w1", 5, now=T0 + 2)] == ["then"]
    assert engine.tagged("t", now=T0 + 2).total == 0
    assert usage(engine)[:4] == (1, 2, 2, 1)


def test_a_job_handed_over_after_its_lock_ran_out_is_not_expired(engine: SQLiteEngine) -> None:
    engine.config_set("grace-period", 0)
    engine.put("q", "j1", "Task", expires_at=T0 + 5, now=T0)
    engine.pop("q", "w1", now=T0)
    assert [job.jid for job in engine.pop("q", "w2", now=T0 + 61)] == ["j1"]
    assert usage(engine)[3] == 0


def test_a_pop_drops_a_bounded_number_of_expired_jobs_and_skips_the_rest(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_EXPIRED_PER_POP", 2)
    for n in range(5):
        engine.put("q", f"old{n}", "Task", expires_at=T0 + 1, now=T0)
    engine.put("q", "live", "Task", now=T0)
    assert [job.jid for job in engine.pop("q", "w1", 5, now=T0 + 2)] == ["live"]
    assert usage(engine)[:4] == (4, 8, 6, 2)
    assert engine.pop("q", "w1", 5, now=T0 + 2) == []
    assert engine.pop("q", "w1", 5, now=T0 + 2) == []
    assert usage(engine)[:4] == (1, 2, 6, 5)


def test_peek_leaves_an_expired_job_for_a_pop_to_drop(engine: SQLiteEngine) -> None:
    engine.put("q", "j1", "Task", expires_at=T0 + 1, now=T0)
    assert engine.peek("q", now=T0 + 2) == []
    assert usage(engine)[:4] == (1, 2, 1, 0)
    assert engine.pop("q", "w1", now=T0 + 2) == []
    assert usage(engine)[:4] == (0, 0, 1, 1)


def test_max_age_counts_from_a_recurring_run_s_due_time(engine: SQLiteEngine) -> None:
    engine.config_set("q-max-age", 5)
    engine.recur("q", "rec", "Task", "{}", 10.0, now=T0)
    # Runs due at T0 and T0 + 10: the first is past its age at T0 + 12, the second is not.
    assert [job.jid for job in engine.pop("q", "w1", 5, now=T0 + 12)] == ["rec-2"]
    assert usage(engine)[2:4] == (2, 1)


# -- fanout -------------------------------------------------------------------------------
def test_children_are_kept_per_parent_until_forgotten(engine: SQLiteEngine) -> None:
    engine.pop("q+a", "w1", now=T0)
    engine.peek("q+b", now=T0)
    engine.pop("other+c", "w1", now=T0)
    engine.put_many([NewJob("q", "j1", "Task"), NewJob("other", "j2", "Task")], now=T0)
    engine.queue_forget(["q+a"], now=T0)
    engine.put("q", "j3", "Task", now=T0)
    found = [job.jid for q in ("q+a", "q+b", "other+c") for job in engine.pop(q, "w1", 5, now=T0)]
    assert found == ["j1+a", "j1+b", "j3+b", "j2+c"]


def test_copies_refused_by_a_child_are_counted_there_only(engine: SQLiteEngine) -> None:
    engine.pop("q+c", "w1", now=T0)
    engine.config_set("q+c-max-item-size", 3)
    engine.put_many([NewJob("q", "small", "Task", "[]"), NewJob("q", "big", "Task", "[1, 2]")],
                    now=T0)  # fmt: skip
    assert usage(engine, "q+c")[:5] == (1, 2, 1, 0, 1)
    assert usage(engine, "q")[:5] == (2, 8, 2, 0, 0)


def test_a_copy_is_moved_as_its_job_is(engine: SQLiteEngine) -> None:
    engine.pop("q+c", "w1", now=T0)
    engine.put("q", "j1", "Task", '"one"', now=T0)
    engine.put("q", "j1", "Task", '"two"', if_exists="keep", now=T0)
    engine.put("q", "j1", "Task", '"three"', now=T0)
    (copy,) = engine.pop("q+c", "w1", 5, now=T0)
    assert (copy.jid, copy.data) == ("j1+c", '"three"')
    assert usage(engine, "q+c")[:3] == (1, 7, 2)
