"""A worker process that runs many jobs at once (`ConcurrentLoop`), on real stores.

The loop runs in a thread of the test process, so its tasks and the test share this
module's state: concurrency is shown by barriers that only jobs running at the same time
can pass (no timing), and each job's own time limit, cancel and current job are checked
per job while its neighbours run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

import lanner
from lanner import Engine, JobState
from lanner.app import App
from lanner.message import KaleMessage
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.task import Task
from lanner.worker.concurrent import ConcurrentLoop
from lanner.worker.recovery import DEATH_ENTRY, runs_alone

QUEUE = "cc"
DEADLINE = 30.0
"""How long any wait of these tests may take on a busy machine (they end far sooner)."""

app = App("sqlite:///never-used.db")
SEEN: dict[str, Any] = {}
"""What the tasks saw, by jid (their current job's jid, the peak of jobs at once)."""
GATE: dict[str, Any] = {}
"""The barriers of the running test, made fresh by the `world` fixture."""


@app.task(queue=QUEUE, result=True)
async def meet(index: int) -> int:
    """Returns only once `GATE["async"]` jobs are in flight together."""
    job = lanner.current_job()
    assert job is not None
    SEEN[job.jid] = index
    if _arrive():
        await asyncio.wait_for(GATE["met"].wait(), DEADLINE)
    await asyncio.sleep(0)
    assert lanner.current_job() is job  # each job keeps its own, across awaits
    return index * 2


def _arrive() -> bool:
    GATE["arrived"] += 1
    if GATE["arrived"] >= GATE["async"]:
        GATE["met"].set()
        return False
    return True


@app.task(queue=QUEUE)
def meet_in_thread(index: int) -> None:
    """Returns only once `threads` sync jobs run together in threads."""
    job = lanner.current_job()
    assert job is not None
    SEEN[job.jid] = index
    GATE["barrier"].wait(DEADLINE)


@app.task(queue=QUEUE, time_limit=0.5, max_retries=0)
async def hang() -> None:
    await asyncio.sleep(DEADLINE * 2)


@app.task(queue=QUEUE, time_limit=0.5, max_retries=0)
def spin() -> None:
    end = time.monotonic() + DEADLINE * 2
    while time.monotonic() < end:  # Python code: the time limit reaches it in its thread
        pass


@app.task(queue=QUEUE, max_retries=0)
async def wait_to_be_cancelled() -> None:
    GATE["running"].set()
    await asyncio.sleep(DEADLINE * 2)


@app.task(queue=QUEUE)
async def quick(index: int) -> int:
    await asyncio.sleep(0.01)
    return index


class Flaky(Task):
    """Fails at its first run; its failure policy sees its own job."""

    app = app
    queue = QUEUE
    max_retries = 1
    _retry_delay_multiple = 0.0

    async def run_task(self, index: int) -> None:
        job = lanner.current_job()
        assert job is not None
        if sum(1 for event in job.history if event.what == "popped") == 1:
            raise ValueError(f"flaky {index}")

    @classmethod
    def handle_failure(
        cls,
        message: KaleMessage,
        raised_exception: BaseException,
        increment_failure_num: bool = True,
    ) -> bool:
        job = lanner.current_job()
        SEEN[message.task_id or ""] = job.jid if job is not None else None
        return super().handle_failure(message, raised_exception, increment_failure_num)


@app.task(queue=QUEUE, time_limit=5)
async def outlive_the_lock(seconds: float) -> None:
    await asyncio.sleep(seconds)


@app.task(queue=QUEUE)
async def count_neighbours() -> None:
    job = lanner.current_job()
    assert job is not None
    SEEN[job.jid] = GATE["loop"].held_now()


@app.task(queue=QUEUE)
async def report_async(count: int) -> None:
    job = lanner.current_job()
    assert job is not None
    for n in range(1, count + 1):
        job.progress(n / count, f"async {n}")
        await asyncio.sleep(0)
        assert lanner.current_job() is job  # each job reports its own, across awaits


@app.task(queue=QUEUE)
def report_in_thread(count: int) -> None:
    job = lanner.current_job()
    assert job is not None
    for n in range(1, count + 1):
        job.progress(n / count, f"thread {n}")


@app.task(queue=QUEUE, max_retries=0)
def count_runs() -> None:
    job = lanner.current_job()
    assert job is not None
    SEEN[job.jid] = SEEN.get(job.jid, 0) + 1


class NoThreadOnce(concurrent.futures.ThreadPoolExecutor):
    """Task threads whose first start fails as under a lowered address-space limit
    (CPython queues the work, then fails to start the thread for it)."""

    failures = 1

    def _adjust_thread_count(self) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("can't start new thread")
        super()._adjust_thread_count()  # type: ignore[misc, unused-ignore]


class World:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop: ConcurrentLoop | None = None
        self.thread: threading.Thread | None = None

    def start(self, tasks_per_process: int, threads: int = 1, lock: float = 10) -> ConcurrentLoop:
        queues = [QueueConfig(QUEUE, visibility_timeout_sec=lock, long_poll_time_sec=0.2)]
        self.loop = ConcurrentLoop(
            app, queues, resolve_selector("reduced-lottery"),
            tasks_per_process=tasks_per_process, threads=threads,
        )  # fmt: skip
        GATE["loop"] = self
        return self.run(self.loop)

    def run(self, loop: ConcurrentLoop) -> ConcurrentLoop:
        """Run `loop` in a thread of its own (stopped by `stop`)."""
        self.loop = loop
        self.thread = threading.Thread(target=loop.run, daemon=True)
        self.thread.start()
        return loop

    def completed(self, jid: str) -> lanner.Job:
        """The job once settled, which must be completed."""
        self.wait_until(lambda: self.settled([jid]), "the job to settle")
        job = self.engine.get(jid)
        assert job is not None
        assert job.state == JobState.COMPLETE, job.failure
        return job

    def held_now(self) -> int:
        assert self.loop is not None
        return len(self.loop._held)

    def wait_until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def settled(self, jids: Sequence[str]) -> bool:
        return all(
            job.state in (JobState.COMPLETE, JobState.FAILED) for job in self.engine.multiget(jids)
        )

    def stop(self) -> None:
        if self.loop is not None and self.thread is not None:
            self.loop.stop()
            self.thread.join(DEADLINE)
            assert not self.thread.is_alive(), "the loop did not stop"


@pytest.fixture(params=["sqlite", "redis"])
def world(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[World]:
    if request.param == "sqlite":
        app.use_broker(f"sqlite:///{tmp_path}/cc.db")
    else:
        import redis

        url: str = request.getfixturevalue("redis_url")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        app.use_broker(url)
    engine = app.engine
    SEEN.clear()
    GATE.clear()
    GATE.update(arrived=0, met=asyncio.Event(), running=threading.Event())
    world = World(engine)
    yield world
    world.stop()
    app.use_broker("sqlite:///never-used.db")


def test_async_jobs_run_together_each_with_its_own_job_and_result(world: World) -> None:
    GATE["async"] = 30
    handles = [meet.delay(i) for i in range(30)]
    loop = world.start(tasks_per_process=50)
    world.wait_until(lambda: world.settled(handles), "30 jobs to settle")
    assert [handle.result(timeout=DEADLINE) for handle in handles] == [2 * i for i in range(30)]
    assert {jid: SEEN[jid] for jid in handles} == {jid: i for i, jid in enumerate(handles)}
    assert loop.processed == 30


def test_sync_jobs_share_threads_when_asked(world: World) -> None:
    GATE["barrier"] = threading.Barrier(4)
    handles = [meet_in_thread.delay(i) for i in range(8)]
    world.start(tasks_per_process=8, threads=4)
    world.wait_until(lambda: world.settled(handles), "8 jobs to settle")
    states = {job.state for job in world.engine.multiget(handles)}
    assert states == {JobState.COMPLETE}


def test_async_and_threaded_tasks_report_progress_each_of_its_own_job(world: World) -> None:
    handles = [report_async.delay(500) for _ in range(5)]
    handles += [report_in_thread.delay(5000) for _ in range(3)]
    world.start(tasks_per_process=8, threads=3)
    world.wait_until(lambda: world.settled(handles), "8 jobs to settle")
    jobs = world.engine.multiget(handles)
    assert {job.state for job in jobs} == {JobState.COMPLETE}
    found = [handle.progress() for handle in handles]
    assert [(p.fraction, p.message) if p else None for p in found] == (
        [(1.0, "async 500")] * 5 + [(1.0, "thread 5000")] * 3
    )
    assert all([e.what for e in job.history].count("progress") == 1 for job in jobs)


def test_a_job_over_its_time_limit_is_stopped_alone(world: World) -> None:
    GATE["async"] = 10
    stuck = [hang.delay(), spin.delay()]
    fine = [meet.delay(i) for i in range(10)]
    world.start(tasks_per_process=20, threads=2)
    world.wait_until(lambda: world.settled(stuck + fine), "the jobs to settle")
    jobs = {job.jid: job for job in world.engine.multiget(stuck + fine)}
    assert [jobs[jid].state for jid in stuck] == [JobState.FAILED] * 2
    assert {getattr(jobs[jid].failure, "group", None) for jid in stuck} == {"TimeLimitExceeded"}
    assert {jobs[jid].state for jid in fine} == {JobState.COMPLETE}


def test_a_cancelled_job_is_stopped_while_its_neighbours_finish(world: World) -> None:
    victim = wait_to_be_cancelled.delay()
    world.start(tasks_per_process=10)
    world.wait_until(GATE["running"].is_set, "the victim to start")
    others = [quick.delay(i) for i in range(5)]
    assert victim.cancel()
    world.wait_until(lambda: world.settled(others), "the neighbours to finish")
    world.wait_until(lambda: world.held_now() == 0, "the victim's task to stop")
    assert world.engine.get(victim) is None


def test_a_job_that_was_in_flight_at_a_death_runs_alone(world: World) -> None:
    suspect = count_neighbours.delay()
    world.engine.log(suspect, DEATH_ENTRY, {"worker": "w-1", "cause": "test"})
    job = world.engine.get(suspect)
    assert job is not None
    assert runs_alone(job)
    GATE["async"] = 5
    others = [meet.delay(i) for i in range(5)]
    world.start(tasks_per_process=10)
    world.wait_until(lambda: world.settled([suspect, *others]), "the jobs to settle")
    assert SEEN[suspect] == 1  # nothing else was held while it ran


def test_one_heartbeat_keeps_the_lock_of_every_job_in_flight(world: World) -> None:
    long_ones = [outlive_the_lock.delay(3.0) for _ in range(5)]
    world.start(tasks_per_process=10, lock=1.5)  # beats every 0.5 s
    world.wait_until(lambda: world.settled(long_ones), "the long jobs to complete")
    jobs = world.engine.multiget(long_ones)
    assert {job.state for job in jobs} == {JobState.COMPLETE}
    assert all([event.what for event in job.history].count("popped") == 1 for job in jobs), (
        "a long job lost its lock and ran again"
    )


def test_failures_are_settled_per_job_by_its_own_policy(world: World) -> None:
    flaky = [Flaky.publish(None, i) for i in range(5)]
    GATE["async"] = 5
    fine = [meet.delay(i) for i in range(5)]
    world.start(tasks_per_process=20)
    world.wait_until(lambda: world.settled([*flaky, *fine]), "the jobs to settle")
    jobs = world.engine.multiget([*flaky, *fine])
    assert {job.state for job in jobs} == {JobState.COMPLETE}
    assert {jid: SEEN.get(jid) for jid in flaky} == {jid: jid for jid in flaky}
    for job in jobs[:5]:
        assert job.remaining == 0  # the retry it spent, and no other


def test_a_thread_that_cannot_start_gives_its_job_back_unspent(world: World) -> None:
    """A sync job whose thread fails to start (a neighbour's limits, not its fault) is
    released, not failed, and runs once when a thread starts."""
    handle = count_runs.delay()
    queues = [QueueConfig(QUEUE, long_poll_time_sec=0.2)]
    loop = ConcurrentLoop(app, queues, resolve_selector("reduced-lottery"),
                          tasks_per_process=4, threads=2)  # fmt: skip
    loop._task_threads = NoThreadOnce(2, "lanner-task")
    world.run(loop)
    job = world.completed(handle)
    assert [event.what for event in job.history].count("released") == 1
    assert SEEN[handle] == 1  # the queued body of its first try never ran


class ThreadsUntilForbidden(concurrent.futures.ThreadPoolExecutor):
    """An executor that cannot start a thread once a task set GATE["no threads"] (as a
    task that lowered the process's address-space limit leaves it)."""

    def _adjust_thread_count(self) -> None:
        if not GATE.get("no threads"):
            super()._adjust_thread_count()  # type: ignore[misc, unused-ignore]
        # As CPython's: a thread is started only if none is idle and there is room.
        elif (
            not self._idle_semaphore.acquire(timeout=0)  # type: ignore[attr-defined, unused-ignore]
            and len(self._threads) < self._max_workers  # type: ignore[attr-defined, unused-ignore]
        ):
            raise RuntimeError("can't start new thread")


@app.task(queue=QUEUE, max_retries=0)
async def forbid_threads() -> None:
    GATE["no threads"] = True


def test_completions_start_no_thread_after_a_task_ran(world: World) -> None:
    """The store's threads are started before any task runs: a task that leaves the
    process unable to start one (a neighbour's limits) does not stop completions."""
    handle = forbid_threads.delay()
    queues = [QueueConfig(QUEUE, long_poll_time_sec=0.2)]
    loop = ConcurrentLoop(app, queues, resolve_selector("reduced-lottery"),
                          tasks_per_process=4, configure=False)  # fmt: skip
    loop._engine_thread = ThreadsUntilForbidden(1, "lanner-engine")
    loop._pop_thread = ThreadsUntilForbidden(1, "lanner-pop")
    world.run(loop)
    world.completed(handle)
