"""Eager mode: a published job runs at once, in the publisher, and never reaches a store.

    app = lanner.App(eager=True)        # or: with lanner.testing.eager(app): ...
    handle = add.delay(2, 3)            # add ran already
    handle.result()                     # 5; TaskFailed (from the task's error) if it failed

The job travels the way it would to a worker: its arguments are encoded by the app's
codec and decoded again, checked against the task's signature, its result kept as JSON,
so what breaks in production breaks here. What eager mode leaves out, on purpose: no
store (nothing to open or clean), each job runs once (no retries), at once (no `delay`,
no waiting for `depends`), without its time limit (no signal is armed in the caller).
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import replace
from typing import TYPE_CHECKING

from lanner import context
from lanner.codec import encode_result
from lanner.errors import ResultError, exception_group
from lanner.handle import JobHandle
from lanner.job import Failure, Job, JobState
from lanner.worker.admission import Rejected, admit

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.records import NewJob

WORKER = "eager"


def run_eagerly(app: App, new: NewJob) -> JobHandle:
    """Run `new` now; return its handle, already settled (complete or failed)."""
    job = _running_job(new)
    token = context.running_job(job)
    try:
        task_class, payload, args, kwargs = admit(job, app.max_data_bytes, app)
        task = task_class(job, payload)
        value = task.run(*args, **kwargs)
        keeps = task_class.keeps_result(app) or task.in_workflow
        result = encode_result(value, task_class.name, app.max_data_bytes) if keeps else None
    except Rejected as rejected:
        return _failed(app, job, rejected.group, rejected.message, None)
    except ResultError as error:
        return _failed(app, job, error.group, str(error), error)
    except Exception as error:  # the task's: kept on its failed job, raised by result()
        return _failed(app, job, exception_group(error), traceback.format_exc(), error)
    finally:
        context.reset(token)
    return JobHandle(job.jid, app, replace(job, state=JobState.COMPLETE, worker="", result=result))


def _failed(app: App, job: Job, group: str, message: str, error: BaseException | None) -> JobHandle:
    failure = Failure(group, message, time.time(), WORKER)
    settled = replace(job, state=JobState.FAILED, worker="", failure=failure)
    return JobHandle(job.jid, app, settled, error)


def _running_job(new: NewJob) -> Job:
    retries = new.retries or 0
    return Job(
        jid=new.jid,
        klass=new.klass,
        queue=new.queue,
        data=str(new.data),  # a plain str: the App's codec makes a subclass (CodecJSON)
        priority=new.priority or 0,
        tags=tuple(new.tags or ()),
        state=JobState.RUNNING,
        retries=retries,
        remaining=retries,
        worker=WORKER,
        expires=float("inf"),
        failure=None,
        dependencies=(),
        dependents=(),
        spawned_from_jid=None,
        tracked=False,
        history_json=json.dumps([{"what": "put", "when": time.time(), "q": new.queue}]),
    )
