"""What the Redis engine adds to the contract: its Lua core's life, hand-off, pop order.

The contract itself is checked by tests/conformance/ (which runs on Redis too); here are
the Redis-specific parts. Servers come from tests/conftest.py (`redis_url`, and private
ones from `redis_server_factory` where a test restarts or configures its server).
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import lanner
from lanner import (
    Engine,
    MalformedArgument,
    NewJob,
    StoreMisconfigured,
)
from lanner.engines.redis import arguments
from lanner.engines.redis.connection import parse_url
from lanner.engines.redis.engine import RedisEngine
from lanner.engines.redis.script import build_script

from .support import T0, RedisServer, raw

# -- the script ---------------------------------------------------------------------------


def test_redis_7_runs_the_core_as_a_function_library(engine: RedisEngine) -> None:
    assert engine._lua.mode == "function"


@pytest.mark.parametrize("lua", ["function", "script"])
def test_the_core_is_reloaded_after_a_flush(redis_url: str, lua: str) -> None:
    with RedisEngine(f"{redis_url}?lua={lua}") as engine:
        assert engine._lua.mode == lua
        engine.put("q", "j1", "Task", now=T0)
        with raw(redis_url) as client:
            client.function_flush() if lua == "function" else client.script_flush()
        engine.put("q", "j2", "Task", now=T0)
        assert [job.jid for job in engine.pop("q", "w", 5, now=T0)] == ["j1", "j2"]


def test_a_loaded_core_is_not_loaded_again(redis_url: str) -> None:
    # Loading blocks Redis for milliseconds: not something every process start should do.
    with raw(redis_url) as client:

        def loads() -> int:
            stats = client.info("commandstats").get("cmdstat_function|load", {})
            return int(stats.get("calls", 0))

        client.function_flush()
        before = loads()
        with RedisEngine(redis_url) as first, RedisEngine(redis_url) as second:
            assert loads() == before + 1
            first.put("q", "j1", "Task", now=T0)
            assert [job.jid for job in second.pop("q", "w", now=T0)] == ["j1"]


def test_where_functions_are_refused_the_core_runs_as_a_script(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    # As on Redis 6.2 (no FUNCTION command), or for an ACL user allowed scripts only.
    server = redis_server_factory(
        "--user", "default", "off", "--user", "app", "on", ">pw", "~*", "&*", "+@all", "-function"
    )
    url = f"redis://app:pw@127.0.0.1:{server.port}/0"
    with RedisEngine(url) as engine:
        assert engine._lua.mode == "script"
        engine.put("q", "j1", "Task", now=T0)
        assert [job.jid for job in engine.pop("q", "w", now=T0)] == ["j1"]
    with pytest.raises(StoreMisconfigured, match="no permissions to run the 'function"):
        RedisEngine(url + "?lua=function")  # what lanner was told to use, refused


def test_a_bad_lua_option_is_refused() -> None:
    with pytest.raises(MalformedArgument, match="lua must be one of auto, function, script"):
        parse_url("redis://localhost/0?lua=eval")


def test_every_piece_of_per_call_state_is_started_afresh_on_each_call() -> None:
    # As a function library the script's top level runs once, so a module-level `local`
    # that changes during a call would leak into the next one unless `per_call` restarts
    # it. Every top-level local must be a constant, a module table, or restarted.
    constant = re.compile(r"^[A-Z][A-Z0-9_]*$")
    module_tables = {"Api", "Args", "Json", "Keys", "Num", "Raised", "call_starts"}
    source = build_script()
    restarted = set()
    for block in re.findall(r"^per_call\(function\(\)\n(.*?)^end\)", source, re.M | re.S):
        restarted.update(re.findall(r"\b([A-Za-z_]\w*)(?:\.\w+)?\s*(?:,|=)", block))
    unchecked = []
    for line in source.splitlines():
        declared = re.match(r"^local ([\w, ]+?)(?: =|$)", line)
        if declared is None or line.startswith("local function"):
            continue
        for name in (part.strip() for part in declared.group(1).split(",")):
            modules = {
                "Config",
                "Events",
                "Stats",
                "Worker",
                "Job",
                "Queue",
                "Recurring",
                "Limits",
                "Flow",
                "Move",
            }
            if constant.match(name) or name in module_tables | modules | {"Lanner"}:
                continue
            if name not in restarted:
                unchecked.append(name)
    assert unchecked == []


def test_qless_clients_get_put_order_among_ties_too(engine: RedisEngine, redis_url: str) -> None:
    # Jobs are placed in -work by (priority, ready time, put sequence), so a qless client
    # calling put and pop directly also gets equal jobs in the order they were put.
    with raw(redis_url) as client:
        sha = client.script_load(build_script())
        for jid in ["c", "a", "b"]:
            client.evalsha(sha, 0, "put", "1000", "", "q", jid, "Task", "{}", "0")
        popped = client.evalsha(sha, 0, "pop", "1000", "q", "w", "3")
    assert [job["jid"] for job in json.loads(popped)] == ["c", "a", "b"]


def test_many_jobs_put_at_once_pop_in_put_order(engine: RedisEngine) -> None:
    jids = [f"job-{n}" for n in reversed(range(2000))]
    engine.put_many([lanner.NewJob("q", jid, "Task") for jid in jids], now=T0)
    engine.put("q", "last", "Task", now=T0)
    popped = [job.jid for job in engine.pop("q", "w", 1500, now=T0)]
    popped += [job.jid for job in engine.pop("q", "w", 1000, now=T0)]
    assert popped == [*jids, "last"]


def test_a_batch_may_put_one_job_twice(engine: RedisEngine, redis_url: str) -> None:
    # The second put moves the first (to another queue, or to a new place in the same one),
    # although the batch's jobs were all new when it started.
    engine.put_many(
        [
            NewJob("q1", "a", "Task"),
            NewJob("q1", "b", "Task"),
            NewJob("q2", "a", "Task", priority=1),
            NewJob("q1", "b", "Task", priority=2),
            NewJob("q1", "c", "Task"),
        ],
        now=T0,
    )
    with raw(redis_url) as client:
        assert client.zrevrange("ql:q:q1-work", 0, -1) == ["b", "c"]
        assert client.zrevrange("ql:q:q2-work", 0, -1) == ["a"]
    job = engine.get("a", now=T0)
    assert job is not None
    assert (job.queue, job.priority) == ("q2", 1)


def test_a_released_job_goes_back_between_jobs_put_at_the_same_time(engine: RedisEngine) -> None:
    for jid in ["a", "b", "c", "d"]:
        engine.put("q", jid, "Task", now=T0)
    assert [job.jid for job in engine.pop("q", "w", 3, now=T0)] == ["a", "b", "c"]
    assert engine.release(["b"], "w", "q", now=T0) == ["b"]
    assert engine.jobs("waiting", "q", now=T0) == ["b", "d"]
    assert engine.release(["a", "c"], "w", "q", now=T0) == ["a", "c"]
    assert engine.jobs("waiting", "q", now=T0) == ["a", "b", "c", "d"]
    assert [job.jid for job in engine.peek("q", 4, now=T0)] == ["a", "b", "c", "d"]


def test_heartbeat_many_is_one_call_leaving_the_keys_as_heartbeats_would(
    engine: RedisEngine, redis_url: str
) -> None:
    engine.config_set("r-heartbeat", 30, now=T0)
    engine.put_many([NewJob("q", "a", "Task"), NewJob("q", "b", "Task")], now=T0)
    engine.put("r", "c", "Task", now=T0)
    engine.pop("q", "w", 2, now=T0)
    engine.pop("r", "w", now=T0)
    assert engine.pop("q", "other", now=T0 + 60) == []  # grants a's and b's grace periods
    with raw(redis_url) as client:
        assert client.hget("ql:j:a", "grace") is not None

        def calls() -> int:
            return int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))

        before = calls()
        assert engine.heartbeat_many(["a", "b", "c"], "w", now=T0 + 65) == {
            "a": T0 + 125, "b": T0 + 125, "c": T0 + 95,
        }  # fmt: skip
        assert calls() - before == 1
        assert client.zrange("ql:q:q-locks", 0, -1, withscores=True) == [
            ("a", T0 + 125), ("b", T0 + 125),
        ]  # fmt: skip
        assert client.zrange("ql:q:r-locks", 0, -1, withscores=True) == [("c", T0 + 95)]
        assert client.zrange("ql:w:w:jobs", 0, -1, withscores=True) == [
            ("c", T0 + 95), ("a", T0 + 125), ("b", T0 + 125),
        ]  # fmt: skip
        assert [client.hget(f"ql:j:{jid}", "grace") for jid in "abc"] == [None] * 3
        assert client.zscore("ql:workers", "w") == T0 + 65


# -- blocking pop ---------------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def waiting_workers(url: str, queue: str) -> list[str]:
    with raw(url) as client:
        return list(client.zrange(f"ql:lanner:waiting:{queue}", 0, -1))


def test_a_put_hands_its_job_to_a_blocked_worker(engine: RedisEngine, redis_url: str) -> None:
    got: list[list[lanner.Job]] = []
    popper = threading.Thread(target=lambda: got.append(engine.pop("q", "w1", 5, wait=10)))
    popper.start()
    wait_until(lambda: waiting_workers(redis_url, "q") == ["w1"])
    with RedisEngine(redis_url) as other:
        other.put("q", "j1", "Task")
        # Popped for w1 by the put itself, before w1 ran another command.
        job = other.get("j1")
        assert job is not None
        assert (job.state, job.worker) == (lanner.JobState.RUNNING, "w1")
    popper.join(timeout=5)
    assert [[j.jid for j in jobs] for jobs in got] == [["j1"]]
    assert got[0][0].state is lanner.JobState.RUNNING
    assert waiting_workers(redis_url, "q") == []
    with raw(redis_url) as client:
        assert client.exists("ql:lanner:handoff:q:w1", "ql:lanner:notify:q") == 0


def register_waiting(engine: RedisEngine, worker: str, count: int, wait: float, now: float) -> None:
    """What a blocking pop does before its BLPOP: find nothing, and register."""
    reply = engine._call("lanner.pop_wait", now, "q", worker, count, wait)
    assert reply[0] == "[]"


def test_a_hand_off_gives_a_worker_no_more_than_its_count(engine: RedisEngine) -> None:
    register_waiting(engine, "w1", 2, 10, T0)
    engine.put_many([NewJob("q", f"j{n}", "Task") for n in range(5)], now=T0)
    assert engine.jobs("waiting", "q", now=T0) == ["j2", "j3", "j4"]
    assert [job.jid for job in engine.pop("q", "w1", 10, now=T0)] == ["j0", "j1", "j2", "j3", "j4"]


def test_a_worker_takes_what_was_handed_to_it_when_it_pops_again(
    engine: RedisEngine, redis_url: str
) -> None:
    # Its BLPOP timed out just as the job was handed off: the next pop returns it.
    register_waiting(engine, "w1", 1, 10, T0)
    engine.put("q", "j1", "Task", now=T0)
    engine.put("q", "j2", "Task", now=T0)
    assert [job.jid for job in engine.pop("q", "w1", 2, now=T0 + 1)] == ["j1", "j2"]
    with raw(redis_url) as client:
        assert client.exists("ql:lanner:handoff:q:w1") == 0


def test_a_registration_lapses_at_the_end_of_its_wait(engine: RedisEngine, redis_url: str) -> None:
    register_waiting(engine, "w1", 1, 10, T0)
    engine.put("q", "j1", "Task", now=T0 + 11)  # w1 stopped waiting without a word (died)
    assert engine.jobs("waiting", "q", now=T0 + 11) == ["j1"]
    assert [job.jid for job in engine.pop("q", "w2", now=T0 + 11)] == ["j1"]
    register_waiting(engine, "w2", 1, 10, T0 + 12)  # and lapsed registrations are dropped
    assert waiting_workers(redis_url, "q") == ["w2"]


def test_no_hand_off_from_a_paused_queue(engine: RedisEngine, redis_url: str) -> None:
    register_waiting(engine, "w1", 1, 10, T0)
    engine.pause(["q"], now=T0)
    engine.put("q", "j1", "Task", now=T0)
    assert engine.jobs("waiting", "q", now=T0) == ["j1"]
    engine.unpause(["q"], now=T0)
    assert [job.jid for job in engine.pop("q", "w1", now=T0)] == ["j1"]


def test_a_handed_off_job_whose_lock_moved_on_is_not_returned(engine: RedisEngine) -> None:
    engine.config_set("grace-period", 0, now=T0)
    register_waiting(engine, "w1", 1, 10, T0)
    engine.put("q", "j1", "Task", now=T0)  # handed to w1, which never collects it ...
    later = T0 + 61  # ... until its lock ran out and w2 took the job over
    assert [job.jid for job in engine.pop("q", "w2", now=later)] == ["j1"]
    assert engine.pop("q", "w1", now=later) == []


def test_blocking_pop_is_woken_by_a_put_from_another_connection(
    engine: RedisEngine, redis_url: str
) -> None:
    put_at: list[float] = []

    def put() -> None:
        with RedisEngine(redis_url) as other:
            put_at.append(time.monotonic())
            other.put("q", "j1", "Task")

    timer = threading.Timer(0.3, put)
    timer.start()
    start = time.monotonic()
    popped = engine.pop("q", "w", wait=10)
    returned = time.monotonic()
    timer.join()
    assert [job.jid for job in popped] == ["j1"]
    assert returned - start < 2.0
    assert returned - put_at[0] < 0.2, "picked up at once, not at a poll interval"


def test_a_blocked_pop_does_not_hold_up_other_threads(engine: RedisEngine) -> None:
    got: list[list[str]] = []
    popper = threading.Thread(
        target=lambda: got.append([j.jid for j in engine.pop("q", "w", wait=5)])
    )
    popper.start()
    time.sleep(0.2)
    start = time.monotonic()
    engine.put("q", "j1", "Task")
    assert engine.get("j1") is not None
    assert time.monotonic() - start < 0.5
    popper.join(timeout=10)
    assert got == [["j1"]]


# -- order: the same as SQLite's ------------------------------------------------------------


def _unfail(engine: Engine, jid: str, now: float) -> None:
    engine.fail(jid, "w", "g", "m", now=now)
    engine.unfail("q", "g", now=now)


def _reprioritise(engine: Engine, jid: str, now: float) -> None:
    engine.release([jid], "w", "q", now=now)
    engine.priority(jid, 1, now=now)


# Ways to end a popped job's run in the test below.
FINISH: dict[str, Callable[[Engine, str, float], object]] = {
    "complete": lambda e, jid, now: e.complete(jid, "w", "q", now=now),
    "retry": lambda e, jid, now: e.retry(jid, "q", "w", now=now),
    "release": lambda e, jid, now: e.release([jid], "w", "q", now=now),
    "unfail": _unfail,
    "priority": _reprioritise,
}


@pytest.mark.parametrize("seed", range(8))
def test_pop_order_matches_the_sqlite_engine(
    engine: RedisEngine, tmp_path: Path, seed: int
) -> None:
    """Random puts (batches, delays, dependencies, priorities), pops, completions, retries,
    releases, unfails and priority changes, applied to both engines, at times 1 ms apart or
    equal: both must give the same jobs in the same order."""
    rnd = random.Random(seed)
    sqlite = lanner.open_engine(f"sqlite:///{tmp_path / 'order.db'}")
    both: list[Engine] = [engine, sqlite]
    now, made, running = 1_763_700_000.123456, 0, []
    try:
        for _ in range(120):
            op = rnd.choice(["put", "put", "batch", "depends", "pop", "pop", "finish", "tick"])
            if op == "tick":
                now += rnd.choice([0.001, 1.0, 5.0])
            elif op in ("put", "depends"):
                jid, made = f"j{made}", made + 1
                depends = [f"j{rnd.randrange(made)}"] if op == "depends" else None
                priority, delay = rnd.choice([0, 0, 1, 7]), rnd.choice([0, 0, 5])
                for e in both:
                    e.put("q", jid, "T", priority=priority, delay=delay, depends=depends, now=now)
            elif op == "batch":
                jobs = [
                    NewJob("q", f"j{made + n}", "T", priority=rnd.choice([0, 1])) for n in range(3)
                ]
                made += 3
                for e in both:
                    e.put_many(jobs, now=now)
            elif op == "pop":
                count = rnd.randrange(1, 4)
                popped = [[job.jid for job in e.pop("q", "w", count, now=now)] for e in both]
                assert popped[0] == popped[1]
                running += popped[0]
            elif running:
                jid = running.pop(rnd.randrange(len(running)))
                how = rnd.choice(list(FINISH))
                for e in both:
                    FINISH[how](e, jid, now)
            waiting = [e.jobs("waiting", "q", 0, 1000, now=now) for e in both]
            assert waiting[0] == waiting[1]
            assert [job.jid for job in engine.peek("q", 1000, now=now)] == waiting[1]
    finally:
        sqlite.close()


# -- lanner redis-script ------------------------------------------------------------------


@pytest.mark.parametrize("library", [False, True])
def test_redis_script_prints_a_core_other_clients_can_load(redis_url: str, library: bool) -> None:
    from click.testing import CliRunner

    from lanner.cli import main

    printed = CliRunner().invoke(main, ["redis-script", *(["--library"] if library else [])])
    assert printed.exit_code == 0, printed.output
    with raw(redis_url) as client:
        client.flushdb()
        args = ("put", "1000", "", "q", "j1", "Task", "{}", "0")
        if library:
            name = client.function_load(printed.output, replace=True)
            assert client.fcall(name, 0, *args) == "j1"
        else:
            assert client.eval(printed.output, 0, *args) == "j1"
        assert client.hget("ql:j:j1", "state") == "waiting"


def test_a_batch_put_stores_every_character_as_given(engine: RedisEngine) -> None:
    """The batch's array is written by msgspec (non-ASCII as UTF-8): the same data is stored."""
    data = json.dumps({"text": "é ü 😀 \u2028"}, ensure_ascii=False)
    engine.put_many([NewJob("q", "j1", "Task", data), NewJob("q", "j2", "Task", '"ü"')], now=T0)
    first, second = engine.get("j1", now=T0), engine.get("j2", now=T0)
    assert first is not None
    assert second is not None
    assert (first.data, second.data) == (data, '"ü"')


def test_a_batch_msgspec_refuses_is_written_by_json() -> None:
    """A lone surrogate (which UTF-8 cannot hold): `json`'s escape, the same value."""
    payload = arguments.put_many([NewJob("q", "j1", "Task", '"\ud800"')])
    assert json.loads(payload)[0]["data"] == '"\ud800"'
