"""The worker settles failures through the task's own policy: Kale's `handle_failure`,
`republish` and `_get_delay_sec_for_retry`, overridden by subclasses, change what happens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import lanner
from lanner import JobState
from lanner.message import KaleMessage

from .world import EVENTS, MULTIPLE, WLTask, World, comes_back_after, events

pytestmark = pytest.mark.timeout(60, method="thread")

SEEN: list[KaleMessage] = []


@pytest.fixture(autouse=True)
def clean_seen() -> Iterator[None]:
    SEEN.clear()
    yield
    SEEN.clear()
    lanner.set_default_app(None)


class WLPolicyBoom(WLTask):
    max_retries = 3

    def run_task(self, *args: Any, **kwargs: Any) -> None:
        EVENTS.append(("run", self.task_id))
        raise ValueError("boom")


class WLOwnDelay(WLPolicyBoom):
    @classmethod
    def _get_delay_sec_for_retry(cls, current_retry_num: int) -> float:
        return 3.5


class WLStaticDelay(WLPolicyBoom):
    @staticmethod
    def _get_delay_sec_for_retry(current_retry_num: int) -> float:
        return 2.5


class WLOwnMultiple(WLPolicyBoom):
    _retry_delay_multiple = 2.0


class WLNeverRetried(WLPolicyBoom):
    @classmethod
    def handle_failure(
        cls,
        message: KaleMessage,
        raised_exception: BaseException,
        increment_failure_num: bool = True,
    ) -> bool:
        return False


class WLFreeRetry(WLPolicyBoom):
    @classmethod
    def handle_failure(
        cls,
        message: KaleMessage,
        raised_exception: BaseException,
        increment_failure_num: bool = True,
    ) -> bool:
        return super().handle_failure(message, raised_exception, increment_failure_num=False)


class WLKaleRepublish(WLPolicyBoom):
    """Kale's own republish, copied with another delay: it publishes the same task id."""

    @classmethod
    def republish(cls, message: KaleMessage, failure_num: int) -> None:
        assert message.task_id is not None
        payload = {"args": message.task_args, "kwargs": message.task_kwargs,
                   "app_data": message.task_app_data}  # fmt: skip
        cls._get_publisher().publish(
            cls, message.task_id, payload, current_retry_num=message.task_retry_num + 1,
            current_failure_num=failure_num, delay_sec=1.5,
        )  # fmt: skip


class WLChangedArgs(WLPolicyBoom):
    @classmethod
    def republish(cls, message: KaleMessage, failure_num: int) -> None:
        assert message.task_id is not None
        payload: dict[str, Any] = {"args": ["other"], "kwargs": {}, "app_data": None}
        cls._get_publisher().publish(cls, message.task_id, payload, current_retry_num=1)


class WLFollowUp(WLPolicyBoom):
    """Retries by publishing a new task of its own (a new id) and says it will be retried."""

    @classmethod
    def republish(cls, message: KaleMessage, failure_num: int) -> None:
        SEEN.append(message)
        WLEchoTask.publish(None, "follow-up")


class WLEchoTask(WLTask):
    def run_task(self, value: str) -> None:
        EVENTS.append(("run", self.task_id, value))


class WLInspected(WLPolicyBoom):
    @classmethod
    def handle_failure(
        cls,
        message: KaleMessage,
        raised_exception: BaseException,
        increment_failure_num: bool = True,
    ) -> bool:
        SEEN.append(message)
        return super().handle_failure(message, raised_exception, increment_failure_num)


class WLKwargsCleaner(WLTask):
    """Kale's documented override form: **kwargs. It must not turn successes into retries."""

    def _clean_task_environment(self, **kwargs: Any) -> None:  # type: ignore[override]
        EVENTS.append(("cleaned", sorted(kwargs)))

    def run_task(self) -> None:
        EVENTS.append(("run", self.task_id))


class WLKaleReporter(WLTask):
    """Kale's form of the report hook: a classmethod, given the message."""

    max_retries = 0

    @classmethod
    def _report_permanent_failure(
        cls,
        message: KaleMessage,
        exception: BaseException | None,
        failure_type: str,
        log_exception: bool = True,
    ) -> None:
        SEEN.append(message)
        EVENTS.append(("reported", message.task_id, failure_type, log_exception))

    def run_task(self, value: int) -> None:
        raise ValueError(value)


class WLPolicyRaises(WLPolicyBoom):
    @classmethod
    def handle_failure(
        cls,
        message: KaleMessage,
        raised_exception: BaseException,
        increment_failure_num: bool = True,
    ) -> bool:
        raise RuntimeError("the policy itself broke")


def _run_and_time(world: World) -> tuple[float, float]:
    since = time.time()
    world.work()
    return since, time.time()


def test_an_overridden_delay_decides_when_the_retry_comes(world: World) -> None:
    jid = world.app.publish(WLOwnDelay)
    since, until = _run_and_time(world)
    assert comes_back_after(world, jid, 3.5, since, until).remaining == 2
    assert world.recorder.retry_delays(jid) == [3.5]  # what a supervisor would use too


