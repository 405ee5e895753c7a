"""`LannerBackend`: Django's task backend API on a lanner broker (SQLite, Redis, SQS).

    TASKS = {
        "default": {
            "BACKEND": "lanner.contrib.django.LannerBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"broker": "redis://localhost:6379/0"},
        }
    }

OPTIONS: `broker` (a lanner broker URL; default: lanner's settings), `retries` (retries
after a failed run, with lanner's backoff; default 0: Django's tasks fail at their first
error), `time_limit` (seconds a run may take; default None), `database` (the Django
database whose transactions an enqueue joins; default "default") and `outbox` (Redis,
SQS: enqueue inside `transaction.atomic()` through the outbox; default False).

How each part of Django's API is honoured:

- `priority` (-100 to 100, higher first) is the job's lanner priority, unchanged: lanner's
  priorities are any integers, higher first, so Django's range is a part of lanner's.
- `run_after` is the job's delay: the seconds from the enqueue to it (none if it passed).
- `queue_name` is the lanner queue (its name must pass lanner's naming rule: `check`).
- `get_result()` reads the job: `results.py` maps it onto Django's `TaskResult`.
- async tasks run on the worker's event loop; sync ones in its process (or threads).

An enqueue inside `transaction.atomic()` on the `database`: with a SQLite broker on that
database's own file, the job is written by Django's connection, in the transaction
(`App.publish_many(within=...)`); with `outbox`, a row of `OutboxEntry` is (relayed by
`manage.py lanner_worker`). Elsewhere, or outside a transaction, it is published at once.
"""

from __future__ import annotations

import os
import time
from typing import Any

from lanner.app import App
from lanner.checks import names
from lanner.contrib.django import compat
from lanner.contrib.django.results import relayed_result, task_result
from lanner.contrib.django.tasks import lanner_task_for
from lanner.engines import sqlite_path
from lanner.errors import InvalidName, MalformedArgument
from lanner.prepared import Message, PublishOptions
from lanner.queues import QueueConfig


class LannerBackend(compat.BaseTaskBackend):  # type: ignore[misc]
    """Django's tasks, published to and run by lanner (see the module docstring)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        broker = options.pop("broker", None)
        self.retries = int(options.pop("retries", 0))
        time_limit = options.pop("time_limit", None)
        self.time_limit = None if time_limit is None else float(time_limit)
        self.database: str = options.pop("database", "default")
        self.outbox = bool(options.pop("outbox", False))
        if options:
            unknown = ", ".join(sorted(options))
            raise compat.InvalidTaskBackend(f"TASKS[{alias!r}]: unknown OPTIONS {unknown}")
        self.app = App(broker=broker, results=True)
        if self.app.settings.broker.startswith("sqs://"):
            # SQS keeps no job to look up, and no order by priority (docs/engines/sqs.md).
            self.supports_get_result = False
            self.supports_priority = False

    def __repr__(self) -> str:
        return f"LannerBackend({self.alias!r}, {self.app!r})"

    # -- Django's API ---------------------------------------------------------------------
    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        try:
            names.queue_name(task.queue_name)
        except InvalidName as error:
            raise compat.InvalidTask(str(error)) from None
        lanner_task_for(self, task)
        if self.app.settings.broker.startswith("sqlite:"):
            # Opened (its tables made) at the task's definition, outside any transaction:
            # opening it first inside one that already wrote would wait for that one.
            _ = self.app.engine

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        args, kwargs = compat.normalize_json(args), compat.normalize_json(kwargs)
        run_after = task.run_after.timestamp() if task.run_after is not None else None
        delay = 0.0 if run_after is None else max(0.0, run_after - time.time())
        message = Message(
            lanner_task_for(self, task),
            tuple(args),
            kwargs,
            {"priority": task.priority, "queue_name": task.queue_name, "run_after": run_after},
            PublishOptions(queue=task.queue_name, delay=delay, priority=task.priority),
        )
        jid = self._publish(message)
        from django.utils import timezone

        result = compat.TaskResult(
            task=task,
            id=jid,
            status=compat.TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        compat.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        if not self.supports_get_result:
            raise NotImplementedError("results cannot be read back from SQS (docs/engines/sqs.md)")
        try:
            job = self.app.engine.get(names.label(result_id, "result id"))
        except MalformedArgument:
            job = None
        if job is None and self.outbox:
            from lanner.contrib.django.outbox import find

            waiting = find(self.database, result_id)  # committed, not yet relayed
            django_task = _django_task(waiting[0].klass) if waiting is not None else None
            if waiting is not None and django_task is not None:
                return relayed_result(*waiting, self.alias, django_task)
        if job is None:
            raise compat.TaskResultDoesNotExist(f"{result_id}: no such job")
        django_task = _django_task(job.klass)
        if django_task is None:
            raise compat.TaskResultDoesNotExist(f"{result_id}: {job.klass} is not a Django task")
        return task_result(job, self.alias, django_task)

    def check(self, **kwargs: Any) -> list[Any]:
        from django.core import checks

        errors = []
        for queue in sorted(self.queues):
            try:
                names.queue_name(queue)
            except InvalidName as error:
                errors.append(checks.Error(f"TASKS[{self.alias!r}] QUEUES: {error}"))
        return errors

    # -- lanner's side --------------------------------------------------------------------
    def served_queues(self) -> tuple[QueueConfig, ...]:
        """What `manage.py lanner_worker` serves unless told: the QUEUES of this backend."""
        return tuple(QueueConfig(name) for name in sorted(self.queues))

    def _publish(self, message: Message) -> str:
        """Publish in the Django transaction open on `database`, where it can be joined."""
        from django.db import connections

        connection = connections[self.database]
        if not connection.in_atomic_block:
            return self.app.publish_many([message])[0].jid
        path = sqlite_path(self.app.settings.broker)
        joinable = path is not None and connection.vendor == "sqlite"
        if joinable and _same_file(connection.settings_dict["NAME"], path or ""):
            connection.ensure_connection()
            return self.app.publish_many([message], within=connection.connection)[0].jid
        if self.outbox:
            from lanner.contrib.django.outbox import write

            job = self.app._new_job(message)
            # A plain str: the App's codec makes a subclass (CodecJSON) only its put reads.
            write(self.database, [job._replace(data=str(job.data))])
            return job.jid
        return self.app.publish_many([message])[0].jid


def _same_file(name: Any, path: str) -> bool:
    try:
        return os.path.samefile(str(name), path)
    except OSError:
        return False


def _django_task(path: str) -> Any:
    """The Django task a job's klass names, or None (another kind of job, or gone)."""
    from django.utils.module_loading import import_string

    try:
        found = import_string(path)
    except ImportError:
        return None
    return found if isinstance(found, compat.Task) else None
