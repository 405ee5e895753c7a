"""The publish options are written once (`lanner.prepared`): the keyword arguments that
`App.publish`, `task.options` and `@app.task` take, and the values they make, stay in step."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import lanner
from lanner.flow import FlowOptions
from lanner.prepared import FlowArguments, PublishArguments, PublishOptions
from lanner.taskfunction import TaskArguments, TaskOptions


def test_the_arguments_name_the_fields_of_the_values() -> None:
    fields = {field.name for field in dataclasses.fields(PublishOptions)}
    assert set(PublishArguments.__annotations__) == fields - {"flow", "debounce"}
    flow_fields = {field.name for field in dataclasses.fields(FlowOptions)}
    assert set(FlowArguments.__annotations__) == flow_fields | {"debounce"}
    task_keys = set(TaskArguments.__annotations__) - set(FlowArguments.__annotations__)
    assert task_keys == set(TaskOptions._fields) - {"flow", "debounce"}


def test_each_way_of_choosing_options_makes_the_same(tmp_path: Path) -> None:
    app = lanner.App(broker=f"sqlite:///{tmp_path}/jobs.db")

    @app.task(queue="q", max_retries=2, rate_limit="5/s", debounce=3)
    def work(n: int) -> None: ...

    assert work.task_class.max_retries == 2
    assert work.task_class.rate_limit == "5/s"
    debounce = work.task_class.debounce
    assert debounce is not None
    assert debounce.window == 3
    chosen = work.options(priority=3, delay=2.0, max_concurrency=1, concurrency_key="k")
    message = chosen.message(1)
    assert message.options.priority == 3
    assert message.options.delay == 2.0
    assert message.options.flow == FlowOptions(None, None, "k", 1, None)
    assert work.options() is work.options()  # none chosen: one made with the task
    handle = app.publish(work.task_class, (1,), queue="other", priority=4)
    job = app.engine.get(handle)
    assert job is not None
    assert (job.queue, job.priority) == ("other", 4)


def test_an_unknown_option_is_refused(tmp_path: Path) -> None:
    app = lanner.App(broker=f"sqlite:///{tmp_path}/jobs.db")
    with pytest.raises(TypeError, match="colour"):
        app.task(colour="red")  # type: ignore[call-overload]

    @app.task
    def work() -> None: ...

    with pytest.raises(TypeError, match="colour"):
        work.options(colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="colour"):
        app.publish(work.task_class, colour="red")  # type: ignore[call-arg]
