"""Bad arguments: every command rejects them with a clear error and changes nothing.

Each case runs against a small world (a waiting, a running, a failed and a complete
job) and checks the error type and that the world is exactly as it was. The cases are
many (a thousand per store): a world is made once per store and shared by the module's
tests for as long as what it shows is what it showed when made (a case that changed it
fails, and the next test gets a new world).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner import (
    Capability,
    Engine,
    InvalidName,
    MalformedArgument,
    NewJob,
    PayloadTooLarge,
    TimeOutOfRange,
)
from lanner.limits import MAX_DELAY_SEC, MAX_TIMESTAMP

from .conftest import STORES
from .helpers import T0, get, in_state, require

NOW = T0 + 1
KNOWN = ["wait1", "run1", "fail1", "done1"]

Call = Callable[[Any], object]


@dataclass(frozen=True)
class Case:
    call: Call
    error: type[Exception] = MalformedArgument
    needs: Capability | None = None


# A world is made again past this age: SQS keeps the running job's lease on its own clock.
WORLD_LIFETIME_SEC = 20.0


@dataclass(frozen=True)
class World:
    engine: Engine
    shown: object
    made_at: float


@pytest.fixture(scope="module")
def worlds() -> Iterator[dict[str, World]]:
    """The world of each store, shared by this module's tests (closed after them)."""
    made: dict[str, World] = {}
    yield made
    for kept in made.values():
        kept.engine.close()


@pytest.fixture
def world(
    store_name: str, request: pytest.FixtureRequest, tmp_path: Path, worlds: dict[str, World]
) -> Engine:
    kept = worlds.get(store_name)
    if (
        kept is not None
        and time.monotonic() - kept.made_at < WORLD_LIFETIME_SEC
        and snapshot(kept.engine) == kept.shown
    ):
        return kept.engine
    if kept is not None:
        kept.engine.close()
    engine = lanner.open_engine(STORES[store_name](request, tmp_path))
    in_state(engine, "running", "run1", "q")
    in_state(engine, "waiting", "wait1", "q")
    in_state(engine, "failed", "fail1", "fq")
    in_state(engine, "complete", "done1", "cq")
    worlds[store_name] = World(engine, snapshot(engine), time.monotonic())
    return engine


def snapshot(engine: Engine) -> object:
    """What the engine can show of its store (more where it has LOOKUP, LISTING, FAILURES)."""
    shown: list[object] = [engine.queues(now=NOW), engine.config_all(now=NOW)]
    if Capability.LOOKUP in engine.capabilities:
        shown.append(engine.multiget([*KNOWN, "new"], now=NOW))
    if Capability.FAILURES in engine.capabilities:
        shown.append(engine.failed_groups(now=NOW))
    if Capability.LISTING in engine.capabilities:
        shown += [engine.jobs("complete", now=NOW), engine.jobs("waiting", "q", now=NOW)]
    return shown


def check(engine: Engine, case: Case) -> None:
    if case.needs is not None:
        require(engine, case.needs)
    before = snapshot(engine)
    with pytest.raises(case.error) as raised:
        case.call(engine)
    assert str(raised.value), "the error should say what is wrong"
    assert snapshot(engine) == before


# -- queue names --------------------------------------------------------------------------

BAD_QUEUE_NAMES = ["", "1abc", "a b", "a" * 65, "a.b", "ä", "-a", "a/b", "a*", "q\n"]

QUEUE_COMMANDS: dict[str, tuple[Callable[[Any, Any], object], Capability | None]] = {
    "put": (lambda e, q: e.put(q, "new", "Task", now=NOW), None),
    "requeue": (lambda e, q: e.requeue(q, "wait1", "Task", now=NOW), None),
    "put_many": (lambda e, q: e.put_many([NewJob(q, "new", "Task")], now=NOW), None),
    "pop": (lambda e, q: e.pop(q, "w2", now=NOW), None),
    "peek": (lambda e, q: e.peek(q, now=NOW), None),
    "complete": (lambda e, q: e.complete("run1", "w1", q, now=NOW), None),
    "complete-next": (lambda e, q: e.complete("run1", "w1", "q", next=q, now=NOW), None),
    "complete_many": (lambda e, q: e.complete_many(["run1"], "w1", q, now=NOW), None),
    "retry": (lambda e, q: e.retry("run1", q, "w1", now=NOW), None),
    "queue_counts": (lambda e, q: e.queue_counts(q, now=NOW), None),
    "length": (lambda e, q: e.length(q, now=NOW), None),
    "jobs": (lambda e, q: e.jobs("waiting", q, now=NOW), None),
    "unfail": (lambda e, q: e.unfail(q, "boom", now=NOW), None),
    "pause": (lambda e, q: e.pause(["q", q], now=NOW), Capability.PAUSE),
    "unpause": (lambda e, q: e.unpause(["q", q], now=NOW), Capability.PAUSE),
}


