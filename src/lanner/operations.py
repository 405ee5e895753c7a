"""Operations on a store that take more than one engine call, for Python code and the CLI.

    retry_failed(engine, group, queue=None, count=None)  failed jobs back to be run again
    list_jobs(engine, state, queue=None, limit=25)       the jobs of one state, across queues
    drain(app, queues=None, max_jobs=None)               run what is ready, in this process

The engine contract (`lanner.engine.Engine`) has one call per command; this module owns
what is built from several: walking a failure group page by page, listing every queue in
turn, and running queues empty through the real worker loop. The `lanner` commands call
these functions and only render what they return; tests and scripts can call them directly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from lanner.engine import Engine
from lanner.errors import MalformedArgument
from lanner.job import Job
from lanner.queues import QueueConfig
from lanner.records import RecurringJob

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.selectors import Ready
    from lanner.worker.loop import WorkerLoop

__all__ = ["LISTABLE_STATES", "RETRY_PAGE", "drain", "list_jobs", "retry_failed"]

RETRY_PAGE: Final = 500
"""Failed jobs read, or put back, per engine call when `retry_failed` walks a group."""

LISTABLE_STATES: Final = (
    "waiting",
    "running",
    "stalled",
    "scheduled",
    "depends",
    "complete",
    "recurring",
)
"""The states `list_jobs` takes; `complete` jobs belong to no queue."""


# -- retrying failures --------------------------------------------------------------------
def retry_failed(
    engine: Engine, group: str, *, queue: str | None = None, count: int | None = None
) -> dict[str, int]:
    """Put up to `count` (None: all) of the oldest failed jobs of `group` back to be run.

    With `queue` they all go into that queue; without, each goes back into the queue it
    failed in. Returns how many went into each queue, in the order they went; a queue that
    got none is left out, so an empty group gives `{}`. Jobs that fail into the group
    meanwhile are newer than those being retried, so they stay failed.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise MalformedArgument(f"count must be None or an int >= 1, not {count!r}")
    if queue is None:
        return _retry_home(engine, group, count)
    return _retry_into(engine, group, queue, count)


def _retry_into(engine: Engine, group: str, queue: str, count: int | None) -> dict[str, int]:
    moved = 0
    while count is None or moved < count:
        step = RETRY_PAGE if count is None else min(RETRY_PAGE, count - moved)
        done = engine.unfail(queue, group, step)
        moved += done
        if done < step:
            break
    return {queue: moved} if moved else {}


def _oldest_failed(engine: Engine, group: str, size: int) -> list[Job]:
    """The `size` oldest jobs of `group`, oldest first (the order `unfail` takes them in)."""
    total = engine.failed(group, 0, 0).total
    while True:
        page = engine.failed(group, max(0, total - size), size)
        if page.total == total:  # else jobs failed in between and shifted the page: again
            return list(reversed(page.jobs))
        total = page.total


def _retry_home(engine: Engine, group: str, count: int | None) -> dict[str, int]:
    # `unfail` takes the oldest jobs of a group into one queue, so the oldest jobs are read
    # first and each run of consecutive jobs of one queue is unfailed into that queue.
    moved: dict[str, int] = {}
    total = 0
    while count is None or total < count:
        size = RETRY_PAGE if count is None else min(RETRY_PAGE, count - total)
        oldest = _oldest_failed(engine, group, size)
        if not oldest:
            break
        for queue, run in itertools.groupby(oldest, key=lambda job: job.queue):
            wanted = len(list(run))
            done = engine.unfail(queue, group, wanted)
            moved[queue] = moved.get(queue, 0) + done
            total += done
            if done < wanted:  # someone else is emptying the group: stop guessing
                return moved
    return moved


