"""The worker loop: failures and retries, bad messages, Kale's hooks, decorated functions."""

from __future__ import annotations

import time

import pytest

import lanner
from lanner import JobState
from lanner.app import App
from lanner.codec import JobIdentity, Payload, SignedPickleCodec
from lanner.errors import exception_group
from lanner.exceptions import TimeLimitExceeded
from lanner.task import Task

from .world import (
    EVENTS,
    KEY,
    MULTIPLE,
    QUEUE,
    WORKER,
    WLAnything,
    WLBlacklisted,
    WLBoom,
    WLBoomOnce,
    WLCustomFatal,
    WLEcho,
    WLExits,
    WLFatal,
    WLKeyError,
    WLKwargs,
    WLNoRetries,
    WLReturns,
    World,
    Worlds,
    comes_back_after,
    events,
    whats,
)

# SIGALRM is the loop's soft time limit; pytest-timeout's signal method would share it.
pytestmark = pytest.mark.timeout(60, method="thread")


# -- failures -----------------------------------------------------------------------------


def test_an_exception_is_retried_after_the_backoff_delay(world: World) -> None:
    jid = world.app.publish(WLBoom)

    since = time.time()
    world.work()
    until = time.time()

    job = world.get(jid)
    assert job.state == JobState.SCHEDULED
    assert job.failure is None
    assert (job.retries, job.remaining) == (3, 2)
    retried = job.history[-1]  # `lanner job JID` shows the run failed, and why
    assert (retried.what, dict(retried.details)) == (
        "retried",
        {"worker": world.loop.worker, "group": "ValueError"},
    )
    assert world.recorder.retry_delays(jid) == [MULTIPLE]
    assert ("finished", jid, False) in world.recorder.reports
    assert comes_back_after(world, jid, MULTIPLE, since, until).remaining == 2


def test_the_backoff_doubles_then_the_job_fails_into_its_exception_group(world: World) -> None:
    jid = world.app.publish(WLBoom)  # max_retries = 3

    since = time.time()
    world.work()
    until = time.time()
    for delay in (MULTIPLE, 2 * MULTIPLE, 4 * MULTIPLE):
        job = comes_back_after(world, jid, delay, since, until)
        since = time.time()
        world.loop.run_batch(world.queue, [job])
        until = time.time()

    assert world.recorder.retry_delays(jid) == [MULTIPLE, 2 * MULTIPLE, 4 * MULTIPLE, None]
    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.remaining == 0
    assert job.failure is not None
    assert job.failure.group == "ValueError"
    assert "Traceback (most recent call last)" in job.failure.message
    assert "ValueError: boom" in job.failure.message
    assert len(events("run")) == 4
    assert events("permanent_failure") == [("permanent_failure", jid, "max_retries", "ValueError")]


def test_the_backoff_is_capped_by_retry_delay_max_sec(worlds: Worlds) -> None:
    world = worlds(retry_delay_max_sec=15.0)
    jid = world.app.publish(WLBoom)

    since = time.time()
    world.work()
    until = time.time()
    job = comes_back_after(world, jid, MULTIPLE, since, until)
    since = time.time()
    world.loop.run_batch(world.queue, [job])
    until = time.time()
    job = comes_back_after(world, jid, 15.0, since, until)
    world.loop.run_batch(world.queue, [job])

    assert world.recorder.retry_delays(jid) == [MULTIPLE, 15.0, 15.0]


@pytest.mark.parametrize(
    ("task", "group", "text"),
    [
        (WLKeyError, "KeyError", "KeyError: 'missing-key'"),
        (WLFatal, f"{WLCustomFatal.__module__}.WLCustomFatal", "WLCustomFatal: never again"),
        (WLBlacklisted, "BlacklistedException", "BlacklistedException: refused"),
    ],
)
def test_an_unretryable_exception_fails_the_job_at_once(
    world: World, task: type[Task], group: str, text: str
) -> None:
    jid = world.app.publish(task)

    world.work()

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.remaining == job.retries == 3  # no retry spent
    assert job.failure is not None
    assert job.failure.group == group
    assert job.failure.message.startswith("Traceback (most recent call last)")
    assert text in job.failure.message
    assert job.failure.worker == WORKER
    assert whats(job)[-1] == "failed"
    [report] = events("permanent_failure")
    assert report[:3] == ("permanent_failure", jid, "unrecoverable")


def test_exhausted_retries_fail_into_the_exception_group(world: World) -> None:
    jid = world.app.publish(WLBoomOnce)  # max_retries = 1

    world.work()
    assert world.get(jid).state == JobState.SCHEDULED
    world.work(now=time.time() + 4 * MULTIPLE)

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "ValueError"
    assert "ValueError: boom once more" in job.failure.message
    assert len(events("run")) == 2
    assert events("permanent_failure") == [("permanent_failure", jid, "max_retries", "ValueError")]