@pytest.mark.parametrize("command", sorted(QUEUE_COMMANDS))
@pytest.mark.parametrize("name", BAD_QUEUE_NAMES, ids=repr)
def test_bad_queue_name_is_an_invalid_name(world: Engine, command: str, name: str) -> None:
    call, needs = QUEUE_COMMANDS[command]
    check(world, Case(lambda e: call(e, name), InvalidName, needs))


@pytest.mark.parametrize("command", ["put", "pop", "queue_counts"])
@pytest.mark.parametrize("name", [None, 5, b"q", ["q"]], ids=repr)
def test_queue_name_of_another_type_is_malformed(world: Engine, command: str, name: Any) -> None:
    call, needs = QUEUE_COMMANDS[command]
    check(world, Case(lambda e: call(e, name), MalformedArgument, needs))


def test_bad_queue_name_error_names_the_rule(world: Engine) -> None:
    with pytest.raises(InvalidName, match="a b"):
        world.put("a b", "new", "Task", now=NOW)


@pytest.mark.requires(Capability.LOOKUP)
@pytest.mark.parametrize("name", ["a", "Z", "a" * 64, "a-_9Z", "Q1-b_c"])
def test_good_queue_names_are_accepted_unchanged(engine: Engine, name: str) -> None:
    engine.put(name, "j1", "Task", now=T0)
    assert get(engine, "j1").queue == name
    assert [q.name for q in engine.queues(now=T0)] == [name]


def test_queue_names_differing_only_in_punctuation_stay_apart(engine: Engine) -> None:
    engine.put("my-app", "j1", "Task", now=T0)
    engine.put("myapp", "j2", "Task", now=T0)
    engine.put("my_app", "j3", "Task", now=T0)
    assert [q.name for q in engine.queues(now=T0)] == sorted(["my-app", "myapp", "my_app"])


# -- labels: jids, workers, groups, klasses, tags, config keys ------------------------------

BAD_LABELS: list[Any] = ["", "a\nb", "nul\x00", "del\x7f", "x" * 257, 5, None]

LABEL_COMMANDS: dict[str, tuple[Callable[[Any, Any], object], Capability | None]] = {
    "put-jid": (lambda e, v: e.put("q", v, "Task", now=NOW), None),
    "put-klass": (lambda e, v: e.put("q", "new", v, now=NOW), None),
    "put_many-jid": (lambda e, v: e.put_many([NewJob("q", v, "Task")], now=NOW), None),
    "requeue-jid": (lambda e, v: e.requeue("q", v, "Task", now=NOW), None),
    "requeue-klass": (lambda e, v: e.requeue("q", "wait1", v, now=NOW), None),
    "pop-worker": (lambda e, v: e.pop("q", v, now=NOW), None),
    "heartbeat-jid": (lambda e, v: e.heartbeat(v, "w1", now=NOW), None),
    "heartbeat-worker": (lambda e, v: e.heartbeat("run1", v, now=NOW), None),
    "heartbeat_many-jid": (lambda e, v: e.heartbeat_many(["run1", v], "w1", now=NOW), None),
    "heartbeat_many-worker": (lambda e, v: e.heartbeat_many(["run1"], v, now=NOW), None),
    "complete-jid": (lambda e, v: e.complete(v, "w1", "q", now=NOW), None),
    "complete-worker": (lambda e, v: e.complete("run1", v, "q", now=NOW), None),
    "complete_many-jid": (lambda e, v: e.complete_many(["run1", v], "w1", "q", now=NOW), None),
    "complete_many-worker": (lambda e, v: e.complete_many(["run1"], v, "q", now=NOW), None),
    "fail-jid": (lambda e, v: e.fail(v, "w1", "boom", "m", now=NOW), None),
    "fail-worker": (lambda e, v: e.fail("run1", v, "boom", "m", now=NOW), None),
    "fail-group": (lambda e, v: e.fail("run1", "w1", v, "m", now=NOW), None),
    "retry-jid": (lambda e, v: e.retry(v, "q", "w1", now=NOW), None),
    "retry-worker": (lambda e, v: e.retry("run1", "q", v, now=NOW), None),
    "retry-group": (lambda e, v: e.retry("run1", "q", "w1", group=v, now=NOW), None),
    "cancel-jid": (lambda e, v: e.cancel(["wait1", v], now=NOW), None),
    "failed-group": (lambda e, v: e.failed(v, now=NOW), None),
    "unfail-group": (lambda e, v: e.unfail("q", v, now=NOW), None),
    "config_set-key": (lambda e, v: e.config_set(v, 1, now=NOW), None),
    "config_unset-key": (lambda e, v: e.config_unset(v, now=NOW), None),
    "timeout-jid": (lambda e, v: e.timeout(["run1", v], now=NOW), Capability.TIMEOUT),
    "priority-jid": (lambda e, v: e.priority(v, 1, now=NOW), Capability.PRIORITY),
    "put-tag": (lambda e, v: e.put("q", "new", "Task", tags=["ok", v], now=NOW), Capability.TAGS),
    "tag_add-tag": (lambda e, v: e.tag_add("wait1", ["ok", v], now=NOW), Capability.TAGS),
    "tag_add-jid": (lambda e, v: e.tag_add(v, ["ok"], now=NOW), Capability.TAGS),
    "tagged-tag": (lambda e, v: e.tagged(v, now=NOW), Capability.TAGS),
    "put-depends": (
        lambda e, v: e.put("q", "new", "Task", depends=[v], now=NOW),
        Capability.DEPENDENCIES,
    ),
    "log-jid": (lambda e, v: e.log(v, "note", now=NOW), Capability.LOG),
}


