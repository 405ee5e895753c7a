"""The decorator style: a function made a task by `@app.task`, and its publish options.

The decorator builds a `Task` subclass around the function (the machinery both styles
share), whose `run_task` has the function's own signature: a job whose arguments do not
fit the function fails at once (`lanner-bad-arguments`) rather than being retried. An
`async def` function runs on its worker's event loop (`lanner.inprocess.coroutines`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, ParamSpec, TypeVar, Unpack

from lanner.flow import Debounce, FlowOptions
from lanner.prepared import (
    FLOW_KEYS,
    FlowArguments,
    Message,
    OptionsArguments,
    PublishOptions,
    flow_choices,
)
from lanner.task import Task

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.handle import JobHandle
    from lanner.workflows.canvas import Signature

P = ParamSpec("P")
R = TypeVar("R")


DEFAULT_QUEUE: Final = "default"


class TaskArguments(FlowArguments, total=False):
    """The keyword arguments of `@app.task(...)` (`App.task` documents them); the
    defaults are `TaskOptions`'s."""

    queue: str
    max_retries: int | None
    time_limit: float | None
    target_runtime: float | None
    priority: int
    name: str | None
    result: bool | None


class TaskOptions(NamedTuple):
    """What `@app.task(...)` was given, with the defaults of what it was not."""

    queue: str = DEFAULT_QUEUE
    max_retries: int | None = 4
    time_limit: float | None = None  # None: no time limit
    target_runtime: float | None = None  # None: the time limit
    priority: int = 0
    name: str | None = None
    result: bool | None = None
    flow: FlowOptions | None = None
    debounce: Debounce | None = None

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> TaskOptions:
        """The options `arguments` (TaskArguments) choose."""
        flow, debounce = flow_choices(arguments)
        chosen = {key: value for key, value in arguments.items() if key not in FLOW_KEYS}
        return cls(**chosen, flow=flow, debounce=debounce)


def task_class_for(app: App, function: Callable[..., Any], options: TaskOptions) -> type[Task]:
    """The Task subclass that runs `function` (registered under its dotted name)."""

    def call(self: Task, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    async def await_call(self: Task, *args: Any, **kwargs: Any) -> Any:
        return await function(*args, **kwargs)

    # An `async def` run_task, so that `Task.runs_async` tells.
    run_task: Callable[..., Any] = await_call if inspect.iscoroutinefunction(function) else call

    # run_task checks a job's arguments against the function's own parameters.
    signature = inspect.signature(function)
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    run_task.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *signature.parameters.values()]
    )
    attributes = {
        "queue": options.queue,
        "max_retries": options.max_retries,
        "time_limit": options.time_limit,
        "target_runtime": (
            options.target_runtime if options.target_runtime is not None else options.time_limit
        ),
        "priority": options.priority,
        "keep_result": options.result,
        **_flow_attributes(options.flow),
        **({"debounce": options.debounce} if options.debounce is not None else {}),
        "app": app,
        "run_task": run_task,
        "__module__": function.__module__,
        "__qualname__": function.__qualname__,
        "__doc__": function.__doc__,
    }
    name = options.name or f"{function.__module__}.{function.__qualname__}"
    return type(function.__name__, (Task,), attributes, name=name)


def _flow_attributes(flow: FlowOptions | None) -> dict[str, Any]:
    """The Task class attributes of what `@app.task` gave (FLOW); none if it gave none."""
    if flow is None:
        return {}
    # A callable key stays a plain function of the arguments, not a method.
    return {
        "rate_limit": flow.rate_limit,
        "rate_key": staticmethod(flow.rate_key) if callable(flow.rate_key) else flow.rate_key,
        "concurrency_key": (
            staticmethod(flow.concurrency_key)
            if callable(flow.concurrency_key)
            else flow.concurrency_key
        ),
        "max_concurrency": flow.max_concurrency,
        "fair_key": staticmethod(flow.fair_key) if callable(flow.fair_key) else flow.fair_key,
    }


class TaskFunction(Generic[P, R]):
    """A function made a task: call it directly, or `.delay(...)` it to a worker."""

    def __init__(self, app: App, function: Callable[P, R], task_class: type[Task]) -> None:
        functools.update_wrapper(self, function)
        self.app = app
        self.function = function
        self.task_class = task_class
        self.name = task_class.name
        # `.delay()`'s: no options chosen (made once, not at every publish).
        self._plain: BoundOptions[P] = BoundOptions(app, task_class, PublishOptions(), None)

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        return self._plain.delay(*args, **kwargs)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """`delay()` for async code: the event loop goes on while the job is published."""
        return await self.options().adelay(*args, **kwargs)

    def message(self, *args: P.args, **kwargs: P.kwargs) -> Message:
        return self.options().message(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature of this task (`lanner.workflows`): in a chain, the previous step's
        result comes before `args`."""
        return self.options().s(*args, **kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: it runs after the previous step, without its result."""
        return self.options().si(*args, **kwargs)

    def options(
        self, *, app_data: Any = None, **arguments: Unpack[OptionsArguments]
    ) -> BoundOptions[P]:
        """Publish options of one run (`lanner.prepared.PublishArguments`); the FLOW ones
        override the task's (docs/flow-control.md)."""
        if not arguments and app_data is None:
            return self._plain
        return BoundOptions(self.app, self.task_class, PublishOptions.of(arguments), app_data)


class BoundOptions(Generic[P]):
    """A task with publish options chosen: `.delay(...)` publishes it."""

    def __init__(
        self, app: App, task_class: type[Task], options: PublishOptions, app_data: Any
    ) -> None:
        self._app = app
        self._task_class = task_class
        self._options = options
        self._app_data = app_data

    def message(self, *args: P.args, **kwargs: P.kwargs) -> Message:
        return Message(self._task_class, args, kwargs, self._app_data, self._options)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        return self._app.publish_many([self.message(*args, **kwargs)])[0]

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        from lanner.workflows.canvas import Signature

        return Signature(self._task_class, self._app, args, kwargs, self._options,
                         self._app_data)  # fmt: skip

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        from lanner.workflows.canvas import Signature

        return Signature(self._task_class, self._app, args, kwargs, self._options,
                         self._app_data, immutable=True)  # fmt: skip

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """`delay()` for async code: the event loop goes on while the job is published."""
        return (await self._app.apublish_many([self.message(*args, **kwargs)]))[0]
