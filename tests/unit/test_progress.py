"""A running task's progress (`Job.progress`): reported from sync and async tasks, written
at most once a second a job with the latest written before the job settles, read by
`JobHandle.progress()`, announced as events; refused outside a task and on SQS."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lanner
from lanner import App, Capability, Event, LannerError, Progress, Unsupported
from lanner import context as job_context
from lanner import progress as progress_module
from lanner.job import Job, JobState
from lanner.operations import drain
from lanner.settings import Settings
from stores import sqlite_or_redis

pytestmark = pytest.mark.timeout(60, method="thread")

app = App("sqlite:///unused-by-tests.db")
RELEASE = threading.Event()
SPENT: list[float] = []


def job_now() -> Job:
    job = lanner.current_job()
    assert job is not None
    return job


@app.task(queue="pg")
def tight(count: int) -> int:
    started = time.monotonic()
    for n in range(1, count + 1):
        job_now().progress(n / count, f"{n} of {count}")
    SPENT.append(time.monotonic() - started)
    return count


@app.task(queue="pg")
async def atight(count: int) -> int:
    for n in range(1, count + 1):
        job_now().progress(n / count, f"{n} of {count}")
        if n % 100 == 0:
            await asyncio.sleep(0)
    return count


@app.task(queue="pg")
def halfway() -> None:
    job_now().progress(0.5, "half way")
    assert RELEASE.wait(30), "the test never let the task go on"


@app.task(queue="pg")
def silent() -> None:
    pass


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    url = sqlite_or_redis(request, tmp_path, "pg.db")
    app.use_broker(url)
    app.settings = Settings(broker=url)
    SPENT.clear()
    RELEASE.clear()
    yield app
    app.close()


def test_the_latest_report_is_written_before_the_job_completes(store: App) -> None:
    handle = tight.delay(20_000)
    drain(store, queues=["pg"])
    assert handle.state() == JobState.COMPLETE
    found = handle.progress()
    assert found is not None
    assert (found.fraction, found.message) == (1.0, "20000 of 20000")
    job = handle.job()
    assert job is not None
    # a run of reports is one entry: the history keeps what else happened to the job
    assert [e.what for e in job.history] == ["put", "popped", "progress", "done"]


def test_a_tight_loop_writes_at_most_once_a_second(store: App) -> None:
    with store.engine.events() as stream:
        handle = tight.delay(200_000)
        drain(store, queues=["pg"])
        writes = 0
        while (event := stream.get(timeout=0.5)) is not None:
            writes += event.kind == "progress" and event.jid == handle.jid
    # one write when it starts, one a window after that, and the last one at the end
    assert 1 <= writes <= SPENT[0] / progress_module.WRITE_EVERY_SEC + 2


def test_an_async_task_reports_without_waiting(store: App) -> None:
    handle = atight.delay(5_000)
    drain(store, queues=["pg"])
    found = handle.progress()
    assert found is not None
    assert (found.fraction, found.message) == (1.0, "5000 of 5000")


def test_progress_is_seen_while_the_task_runs(store: App) -> None:
    handle = halfway.delay()
    events = store.engine.events()
    worker = threading.Thread(target=drain, args=(store,), kwargs={"queues": ["pg"]})
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while (found := handle.progress()) is None:
            assert time.monotonic() < deadline, "the progress never showed"
            time.sleep(0.02)
        assert handle.state() == JobState.RUNNING
        assert (found.fraction, found.message) == (0.5, "half way")
        assert asyncio.run(handle.aprogress()) == found
        heard = events.get(timeout=10)
        while heard is not None and heard.kind != "progress":
            heard = events.get(timeout=10)
        assert heard == Event(
            "progress", jid=handle.jid, queue="pg",
            details={"fraction": "0.5", "message": "half way"},
        )  # fmt: skip
    finally:
        RELEASE.set()
        worker.join(30)
        events.close()


def test_a_job_that_reported_nothing_has_no_progress(store: App) -> None:
    handle = silent.delay()
    assert handle.progress() is None
    drain(store, queues=["pg"])
    assert handle.progress() is None


def test_a_new_run_starts_with_no_progress(store: App) -> None:
    handle = tight.delay(3)
    drain(store, queues=["pg"])
    store.engine.put("pg", handle.jid, tight.name, "{}")  # moved back to waiting
    store.engine.pop("pg", "w2")
    assert handle.progress() is None


def test_progress_outside_the_task_running_the_job_is_refused(store: App) -> None:
    handle = silent.delay()
    job = handle.job()
    assert job is not None
    with pytest.raises(LannerError, match="reported by the task running the job"):
        job.progress(0.5)


def test_a_bad_report_fails_in_the_task(store: App) -> None:
    job = Job(
        "j1", "Task", "pg", "{}", 0, (), JobState.RUNNING, 5, 5, "w", 0.0, None, (), (), None,
        False, "[]",
    )  # fmt: skip
    token = job_context.running_job(job, store.engine)
    try:
        with pytest.raises(lanner.MalformedArgument, match="from 0 to 1"):
            job.progress(2.0)
    finally:
        job_context.reset(token)


def test_eager_mode_takes_reports_and_keeps_none() -> None:
    eager = App("sqlite:///unused-by-tests.db", eager=True)

    @eager.task(queue="pg")
    def reports() -> int:
        job_now().progress(0.5, "half")
        return 1

    handle = reports.delay()
    assert handle.state() == JobState.COMPLETE
    assert handle.progress() is None


def test_sqs_refuses_progress(sqs_fresh_url: str) -> None:
    sqs = App(sqs_fresh_url)
    try:
        assert Capability.LOG not in sqs.engine.capabilities
        job = Job(
            "j1", "Task", "pg", "{}", 0, (), JobState.RUNNING, 5, 5, "w", 0.0, None, (), (),
            None, False, "[]",
        )  # fmt: skip
        token = job_context.running_job(job, sqs.engine)
        try:
            with pytest.raises(Unsupported, match="log"):
                job.progress(0.5, "half")
        finally:
            job_context.reset(token)
    finally:
        sqs.close()


def test_progress_reads_the_latest_entry_of_the_last_run() -> None:
    history = (
        '[{"what":"put","when":1},{"what":"popped","when":2},'
        '{"what":"progress","when":3,"fraction":0.5,"message":"a"},'
        '{"what":"retried","when":4}]'
    )
    job = Job(
        "j1", "Task", "pg", "{}", 0, (), JobState.WAITING, 5, 5, "", 0.0, None, (), (), None,
        False, history,
    )  # fmt: skip
    assert progress_module.of(job) == Progress(0.5, "a", 3)