OPTIONAL_LABELS = {"retry-group"}  # None is the default there, so allowed


@pytest.mark.parametrize(
    ("command", "value"),
    [
        pytest.param(command, value, id=f"{command}-{value!r}")
        for command in sorted(LABEL_COMMANDS)
        for value in BAD_LABELS
        if not (value is None and command in OPTIONAL_LABELS)
    ],
)
def test_bad_label_is_malformed(world: Engine, command: str, value: Any) -> None:
    call, needs = LABEL_COMMANDS[command]
    check(world, Case(lambda e: call(e, value), MalformedArgument, needs))


@pytest.mark.parametrize("value", ["", "a\nb", "x" * 257])
def test_bad_label_text_is_an_invalid_name(world: Engine, value: str) -> None:
    check(world, Case(lambda e: e.put("q", value, "Task", now=NOW), InvalidName))


def test_labels_may_hold_any_printable_text(engine: Engine) -> None:
    jid = "jöb id/with:odd*chars ✓" + "x" * 200
    engine.put("q", jid, "mod.Klass<T>", now=T0)
    (job,) = engine.pop("q", "worker@host:123 ✓", now=T0)
    assert (job.jid, job.klass, job.worker) == (jid, "mod.Klass<T>", "worker@host:123 ✓")


@pytest.mark.parametrize("value", [5, None, b"j"], ids=repr)
def test_reading_with_a_jid_of_another_type_is_malformed(world: Engine, value: Any) -> None:
    check(world, Case(lambda e: e.get(value, now=NOW)))
    check(world, Case(lambda e: e.multiget(["wait1", value], now=NOW)))


# -- data ---------------------------------------------------------------------------------

BAD_DATA: list[Any] = ["{not json", "", "{'a': 1}", "undefined", "[1,", 5, {"a": 1}, b"{}"]

DATA_COMMANDS: dict[str, Callable[[Any, Any], object]] = {
    "put": lambda e, d: e.put("q", "new", "Task", d, now=NOW),
    "reput": lambda e, d: e.put("q", "wait1", "Task", d, now=NOW),
    "put_many": lambda e, d: e.put_many([NewJob("q", "new", "Task", d)], now=NOW),
    "heartbeat": lambda e, d: e.heartbeat("run1", "w1", d, now=NOW),
    "complete": lambda e, d: e.complete("run1", "w1", "q", d, now=NOW),
    "fail": lambda e, d: e.fail("run1", "w1", "boom", "m", d, now=NOW),
}


@pytest.mark.parametrize("command", sorted(DATA_COMMANDS))
@pytest.mark.parametrize("data", BAD_DATA, ids=repr)
def test_data_that_is_not_json_text_is_malformed(world: Engine, command: str, data: Any) -> None:
    call = DATA_COMMANDS[command]
    check(world, Case(lambda e: call(e, data)))


