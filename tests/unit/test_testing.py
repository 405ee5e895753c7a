"""Helpers for users' own tests: eager mode, temporary stores, drain, the pytest fixture."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import lanner
from lanner import App, JobState, TaskFailed
from lanner.errors import ChubbyTaskException
from lanner.testing import drain, eager, temporary_store


def test_an_eager_app_runs_the_task_at_publish_and_opens_no_store(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    app = App(f"sqlite:///{db}", eager=True, results=True)
    ran: list[int] = []

    @app.task
    def add(a: int, b: int) -> int:
        ran.append(a + b)
        return a + b

    handle = add.delay(2, 3)
    assert ran == [5]
    assert handle.state() == JobState.COMPLETE
    assert handle.result() == 5
    assert not db.exists()


def test_eager_goes_through_the_codec_so_a_non_json_argument_fails_as_in_production() -> None:
    app = App("sqlite:///unused.db", eager=True)

    @app.task
    def store(value: object) -> None: ...

    with pytest.raises(lanner.MalformedArgument, match="JSON"):
        store.delay({1, 2})


def test_eager_keeps_a_failure_and_raises_it_from_the_tasks_own_error() -> None:
    app = App("sqlite:///unused.db", eager=True)

    @app.task
    def explode(reason: str) -> None:
        raise KeyError(reason)

    handle = explode.delay("no such user")
    assert handle.state() == JobState.FAILED
    with pytest.raises(TaskFailed, match="KeyError") as failed:
        handle.result()
    assert isinstance(failed.value.__cause__, KeyError)


def test_eager_checks_arguments_against_the_functions_signature() -> None:
    app = App("sqlite:///unused.db", eager=True)

    @app.task
    def greet(name: str) -> None: ...

    handle = greet.delay("a", "b")  # type: ignore[call-arg]
    with pytest.raises(TaskFailed) as failed:
        handle.result()
    assert failed.value.group == "lanner-bad-arguments"


def test_eager_runs_async_tasks_and_keeps_what_they_return() -> None:
    app = App("sqlite:///unused.db", eager=True, results=True)

    @app.task
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    assert double.delay(21).result() == 42


def test_eager_async_tasks_run_when_published_from_inside_an_event_loop() -> None:
    # An async web handler or test publishing to an eager app: the caller's loop is busy,
    # so the task's coroutine cannot run on it, yet must run to its end all the same.
    app = App("sqlite:///unused.db", eager=True, results=True)

    @app.task
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    async def handler() -> int:
        return int(double.delay(21).result())

    assert asyncio.run(handler()) == 42


def test_eager_fails_a_result_json_cannot_carry_into_the_workers_group() -> None:
    app = App("sqlite:///unused.db", eager=True, results=True)

    @app.task
    def make() -> object:
        return {1, 2}

    handle = make.delay()
    with pytest.raises(TaskFailed) as failed:
        handle.result()
    assert failed.value.group == "lanner-unserializable-result"
    assert "set" in failed.value.message


def test_eager_fails_a_result_larger_than_the_engine_keeps_as_a_worker_does() -> None:
    app = App("sqlite:///unused.db", eager=True, results=True)

    @app.task
    def make() -> str:
        return "x" * app.max_data_bytes  # with JSON's quotes, 2 bytes too many

    handle = make.delay()
    with pytest.raises(TaskFailed) as failed:
        handle.result()
    assert failed.value.group == "lanner-result-too-large"
    assert f"{app.max_data_bytes + 2} bytes" in failed.value.message


def test_eager_refuses_an_oversized_payload_without_a_store() -> None:
    app = App("sqlite:///unused.db", eager=True)

    @app.task
    def big(text: str) -> None: ...

    with pytest.raises(ChubbyTaskException, match="bytes"):
        big.delay("x" * (11 * 1024 * 1024))


def test_the_current_job_is_known_inside_an_eager_task() -> None:
    app = App("sqlite:///unused.db", eager=True, results=True)

    @app.task
    def whoami() -> str:
        job = lanner.current_job()
        assert job is not None
        return job.jid

    handle = whoami.options(jid="me").delay()
    assert handle.result() == "me"
    assert lanner.current_job() is None


def test_the_eager_context_manager_lasts_for_its_block(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", results=True)

    @app.task
    def square(n: int) -> int:
        return n * n

    with eager(app):
        assert square.delay(4).result() == 16
    later = square.delay(5)
    try:
        assert later.state() == JobState.WAITING
    finally:
        app.close()


def test_temporary_store_points_the_app_elsewhere_and_back(tmp_path: Path) -> None:
    own = tmp_path / "own.db"
    app = App(f"sqlite:///{own}", results=True)
    ran: list[str] = []

    @app.task
    def hello(name: str) -> str:
        ran.append(name)
        return f"hello {name}"

    with temporary_store(app) as url:
        handle = hello.delay("ada")
        assert drain(app) == 1
        assert handle.result(timeout=0) == "hello ada"
        path = Path(url.removeprefix("sqlite:///"))
        assert path.exists()
    assert ran == ["ada"]
    assert not path.exists()
    assert not own.exists()
    assert app.settings.broker == f"sqlite:///{own}"


def test_drain_runs_async_tasks_and_raises_their_errors(lanner_app: App) -> None:
    @lanner_app.task(max_retries=0)
    async def fetch(url: str) -> None:
        await asyncio.sleep(0)
        raise ConnectionError(f"cannot reach {url}")

    handle = fetch.delay("https://example.invalid")
    with pytest.raises(ConnectionError, match=r"example\.invalid"):
        drain(lanner_app)
    assert handle.state() == JobState.FAILED


def test_the_pytest_fixture_gives_an_app_on_the_tests_own_file(
    lanner_app: App, tmp_path: Path
) -> None:
    assert lanner_app.settings.broker == f"sqlite:///{tmp_path / 'lanner.db'}"
    assert not lanner_app.eager
    assert lanner_app.engine.queues() == []
    assert os.path.exists(tmp_path / "lanner.db")
