"""The dashboard as an ASGI application: `create_app(engine, token=...)`.

Routes (pages in `pages`, actions in `actions`):

    GET  /                    queues, failure groups, workers (live)
    GET  /queues/<name>       a queue: counts, charts, jobs by state (?state=, ?offset=, ?day=)
    GET  /jobs                jobs by ?tag=, by failure ?group=, or ?state=complete
    GET  /job?jid=            one job: data, history, tags, dependencies, failure, result
    GET  /failures            failure groups
    GET  /workers, /worker?name=, /recurring
    GET  /flow                what flow control holds back; the schedules registered
    GET  /live                server-sent events: the engine's events, for live pages
    GET  /metrics             Prometheus metrics of the engine
    GET  /login; POST /login, /logout, /act/<action>
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from lanner.engine import Engine
from lanner.errors import LannerError
from lanner.web import actions, pages
from lanner.web.live import Hub
from lanner.web.rendering import HERE, error_page, render
from lanner.web.security import Guard, SecurityHeaders

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def create_app(engine: Engine, *, token: str | None = None, host: str = "127.0.0.1") -> Starlette:
    """The dashboard over `engine`. Without `token` it is read-only. `host` is the address
    it is served on: requests naming any other host are refused (DNS rebinding)."""
    hub = Hub(engine)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            hub.stop()

    routes = [
        Route("/", pages.overview),
        Route("/fragments/queues", pages.queues_fragment),
        Route("/queues/{name}", pages.queue),
        Route("/jobs", pages.jobs),
        Route("/job", pages.job),
        Route("/failures", pages.failures),
        Route("/workers", pages.workers),
        Route("/worker", pages.worker),
        Route("/recurring", pages.recurring),
        Route("/flow", pages.flow),
        Route("/live", _live),
        Route("/metrics", _metrics),
        Route("/login", _login_page),
        Route("/login", actions.login, methods=["POST"]),
        Route("/logout", actions.logout, methods=["POST"]),
        Route("/act/{action}", actions.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    allowed = ["*"] if host in ("0.0.0.0", "::", "") else [*LOCAL_HOSTS, host]  # noqa: S104
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # Page handlers are plain functions: Starlette runs them on its thread pool, so a
        # slow store never blocks the loop; what lanner raises on purpose is shown as a page.
        exception_handlers={LannerError: _error_page},
        middleware=[Middleware(SecurityHeaders, allowed_hosts=allowed)],
    )
    app.state.engine = engine
    app.state.guard = Guard(token)
    app.state.hub = hub
    return app


async def _error_page(request: Request, error: Exception) -> Response:
    return error_page(request, error)


def _login_page(request: Request) -> Response:
    return render(request, "login.html", {"next": request.query_params.get("next", "/")})


async def _live(request: Request) -> Response:
    """Server-sent events; the first line (`retry:`) says the page is subscribed."""
    hub: Hub = request.app.state.hub

    async def stream() -> AsyncIterator[str]:
        messages = hub.subscribe()
        await anext(messages)
        yield "retry: 2000\n\n"
        async for message in messages:
            yield f"data: {message}\n\n" if message else ": keep-alive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def _metrics(request: Request) -> Response:
    from lanner.metrics import render as render_metrics  # loads prometheus_client

    try:
        body, content_type = await run_in_threadpool(render_metrics, request.app.state.engine)
    except LannerError as error:
        return Response(f"engine unavailable: {error}\n", status_code=503)
    return Response(body, media_type=content_type)