def test_a_delay_override_may_be_a_staticmethod(world: World) -> None:
    jid = world.app.publish(WLStaticDelay)
    since, until = _run_and_time(world)
    assert comes_back_after(world, jid, 2.5, since, until).remaining == 2
    assert world.recorder.retry_delays(jid) == [2.5]


def test_the_classs_retry_delay_multiple_replaces_the_settings(world: World) -> None:
    jid = world.app.publish(WLOwnMultiple)
    since, until = _run_and_time(world)
    job = comes_back_after(world, jid, 2.0, since, until)
    since = time.time()
    world.loop.run_batch(world.queue, [job])
    comes_back_after(world, jid, 4.0, since, time.time())


def test_handle_failure_saying_no_fails_the_job_at_once(world: World) -> None:
    jid = world.app.publish(WLNeverRetried)
    world.work()
    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "ValueError"
    assert job.remaining == 3  # no retry spent: the policy never retried it
    assert events("permanent_failure") == []  # the override reported nothing


def test_a_failure_not_counted_is_given_back_without_spending_a_retry(world: World) -> None:
    jid = world.app.publish(WLFreeRetry)
    since, until = _run_and_time(world)
    assert comes_back_after(world, jid, MULTIPLE, since, until).remaining == 3


def test_kales_republish_of_the_same_task_id_retries_the_job_in_place(world: World) -> None:
    jid = world.app.publish(WLKaleRepublish)
    since, until = _run_and_time(world)
    job = comes_back_after(world, jid, 1.5, since, until)
    assert (job.jid, job.retries, job.remaining) == (jid, 3, 2)
    assert [q.waiting + q.scheduled + q.running for q in world.engine.queues()] == [1]


def test_a_republish_that_changes_the_arguments_fails_the_job_saying_why(world: World) -> None:
    jid = world.app.publish(WLChangedArgs)
    world.work()
    job = world.get(jid)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert job.failure.group == "ValueError"
    assert "ValueError: boom" in job.failure.message
    assert "while handle_failure ran" in job.failure.message
    assert "other arguments" in job.failure.message


def test_handle_failure_that_raises_fails_the_job_and_the_worker_goes_on(world: World) -> None:
    broken = world.app.publish(WLPolicyRaises)
    fine = world.app.publish(WLEchoTask, ["after"])
    world.work()
    job = world.get(broken)
    assert job.state == JobState.FAILED
    assert job.failure is not None
    assert "the policy itself broke" in job.failure.message
    assert world.get(fine).state == JobState.COMPLETE


def test_a_retry_of_its_own_making_completes_the_failed_run(world: World) -> None:
    lanner.set_default_app(world.app)  # where WLEchoTask.publish goes
    jid = world.app.publish(WLFollowUp)
    world.work()
    assert world.get(jid).state == JobState.COMPLETE  # as Kale deletes the message
    assert len(SEEN) == 1
    assert SEEN[0].outcome is None
    world.work()
    runs = events("run")
    assert [e for e in runs if e[1] == jid] == [("run", jid)]  # never again
    assert [e[2] for e in runs if e[1] != jid] == ["follow-up"]


def test_the_message_carries_what_kales_does(world: World) -> None:
    jid = world.app.publish(WLInspected, [1], {"extra": 2}, app_data={"who": "me"})
    since, until = _run_and_time(world)
    world.loop.run_batch(world.queue, [comes_back_after(world, jid, MULTIPLE, since, until)])
    first, second = SEEN
    assert (first.task_id, first.id, first.task_name) == (jid, jid, WLInspected.name)
    assert (first.task_args, first.task_kwargs, first.task_app_data) == (
        [1], {"extra": 2}, {"who": "me"}
    )  # fmt: skip
    assert (first.sqs_queue_name, first.queue) == (world.queue.name, world.queue.name)
    assert isinstance(first.task_inst, WLInspected)
    assert first.task_inst.task_id == jid
    assert first.job is not None
    assert first.job.jid == jid
    assert (first.task_retry_num, first.task_failure_num, first.task_max_retries) == (0, 0, 3)
    assert first.outcome == "retried"
    assert (second.task_retry_num, second.task_failure_num) == (1, 1)


def test_a_clean_task_environment_taking_only_kwargs_keeps_success_a_success(
    world: World,
) -> None:
    jid = world.app.publish(WLKwargsCleaner)
    world.work()
    assert world.get(jid).state == JobState.COMPLETE
    assert events("cleaned") == [("cleaned", ["task_id", "task_name"])]


def test_report_permanent_failure_gets_the_message(world: World) -> None:
    jid = world.app.publish(WLKaleReporter, [7])
    world.work()
    assert events("reported") == [("reported", jid, "no_retries", True)]
    assert SEEN[0].task_args == [7]
    assert world.get(jid).state == JobState.FAILED