def test_max_retries_zero_fails_at_the_first_error(world: World) -> None:
    jid = world.app.publish(WLNoRetries)

    world.work()

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert (job.retries, job.remaining) == (0, 0)
    assert job.failure is not None
    assert job.failure.group == "ValueError"
    assert "ValueError: no second chance" in job.failure.message
    assert world.recorder.retry_delays(jid) == [None]
    assert events("permanent_failure") == [("permanent_failure", jid, "no_retries", "ValueError")]


def test_retries_given_at_publish_time_are_honoured(world: World) -> None:
    # `App.publish(..., retries=2)` gives the job a retry budget of 2 whatever the class says;
    # the worker should spend it rather than fail the job at its first error.
    jid = world.app.publish(WLNoRetries, retries=2)
    assert (world.get(jid).retries, world.get(jid).remaining) == (2, 2)

    world.work()

    job = world.get(jid)
    assert job.state == JobState.SCHEDULED, job.failure
    assert job.remaining == 1


def test_exception_group_names() -> None:
    assert exception_group(KeyError("x")) == "KeyError"
    assert exception_group(TimeLimitExceeded("x")) == "TimeLimitExceeded"
    assert exception_group(WLCustomFatal()) == f"{WLCustomFatal.__module__}.WLCustomFatal"


# -- bad messages --------------------------------------------------------------------------


def test_bad_messages_fail_into_lanner_groups_and_the_rest_of_the_batch_runs(
    worlds: Worlds,
) -> None:
    world = worlds(query="?max_data_bytes=300")
    big = lanner.open_engine(world.url.replace("300", "100000"))
    signer = SignedPickleCodec(KEY)
    pickled = signer.encode(Payload((1,), {}), JobIdentity("pickled", WLEcho.name, QUEUE))
    try:
        good1 = world.app.publish(WLEcho, [1])
        big.put(QUEUE, "list", WLEcho.name, "[1, 2]")
        big.put(QUEUE, "version", WLEcho.name, '{"v": 99}')
        big.put(QUEUE, "unknown", "nope.Missing", '{"v": 1, "args": [], "kwargs": {}}')
        big.put(QUEUE, "arity", WLEcho.name, '{"v": 1, "args": [1, 2, 3], "kwargs": {}}')
        big.put(QUEUE, "pickled", WLEcho.name, pickled)
        big.put(QUEUE, "oversized", WLEcho.name, '{"v": 1, "args": ["' + "x" * 500 + '"]}')
        good2 = world.app.publish(WLEcho, [2])
    finally:
        big.close()

    jobs = world.work()
    assert len(jobs) == 8  # one batch

    expected = {
        "list": ("lanner-undecodable", "not an envelope"),
        "version": ("lanner-undecodable", "unknown envelope version 99"),
        "unknown": ("lanner-unknown-task", "nope.Missing"),
        "arity": ("lanner-bad-arguments", "too many positional arguments"),
        "pickled": ("lanner-bad-signature", "no pickle codec"),
        "oversized": ("lanner-oversized", "the limit is 300"),
    }
    for jid, (group, reason) in expected.items():
        job = world.get(jid)
        assert job.state == JobState.FAILED, jid
        assert job.failure is not None
        assert job.failure.group == group, jid
        assert reason in job.failure.message, (jid, job.failure.message)
    assert world.engine.failed_groups() == {
        "lanner-undecodable": 2,
        "lanner-unknown-task": 1,
        "lanner-bad-arguments": 1,
        "lanner-bad-signature": 1,
        "lanner-oversized": 1,
    }
    assert world.get(good1).state == world.get(good2).state == JobState.COMPLETE
    assert [event[2] for event in events("run")] == [1, 2]
    started = {r[1] for r in world.recorder.reports if r[0] == "started"}
    assert started == {good1, good2}


def test_signed_pickle_payloads_run_and_forged_ones_do_not(worlds: Worlds) -> None:
    world = worlds(pickle_hmac_key=KEY)
    publisher = App(world.url, settings=world.app.settings, codec=SignedPickleCodec(KEY))
    try:
        good = publisher.publish(WLAnything, [{1, 2, 3}], app_data=("a", "tuple"))
        intruder = SignedPickleCodec(b"another-key-0123456789abcdef")
        forged = intruder.encode(Payload(({4},), {}), JobIdentity("forged", WLAnything.name, QUEUE))
        publisher.engine.put(QUEUE, "forged", WLAnything.name, forged)
        # A genuinely signed payload copied into another job is refused: it is bound to its jid.
        original = publisher.engine.get(good)
        assert original is not None
        publisher.engine.put(QUEUE, "replayed", WLAnything.name, original.data)
    finally:
        publisher.close()

    world.work()

    assert world.get(good).state == JobState.COMPLETE
    assert events("run") == [("run", good, {1, 2, 3}, ("a", "tuple"))]
    for jid in ("forged", "replayed"):
        job = world.get(jid)
        assert job.failure is not None
        assert job.failure.group == "lanner-bad-signature", jid


