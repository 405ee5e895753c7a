"""A FastAPI application on lanner: its async handlers publish jobs and read their results
without blocking the event loop, and lanner's dashboard is served beside its API.

    pip install 'lanner[web]' fastapi uvicorn
    uvicorn fastapi_app:api                       # the API, and the dashboard at /
    lanner worker -A fastapi_app:tasks -c 2 -t 50  # the pool that runs the jobs

Both read LANNER_BROKER (default: sqlite:///jobs.db, in the folder they run in), so that
they share one store; docs/integrations.md walks through it. tests/contrib runs it with a
real pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel

import lanner
from lanner.web import create_app

tasks = lanner.App(broker=os.environ.get("LANNER_BROKER", "sqlite:///jobs.db"), results=True)


@tasks.task(queue="words", max_retries=0, time_limit=30)  # counting again would not help
async def count_words(text: str) -> dict[str, int]:
    """An async task: a worker awaits it on its event loop, beside others (`-t 50`)."""
    await asyncio.sleep(0)  # where a real task awaits its HTTP client or database
    words = text.split()
    if not words:
        raise ValueError("no words to count")
    return {"words": len(words), "distinct": len({word.lower() for word in words})}


class Text(BaseModel):
    text: str


@contextlib.asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    # The dashboard is made at startup, not at import: the workers import this module too
    # (`-A fastapi_app:tasks`) and have no use for it. Mounted at / after the API's routes, so
    # /api/... stays the API's; its pages link from the root. A mounted app's own lifespan
    # does not run by itself: its live updates start here.
    dashboard = create_app(tasks.engine, token=os.environ.get("LANNER_WEB_TOKEN"))
    api.mount("/", dashboard)
    async with dashboard.router.lifespan_context(dashboard):
        yield
    tasks.close()


api = FastAPI(title="word counts", lifespan=lifespan)


@api.post("/api/counts", status_code=202)
async def submit(body: Text) -> dict[str, str]:
    """Publish a job; the put runs in a thread while the event loop serves other requests."""
    handle = await count_words.adelay(body.text)
    return {"jid": handle, "result": f"/api/counts/{handle}"}


@api.get("/api/counts/{jid}")
async def result(jid: str, wait: float = Query(0.0, ge=0, le=30)) -> dict[str, Any]:
    """The job's result, waiting up to `wait` seconds for it (the loop goes on meanwhile)."""
    try:
        handle = tasks.handle(jid)
        counted = await handle.aresult(timeout=wait)
    except lanner.InvalidName:
        raise HTTPException(404, "no such job") from None
    except lanner.JobNotFound:
        raise HTTPException(404, f"no job {jid}") from None
    except lanner.TaskFailed as failed:
        return {"jid": jid, "state": "failed", "error": failed.group}
    except TimeoutError:
        return {"jid": jid, "state": await handle.astate()}
    return {"jid": jid, "state": "complete", "result": counted}
