"""The worker loop of one process, in-process on a real SQLite file.

Each test pops jobs itself and hands them to `WorkerLoop.run_batch` (or lets `run()` loop),
then reads what the engine recorded. Retry and deferral delays are checked with explicit
`now=` pops, so no test waits for a delay to pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner import Engine, EngineUnavailable, Job, JobState
from lanner.app import App
from lanner.codec import JobIdentity, Payload, SignedPickleCodec
from lanner.exceptions import BlacklistedException, TimeLimitExceeded
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.settings import Settings
from lanner.task import Task
from lanner.worker.loop import Limits, WorkerLoop, exception_group

# SIGALRM is the loop's soft time limit; pytest-timeout's signal method would share it.
pytestmark = pytest.mark.timeout(60, method="thread")

QUEUE = "wl"
WORKER = "wl-worker"
LOCK_SEC = 30.0
"""The queue's visibility timeout, and so the lock of every popped job."""
MULTIPLE = 10.0
"""retry_delay_multiple_sec: long enough for "not before the delay" to be checked with now=."""
KEY = b"wl-test-key-0123456789abcdef"

EVENTS: list[tuple[Any, ...]] = []
"""What the test tasks saw and which hooks ran, in order."""
STOP: list[Callable[[], None]] = []
"""A callback a task may call (the test puts loop.stop here)."""
PEEK: list[Callable[[str], Job]] = []
"""How a task reads its own job from the engine (the test puts a getter here)."""


@pytest.fixture(autouse=True)
def _clean_globals() -> Iterator[None]:
    EVENTS.clear()
    STOP.clear()
    PEEK.clear()
    yield
    EVENTS.clear()
    STOP.clear()
    PEEK.clear()


# -- tasks (registered globally by dotted name: every class here has a WL prefix) ---------


class WLCustomFatal(Exception):
    """A project's own exception that must never be retried."""


class WLTask(Task):
    """Records its hooks; the base of the tasks below."""

    queue = QUEUE
    time_limit = 5.0
    max_retries = 3

    def _pre_run(self, *args: Any, **kwargs: Any) -> None:
        super()._pre_run(*args, **kwargs)
        EVENTS.append(("pre_run", self.task_id, args, kwargs))

    def _post_run(self, *args: Any, **kwargs: Any) -> None:
        super()._post_run(*args, **kwargs)
        EVENTS.append(("post_run", self.task_id))

    def _clean_task_environment(
        self,
        task_id: str | None = None,
        task_name: str | None = None,
        exc: BaseException | None = None,
    ) -> None:
        EVENTS.append(("clean", task_id, task_name, type(exc).__name__ if exc else None))

    def _kill_runtime_exceeded(self) -> None:
        super()._kill_runtime_exceeded()
        EVENTS.append(("kill_runtime_exceeded", self.task_id))

    def _report_permanent_failure(
        self,
        message: str,
        exception: BaseException | None,
        failure_type: str,
        log_exception: bool = True,
    ) -> None:
        super()._report_permanent_failure(message, exception, failure_type, log_exception)
        EVENTS.append(("permanent_failure", self.task_id, failure_type, type(exception).__name__))


class WLEcho(WLTask):
    def run_task(self, value: Any, *, extra: Any = None) -> None:
        EVENTS.append(("run", self.task_id, value, extra, self.app_data))


class WLBoom(WLTask):
    max_retries = 3

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))
        raise ValueError("boom")


class WLBoomOnce(WLTask):
    max_retries = 1

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))
        raise ValueError("boom once more")


class WLNoRetries(WLTask):
    max_retries = 0

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))
        raise ValueError("no second chance")


class WLKeyError(WLTask):
    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))
        raise KeyError("missing-key")


class WLFatal(WLTask):
    EXCEPTION_LIST = (*Task.EXCEPTION_LIST, WLCustomFatal)

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))
        raise WLCustomFatal("never again")


class WLBlacklisted(WLTask):
    def _check_blacklist(self, *args: Any, **kwargs: Any) -> None:
        raise BlacklistedException("refused")

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))


class WLDeferred(WLTask):
    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        EVENTS.append(("should_run_task", args))
        return False

    def run_task(self, value: int) -> None:
        EVENTS.append(("run", self.task_id))


class WLShouldRunRaises(WLTask):
    max_retries = 0

    def should_run_task(self, *args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("the check itself broke")

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))