# -- Kale compatibility, hooks, decorator style -------------------------------------------


def test_a_kale_style_task_sees_its_app_data(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WLEcho, "app", world.app)
    jid = WLEcho.publish({"tenant": "acme"}, 5, extra=True)

    world.work()

    assert world.get(jid).state == JobState.COMPLETE
    assert events("run") == [("run", jid, 5, True, {"tenant": "acme"})]


def test_kale_delay_sec_delays_the_job_and_reaches_run_task(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(WLKwargs, "app", world.app)
    before = time.time()
    jid = WLKwargs.publish(None, 1, delay_sec=20)
    assert world.get(jid).state == JobState.SCHEDULED

    assert world.pop(now=before + 19) == []
    world.work(now=time.time() + 21)

    assert world.get(jid).state == JobState.COMPLETE
    assert events("run") == [("run", jid, 1, {"delay_sec": 20})]


def test_hooks_run_around_success_and_permanent_failure(world: World) -> None:
    ok = world.app.publish(WLEcho, ["v"])
    bad = world.app.publish(WLNoRetries)

    world.work()

    name_ok, name_bad = WLEcho.name, WLNoRetries.name
    seen = list(EVENTS)
    assert seen == [
        ("pre_run", ok, ("v",), {}),
        ("run", ok, "v", None, None),
        ("post_run", ok),
        ("clean", ok, name_ok, None),
        ("pre_run", bad, (), {}),
        ("run", bad),
        ("clean", bad, name_bad, "ValueError"),
        ("permanent_failure", bad, "no_retries", "ValueError"),
    ]


def test_decorated_functions_run(world: World) -> None:
    results: list[int] = []

    @world.app.task(queue=QUEUE, time_limit=5, name="wl_decorated.add")
    def add(a: int, b: int) -> None:
        results.append(a + b)

    first = add.delay(1, 2)
    second = add.options(priority=10).delay(b=20, a=10)
    third, fourth = world.app.publish_many([add.message(100, 200), add.message(1000, 2000)])

    world.work()

    assert results == [30, 3, 300, 3000]  # priority 10 first
    for jid in (first, second, third, fourth):
        assert world.get(jid).state == JobState.COMPLETE


@pytest.mark.parametrize(
    ("how", "group", "reason"),
    [("exit", "SystemExit", "the task called sys.exit"), ("interrupt", "KeyboardInterrupt", "")],
)
def test_a_task_that_exits_or_is_interrupted_fails_with_the_reason_and_the_worker_goes_on(
    world: World, how: str, group: str, reason: str
) -> None:
    jid = world.app.publish(WLExits, [how])
    after = world.app.publish(WLEcho, ["after"])

    world.work()

    job = world.get(jid)
    assert job.failure is not None
    assert (job.state, job.failure.group) == (JobState.FAILED, group)
    assert job.failure.message.strip().endswith(f"{group}: {reason}" if reason else group)
    assert world.get(after).state == JobState.COMPLETE


def test_a_kept_result_is_stored_with_the_completed_job(world: World) -> None:
    jid = world.app.publish(WLReturns, [{"rows": [1, 2]}])
    world.work()
    job = world.get(jid)
    assert (job.state, job.result) == (JobState.COMPLETE, '{"rows":[1,2]}')


def test_a_result_that_is_not_json_fails_the_job_into_its_own_group(world: World) -> None:
    jid = world.app.publish(WLReturns, [None])
    world.app.publish(WLEcho, ["after"])
    calls: list[object] = []
    real = WLReturns.run_task

    def returns_bytes(self: WLReturns, value: object) -> object:
        calls.append(value)
        return b"\x00raw"

    WLReturns.run_task = returns_bytes  # type: ignore[method-assign]
    try:
        world.work()
    finally:
        WLReturns.run_task = real  # type: ignore[method-assign]
    job = world.get(jid)
    assert job.failure is not None
    assert (job.state, job.failure.group) == (JobState.FAILED, "lanner-unserializable-result")
    assert "bytes" in job.failure.message
    assert calls == [None]


def test_a_successful_job_logs_its_run_time_at_debug(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    jid = world.app.publish(WLEcho, ["x"])
    with caplog.at_level("DEBUG", logger="lanner.worker"):
        world.work()
    assert any(f"job {jid} ({WLEcho.name}) done in" in line for line in caplog.messages)
