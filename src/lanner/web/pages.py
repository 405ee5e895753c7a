"""The dashboard's pages: one handler per URL, each reading through `reads` and rendering
one template. Handlers are plain functions: Starlette runs them on its thread pool, so
a slow store never blocks the event loop that serves the live updates."""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from lanner.checks.names import label, queue_name
from lanner.engine import Capability, Engine
from lanner.errors import MalformedArgument
from lanner.progress import of as progress_of
from lanner.web import charts, graphs, reads
from lanner.web.rendering import render
from lanner.workflows import graph

LISTINGS = reads.QUEUE_STATES
MAX_OFFSET = 10_000_000


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def offset_of(request: Request) -> int:
    raw = request.query_params.get("offset", "0")
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_OFFSET:
        raise MalformedArgument(f"offset must be a whole number up to {MAX_OFFSET}, not {raw!r}")
    return int(raw)


def day_of(request: Request) -> float:
    """The day asked for (`?day=YYYY-MM-DD`, UTC), as a Unix time inside it; default today."""
    raw = request.query_params.get("day")
    if not raw:
        return time.time()
    try:
        return float(calendar.timegm(time.strptime(raw, "%Y-%m-%d")))
    except ValueError:
        raise MalformedArgument(f"day must be YYYY-MM-DD, not {raw!r}") from None


def overview(request: Request) -> Response:
    return render(request, "overview.html", {"overview": reads.overview(engine_of(request))})


def queues_fragment(request: Request) -> Response:
    """The queue table alone: what the overview re-reads when events arrive."""
    return render(request, "_queues.html", {"overview": reads.overview(engine_of(request))})


def queue(request: Request) -> Response:
    engine = engine_of(request)
    name = queue_name(request.path_params["name"])
    state = request.query_params.get("state", "waiting")
    if state not in LISTINGS:
        raise MalformedArgument(f"state must be one of {', '.join(LISTINGS)}, not {state!r}")
    offset, day = offset_of(request), day_of(request)
    context: dict[str, Any] = {
        "name": name,
        "counts": engine.queue_counts(name),
        "state": state,
        "states": LISTINGS,
    }
    if reads.has(engine, Capability.LISTING):
        context["listing"] = reads.queue_jobs(engine, name, state, offset)
    if reads.has(engine, Capability.STATS):
        history = reads.queue_history(engine, name, day)
        today = history[-1].stats
        context.update(
            day=time.strftime("%Y-%m-%d", time.gmtime(day)),
            stats=today,
            wait=reads.timing(today, "wait"),
            run=reads.timing(today, "run"),
            wait_chart=charts.histogram(today.wait.histogram, "wait"),
            run_chart=charts.histogram(today.run.histogram, "run"),
            throughput_chart=charts.bars(
                [(time.strftime("%m-%d", time.gmtime(d.day)), d.stats.run.count) for d in history],
                "jobs run per day",
                "jobs",
            ),
            failed_chart=charts.bars(
                [(time.strftime("%m-%d", time.gmtime(d.day)), d.stats.failed) for d in history],
                "jobs failed per day",
                "jobs",
            ),
        )
    return render(request, "queue.html", context)


def jobs(request: Request) -> Response:
    """Jobs by tag (`?tag=`), by failure group (`?group=`), or complete ones (`?state=complete`)."""
    engine = engine_of(request)
    offset = offset_of(request)
    if "tag" in request.query_params:
        listing = reads.tagged_jobs(engine, label(request.query_params["tag"], "tag"), offset)
    elif "group" in request.query_params:
        group = label(request.query_params["group"], "group")
        return render(
            request,
            "failures.html",
            {"group": group, "listing": reads.failed_jobs(engine, group, offset)},
        )
    elif request.query_params.get("state") == "complete":
        listing = reads.complete_jobs(engine, offset)
    else:
        raise MalformedArgument("list jobs by ?tag=, ?group= or ?state=complete")
    return render(request, "jobs.html", {"listing": listing})


def job(request: Request) -> Response:
    engine = engine_of(request)
    jid = label(request.query_params.get("jid", ""), "jid")
    found = engine.get(jid)
    context: dict[str, Any] = {"jid": jid, "job": found}
    if found is not None:
        context["data"] = _pretty(found.data)
        context["result"] = _pretty(found.result) if found.result is not None else None
        context["progress"] = progress_of(found)
        workflow_id = graph.workflow_of(found)
        shown = graph.read(engine, workflow_id, jid) if workflow_id is not None else None
        if shown is not None:
            context["workflow"] = {
                "id": shown.workflow_id,
                "summary": graph.summary(shown),
                "svg": graphs.workflow(shown, jid),
            }
    return render(request, "job.html", context, status_code=200 if found else 404)


def failures(request: Request) -> Response:
    groups = engine_of(request).failed_groups()
    return render(request, "failures.html", {"groups": groups, "group": None})


def workers(request: Request) -> Response:
    return render(request, "workers.html", {"workers": engine_of(request).workers()})


def worker(request: Request) -> Response:
    name = label(request.query_params.get("name", ""), "worker")
    view = reads.worker(engine_of(request), name)
    return render(request, "worker.html", {"name": name, "view": view}, 200 if view else 404)


def recurring(request: Request) -> Response:
    engine = engine_of(request)
    return render(
        request, "recurring.html", {"templates": reads.recurring(engine, engine.queues())}
    )


def flow(request: Request) -> Response:
    return render(request, "flow.html", {"flow": reads.flow(engine_of(request))})


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text
