"""The store operations of `lanner.operations`, on real SQLite files: retrying failure groups,
listing jobs across queues, and draining queues in-process through the worker loop."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lanner import Engine, JobState, MalformedArgument, RecurringJob, operations
from lanner.app import App
from lanner.errors import TaskFailed
from lanner.operations import drain, list_jobs, retry_failed
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.task import Task
from lanner.worker.loop import BATCH_HOLD_SEC

# SIGALRM is the loop's soft time limit; pytest-timeout's signal method would share it.
pytestmark = pytest.mark.timeout(60, method="thread")

KLASS = "myapp.tasks.Work"
QUEUES = (QueueConfig("emails", priority=10), QueueConfig("reports", priority=5))

RUNS: list[tuple[Any, ...]] = []
"""What the tasks of this module saw, in the order they ran."""


@pytest.fixture(autouse=True)
def _no_runs() -> Iterator[None]:
    RUNS.clear()
    yield
    RUNS.clear()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{(tmp_path / 'ops.db').as_posix()}"  # `engine` (conftest) opens it


def make_app(url: str, **settings: Any) -> App:
    return App(url, settings=Settings(broker=url, **settings), queues=QUEUES)


@pytest.fixture
def app(url: str) -> Iterator[App]:
    made = make_app(url)
    yield made
    made.close()


class OpsGreet(Task):
    """A Kale-style task: a class with `run_task`, published with app data."""

    queue = "reports"
    time_limit = 5

    def run_task(self, name: str, *, loud: bool = False) -> None:
        RUNS.append(("greet", name, loud, self.app_data))


# -- retry_failed -------------------------------------------------------------------------
def fail_job(engine: Engine, queue: str, jid: str, group: str, at: float) -> None:
    engine.put(queue, jid, KLASS, "{}", now=at)
    [popped] = engine.pop(queue, "worker-1", now=at)
    assert popped.jid == jid
    engine.fail(jid, "worker-1", group, "no", now=at)


def fail_interleaved(engine: Engine) -> list[tuple[str, str]]:
    """Five jobs of group boom, oldest first, from queues in runs: a a b a b; one of other."""
    jobs = [("a", "j1"), ("a", "j2"), ("b", "j3"), ("a", "j4"), ("b", "j5")]
    at = time.time() - 100
    for n, (queue, jid) in enumerate(jobs):
        fail_job(engine, queue, jid, "boom", at + n)
    fail_job(engine, "a", "o1", "other", at)
    return jobs


def states(engine: Engine) -> dict[str, tuple[str, JobState]]:
    jobs = engine.multiget(["j1", "j2", "j3", "j4", "j5"])
    return {job.jid: (job.queue, job.state) for job in jobs}


@pytest.mark.parametrize("page", [500, 2])
def test_retry_failed_puts_each_job_back_into_its_own_queue(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(operations, "RETRY_PAGE", page)
    jobs = fail_interleaved(engine)
    moved = retry_failed(engine, "boom")
    assert list(moved.items()) == [("a", 3), ("b", 2)]
    assert states(engine) == {jid: (queue, JobState.WAITING) for queue, jid in jobs}
    assert [job.jid for job in engine.peek("a", 10)] == ["j1", "j2", "j4"]  # oldest first
    assert engine.failed_groups() == {"other": 1}


@pytest.mark.parametrize("page", [500, 2])
def test_retry_failed_count_takes_the_oldest(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(operations, "RETRY_PAGE", page)
    fail_interleaved(engine)
    assert retry_failed(engine, "boom", count=3) == {"a": 2, "b": 1}
    assert states(engine) == {
        "j1": ("a", JobState.WAITING),
        "j2": ("a", JobState.WAITING),
        "j3": ("b", JobState.WAITING),
        "j4": ("a", JobState.FAILED),
        "j5": ("b", JobState.FAILED),
    }
    assert engine.failed_groups() == {"boom": 2, "other": 1}


@pytest.mark.parametrize("page", [500, 2])
def test_retry_failed_into_one_queue(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(operations, "RETRY_PAGE", page)
    fail_interleaved(engine)
    assert retry_failed(engine, "boom", queue="c", count=4) == {"c": 4}
    assert [job.jid for job in engine.peek("c", 10)] == ["j1", "j2", "j3", "j4"]
    assert states(engine)["j5"] == ("b", JobState.FAILED)
    assert retry_failed(engine, "boom", queue="c") == {"c": 1}
    assert engine.failed_groups() == {"other": 1}


def test_retry_failed_of_an_empty_group(engine: Engine) -> None:
    assert retry_failed(engine, "boom") == {}
    assert retry_failed(engine, "boom", queue="c") == {}


@pytest.mark.parametrize("count", [0, -1, True, 2.0])
def test_retry_failed_rejects_a_bad_count(engine: Engine, count: Any) -> None:
    fail_job(engine, "a", "j1", "boom", time.time())
    with pytest.raises(MalformedArgument, match="count must be"):
        retry_failed(engine, "boom", count=count)
    assert engine.failed_groups() == {"boom": 1}


# -- list_jobs ----------------------------------------------------------------------------
def test_list_jobs_walks_every_queue_by_name_up_to_the_limit(engine: Engine) -> None:
    for queue, jid in [("gamma", "g1"), ("alpha", "a1"), ("beta", "b1"), ("alpha", "a2")]:
        engine.put(queue, jid, KLASS)
    found = list_jobs(engine)
    assert [(job.queue, job.jid) for job in found] == [
        ("alpha", "a1"), ("alpha", "a2"), ("beta", "b1"), ("gamma", "g1"),
    ]  # fmt: skip
    assert [job.jid for job in list_jobs(engine, limit=3)] == ["a1", "a2", "b1"]
    assert [job.jid for job in list_jobs(engine, queue="beta")] == ["b1"]


def test_list_jobs_by_state(engine: Engine) -> None:
    engine.put("q", "low", KLASS, priority=0)
    engine.put("q", "high", KLASS, priority=3)
    engine.put("q", "later", KLASS, delay=3600)
    engine.put("q", "after", KLASS, depends=["low"])
    engine.recur("q", "nightly", KLASS, "{}", 3600, 3600)
    assert [job.jid for job in list_jobs(engine, "waiting")] == ["high", "low"]
    assert [job.jid for job in list_jobs(engine, "scheduled", queue="q")] == ["later"]
    assert [job.jid for job in list_jobs(engine, "depends")] == ["after"]
    [template] = list_jobs(engine, "recurring")
    assert isinstance(template, RecurringJob)
    assert (template.jid, template.interval) == ("nightly", 3600)


def test_list_jobs_complete_ones_newest_first(engine: Engine) -> None:
    at = time.time()
    for n, jid in enumerate(["first", "second", "third"]):
        engine.put("q", jid, KLASS, now=at + n)
        engine.pop("q", "worker-1", now=at + n)
        engine.complete(jid, "worker-1", "q", now=at + n)
    assert [job.jid for job in list_jobs(engine, "complete", limit=2)] == ["third", "second"]


@pytest.mark.parametrize(
    ("state", "options", "message"),
    [
        ("failed", {}, "state must be one of waiting, running"),
        ("complete", {"queue": "q"}, "complete jobs belong to no queue"),
        ("waiting", {"limit": 0}, "limit must be an int >= 1"),
    ],
)
def test_list_jobs_rejects_bad_arguments(
    engine: Engine, state: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(MalformedArgument, match=message):
        list_jobs(engine, state, **options)


# -- drain --------------------------------------------------------------------------------
def test_drain_runs_decorated_and_kale_style_tasks_highest_priority_queue_first(
    app: App,
) -> None:
    @app.task(queue="emails")
    def send(to: str) -> None:
        RUNS.append(("send", to))

    greeting = app.publish(OpsGreet, ["ann"], {"loud": True}, app_data={"trace": 7})
    first, second = send.delay("a@example.com"), send.delay("b@example.com")
    assert drain(app) == 3
    assert RUNS == [
        ("send", "a@example.com"),
        ("send", "b@example.com"),
        ("greet", "ann", True, {"trace": 7}),
    ]
    jobs = app.engine.multiget([first, second, greeting])
    assert [job.state for job in jobs] == [JobState.COMPLETE] * 3
    assert drain(app) == 0


def test_drain_runs_jobs_that_tasks_publish_meanwhile(app: App) -> None:
    @app.task(queue="emails")
    def notify(user: int) -> None:
        RUNS.append(("notify", user))

    @app.task(queue="reports")
    def signup(user: int) -> None:
        RUNS.append(("signup", user))
        notify.delay(user)

    signup.delay(1)
    assert drain(app) == 2
    assert RUNS == [("signup", 1), ("notify", 1)]


def test_drain_leaves_a_failing_task_retried_with_its_delay(app: App) -> None:
    @app.task(queue="emails", max_retries=2)
    def flaky() -> None:
        RUNS.append(("flaky",))
        raise ValueError("smtp down")

    jid = flaky.delay()
    assert drain(app, raise_errors=False) == 1  # the retry is 60 s away: not waited for
    job = app.engine.get(jid)
    assert job is not None
    assert (job.state, job.remaining) == (JobState.SCHEDULED, 1)
    assert RUNS == [("flaky",)]


def test_drain_runs_retries_that_are_due_until_the_job_fails(url: str) -> None:
    app = make_app(url, retry_delay_multiple_sec=0)

    @app.task(queue="emails", max_retries=2)
    def broken() -> None:
        RUNS.append(("broken",))
        raise ValueError("smtp down")

    try:
        jid = broken.delay()
        assert drain(app, raise_errors=False) == 3
        job = app.engine.get(jid)
        assert job is not None
        assert job.state == JobState.FAILED
        assert job.failure is not None
        assert job.failure.group == "ValueError"
        assert "smtp down" in job.failure.message
        assert app.engine.failed_groups() == {"ValueError": 1}
    finally:
        app.close()


def test_drain_stops_after_max_jobs(app: App) -> None:
    @app.task(queue="emails")
    def count(n: int) -> None:
        RUNS.append(("count", n))

    for n in range(5):
        count.delay(n)
    assert drain(app, max_jobs=3) == 3
    counts = app.engine.queue_counts("emails")
    assert (counts.waiting, counts.running) == (2, 0)  # only 3 were taken
    assert RUNS == [("count", 0), ("count", 1), ("count", 2)]
    assert drain(app, max_jobs=0) == 0
    assert drain(app) == 2
    assert app.engine.queue_counts("emails").waiting == 0


def test_drain_touches_only_the_queues_it_is_given(app: App) -> None:
    @app.task(queue="emails")
    def send(to: str) -> None:
        RUNS.append(("send", to))

    send.delay("a")
    report = app.publish(OpsGreet, ["bob"])
    elsewhere = send.options(queue="archive").delay("c")
    assert drain(app, queues=["reports"]) == 1
    assert RUNS == [("greet", "bob", False, None)]
    assert app.engine.queue_counts("emails").waiting == 1
    assert drain(app) == 1  # the configured queues: emails and reports, not archive
    job = app.engine.get(elsewhere)
    assert job is not None
    assert job.state == JobState.WAITING
    assert drain(app, queues=[QueueConfig("archive", batch_size=1)]) == 1
    assert [job.state for job in app.engine.multiget([report, elsewhere])] == [
        JobState.COMPLETE,
        JobState.COMPLETE,
    ]


def test_drain_does_not_wait_for_scheduled_jobs_or_paused_queues(app: App) -> None:
    @app.task(queue="emails")
    def send(to: str) -> None:
        RUNS.append(("send", to))

    later = send.options(delay=3600).delay("later")
    send.options(queue="reports").delay("paused")
    app.engine.pause(["reports"])
    assert drain(app) == 0
    assert RUNS == []
    job = app.engine.get(later)
    assert job is not None
    assert job.state == JobState.SCHEDULED
    assert app.engine.queue_counts("reports").waiting == 1


def test_drain_raises_the_first_task_error_after_settling_its_batch(app: App) -> None:
    @app.task(queue="emails", max_retries=0)
    def send(to: str) -> None:
        RUNS.append(("send", to))
        if to == "bad":
            time.sleep(BATCH_HOLD_SEC * 3)  # a worker would give back the rest meanwhile
            raise ValueError(f"cannot send to {to}")

    jids = [send.delay(to) for to in ("a", "bad", "c")]
    with pytest.raises(ValueError, match="cannot send to bad"):
        drain(app)
    assert RUNS == [("send", "a"), ("send", "bad"), ("send", "c")]
    states = [job.state for job in app.engine.multiget(jids)]
    assert states == [JobState.COMPLETE, JobState.FAILED, JobState.COMPLETE]


def test_drain_raises_task_failed_for_a_job_that_cannot_reach_its_task(app: App) -> None:
    app.engine.put("emails", "lost", "nowhere.Missing", "{}")
    with pytest.raises(TaskFailed, match="lanner-unknown-task") as raised:
        drain(app)
    assert raised.value.group == "lanner-unknown-task"
    assert raised.value.jid == "lost"


def test_drain_fails_a_job_of_an_unknown_task_without_counting_it(app: App) -> None:
    app.engine.put("emails", "lost", "nowhere.Missing", "{}")
    assert drain(app, raise_errors=False) == 0
    job = app.engine.get("lost")
    assert job is not None
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "lanner-unknown-task"


def test_drain_runs_a_job_whose_time_limit_outlasts_its_lock(app: App) -> None:
    """Issue 10, fault 2: its lock is extended, not given back and popped forever."""

    @app.task(queue="tight", time_limit=5)
    def slow() -> None:
        RUNS.append(("slow",))

    jid = slow.delay()
    assert (
        drain(app, queues=[QueueConfig("tight", visibility_timeout_sec=1)], raise_errors=False) == 1
    )
    assert RUNS == [("slow",)]
    job = app.engine.get(jid)
    assert job is not None
    assert job.state == JobState.COMPLETE


class OpsNeverNow(Task):
    """Defers itself every time (a `should_run_task` that always says no)."""

    queue = "later"

    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def run_task(self) -> None:
        RUNS.append(("never",))


def test_drain_ends_when_jobs_keep_coming_back_without_running(url: str) -> None:
    # No backoff: each deferral gives the job straight back to the queue.
    app = make_app(url, retry_delay_multiple_sec=0)
    jid = app.publish(OpsNeverNow)
    assert drain(app, queues=["later"]) == 0
    assert RUNS == []
    job = app.engine.get(jid)
    assert job is not None
    assert job.state == JobState.WAITING
    app.close()


def test_drain_arms_the_soft_time_limit_in_the_main_thread(app: App) -> None:
    @app.task(queue="emails", max_retries=0, time_limit=0.05)
    def spin() -> None:
        RUNS.append(("spin", signal.getitimer(signal.ITIMER_REAL)[0]))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the soft limit interrupts it
            pass

    jid = spin.delay()
    assert drain(app, raise_errors=False) == 1
    [(_, armed)] = RUNS
    assert 0 < armed <= 0.05
    job = app.engine.get(jid)
    assert job is not None
    assert job.failure is not None
    assert (job.state, job.failure.group) == (JobState.FAILED, "TimeLimitExceeded")


def test_drain_outside_the_main_thread_runs_without_the_soft_limit(app: App) -> None:
    @app.task(queue="emails", time_limit=7)
    def where() -> None:
        armed = signal.getitimer(signal.ITIMER_REAL)[0]
        RUNS.append(("where", threading.current_thread().name, armed))

    jid = where.delay()
    ran: list[int] = []
    thread = threading.Thread(target=lambda: ran.append(drain(app)), name="drainer")
    thread.start()
    thread.join(30)
    assert ran == [1]
    [(_, thread_name, armed)] = RUNS
    assert thread_name == "drainer"
    assert not 0 < armed <= 7  # no timer of the task's 7 s limit (others' timers may run)
    job = app.engine.get(jid)
    assert job is not None
    assert job.state == JobState.COMPLETE


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_jobs": -1}, "max_jobs must be None or an int >= 0"),
        ({"max_jobs": 1.5}, "max_jobs must be None or an int >= 0"),
        ({"queues": "emails"}, "queues must be a list of names, not a str"),
        ({"queues": []}, "no queues to drain"),
        ({"queues": ["bad name"]}, "name"),
    ],
)
def test_drain_rejects_bad_arguments(app: App, options: dict[str, Any], message: str) -> None:
    app.engine.put("emails", "j1", KLASS)
    with pytest.raises(MalformedArgument, match=message):
        drain(app, **options)
    assert app.engine.queue_counts("emails").waiting == 1


def test_drain_leaves_no_keeper_thread_behind(app: App) -> None:
    @app.task(queue="emails")
    def quick() -> None:
        pass

    def heartbeats() -> int:
        return sum(1 for thread in threading.enumerate() if thread.name == "lanner-keeper")

    before = heartbeats()
    for _ in range(3):
        quick.delay()
        assert drain(app, queues=["emails"]) == 1
    assert heartbeats() == before
