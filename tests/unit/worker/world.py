"""The world of the worker-loop tests: test tasks, an App on a real SQLite file, a loop.

Each test pops jobs itself and hands them to `WorkerLoop.run_batch` (or lets `run()` loop),
then reads what the engine recorded. Retry and deferral delays are checked with explicit
`now=` pops, so no test waits for a delay to pass. A batch is run whole however long it
takes (`give_back_held=False`): a loaded machine may take longer than the loop's hold bound
over any batch, so only a test of that give-back asks for it (`worlds(give_back_held=True)`).
The fixtures are `world` and `worlds`.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lanner import Engine, Job, JobState
from lanner.app import App
from lanner.errors import JobCancelled
from lanner.exceptions import BlacklistedException, TimeLimitExceeded
from lanner.message import KaleMessage
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.settings import Settings
from lanner.task import Task
from lanner.worker.loop import Limits, WorkerLoop
from lanner.worker.reporter import Outcome

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
def clean_globals() -> Iterator[None]:
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

    # An instance method (lanner's first form of the hook; Kale's is a classmethod): still called.
    def _report_permanent_failure(  # type: ignore[override]
        self,
        message: KaleMessage,
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


class WLWatcher(WLTask):
    """Waits (up to 5 s) until the other job reaches `state`, and records how long it took."""

    def run_task(self, other: str, state: str) -> None:
        started = time.monotonic()
        while PEEK[0](other).state != state:
            if time.monotonic() - started > 5:
                EVENTS.append(("watched", other, None))
                return
            time.sleep(0.01)
        EVENTS.append(("watched", other, time.monotonic() - started))


class WLForker(WLTask):
    """Forks, and both processes return from the task (the child never should act on it)."""

    def run_task(self) -> None:
        child = os.fork()
        if child:
            EVENTS.append(("forked", child))


class WLUnlimited(Task):
    queue = QUEUE
    time_limit = None

    def run_task(self) -> None:
        EVENTS.append(("armed", self.task_id, signal.getitimer(signal.ITIMER_REAL)[0]))


class WLTight(WLTask):
    time_limit = 1.8

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))


class WLExits(WLTask):
    max_retries = 0

    def run_task(self, how: str) -> None:
        EVENTS.append(("run", self.task_id))
        if how == "exit":
            raise SystemExit("the task called sys.exit")
        raise KeyboardInterrupt


class WLReturns(WLTask):
    keep_result = True

    def run_task(self, value: Any) -> Any:
        return value


class WLCancelled(WLTask):
    """Cancels its own job (through STOP[0]), then waits to be stopped."""

    time_limit = 8.0

    def run_task(self) -> None:
        STOP[0]()
        try:
            time.sleep(6)
        except JobCancelled as stopped:
            EVENTS.append(("stopped", self.task_id, str(stopped)))
            raise


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
    outcomes: list[tuple[str, Outcome, str, float]] = field(default_factory=list)

    def batch(self, queue: str, jids: Any) -> None:
        self.reports.append(("batch", queue, list(jids)))

    def started(self, jid: str, deadline: float, retry_delay: float | None) -> None:
        self.reports.append(("started", jid, deadline, retry_delay))

    def stopping(self, jid: str, why: str) -> None:
        self.reports.append(("stopping", jid, why))

    def finished(
        self,
        jid: str,
        succeeded: bool,
        outcome: Outcome = "",
        klass: str = "",
        seconds: float = 0.0,
    ) -> None:
        self.reports.append(("finished", jid, succeeded))
        self.outcomes.append((jid, outcome, klass, seconds))

    def completed(self, jids: Any) -> None:
        self.reports.append(("completed", list(jids)))

    def flushed(self) -> None:
        self.reports.append(("flushed",))

    def engine_error(self) -> None:
        self.reports.append(("engine_error",))

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
        self.loops: list[WorkerLoop] = []

    def __call__(
        self,
        *,
        lock: float = LOCK_SEC,
        query: str = "",
        limits: Limits | None = None,
        give_back_held: bool = False,
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
            give_back_held=give_back_held,
        )
        self.loops.append(loop)
        return World(app, loop, queue, recorder, url)

    def close(self) -> None:
        for loop in self.loops:
            loop.close()
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


def wait_for(check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll `check` until it holds (what another thread does, such as the keeper's reports,
    may land after `run_batch` returns); fail after a deadline generous on a loaded machine."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:g} s"
        time.sleep(0.01)


def comes_back_after(world: World, jid: str, delay: float, since: float, until: float) -> Job:
    """Check that `jid` is not poppable before `since + delay` but is after `until + delay`.

    `since`/`until` bracket the moment the job was given back; return the job popped.
    """
    assert [j.jid for j in world.pop(now=since + delay - 0.5)] == []
    assert world.get(jid).state == JobState.SCHEDULED
    jobs = world.pop(now=until + delay + 0.5)
    assert [j.jid for j in jobs] == [jid]
    return jobs[0]
