"""What the dashboard changes: signing in and out, retrying and cancelling failed jobs,
pausing queues. Every action is a POST checked by `security.Guard.may_act` (token, origin,
CSRF value), runs the engine work on the thread pool, and answers with a redirect back to
the page it came from (`next`, a path of this dashboard) carrying a one-line message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from lanner.checks.names import label, queue_name
from lanner.engine import Engine
from lanner.errors import InvalidState, JobNotFound
from lanner.job import JobState
from lanner.operations import retry_failed
from lanner.web.security import SESSION_COOKIE, Guard, same_origin

WRONG_TOKEN_PAUSE_SEC: Final = 0.5
CANCEL_PAGE: Final = 500
"""Failed jobs read, then cancelled, per engine call when a whole group is cancelled."""


def _back(request: Request, next_path: object, message: str) -> Response:
    path = next_path if isinstance(next_path, str) else "/"
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        path = "/"  # only back to this dashboard, never to another site
    separator = "&" if "?" in path else "?"
    return RedirectResponse(f"{path}{separator}{urlencode({'flash': message})}", status_code=303)


async def login(request: Request) -> Response:
    guard: Guard = request.app.state.guard
    form = await request.form()
    if not same_origin(request):
        return PlainTextResponse("refused: the request came from another site", status_code=403)
    if not guard.check_token(str(form.get("token", ""))):
        await asyncio.sleep(WRONG_TOKEN_PAUSE_SEC)  # guessing costs time; other requests go on
        return _back(request, "/login", "wrong token" if guard.token else "read-only: no token")
    response = _back(request, form.get("next"), "signed in")
    response.set_cookie(SESSION_COOKIE, guard.session_value(), httponly=True, samesite="strict")
    return response


async def logout(request: Request) -> Response:
    response = _back(request, "/", "signed out")
    response.delete_cookie(SESSION_COOKIE)
    return response


def retry_group(engine: Engine, group: str) -> str:
    moved = retry_failed(engine, group)
    return f"retried {sum(moved.values())} jobs of {group}"


def cancel_group(engine: Engine, group: str) -> str:
    cancelled = 0
    while True:
        page = engine.failed(group, 0, CANCEL_PAGE)
        if not page.jobs:
            return f"cancelled {cancelled} jobs of {group}"
        done = engine.cancel([job.jid for job in page.jobs])
        cancelled += len(done)
        if not done:  # someone else holds them (dependents): stop rather than spin
            return f"cancelled {cancelled} jobs of {group}; the rest could not be cancelled"


def retry_job(engine: Engine, jid: str) -> str:
    """A failed job back into its queue, as it was put (tags, priority, retries)."""
    job = engine.get(jid)
    if job is None:
        raise JobNotFound(jid, "retry")
    if job.state is not JobState.FAILED:
        raise InvalidState(f"job {jid} is {job.state.value}, not failed: nothing to retry")
    engine.requeue(
        job.queue,
        jid,
        job.klass,
        job.data,
        priority=job.priority,
        tags=job.tags,
        retries=job.retries,
    )
    return f"retried {jid} into {job.queue}"


def cancel_job(engine: Engine, jid: str) -> str:
    return f"cancelled {jid}" if engine.cancel([jid]) else f"{jid} was not cancelled"


def pause(engine: Engine, queue: str) -> str:
    engine.pause([queue])
    return f"paused {queue}"


def unpause(engine: Engine, queue: str) -> str:
    engine.unpause([queue])
    return f"unpaused {queue}"


ACTIONS: Final[dict[str, tuple[Callable[[Engine, str], str], str]]] = {
    "retry-group": (retry_group, "group"),
    "cancel-group": (cancel_group, "group"),
    "retry-job": (retry_job, "jid"),
    "cancel-job": (cancel_job, "jid"),
    "pause": (pause, "queue"),
    "unpause": (unpause, "queue"),
}


async def act(request: Request) -> Response:
    """POST /act/<action> with the form's `group`, `jid` or `queue`, `csrf` and `next`."""
    guard: Guard = request.app.state.guard
    form = await request.form()
    refusal = guard.may_act(request, form)
    if refusal is not None:
        return PlainTextResponse(refusal, status_code=403)
    action = ACTIONS.get(request.path_params["action"])
    if action is None:
        return PlainTextResponse("no such action", status_code=404)
    run, field = action
    raw = form.get(field, "")
    subject = queue_name(raw) if field == "queue" else label(raw, field)
    message = await run_in_threadpool(run, request.app.state.engine, subject)
    return _back(request, form.get("next"), message)