# -- listing ------------------------------------------------------------------------------
def list_jobs(
    engine: Engine, state: str = "waiting", *, queue: str | None = None, limit: int = 25
) -> list[Job | RecurringJob]:
    """Up to `limit` jobs in `state`, of `queue` or else of every queue in turn (by name).

    `state` is one of `LISTABLE_STATES`. Jobs come in the order the engine keeps them
    (waiting ones highest priority first; complete ones, which belong to no queue, newest
    first); `recurring` gives the recurring jobs' templates. The state is the one the
    engine lists a job under, which is what a worker sees: a due scheduled job is
    `waiting`, a running job whose lock ran out `stalled`.
    """
    if state not in LISTABLE_STATES:
        raise MalformedArgument(f"state must be one of {', '.join(LISTABLE_STATES)}, not {state!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise MalformedArgument(f"limit must be an int >= 1, not {limit!r}")
    if state == "complete":
        if queue is not None:
            raise MalformedArgument("complete jobs belong to no queue: give no queue")
        return list(engine.multiget(engine.jobs(state, None, 0, limit)))
    found: list[Job | RecurringJob] = []
    for name in [queue] if queue is not None else [q.name for q in engine.queues()]:
        jids = engine.jobs(state, name, 0, limit - len(found))
        if state == "recurring":
            templates = (engine.recur_get(jid) for jid in jids)
            found += [template for template in templates if template is not None]
        else:
            found += engine.multiget(jids)
        if len(found) >= limit:
            break
    return found


# -- running queues in this process -------------------------------------------------------
def drain(
    app: App,
    *,
    queues: Sequence[str | QueueConfig] | None = None,
    max_jobs: int | None = None,
    raise_errors: bool = True,
) -> int:
    """Run the jobs ready in `queues` in this process, as a worker would; return how many ran.

    Meant for tests: publish, `drain(app)`, then check what the tasks did and the jobs'
    states. `queues` are names or `QueueConfig`s (default: `app.served_queues()`, the
    configured queues and those of the app's tasks); a name the app configures takes that
    configuration, any other the `QueueConfig` defaults. As a worker does, drain first
    stores their settings in the engine (a pop's lock is the queue's
    `visibility_timeout_sec`).

    With `raise_errors` (the default), the first task error is raised once its batch has
    run (the job itself retried or failed as under a worker), and a job that cannot reach
    its task (unknown task, bad arguments) raises `TaskFailed` with its failure group;
    `raise_errors=False` runs everything and leaves the failures in the store.

    Every job goes through lanner's worker loop (`WorkerLoop.run_batch`) and ends as under
    a worker: completed, retried with the settings' backoff, failed into its group, or
    given back when `should_run_task` says no. Queues are taken highest priority first, a
    `batch_size` at a time, until none gives a job (waiting, due, or stalled past its lock,
    jobs the tasks publish meanwhile included) or `max_jobs` jobs ran. Nothing is waited
    for: a job scheduled for later, such as a retry with a delay, stays scheduled; a paused
    queue gives nothing.

    The count is of jobs whose task ran, successfully or not. A job that never reaches its
    task (an unknown task, data that cannot be decoded) fails into its `lanner-*` group
    uncounted. Jobs that come back without running (given back with no delay, as when a
    task's `time_limit` outlasts the queue's lock) end the draining of their queue rather
    than go round forever; a task that publishes a new job every time it runs needs
    `max_jobs`.

    The soft time limit (`TimeLimitExceeded` raised inside a task at its `time_limit`)
    uses SIGALRM, which only the main thread receives: called from another thread, drain
    runs tasks without it, so nothing stops a task that overruns. Engine errors (such as
    `EngineUnavailable`) are raised, not waited out.
    """
    # Imported here: the CLI imports this module for retry and listing, not the worker.
    from lanner.selectors import HighestPriorityFirst
    from lanner.worker.loop import WorkerLoop, configure_queues

    if max_jobs is not None and (
        isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 0
    ):
        raise MalformedArgument(f"max_jobs must be None or an int >= 0, not {max_jobs!r}")
    configs = _queues_to_drain(app, queues)
    errors: list[BaseException] = []
    # A deterministic selector: the same jobs run in the same order on every run of a test.
    loop = WorkerLoop(
        app,
        configs,
        HighestPriorityFirst(),
        configure=False,
        on_error=(lambda job, error: errors.append(error)) if raise_errors else None,
        give_back_held=False,
    )
    configure_queues(app.engine, configs)
    try:
        return _drain(app, loop, configs, max_jobs, errors)
    finally:
        loop.close()


def _drain(
    app: App,
    loop: WorkerLoop,
    configs: tuple[QueueConfig, ...],
    max_jobs: int | None,
    errors: list[BaseException],
) -> int:
    ran = 0
    empty: set[str] = set()  # queues whose last pop gave nothing
    cycling: set[str] = set()  # queues whose jobs come back without running
    unrun: set[str] = set()  # jids of batches in which no task ran
    while max_jobs is None or ran < max_jobs:
        candidates = [q for q in configs if q.name not in empty and q.name not in cycling]
        if not candidates:
            break
        queue = loop.selector.select(candidates, _ready(candidates))
        wanted = queue.batch_size if max_jobs is None else min(queue.batch_size, max_jobs - ran)
        jobs = app.engine.pop(queue.name, loop.worker, wanted)
        if not jobs:
            empty.add(queue.name)
            continue
        before = loop.processed
        loop.run_batch(queue, jobs)
        if errors:
            raise errors[0]
        ran += loop.processed - before
        if loop.processed == before:
            jids = {job.jid for job in jobs}
            if jids <= unrun:
                cycling.add(queue.name)
            unrun |= jids
        # The batch may have made work anywhere: retries, and jobs its tasks published.
        empty.clear()
    return ran


def _ready(queues: Sequence[QueueConfig]) -> Ready:
    """`ready()` for a selector: every queue drain has not yet found empty may have work."""
    names = frozenset(queue.name for queue in queues)
    return lambda: names


def _queues_to_drain(
    app: App, queues: Sequence[str | QueueConfig] | None
) -> tuple[QueueConfig, ...]:
    if queues is None:
        return app.served_queues()
    if isinstance(queues, str):
        raise MalformedArgument(f"queues must be a list of names, not a str ({queues!r})")
    configs = tuple(
        queue if isinstance(queue, QueueConfig) else app.queue_config(queue) or QueueConfig(queue)
        for queue in queues
    )
    if not configs:
        raise MalformedArgument("no queues to drain")
    return configs
