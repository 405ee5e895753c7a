"""The App: one explicit configuration (broker, queues, codec) and the tasks it publishes.

    app = lanner.App(broker="sqlite:///lanner.db")

    @app.task(queue="emails", max_retries=5, time_limit=30)
    def send_email(to: str, subject: str) -> None: ...

    send_email.delay("a@example.com", "hi")
    send_email.options(delay=60, priority=10, tags=["welcome"]).delay("b@example.com", "hi")
    app.publish_many([send_email.message("c@example.com", "x"), ...])   # one round trip

Nothing connects at import time: the engine is opened on first use. Kale-style task
classes without an `app` publish through `default_app()`, which is built once per
process from the configuration (LANNER_SETTINGS_MODULE, LANNER_BROKER, or the default
`sqlite:///lanner.db`), and logs where it publishes.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, ParamSpec, TypeVar, overload

from lanner.codec import Codec, JobIdentity, JSONCodec, Payload, SignedPickleCodec
from lanner.engine import Engine
from lanner.engines import open_engine
from lanner.errors import (
    ChubbyTaskException,
    InvalidTimeLimitTaskException,
    MalformedArgument,
    PayloadTooLarge,
)
from lanner.queues import QueueConfig
from lanner.records import NewJob
from lanner.settings import Settings, load_settings
from lanner.task import Task, find_task

logger = logging.getLogger("lanner.app")

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class PublishOptions:
    """Per-publish choices; None means the task's default."""

    queue: str | None = None
    delay: float = 0.0
    priority: int | None = None
    tags: Sequence[str] | None = None
    depends: Sequence[str] | None = None
    jid: str | None = None
    retries: int | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One publish, prepared: for `App.publish_many`."""

    task: type[Task]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    app_data: Any = None
    options: PublishOptions = PublishOptions()


class App:
    """Where tasks are published, and how workers find their configuration."""

    def __init__(
        self,
        broker: str | Engine | None = None,
        *,
        settings: Settings | None = None,
        queues: Sequence[QueueConfig] | None = None,
        codec: Codec | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        if isinstance(broker, str):
            self.settings = replace(self.settings, broker=broker)
        self._engine: Engine | None = None if isinstance(broker, str) or broker is None else broker
        self._queues = tuple(queues) if queues is not None else None
        self._queues_by_name: dict[str, QueueConfig] | None = None
        key = self.settings.pickle_hmac_key
        self.codec: Codec = codec or JSONCodec()
        # What a worker of this app may unpickle: the app's own signed codec, or one
        # made from the settings' key; JSON payloads need nothing.
        self.pickle_codec: SignedPickleCodec | None = None
        if isinstance(codec, SignedPickleCodec):
            self.pickle_codec = codec
        elif key:
            self.pickle_codec = SignedPickleCodec(key)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"App(broker={self.settings.broker!r})"

    @property
    def engine(self) -> Engine:
        """The engine, opened on first use."""
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = open_engine(self.settings.broker)
        return self._engine

    def reopen_engine(self, *, max_wait: float) -> Engine:
        """A new engine on the app's store whose opening and commands give up after about
        `max_wait` seconds (`EngineUnavailable`): for code that must never block on the
        store, such as a pool's supervisor. The app's own engine is not opened for it."""
        if self._engine is not None:
            return self._engine.reopen(max_wait=max_wait)
        return open_engine(self.settings.broker, max_wait=max_wait)

    @property
    def queues(self) -> tuple[QueueConfig, ...]:
        if self._queues is None:
            self._queues = self.settings.queues()
        return self._queues

    def queue_config(self, name: str) -> QueueConfig | None:
        if self._queues_by_name is None:
            self._queues_by_name = {queue.name: queue for queue in self.queues}
        return self._queues_by_name.get(name)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()

    # -- tasks ----------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> TaskFunction[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        queue: str = DEFAULT_QUEUE,
        max_retries: int | None = 4,
        time_limit: float = 60,
        target_runtime: float | None = None,
        priority: int = 0,
        name: str | None = None,
    ) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        queue: str = DEFAULT_QUEUE,
        max_retries: int | None = 4,
        time_limit: float = 60,
        target_runtime: float | None = None,
        priority: int = 0,
        name: str | None = None,
    ) -> Any:
        """Decorate a function as a task (with or without arguments)."""

        def decorate(function: Callable[P, R]) -> TaskFunction[P, R]:
            task_name = name or f"{function.__module__}.{function.__qualname__}"

            def run_task(self: Task, *args: Any, **kwargs: Any) -> Any:
                return function(*args, **kwargs)

            attributes = {
                "queue": queue,
                "max_retries": max_retries,
                "time_limit": time_limit,
                "target_runtime": target_runtime if target_runtime is not None else time_limit,
                "priority": priority,
                "app": self,
                "run_task": run_task,
                "__module__": function.__module__,
                "__qualname__": function.__qualname__,
                "__doc__": function.__doc__,
            }
            task_class = type(function.__name__, (Task,), attributes, name=task_name)
            return TaskFunction(self, function, task_class)

        return decorate(fn) if fn is not None else decorate

    # -- publishing -----------------------------------------------------------------------
    def publish(
        self,
        task: type[Task] | str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        app_data: Any = None,
        queue: str | None = None,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        depends: Sequence[str] | None = None,
        jid: str | None = None,
        retries: int | None = None,
    ) -> str:
        """Publish one run of `task`; return its jid."""
        options = PublishOptions(queue, delay, priority, tags, depends, jid, retries)
        message = Message(_task_class(task), tuple(args), kwargs or {}, app_data, options)
        return self.publish_many([message])[0]

    def publish_many(self, messages: Iterable[Message]) -> list[str]:
        """Publish many runs in one engine round trip (all or none); return their jids."""
        jobs = [self._new_job(message) for message in messages]
        try:
            return self.engine.put_many(jobs)
        except PayloadTooLarge as error:
            raise ChubbyTaskException(str(error)) from None

    def _new_job(self, message: Message) -> NewJob:
        task, options = message.task, message.options
        queue = options.queue or task.queue or DEFAULT_QUEUE
        self._check_time_limit(task, queue)
        jid = options.jid or task._get_task_id(*message.args, **message.kwargs)
        payload = Payload(message.args, message.kwargs, message.app_data)
        data = self.codec.encode(payload, JobIdentity(jid, task.name, queue))
        if len(data) > self.engine.max_data_bytes:
            raise ChubbyTaskException(
                f"{task.name} {jid}: payload is {len(data)} bytes; the engine accepts at most "
                f"{self.engine.max_data_bytes}"
            )
        config = self.queue_config(queue)
        retries = options.retries
        if retries is None:
            retries = task.max_retries if task.max_retries is not None else 0
            # A queue's `retries` is the default of tasks that do not set max_retries.
            inherited = "max_retries" not in vars(task)
            if config is not None and config.retries is not None and inherited:
                retries = config.retries
        return NewJob(
            queue=queue,
            jid=jid,
            klass=task.name,
            data=data,
            delay=options.delay,
            priority=options.priority if options.priority is not None else task.priority,
            tags=options.tags,
            retries=retries,
            depends=options.depends,
        )

    def _check_time_limit(self, task: type[Task], queue: str) -> None:
        config = self.queue_config(queue)
        if config is not None and task.time_limit >= config.visibility_timeout_sec:
            raise InvalidTimeLimitTaskException(
                f"{task.name}: time_limit {task.time_limit} s must be shorter than queue "
                f"{queue!r}'s visibility_timeout_sec {config.visibility_timeout_sec} s"
            )


class TaskFunction(Generic[P, R]):
    """A function made a task: call it directly, or `.delay(...)` it to a worker."""

    def __init__(self, app: App, function: Callable[P, R], task_class: type[Task]) -> None:
        functools.update_wrapper(self, function)
        self.app = app
        self.function = function
        self.task_class = task_class
        self.name = task_class.name

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> str:
        return self.options().delay(*args, **kwargs)

    def message(self, *args: P.args, **kwargs: P.kwargs) -> Message:
        return self.options().message(*args, **kwargs)

    def options(
        self,
        *,
        queue: str | None = None,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        depends: Sequence[str] | None = None,
        jid: str | None = None,
        retries: int | None = None,
        app_data: Any = None,
    ) -> BoundOptions[P]:
        options = PublishOptions(queue, delay, priority, tags, depends, jid, retries)
        return BoundOptions(self.app, self.task_class, options, app_data)


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

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> str:
        return self._app.publish_many([self.message(*args, **kwargs)])[0]


def _task_class(task: type[Task] | str) -> type[Task]:
    if isinstance(task, str):
        found = find_task(task)
        if found is None:
            raise MalformedArgument(f"unknown task {task!r}: no Task subclass has that name")
        return found
    return task


_default_app: App | None = None
_default_lock = threading.Lock()


def default_app() -> App:
    """The process's default App, built once from configuration (see module docstring)."""
    global _default_app
    if _default_app is None:
        with _default_lock:
            if _default_app is None:
                app = App()
                # Publishing to ./lanner.db because nothing was configured deserves a warning.
                configured = {"LANNER_BROKER", "LANNER_SETTINGS_MODULE"} & set(os.environ)
                unset = "" if configured else " (neither LANNER_BROKER nor a settings module set)"
                log = logger.info if configured else logger.warning
                log("lanner: the default app publishes to %s%s", app.settings.broker, unset)
                _default_app = app
    return _default_app


def set_default_app(app: App | None) -> None:
    """Choose the app that Kale-style tasks without an `app` publish through."""
    global _default_app
    _default_app = app
