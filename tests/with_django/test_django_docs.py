"""Django's task documentation, run as written against `LannerBackend` with a real pool,
on SQLite and on Redis: defining tasks, enqueueing (`enqueue`, `aenqueue`, `using`),
priorities, `run_after`, queues, the task context, async tasks, results (`get_result`,
`aget_result`, `refresh`, statuses, return values) and errors."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from .conftest import Project, wait_for


def finished(task: Any, result_id: str) -> Any:
    """The task's result once it finished (polled through `get_result`)."""

    def look() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return wait_for(look, f"result {result_id}")


def test_the_backend_says_what_it_supports(project: Project) -> None:
    from lanner.contrib.django.compat import task_backends

    backend = task_backends()["default"]
    assert type(backend).__name__ == "LannerBackend"
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority


def test_enqueue_then_get_result(project: Project) -> None:
    from shop.tasks import email_users

    from lanner.contrib.django.compat import TaskResultStatus

    result = email_users.enqueue(
        emails=["user@example.com"], subject="You have a message", message="Hello there!"
    )
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    done = finished(email_users, result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 1  # send_mail's count of messages sent
    assert done.kwargs == {
        "emails": ["user@example.com"],
        "subject": "You have a message",
        "message": "Hello there!",
    }
    assert done.args == []
    assert done.attempts == 1
    assert len(done.worker_ids) == 1
    assert done.errors == []
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.started_at == done.last_attempted_at
    assert done.task.func is email_users.func
    result.refresh()  # the result returned by enqueue, brought up to date
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 1


def test_the_default_backend_reads_any_task(project: Project) -> None:
    from shop.tasks import add

    from lanner.contrib.django.compat import task_backends

    result = add.enqueue(2, 3)
    done = wait_for(
        lambda: (found := task_backends()["default"].get_result(result.id)).is_finished and found,
        "add",
    )
    assert done.return_value == 5
    assert done.args == [2, 3]


def test_a_result_of_another_task_or_none(project: Project) -> None:
    from shop.tasks import add, email_users

    from lanner.contrib.django.compat import PACKAGE, TaskResultDoesNotExist

    mismatch = __import__(f"{PACKAGE}.exceptions", fromlist=["x"]).TaskResultMismatch
    result = add.enqueue(1, 1)
    with pytest.raises(mismatch):
        email_users.get_result(result.id)
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result("0123456789abcdef0123456789abcdef")
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result("not a jid!")


def test_the_task_context(project: Project) -> None:
    from shop.tasks import email_users_with_context

    result = email_users_with_context.enqueue(
        emails=["user@example.com"], subject="You have a message", message="Hello there!"
    )
    done = finished(email_users_with_context, result.id)
    assert done.return_value == {"attempt": 1, "id": result.id}


def test_async_tasks_and_aenqueue(project: Project) -> None:
    from shop.tasks import add, async_add

    async def main() -> tuple[Any, Any]:
        first = await async_add.aenqueue(2, 40)
        second = await add.aenqueue(a=1, b=2)
        while True:
            one = await async_add.aget_result(first.id)
            two = await add.aget_result(second.id)
            if one.is_finished and two.is_finished:
                return one, two
            await asyncio.sleep(0.05)

    one, two = asyncio.run(asyncio.wait_for(main(), 60))
    assert one.return_value == 42
    assert two.return_value == 3


def test_errors(project: Project) -> None:
    from shop.tasks import fail

    from lanner.contrib.django.compat import TaskResultStatus

    result = fail.enqueue("boom")
    done = finished(fail, result.id)
    assert done.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = done.return_value
    assert len(done.errors) == 1
    error = done.errors[0]
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert "ValueError: boom" in error.traceback
    assert "shop/tasks.py" in error.traceback
    assert done.finished_at is not None
    assert done.attempts == 1


def test_run_after(project: Project) -> None:
    from django.utils import timezone
    from shop.tasks import add

    from lanner.contrib.django.compat import TaskResultStatus

    run_after = timezone.now() + datetime.timedelta(seconds=1)
    result = add.using(run_after=run_after).enqueue(1, 2)
    waiting = add.get_result(result.id)
    assert waiting.task.run_after == run_after.replace(
        microsecond=waiting.task.run_after.microsecond
    )
    done = finished(add, result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.started_at >= run_after
    assert done.task.run_after is not None


def test_queue_name(project: Project) -> None:
    from shop.tasks import email_users, email_users_later

    from lanner.contrib.django.compat import InvalidTask, task_backends

    result = email_users_later.enqueue(["a@example.com"], "hi", "there")
    done = finished(email_users_later, result.id)
    assert done.task.queue_name == "emails"
    job = task_backends()["default"].app.engine.get(result.id)
    assert job.history[0].details["q"] == "emails"  # put there (a complete job is in none)
    with pytest.raises(InvalidTask):
        email_users.using(queue_name="elsewhere")


def test_priorities(project: Project) -> None:
    from shop.tasks import record

    from lanner.contrib.django.compat import InvalidTask, task_backends

    project.task_log.unlink(missing_ok=True)
    results = [
        record.using(priority=priority).enqueue(label)
        for label, priority in [("low", -100), ("mid", 0), ("high", 100), ("higher", 100)]
    ]
    engine = task_backends()["default"].app.engine
    assert [engine.get(result.id).priority for result in results] == [-100, 0, 100, 100]
    worker = project.start_worker("-c", "1", "-Q", "ordered")
    try:
        for result in results:
            finished(record, result.id)
    finally:
        project.stop_worker(worker)
    order = [line.split()[0] for line in project.task_log.read_text().splitlines()]
    assert order == ["high", "higher", "mid", "low"]
    assert record.get_result(results[2].id).task.priority == 100
    with pytest.raises(InvalidTask):
        record.using(priority=101)


def test_the_orm_in_a_worker(project: Project) -> None:
    from shop.models import Order
    from shop.tasks import count_orders

    Order.objects.create(item="tea")
    result = count_orders.enqueue()
    assert finished(count_orders, result.id).return_value == Order.objects.count()


def test_retries_keep_each_runs_error(project: Project) -> None:
    from shop.tasks import flaky

    from lanner.contrib.django.compat import TaskResultStatus

    result = flaky.enqueue(result_key())
    done = finished(flaky, result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 3
    assert done.attempts == 3
    assert [error.exception_class for error in done.errors] == [ConnectionError] * 2
    assert done.started_at < done.last_attempted_at


def result_key() -> str:
    import uuid

    return uuid.uuid4().hex
