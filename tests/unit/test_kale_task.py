"""Kale's Task API below `run`, outside a worker: publishing through Kale's Publisher, the
failure policy on a hand-made message, Kale's message bodies, and `lanner.test_utils`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner import JobState, exceptions, task, test_utils
from lanner.app import App
from lanner.publisher import Publisher
from lanner.settings import Settings


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    made = App(url, settings=Settings(broker=url, retry_delay_multiple_sec=7))
    lanner.set_default_app(made)
    yield made
    lanner.set_default_app(None)
    made.close()


def test_publish_goes_through_kales_publisher_with_kales_payload(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, ...]] = []
    real = Publisher.publish

    def spy(self: Publisher, *args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Publisher, "publish", spy)
    handle = test_utils.MockTask.publish({"app": 1}, 5, delay_sec=30, flag=True)
    payload = {"args": (5,), "kwargs": {"delay_sec": 30, "flag": True}, "app_data": {"app": 1}}
    assert calls == [((test_utils.MockTask, "mock_task", payload), {"delay_sec": 30})]
    assert handle == "mock_task"
    assert handle.state() == JobState.SCHEDULED


def test_a_failure_on_a_hand_made_message_republishes_as_kale_does(app: App) -> None:
    failing = test_utils.new_mock_task(test_utils.FailTask)
    message = test_utils.MockMessage(failing, task_args=[1], retry_num=2, failure_num=2)
    assert test_utils.FailTask.handle_failure(message, exceptions.TaskException("x"))
    job = app.engine.get("fail_task")  # a new job of the same task id: no worker held one
    assert job is not None
    assert job.state == JobState.SCHEDULED
    assert job.due is not None
    assert job.decoded_data()["args"] == [1]
    assert test_utils.FailTask._get_delay_sec_for_retry(2) == 28  # 2**2 * the app's 7 s


@pytest.mark.parametrize(
    ("task_class", "failure_num", "error", "expected"),
    [
        (test_utils.FailTask, 0, KeyError("k"), task.PERMANENT_FAILURE_UNRECOVERABLE),
        (test_utils.FailTaskNoRetries, 0, ValueError("v"), task.PERMANENT_FAILURE_NO_RETRY),
        (test_utils.FailTask, 4, ValueError("v"), task.PERMANENT_FAILURE_RETRIES_EXCEEDED),
    ],
)
def test_permanent_failures_are_reported_with_kales_types(
    task_class: type[lanner.Task], failure_num: int, error: Exception, expected: str
) -> None:
    reported: list[tuple[Any, ...]] = []

    class Reporting(task_class):  # type: ignore[valid-type,misc]
        @classmethod
        def _report_permanent_failure(cls, *args: Any) -> None:
            reported.append(args)

    message = test_utils.MockMessage(test_utils.new_mock_task(Reporting), failure_num=failure_num)
    assert not Reporting.handle_failure(message, error)
    assert reported == [(message, error, expected, expected != "max_retries")]


def test_a_task_made_from_a_kale_message_body() -> None:
    made = test_utils.MockTask({"id": "abc", "payload": {"app_data": {"a": 1}}, "_publisher": "p"})
    assert (made.task_id, made.app_data, made._publisher_data) == ("abc", {"a": 1}, "p")
    assert made.task_name == "lanner.test_utils.MockTask"
    assert made._dequeued_time is not None  # Kale's _dequeued() ran
    assert test_utils.MockTask().task_id is None


def test_kales_fixture_tasks_behave_as_named() -> None:
    with pytest.raises(exceptions.TaskException, match="Task failed"):
        test_utils.new_mock_task(test_utils.FailTask).run()
    with pytest.raises(exceptions.TimeoutException):
        test_utils.new_mock_task(test_utils.TimeoutTask).run()
    assert not test_utils.new_mock_task(test_utils.ShouldNotRunTask).should_run_task()
    slow = test_utils.new_mock_task(test_utils.SlowButNotTooSlowTask)
    slow.run()
    assert slow.target_runtime is not None
    assert slow._task_latency_sec >= slow.target_runtime
    message = test_utils.new_mock_message()
    assert isinstance(message.task_inst, test_utils.MockTask)
    assert (message.task_id, message.task_args, message.task_app_data) == ("mock_task", [], {})
    assert not message.bound


def test_new_jids_are_version_7_uuids_that_grow_with_time() -> None:
    before = int(time.time() * 1000)
    first = task.time_ordered_id()
    ids = [task.time_ordered_id() for _ in range(200)]
    after = int(time.time() * 1000)
    for jid in [first, *ids]:
        parsed = uuid.UUID(hex=jid)
        assert (len(jid), parsed.version, parsed.variant) == (32, 7, uuid.RFC_4122)
        assert before <= int(jid[:12], 16) <= after
    assert len(set(ids)) == len(ids)
    time.sleep(0.002)  # the next millisecond: not a wait for state
    assert task.time_ordered_id() > max(ids)
    assert len(lanner.Task._get_task_id()) == 32