class WLInitRaises(WLTask):
    max_retries = 0

    def _dequeued(self) -> None:
        raise RuntimeError("the constructor hook broke")

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))


class WLSlow(WLTask):
    time_limit = 0.2
    max_retries = 1

    def run_task(self) -> None:
        try:
            time.sleep(5)
        except TimeLimitExceeded as error:
            EVENTS.append(("caught", self.task_id, type(error).__name__))
            raise


class WLSlowNoRetries(WLSlow):
    max_retries = 0


class WLSleepy(WLTask):
    time_limit = 1

    def run_task(self, seconds: float) -> None:
        time.sleep(seconds)
        EVENTS.append(("run", self.task_id))


class WLTight(WLTask):
    time_limit = 1.8

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))


class WLStopper(WLTask):
    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))
        STOP[0]()


class WLHeartbeat(WLTask):
    time_limit = 1.0

    def run_task(self) -> None:
        assert self.task_id is not None
        EVENTS.append(("expires", PEEK[0](self.task_id).expires))
        time.sleep(0.8)
        EVENTS.append(("expires", PEEK[0](self.task_id).expires))


class WLKwargs(WLTask):
    def run_task(self, value: Any, **kwargs: Any) -> None:
        EVENTS.append(("run", self.task_id, value, kwargs))


class WLAnything(WLTask):
    """Takes any argument (the pickle tests pass non-JSON ones)."""

    def run_task(self, value: Any) -> None:
        EVENTS.append(("run", self.task_id, value, self.app_data))


# -- the world of one test -----------------------------------------------------------------


@dataclass
class Recorder:
    """A Reporter that remembers what the loop said."""

    reports: list[tuple[Any, ...]] = field(default_factory=list)

    def batch(self, queue: str, jids: Any) -> None:
        self.reports.append(("batch", queue, list(jids)))

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None:
        self.reports.append(("started", jid, deadline, retry_delay))

    def finished(self, jid: str, succeeded: bool) -> None:
        self.reports.append(("finished", jid, succeeded))

    def flushed(self) -> None:
        self.reports.append(("flushed",))

    def retry_delays(self, jid: str) -> list[float | None]:
        return [r[3] for r in self.reports if r[0] == "started" and r[1] == jid]


@dataclass
class World:
    app: App
    loop: WorkerLoop
    queue: QueueConfig
    recorder: Recorder
    url: str

    @property
    def engine(self) -> Engine:
        return self.app.engine

    def get(self, jid: str) -> Job:
        job = self.engine.get(jid)
        assert job is not None, f"job {jid} does not exist"
        return job

    def pop(self, count: int = 10, now: float | None = None) -> list[Job]:
        jobs: list[Job] = self.engine.pop(QUEUE, self.loop.worker, count, now=now)
        return jobs

    def work(self, count: int = 10, now: float | None = None) -> list[Job]:
        """Pop a batch (at `now`) and run it; return the jobs popped."""
        jobs = self.pop(count, now)
        self.loop.run_batch(self.queue, jobs)
        return jobs


