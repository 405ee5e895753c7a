"""The async API (`adelay`, `apublish_many`, `apublish`, `aresult`, `astate`, `ajob`,
`acancel`), on every engine, from inside a running event loop: it publishes and waits as
the sync API does, in threads (`lanner.offload`), so the loop goes on meanwhile.

SQS keeps no job to look at (no LOOKUP, no WAIT): there the handle's async methods refuse
in one line, as the sync ones do.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner import App, JobState, Unsupported
from lanner.codec import JobIdentity, JSONCodec, Payload
from lanner.prepared import Message
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.task import Task
from stores import fresh_redis

QUEUE = "aio"
DEADLINE = 60.0  # generous: only a broken build waits this long


class ThreadNoting(JSONCodec):
    """The default codec, noting the thread each publish encodes its job in."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def encode(self, payload: Payload, job: JobIdentity) -> str:
        self.threads.append(threading.current_thread())
        return super().encode(payload, job)


@pytest.fixture(params=["sqlite", "redis", "sqs"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'lanner.db'}"
    elif request.param == "redis":
        url = fresh_redis(request)
    else:
        url = str(request.getfixturevalue("sqs_fresh_url"))
    made = App(
        url,
        settings=Settings(broker=url),
        queues=[QueueConfig(QUEUE, visibility_timeout_sec=120, long_poll_time_sec=0)],
        codec=ThreadNoting(),
        results=True,
    )
    yield made
    made.close()


@pytest.fixture
def sqlite_app(tmp_path: Path) -> Iterator[App]:
    url = f"sqlite:///{tmp_path / 'lanner.db'}"
    made = App(url, settings=Settings(broker=url), results=True)
    yield made
    made.close()


def waits(app: App) -> bool:
    """Whether the app's engine can look at jobs and wait for them (not SQS)."""
    return lanner.Capability.WAIT in app.engine.capabilities


def test_async_publishes_run_in_a_thread_and_drain_runs_them(app: App) -> None:
    ran: list[int] = []

    @app.task(queue=QUEUE, time_limit=10)
    def add(a: int, b: int) -> int:
        ran.append(a + b)
        return a + b

    class Double(Task):
        queue = QUEUE
        time_limit = 10

        def run_task(self, n: int, *args: Any, **kwargs: Any) -> int:
            ran.append(2 * n)
            return 2 * n

    Double.app = app
    loop_threads: list[threading.Thread] = []

    async def main() -> list[lanner.JobHandle]:
        loop_threads.append(threading.current_thread())
        one = await add.adelay(1, 2)
        two = await add.options(app_data={"from": "options"}).adelay(3, 4)
        many = await app.apublish_many([add.message(10, n) for n in range(3)])
        kale = await Double.apublish(None, 50)
        assert all(isinstance(handle, lanner.JobHandle) for handle in [one, two, *many, kale])
        assert lanner.drain(app, queues=[QUEUE]) == 6
        if waits(app):
            assert await one.aresult(timeout=DEADLINE) == 3
            assert await two.aresult(timeout=DEADLINE) == 7
            assert [await handle.aresult(timeout=DEADLINE) for handle in many] == [10, 11, 12]
            assert await kale.aresult(timeout=DEADLINE) == 100
            assert await one.astate() == JobState.COMPLETE
            job = await two.ajob()
            assert job is not None
            assert job.state == JobState.COMPLETE
        else:
            with pytest.raises(Unsupported, match="sqs"):
                await one.aresult(timeout=DEADLINE)
            with pytest.raises(Unsupported, match="sqs"):
                await one.astate()
        return [one, two, *many, kale]

    handles = asyncio.run(main())
    assert sorted(ran) == [3, 7, 10, 11, 12, 100]
    assert len(set(handles)) == 6
    # Every job was encoded (and put) in another thread than the loop's.
    assert len(app.codec.threads) == 6  # type: ignore[attr-defined]
    assert not set(app.codec.threads) & set(loop_threads)  # type: ignore[attr-defined]


def test_acancel_and_astate_follow_the_job(app: App) -> None:
    @app.task(queue=QUEUE, time_limit=10)
    def later() -> None: ...

    async def main() -> None:
        handle = await later.options(delay=3600).adelay()
        if not waits(app):
            with pytest.raises(Unsupported, match="sqs"):
                await handle.acancel()
            return
        assert await handle.astate() == JobState.SCHEDULED
        assert await handle.acancel() is True
        assert await handle.astate() is None
        assert await handle.ajob() is None
        assert await handle.acancel() is False
        with pytest.raises(lanner.JobNotFound):
            await handle.aresult(timeout=0)

    asyncio.run(main())


def test_the_loop_goes_on_while_aresult_waits(app: App) -> None:
    """A coroutine ticks while `aresult` waits; a worker (a thread here) runs the job only
    once it has ticked: a wait that blocked the loop would never see the job run."""
    if not waits(app):
        pytest.skip("the sqs engine keeps no result to wait for")

    @app.task(queue=QUEUE, time_limit=10)
    def add(a: int, b: int) -> int:
        return a + b

    ticked = threading.Event()
    drained: list[int] = []

    def worker() -> None:
        if ticked.wait(DEADLINE):
            drained.append(lanner.drain(app, queues=[QUEUE]))

    async def main() -> tuple[Any, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
                if ticks == 10:
                    ticked.set()

        handle = await add.adelay(2, 3)
        waiting = asyncio.create_task(handle.aresult(timeout=DEADLINE))
        ticking = asyncio.create_task(ticker())
        runner = threading.Thread(target=worker)
        runner.start()
        try:
            return await waiting, ticks
        finally:
            ticking.cancel()
            await asyncio.to_thread(runner.join)

    result, ticks = asyncio.run(main())
    assert result == 5
    assert drained == [1]
    assert ticks >= 10


def test_a_bad_timeout_is_refused_before_anything_waits(sqlite_app: App) -> None:
    @sqlite_app.task
    def noop() -> None: ...

    async def main() -> None:
        handle = await noop.adelay()
        with pytest.raises(ValueError, match="timeout"):
            await handle.aresult(timeout=float("nan"))

    asyncio.run(main())


def test_aresult_times_out_as_result_does(sqlite_app: App) -> None:
    @sqlite_app.task
    def never_run() -> None: ...

    async def main() -> None:
        handle = await never_run.adelay()
        with pytest.raises(TimeoutError, match="waiting"):
            await handle.aresult(timeout=0.05)

    asyncio.run(main())


def test_a_cancelled_aresult_leaves_asyncio_run_free_and_ends_quietly(
    sqlite_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`asyncio.run` returns although the given-up wait goes on in its thread; that wait
    ends with the job, after the loop closed, without an error."""
    unhandled: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", unhandled.append)

    @sqlite_app.task
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.delay(1, 1)
    earlier = set(threading.enumerate())  # another test's waits may be ending still

    def waiters() -> list[threading.Thread]:
        found = threading.enumerate()
        return [
            thread for thread in found if thread.name == "lanner-wait" and thread not in earlier
        ]

    async def main() -> None:
        waiting = asyncio.create_task(handle.aresult())  # no timeout: a minute's chunk
        deadline = time.monotonic() + DEADLINE
        while not waiters() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    assert waiters(), "asyncio.run waited for the wait it gave up"
    assert lanner.drain(sqlite_app) == 1  # the job completes: the wait wakes and ends
    deadline = time.monotonic() + DEADLINE
    while waiters() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not waiters()
    assert unhandled == []
    assert handle.result(timeout=0) == 2


def test_an_eager_app_runs_async_publishes_at_once(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'unused.db'}", eager=True, results=True)

    @app.task
    async def halve(n: int) -> float:
        await asyncio.sleep(0)
        return n / 2

    async def main() -> Any:
        handle = await halve.adelay(5)
        assert await handle.astate() == JobState.COMPLETE
        return await handle.aresult()

    assert asyncio.run(main()) == 2.5


def test_apublish_many_takes_messages_made_by_hand(sqlite_app: App) -> None:
    @sqlite_app.task(queue=QUEUE)
    def echo(word: str) -> str:
        return word

    async def main() -> list[Any]:
        handles = await sqlite_app.apublish_many(
            Message(echo.task_class, (word,)) for word in ("a", "b")
        )
        lanner.drain(sqlite_app, queues=[QUEUE])
        return [await handle.aresult(timeout=DEADLINE) for handle in handles]

    assert asyncio.run(main()) == ["a", "b"]
