"""`lanner web`: a dashboard of queues, jobs, failures, workers and statistics.

    app.py        the ASGI application (Starlette) and its routes: `create_app(engine)`
    pages.py      one handler per page, reading through `reads`
    reads.py      what each page asks the engine, capability by capability
    actions.py    what a signed-in user may change: retry, cancel, pause
    security.py   the token, sessions, CSRF and origin checks, security headers
    live.py       the engine's events to every open page (server-sent events)
    charts.py     histograms and bar charts as inline SVG
    rendering.py  Jinja2 templates (templates/) and error pages
    server.py     serving it with uvicorn, in the foreground or on a thread (`WebThread`)

Install with `pip install 'lanner[web]'`; docs/web.md shows it.
"""

from lanner.web.app import create_app
from lanner.web.server import WebThread, serve

__all__ = ["WebThread", "create_app", "serve"]