class Worlds:
    """Makes the test's App, loop and store (closed at the end)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.opened: list[App] = []

    def __call__(
        self,
        *,
        lock: float = LOCK_SEC,
        query: str = "",
        limits: Limits | None = None,
        **settings: Any,
    ) -> World:
        url = "sqlite:///" + str(self.tmp_path / "jobs.db") + query
        values: dict[str, Any] = {"retry_delay_multiple_sec": MULTIPLE, **settings}
        queue = QueueConfig(
            QUEUE, batch_size=10, visibility_timeout_sec=lock, long_poll_time_sec=0.1
        )
        app = App(url, settings=Settings(broker=url, **values), queues=[queue])
        self.opened.append(app)
        # What WorkerPool.start() does: the queue's lock is its visibility timeout.
        app.engine.config_set(f"{QUEUE}-heartbeat", lock)
        recorder = Recorder()
        loop = WorkerLoop(
            app,
            [queue],
            resolve_selector("reduced-lottery"),
            worker=WORKER,
            reporter=recorder,
            limits=limits,
        )
        return World(app, loop, queue, recorder, url)

    def close(self) -> None:
        for app in self.opened:
            app.close()


@pytest.fixture
def worlds(tmp_path: Path) -> Iterator[Worlds]:
    made = Worlds(tmp_path)
    yield made
    made.close()


@pytest.fixture
def world(worlds: Worlds) -> World:
    return worlds()


def whats(job: Job) -> list[str]:
    return [event.what for event in job.history]


def events(kind: str) -> list[tuple[Any, ...]]:
    return [event for event in EVENTS if event[0] == kind]


def comes_back_after(world: World, jid: str, delay: float, since: float, until: float) -> Job:
    """Check that `jid` is not poppable before `since + delay` but is after `until + delay`.

    `since`/`until` bracket the moment the job was given back; return the job popped.
    """
    assert [j.jid for j in world.pop(now=since + delay - 0.5)] == []
    assert world.get(jid).state == JobState.SCHEDULED
    jobs = world.pop(now=until + delay + 0.5)
    assert [j.jid for j in jobs] == [jid]
    return jobs[0]


# -- success ------------------------------------------------------------------------------


def test_a_success_completes_the_job_once(world: World) -> None:
    jid = world.app.publish(WLEcho, ["hello"], {"extra": 2})

    world.work()

    job = world.get(jid)
    assert job.state == JobState.COMPLETE
    assert whats(job).count("done") == 1
    assert whats(job).count("popped") == 1
    assert events("run") == [("run", jid, "hello", 2, None)]
    kinds = [r[0] for r in world.recorder.reports]
    assert kinds == ["batch", "started", "finished", "flushed"]
    assert world.recorder.reports[2] == ("finished", jid, True)
    assert world.loop.processed == 1


def test_the_successes_of_a_batch_complete_in_one_call(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = world.engine.complete_many

    def spy(jids: Any, worker: str, queue: str, *, now: float | None = None) -> list[str]:
        calls.append(list(jids))
        done: list[str] = real(jids, worker, queue, now=now)
        return done

    monkeypatch.setattr(world.engine, "complete_many", spy)
    good = [world.app.publish(WLEcho, [n]) for n in range(3)]
    bad = world.app.publish(WLBoom)
    last = world.app.publish(WLEcho, [3])

    world.work()

    assert calls == [[*good, last]]
    assert [world.get(jid).state for jid in [*good, last]] == [JobState.COMPLETE] * 4
    assert world.get(bad).state == JobState.SCHEDULED


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
        (WLFatal, f"{__name__}.WLCustomFatal", "WLCustomFatal: never again"),
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
    assert exception_group(WLCustomFatal()) == f"{__name__}.WLCustomFatal"


# -- deferral, time limits, the batch SLA --------------------------------------------------


def test_should_run_task_false_releases_the_job_with_a_delay(world: World) -> None:
    jid = world.app.publish(WLDeferred, [7])

    since = time.time()
    world.work()
    until = time.time()

    job = world.get(jid)
    assert job.state == JobState.SCHEDULED
    assert (job.retries, job.remaining) == (3, 3)  # deferring costs no retry
    assert whats(job)[-1] == "released"
    assert events("should_run_task") == [("should_run_task", (7,))]
    assert events("run") == []
    assert world.recorder.retry_delays(jid) == []  # never started

    # A second deferral waits twice as long.
    job = comes_back_after(world, jid, MULTIPLE, since, until)
    since = time.time()
    world.loop.run_batch(world.queue, [job])
    until = time.time()
    assert whats(world.get(jid)).count("released") == 2
    comes_back_after(world, jid, 2 * MULTIPLE, since, until)
    assert world.get(jid).remaining == 3
    assert events("run") == []


@pytest.mark.parametrize(
    ("task", "text"),
    [
        (WLShouldRunRaises, "RuntimeError: the check itself broke"),
        (WLInitRaises, "RuntimeError: the constructor hook broke"),
    ],
)
def test_an_exception_in_task_code_before_run_task_fails_the_job_not_the_batch(
    world: World, task: type[Task], text: str
) -> None:
    broken = world.app.publish(task)  # max_retries = 0
    good = world.app.publish(WLEcho, ["after"])

    world.work()  # must not raise: one task's bug must not take the worker down

    assert world.get(good).state == JobState.COMPLETE
    job = world.get(broken)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "RuntimeError"
    assert text in job.failure.message
    assert ("run", broken) not in EVENTS


def test_the_soft_time_limit_raises_inside_the_task_and_retries(world: World) -> None:
    jid = world.app.publish(WLSlow)  # time_limit 0.2 s, max_retries 1

    started = time.monotonic()
    world.work()

    assert time.monotonic() - started < 2
    assert events("caught") == [("caught", jid, "TimeLimitExceeded")]
    assert events("kill_runtime_exceeded") == [("kill_runtime_exceeded", jid)]
    job = world.get(jid)
    assert job.state == JobState.SCHEDULED
    assert job.remaining == 0

    world.work(now=time.time() + 4 * MULTIPLE)

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "TimeLimitExceeded"
    assert "time limit of 0.2 s exceeded" in job.failure.message
    assert len(events("caught")) == 2


def test_the_soft_time_limit_without_retries_fails_at_once(world: World) -> None:
    jid = world.app.publish(WLSlowNoRetries)

    world.work()

    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "TimeLimitExceeded"


def test_the_batch_sla_releases_a_job_that_would_outlast_its_lock(worlds: Worlds) -> None:
    world = worlds(lock=2.0)
    first = world.app.publish(WLSleepy, [0.5])  # time_limit 1 s: fits when popped
    tight = world.app.publish(WLTight)  # time_limit 1.8 s: fits only at the start of a lock

    world.work()

    assert world.get(first).state == JobState.COMPLETE
    job = world.get(tight)
    assert job.state == JobState.WAITING
    assert whats(job)[-1] == "released"
    assert job.remaining == job.retries
    assert events("run") == [("run", first)]
    assert world.recorder.retry_delays(tight) == []

    # Popped afresh, with its whole lock ahead, it runs.
    world.work()
    assert world.get(tight).state == JobState.COMPLETE


def test_the_running_job_is_heartbeaten(worlds: Worlds) -> None:
    world = worlds(lock=1.5)
    PEEK.append(world.get)
    jid = world.app.publish(WLHeartbeat)

    [job] = world.work()

    assert world.get(jid).state == JobState.COMPLETE
    first, last = (event[1] for event in events("expires"))
    assert first >= job.expires
    assert last > first + 0.3  # extended while the task ran


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


# -- run() ---------------------------------------------------------------------------------


def test_run_stops_at_max_tasks_and_gives_back_the_rest_of_the_batch(worlds: Worlds) -> None:
    world = worlds(limits=Limits(max_tasks=3))
    jids = [world.app.publish(WLEcho, [n]) for n in range(5)]

    assert world.loop.run() == "max-tasks"

    states = [world.get(jid).state for jid in jids]
    assert states == [JobState.COMPLETE] * 3 + [JobState.WAITING] * 2
    for jid in jids[3:]:
        assert whats(world.get(jid))[-1] == "released"
        assert world.get(jid).remaining == 3
    assert world.loop.processed == 3


def test_stop_finishes_the_running_task_and_gives_back_the_rest(world: World) -> None:
    STOP.append(world.loop.stop)
    first = world.app.publish(WLEcho, ["before"])
    stopper = world.app.publish(WLStopper)
    rest = [world.app.publish(WLEcho, [n]) for n in range(3)]

    assert world.loop.run() == "stopped"

    assert world.get(first).state == JobState.COMPLETE
    assert world.get(stopper).state == JobState.COMPLETE
    for jid in rest:
        job = world.get(jid)
        assert job.state == JobState.WAITING
        assert whats(job)[-1] == "released"
    assert world.loop.stopping


class Flaky:
    """A real engine whose pops fail `failures` times as if its store were down."""

    def __init__(self, engine: Engine, failures: int) -> None:
        self._engine = engine
        self.failures = failures

    def pop(self, *args: Any, **kwargs: Any) -> list[Job]:
        if self.failures:
            self.failures -= 1
            raise EngineUnavailable("store down (test)")
        jobs: list[Job] = self._engine.pop(*args, **kwargs)
        return jobs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def test_the_loop_waits_out_an_engine_outage_and_carries_on(
    worlds: Worlds, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = worlds(limits=Limits(max_tasks=1))
    jid = world.app.publish(WLEcho, ["after the outage"])
    flaky = Flaky(world.engine, failures=3)
    world.loop.engine = flaky
    monkeypatch.setattr(WorkerLoop, "outage_first_pause", 0.01)

    assert world.loop.run() == "max-tasks"

    assert flaky.failures == 0
    assert world.get(jid).state == JobState.COMPLETE
