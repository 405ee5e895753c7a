"""A published job, as its publisher follows it: its state, its job, its result, its cancel.

`JobHandle` is the job's id, a `str` (Kale's `publish` returned the id, and code written
for it keeps working), that can also look at the job through its app's engine:

    handle = add.delay(2, 3)
    handle.state()              # JobState.WAITING, ... (None once the job is gone)
    handle.result(timeout=10)   # 5, once a worker ran it (a task with result=True)
    handle.progress()           # how far along its task said it was (`Job.progress`)
    handle.cancel()

`result()` waits without polling the store (the engine's `wait`), and raises `TaskFailed`
if the job failed, `TimeoutError` if the wait ended first. A job run eagerly
(`App(eager=True)`) is settled before its handle is returned; its failure is raised from
the task's own exception.

From async code, `await handle.aresult(timeout=10)`, `astate()`, `ajob()`, `aprogress()`
and `acancel()` do the same without blocking the event loop (`lanner.offload` says how).
"""

from __future__ import annotations

import functools
import json
import math
import time
from typing import TYPE_CHECKING, Any

from lanner.errors import JobNotFound, TaskFailed
from lanner.job import Job, JobState

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.progress import Progress

_WAIT_CHUNK = 60.0  # a wait with no timeout is a series of waits this long


class JobHandle(str):
    """A job's id that can also follow the job (see the module docstring)."""

    _app: App
    _settled: Job | None  # a job run eagerly, in the publisher's process
    _error: BaseException | None  # what failed it, then

    def __new__(
        cls, jid: str, app: App, settled: Job | None = None, error: BaseException | None = None
    ) -> JobHandle:
        handle = super().__new__(cls, jid)
        handle._app = app
        handle._settled = settled
        handle._error = error
        return handle

    @property
    def jid(self) -> str:
        return str(self)

    def job(self) -> Job | None:
        """The job now, or None if it is gone (cancelled, or past retention)."""
        if self._settled is not None:
            return self._settled
        return self._app.engine.get(self.jid)

    def state(self) -> JobState | None:
        job = self.job()
        return None if job is None else job.state

    def result(self, timeout: float | None = None) -> Any:
        """What the task returned, once its job is complete (None if its task keeps no
        result). Waits up to `timeout` seconds (None: as long as it takes).

        Raises `TaskFailed` (with the failure's group and message) if the job failed,
        `TimeoutError` if it is still pending when the wait ends, `JobNotFound` if it is
        gone (cancelled, or removed after `jobs-history`).
        """
        return self._outcome(self._settled or self._wait(timeout), timeout)

    async def aresult(self, timeout: float | None = None) -> Any:
        """`result()` for async code: the event loop goes on while the job is awaited."""
        return self._outcome(self._settled or await self._await(timeout), timeout)

    def _outcome(self, job: Job | None, timeout: float | None) -> Any:
        """What `result()` answers once its wait returned `job`."""
        if job is None:
            raise JobNotFound(self.jid, "result")
        if job.state == JobState.COMPLETE:
            return None if job.result is None else json.loads(job.result)
        if job.state == JobState.FAILED and job.failure is not None:
            raise TaskFailed(self.jid, job.failure.group, job.failure.message) from self._error
        raise TimeoutError(f"job {self.jid} is still {job.state} after {timeout:g} s")

    def _wait(self, timeout: float | None) -> Job | None:
        deadline = _deadline(timeout)
        while True:
            seconds, last = _chunk(deadline)
            job = self._wait_chunk(seconds)
            if last or job is None or job.finished:
                return job

    async def _await(self, timeout: float | None) -> Job | None:
        """`_wait`, each chunk in a thread (a cancelled awaiter leaves only its chunk)."""
        from lanner import offload

        deadline = _deadline(timeout)
        while True:
            seconds, last = _chunk(deadline)
            job = await offload.wait(functools.partial(self._wait_chunk, seconds))
            if last or job is None or job.finished:
                return job

    def _wait_chunk(self, seconds: float) -> Job | None:
        return self._app.engine.wait(self.jid, timeout=seconds)

    def progress(self) -> Progress | None:
        """How far along its task said it was (`Job.progress`), in its current or last run:
        None if it reported nothing since it was last popped, or the job is gone."""
        from lanner.progress import of

        return of(self.job())

    async def aprogress(self) -> Progress | None:
        """`progress()` for async code."""
        from lanner import offload

        return await offload.call(self.progress)

    async def ajob(self) -> Job | None:
        """`job()` for async code."""
        from lanner import offload

        return await offload.call(self.job)

    async def astate(self) -> JobState | None:
        """`state()` for async code."""
        from lanner import offload

        return await offload.call(self.state)

    async def acancel(self) -> bool:
        """`cancel()` for async code."""
        from lanner import offload

        return await offload.call(self.cancel)

    def cancel(self) -> bool:
        """Cancel the job (a running task is stopped within about a second); True if it
        was cancelled, False if it had finished or was gone already."""
        if self._settled is not None:
            return False
        return bool(self._app.engine.cancel([self.jid]))

    def __repr__(self) -> str:
        return f"JobHandle({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (str(self),))  # pickled as the plain id: an app does not travel


def _deadline(timeout: float | None) -> float | None:
    """When a wait of `timeout` seconds ends (monotonic clock); None: it does not."""
    if timeout is not None and (not math.isfinite(timeout) or timeout < 0):
        raise ValueError(f"timeout must be None or a finite number >= 0, not {timeout!r}")
    return None if timeout is None else time.monotonic() + timeout


def _chunk(deadline: float | None) -> tuple[float, bool]:
    """The next engine wait towards `deadline`: its seconds, and whether it is the last."""
    left = _WAIT_CHUNK if deadline is None else max(0.0, deadline - time.monotonic())
    return min(left, _WAIT_CHUNK), deadline is not None and left <= _WAIT_CHUNK