@pytest.mark.parametrize("command", sorted(DATA_COMMANDS))
def test_data_over_the_size_limit_is_payload_too_large(world: Engine, command: str) -> None:
    call = DATA_COMMANDS[command]
    too_big = json.dumps("x" * (world.max_data_bytes - 1))  # two quotes: limit + 1 bytes
    check(world, Case(lambda e: call(e, too_big), PayloadTooLarge))


@pytest.mark.requires(Capability.LOOKUP)
def test_data_of_exactly_the_size_limit_is_accepted(engine: Engine) -> None:
    data = json.dumps("x" * (engine.max_data_bytes - 2))
    engine.put("q", "j1", "Task", data, now=T0)
    assert get(engine, "j1").data == data


@pytest.mark.requires(Capability.LOOKUP)
def test_the_size_limit_counts_utf8_bytes_not_characters(engine: Engine) -> None:
    limit = engine.max_data_bytes
    data = json.dumps("é" * (limit // 2), ensure_ascii=False)  # about `limit` chars, 2x bytes
    assert len(data) <= limit < len(data.encode())
    with pytest.raises(PayloadTooLarge):
        engine.put("q", "j1", "Task", data, now=T0)
    assert engine.get("j1", now=T0) is None


def test_payload_too_large_is_a_malformed_argument() -> None:
    assert issubclass(PayloadTooLarge, MalformedArgument)
    assert issubclass(InvalidName, MalformedArgument)
    assert issubclass(MalformedArgument, ValueError)


# -- numbers ------------------------------------------------------------------------------

NAN = math.nan
INF = math.inf

NUMBER_CASES: dict[str, Case] = {
    "pop-count-negative": Case(lambda e: e.pop("q", "w2", -1, now=NOW)),
    "pop-count-float": Case(lambda e: e.pop("q", "w2", 1.5, now=NOW)),
    "pop-count-str": Case(lambda e: e.pop("q", "w2", "2", now=NOW)),
    "pop-count-bool": Case(lambda e: e.pop("q", "w2", True, now=NOW)),
    "peek-count-negative": Case(lambda e: e.peek("q", -1, now=NOW)),
    "jobs-offset-negative": Case(lambda e: e.jobs("waiting", "q", -1, now=NOW)),
    "jobs-count-negative": Case(lambda e: e.jobs("waiting", "q", 0, -1, now=NOW)),
    "failed-start-negative": Case(lambda e: e.failed("boom", -1, now=NOW)),
    "failed-limit-negative": Case(lambda e: e.failed("boom", 0, -1, now=NOW)),
    "unfail-count-negative": Case(lambda e: e.unfail("q", "boom", -1, now=NOW)),
    "unfail-count-float": Case(lambda e: e.unfail("q", "boom", 2.0, now=NOW)),
    "put-retries-negative": Case(lambda e: e.put("q", "new", "Task", retries=-1, now=NOW)),
    "put-retries-float": Case(lambda e: e.put("q", "new", "Task", retries=1.5, now=NOW)),
    "put-retries-bool": Case(lambda e: e.put("q", "new", "Task", retries=True, now=NOW)),
    "put-retries-str": Case(lambda e: e.put("q", "new", "Task", retries="3", now=NOW)),
    "now-nan": Case(lambda e: e.put("q", "new", "Task", now=NAN)),
    "now-inf": Case(lambda e: e.put("q", "new", "Task", now=INF)),
    "now-str": Case(lambda e: e.put("q", "new", "Task", now="1000")),
    "now-bool": Case(lambda e: e.put("q", "new", "Task", now=True)),
    "pop-now-nan": Case(lambda e: e.pop("q", "w2", now=NAN)),
    "heartbeat-now-nan": Case(lambda e: e.heartbeat("run1", "w1", now=NAN)),
    "complete-now-inf": Case(lambda e: e.complete("run1", "w1", "q", now=INF)),
}


def with_value(value: Any, call: Callable[[Any, Any], object], needs: Capability) -> Case:
    return Case(lambda e: call(e, value), needs=needs)


for kind, value in [("negative", -1), ("nan", NAN), ("inf", INF), ("str", "5"), ("bool", True)]:
    NUMBER_CASES[f"put-delay-{kind}"] = with_value(
        value, lambda e, v: e.put("q", "new", "Task", delay=v, now=NOW), Capability.DELAY
    )
    NUMBER_CASES[f"retry-delay-{kind}"] = with_value(
        value, lambda e, v: e.retry("run1", "q", "w1", delay=v, now=NOW), Capability.DELAY
    )
    NUMBER_CASES[f"complete-delay-{kind}"] = with_value(
        value,
        lambda e, v: e.complete("run1", "w1", "q", next="q2", delay=v, now=NOW),
        Capability.DELAY,
    )
# One rule for every engine: integers of at most 14 digits, which every engine keeps exactly.
NOT_PRIORITIES = [
    ("float", 1.5), ("str", "1"), ("bool", True), ("nan", NAN),
    ("10**14", 10**14), ("-10**14", -(10**14)), ("2**64", 2**64),
]  # fmt: skip
for kind, value in NOT_PRIORITIES:
    NUMBER_CASES[f"put-priority-{kind}"] = with_value(
        value, lambda e, v: e.put("q", "new", "Task", priority=v, now=NOW), Capability.PRIORITY
    )
    NUMBER_CASES[f"priority-{kind}"] = with_value(
        value, lambda e, v: e.priority("wait1", v, now=NOW), Capability.PRIORITY
    )
for kind, value in [("negative", -1), ("nan", NAN), ("str", "1")]:
    NUMBER_CASES[f"pop-wait-{kind}"] = with_value(
        value, lambda e, v: e.pop("q", "w2", wait=v, now=NOW), Capability.BLOCKING_POP
    )
NUMBER_CASES["put-retries-10**14"] = Case(
    lambda e: e.put("q", "new", "Task", retries=10**14, now=NOW)
)
NUMBER_CASES["put-data-nested-too-deep"] = Case(
    lambda e: e.put("q", "new", "Task", "[" * 100_000 + "]" * 100_000, now=NOW)
)
NUMBER_CASES["tagged-offset-negative"] = Case(
    lambda e: e.tagged("t", -1, now=NOW), needs=Capability.TAGS
)


@pytest.mark.parametrize("case", sorted(NUMBER_CASES))
def test_bad_number_is_malformed(world: Engine, case: str) -> None:
    check(world, NUMBER_CASES[case])


def test_malformed_error_names_the_argument(world: Engine) -> None:
    with pytest.raises(MalformedArgument, match="retries"):
        world.put("q", "new", "Task", retries=-1, now=NOW)
    with pytest.raises(MalformedArgument, match="count"):
        world.pop("q", "w2", -1, now=NOW)


# -- other arguments ----------------------------------------------------------------------

OTHER_CASES: dict[str, Case] = {
    "jobs-state-unknown": Case(lambda e: e.jobs("bogus", "q", now=NOW)),
    "jobs-state-empty": Case(lambda e: e.jobs("", "q", now=NOW)),
    "jobs-state-failed": Case(lambda e: e.jobs("failed", "q", now=NOW)),
    "jobs-state-not-str": Case(lambda e: e.jobs(5, "q", now=NOW)),
    "complete-delay-without-next": Case(
        lambda e: e.complete("run1", "w1", "q", delay=5, now=NOW), needs=Capability.DELAY
    ),
    "complete-depends-without-next": Case(
        lambda e: e.complete("run1", "w1", "q", depends=["wait1"], now=NOW),
        needs=Capability.DEPENDENCIES,
    ),
    "cancel-str": Case(lambda e: e.cancel("wait1", now=NOW)),
    "multiget-str": Case(lambda e: e.multiget("wait1", now=NOW)),
    "complete_many-str": Case(lambda e: e.complete_many("run1", "w1", "q", now=NOW)),
    "put_many-not-a-list": Case(lambda e: e.put_many(NewJob("q", "new", "Task"), now=NOW)),
    "put_many-not-new-jobs": Case(lambda e: e.put_many([{"queue": "q"}], now=NOW)),
    "put-tags-str": Case(
        lambda e: e.put("q", "new", "Task", tags="abc", now=NOW), needs=Capability.TAGS
    ),
    "put-depends-str": Case(
        lambda e: e.put("q", "new", "Task", depends="wait1", now=NOW),
        needs=Capability.DEPENDENCIES,
    ),
    "pause-str": Case(lambda e: e.pause("q", now=NOW), needs=Capability.PAUSE),
    "timeout-str": Case(lambda e: e.timeout("run1", now=NOW), needs=Capability.TIMEOUT),
    "config_set-none": Case(lambda e: e.config_set("k", None, now=NOW)),
    "config_set-list": Case(lambda e: e.config_set("k", [1], now=NOW)),
}


@pytest.mark.parametrize("case", sorted(OTHER_CASES))
def test_other_bad_argument_is_malformed(world: Engine, case: str) -> None:
    check(world, OTHER_CASES[case])


def test_put_many_with_a_bad_job_after_good_ones_changes_nothing(world: Engine) -> None:
    batch = [
        NewJob("q", "new", "Task"),
        NewJob("q2", "wait1", "Task"),  # a move of an existing job
        NewJob("q", "bad", "Task", data="{oops"),
    ]
    check(world, Case(lambda e: e.put_many(batch, now=NOW)))


def test_the_largest_exact_integers_are_kept_exactly(engine: Engine) -> None:
    require(engine, Capability.PRIORITY)
    top = 10**14 - 1
    engine.put("q", "high", "Task", priority=top, now=T0)
    engine.put("q", "low", "Task", priority=-top, now=T0)
    assert (get(engine, "high").priority, get(engine, "low").priority) == (top, -top)
    assert [job.jid for job in engine.pop("q", "w", 2, now=T0)] == ["high", "low"]


# -- times past their bounds --------------------------------------------------------------
# A job due more than ten years ahead, or at a date no one can show, is refused the same
# way by every engine (`TimeOutOfRange`), before anything is stored: no display, no engine
# then meets a date past year 9999.

LATE = MAX_DELAY_SEC + 1


def too_late(call: Call, needs: Capability | None = Capability.DELAY) -> Case:
    return Case(call, TimeOutOfRange, needs)


TIME_CASES: dict[str, Case] = {
    "put-delay": too_late(lambda e: e.put("q", "new", "Task", delay=LATE, now=NOW)),
    "put-delay-1e12": too_late(lambda e: e.put("q", "new", "Task", delay=1e12, now=NOW)),
    "put-delay-1e308": too_late(lambda e: e.put("q", "new", "Task", delay=1e308, now=NOW)),
    "put_many-delay": too_late(
        lambda e: e.put_many(
            [NewJob("q", "new", "Task"), NewJob("q", "n2", "Task", delay=LATE)], now=NOW
        )
    ),
    "requeue-delay": too_late(lambda e: e.requeue("q", "wait1", "Task", delay=LATE, now=NOW)),
    "retry-delay": too_late(lambda e: e.retry("run1", "q", "w1", delay=LATE, now=NOW)),
    "release-delay": too_late(lambda e: e.release(["run1"], "w1", "q", delay=LATE, now=NOW)),
    "complete-next-delay": too_late(
        lambda e: e.complete("run1", "w1", "q", next="q2", delay=LATE, now=NOW)
    ),
    "recur-interval": too_late(
        lambda e: e.recur("q", "r1", "Task", "{}", LATE, now=NOW), Capability.RECURRING
    ),
    "recur-offset": too_late(
        lambda e: e.recur("q", "r1", "Task", "{}", 60, LATE, now=NOW), Capability.RECURRING
    ),
    "recur_update-interval": too_late(
        lambda e: e.recur_update("r1", {"interval": LATE}, now=NOW), Capability.RECURRING
    ),
    "queue-lease": too_late(lambda e: e.config_set("q-heartbeat", LATE, now=NOW), None),
    "lease": too_late(lambda e: e.config_set("heartbeat", LATE, now=NOW), Capability.CONFIG),
    "grace-period": too_late(
        lambda e: e.config_set("grace-period", str(LATE), now=NOW), Capability.CONFIG
    ),
    "now-past-year-9999": too_late(
        lambda e: e.put("q", "new", "Task", now=MAX_TIMESTAMP + 1), None
    ),
    "expires_at-past-year-9999": too_late(
        lambda e: e.put_many([NewJob("q", "new", "Task", expires_at=1e300)], now=NOW),
        Capability.LIMITS,
    ),
}


@pytest.mark.parametrize("case", sorted(TIME_CASES))
def test_a_time_past_its_bound_is_refused_and_changes_nothing(world: Engine, case: str) -> None:
    check(world, TIME_CASES[case])


def test_time_out_of_range_is_a_one_line_malformed_argument(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    with pytest.raises(MalformedArgument) as raised:
        engine.put("q", "new", "Task", delay=1e12, now=NOW)
    assert isinstance(raised.value, TimeOutOfRange)
    assert str(raised.value) == (
        "delay must be at most 315576000 seconds (ten years), not 1000000000000.0"
    )


def test_a_delay_of_ten_years_is_taken(engine: Engine) -> None:
    require(engine, Capability.DELAY)
    assert engine.put("q", "far", "Task", delay=MAX_DELAY_SEC, now=NOW) == "far"
    if Capability.LOOKUP in engine.capabilities:
        assert get(engine, "far").due == pytest.approx(NOW + MAX_DELAY_SEC)
