"""Workflows (chain, group, chord) on real stores: SQLite files and a Redis server, each
job run in-process by `drain` through the worker loop; eager mode; SQS refusing them."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner import App, JobState, TaskFailed, Unsupported
from lanner.job import CASCADE_TAG, DEPENDENCY_FAILED_GROUP
from lanner.operations import drain
from lanner.settings import Settings
from lanner.task import Task

pytestmark = pytest.mark.timeout(60, method="thread")

app = App("sqlite:///unused-by-tests.db")
SEEN: list[tuple[str, Any]] = []


@app.task(queue="wf")
def add(x: int, y: int = 0) -> int:
    SEEN.append(("add", (x, y)))
    return x + y


@app.task(queue="wf")
def tsum(values: list[Any]) -> int:
    SEEN.append(("tsum", values))
    return sum(v for v in values if isinstance(v, int))


@app.task(queue="wf")
def describe(values: list[Any]) -> list[str]:
    return [type(v).__name__ for v in values]


@app.task(queue="wf", max_retries=0)
def boom(x: int) -> int:
    raise ValueError(f"boom {x}")


@app.task(queue="wf")
async def adouble(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


@app.task(queue="wf")
def hello() -> str:
    return "hello"


class Multiply(Task):
    """A Kale-style task in a workflow."""

    queue = "wf"
    app = app

    def run_task(self, x: int, y: int) -> int:
        return x * y


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    if request.param == "sqlite":
        url = f"sqlite:///{(tmp_path / 'wf.db').as_posix()}"
    else:
        import redis

        url = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
    app.use_broker(url)
    app.settings = Settings(broker=url)
    SEEN.clear()
    yield app
    app.close()


def run_all(store: App) -> None:
    drain(store, queues=["wf"], raise_errors=False)


def test_a_chain_passes_each_result_on(store: App) -> None:
    handle = lanner.chain(add.s(1, 2), add.s(10), add.s(100)).delay()
    run_all(store)
    assert handle.result(timeout=10) == 113
    assert handle.state() == JobState.COMPLETE


def test_the_pipe_makes_a_chain_and_si_ignores_the_result(store: App) -> None:
    handle = (add.s(1, 2) | add.si(5, 5) | add.s(1)).delay()
    run_all(store)
    assert handle.result(timeout=10) == 11


def test_a_group_gives_every_result_in_order(store: App) -> None:
    handle = lanner.group([add.s(i, i) for i in range(5)]).delay()
    run_all(store)
    assert handle.result(timeout=10) == [0, 2, 4, 6, 8]


def test_a_chord_callback_waits_in_depends_and_gets_the_list(store: App) -> None:
    handle = lanner.chord(lanner.group(add.s(1, 1), add.s(2, 2), add.s(3, 3)), tsum.s()).delay()
    callback = handle.jids[-1]
    job = store.engine.get(callback)
    assert job is not None
    assert job.state == JobState.DEPENDS
    assert CASCADE_TAG in job.tags
    assert sorted(job.dependencies) == sorted(handle.jids[:3])

    run_all(store)

    assert handle.result(timeout=10) == 12
    assert SEEN[-1] == ("tsum", [2, 4, 6])


def test_nested_chain_of_groups_and_group_of_chains(store: App) -> None:
    handle = lanner.chain(
        lanner.group(lanner.chain(add.s(1, 1), add.s(10)), add.s(3, 3)),
        tsum.s(),
        add.s(1000),
    ).delay()
    groups = lanner.group(lanner.chain(add.s(1, 0), add.s(1)), lanner.group(add.s(5), hello.si()))
    nested = groups.delay()
    run_all(store)
    assert handle.result(timeout=10) == 1018
    assert nested.result(timeout=10) == [2, [5, "hello"]]


def test_a_chord_whose_callback_is_a_chain(store: App) -> None:
    handle = lanner.chord([add.s(i) for i in range(4)], tsum.s() | add.s(1)).delay()
    run_all(store)
    assert handle.result(timeout=10) == 7


def test_kale_tasks_and_async_tasks_take_part(store: App) -> None:
    handle = lanner.chain(Multiply.s(3, 4), adouble.s(), Multiply.s(10)).delay()
    run_all(store)
    assert handle.result(timeout=10) == 240


def test_a_failed_parent_fails_the_chord_naming_it(store: App) -> None:
    handle = lanner.chord([add.s(1, 1), boom.s(7), add.s(2, 2)], tsum.s()).delay()
    run_all(store)

    callback = store.engine.get(handle.jids[-1])
    assert callback is not None
    assert callback.state == JobState.FAILED
    assert callback.failure is not None
    assert callback.failure.group == DEPENDENCY_FAILED_GROUP
    assert handle.jids[1] in callback.failure.message
    assert "boom 7" in callback.failure.message
    assert handle.state() == JobState.FAILED
    with pytest.raises(TaskFailed, match=DEPENDENCY_FAILED_GROUP):
        handle.result(timeout=10)
    assert not any(what == "tsum" for what, _ in SEEN)


def test_a_failure_goes_down_a_chain(store: App) -> None:
    handle = lanner.chain(boom.s(1), add.s(1), add.s(2)).delay()
    run_all(store)
    states = [job.state for job in handle.jobs().values() if job is not None]
    assert states == [JobState.FAILED] * 3
    assert store.engine.queue_counts("wf").depends == 0


def test_a_chord_may_run_with_its_failures(store: App) -> None:
    header = [add.s(1, 1), boom.s(7), add.s(2, 2)]
    handle = lanner.chord(header, describe.s(), failures="include").delay()
    run_all(store)
    assert handle.result(timeout=10) == ["int", "ParentFailed", "int"]
    assert lanner.group(header).delay().jids  # the same signatures publish again


def test_cancel_leaves_nothing_waiting(store: App) -> None:
    handle = lanner.chord([add.s(i) for i in range(3)], tsum.s()).delay()
    drain(store, queues=["wf"], max_jobs=1)

    cancelled = handle.cancel()

    assert len(cancelled) == 3  # two parents and the callback; the one that ran stays
    assert handle.state() == JobState.COMPLETE
    counts = store.engine.queue_counts("wf")
    assert (counts.waiting, counts.depends, counts.running) == (0, 0, 0)


def test_publish_is_one_put_of_every_job(store: App) -> None:
    handle = lanner.chord([add.s(i) for i in range(20)], tsum.s()).delay()
    counts = store.engine.queue_counts("wf")
    assert (counts.waiting, counts.depends) == (20, 1)
    assert len(handle.graph()) == 21
    assert handle.graph()[-1][2] == tuple(handle.jids[:20])


def test_the_collector_is_as_it_was_after_a_publish(store: App) -> None:
    # Held off while the jobs are built and put (lanner.workflows.handle), never left off,
    # nor turned on for a program that turned it off.
    lanner.chord([add.s(i) for i in range(3)], tsum.s()).delay()
    assert gc.isenabled()
    with pytest.raises(lanner.ChubbyTaskException):
        lanner.group(add.s(1), add.s("x" * (store.engine.max_data_bytes + 1))).delay()
    assert gc.isenabled()
    gc.disable()
    try:
        lanner.chain(add.s(1), add.s()).delay()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_async_publish_and_result(store: App) -> None:
    async def publish() -> lanner.WorkflowHandle:
        return await lanner.chain(add.s(1, 1), adouble.s()).adelay()

    async def follow(handle: lanner.WorkflowHandle) -> Any:
        return await handle.aresult(timeout=10), await handle.astate()

    handle = asyncio.run(publish())
    run_all(store)
    assert asyncio.run(follow(handle)) == (4, JobState.COMPLETE)


def test_eager_mode_runs_the_workflow_at_once() -> None:
    eager = App(eager=True)

    @eager.task(queue="wf")
    def inc(x: int) -> int:
        return x + 1

    @eager.task(queue="wf")
    def total(values: list[int]) -> int:
        return sum(values)

    handle = lanner.chord([inc.s(i) for i in range(3)], total.s() | inc.s()).delay()
    assert handle.result() == 7
    assert handle.state() == JobState.COMPLETE


def test_signatures_refuse_what_a_workflow_decides() -> None:
    with pytest.raises(lanner.MalformedArgument, match="depends"):
        add.options(depends=["x"]).s(1)
    with pytest.raises(lanner.MalformedArgument, match="signatures"):
        lanner.chain(add.s(1), 3)  # type: ignore[arg-type]
    with pytest.raises(lanner.MalformedArgument, match="at least one task"):
        lanner.group([]).delay()


def test_set_changes_options_and_keeps_the_rest() -> None:
    sig = add.si(1, 2).set(queue="math", retries=2)
    assert (sig.options.queue, sig.options.retries, sig.args, sig.immutable) == (
        "math", 2, (1, 2), True,
    )  # fmt: skip
    assert sig.set(priority=5).options.queue == "math"
    with pytest.raises(TypeError):
        sig.set(colour="red")
    with pytest.raises(lanner.MalformedArgument, match="depends"):
        sig.set(depends=["x"])


def test_sqs_refuses_a_workflow_that_waits(sqs_fresh_url: str) -> None:
    sqs = App(sqs_fresh_url)

    @sqs.task(queue="wf")
    def step(x: int) -> int:
        return x

    with pytest.raises(Unsupported, match="dependencies"):
        lanner.chain(step.s(1), step.s()).delay()


def test_a_handle_is_loaded_again_from_its_id(store: App) -> None:
    published = lanner.chain(lanner.group(add.s(1, 1), add.s(2, 2)), tsum.s()).delay()
    loaded = lanner.WorkflowHandle.load(published.id, store)
    assert loaded.jids == published.jids
    assert loaded.steps == published.steps
    assert loaded.output == published.output
    run_all(store)
    assert loaded.result(timeout=10) == 6
    with pytest.raises(lanner.JobNotFound):
        lanner.WorkflowHandle.load("nope", store)


def test_envelopes_name_the_workflows_jobs_by_number(store: App) -> None:
    import json

    handle = lanner.chord([add.s(i) for i in range(3)], tsum.s()).delay()
    callback = store.engine.get(handle.jids[-1])
    first = store.engine.get(handle.jids[0])
    assert callback is not None
    assert first is not None
    assert json.loads(callback.data)["wf"]["in"] == [0, 1, 2]
    assert json.loads(first.data)["wf"]["jobs"] == 4
