"""Rendering the templates, with what every page needs, and errors as pages."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from lanner.engine import Capability
from lanner.errors import (
    EngineUnavailable,
    InvalidState,
    JobNotFound,
    LannerError,
    MalformedArgument,
    Unsupported,
)
from lanner.histograms import duration

HERE: Final = Path(__file__).parent

_environment = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(value: float | None) -> str:
    """A Unix time as UTC; one no date can show (past year 9999: a store written before due
    dates were bounded may hold one) as it is, rather than a failed page."""
    if not value:
        return "—"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(value))
    except (OverflowError, ValueError, OSError):
        return repr(value)


def _seconds(value: float | None) -> str:
    return "—" if value is None else duration(value)


def _percentile(value: float | None) -> str:
    """A percentile read off the histograms, whose first bucket is a whole second wide."""
    if value is None:
        return "—"
    return "<1s" if value < 1 else duration(value)


_environment.filters["when"] = _when
_environment.filters["percentile"] = _percentile
_environment.filters["seconds"] = _seconds


def _here(request: Request) -> str:
    """This page's path and query, without the message an action left on it."""
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "flash"])
    return request.url.path + (f"?{query}" if query else "")


def render(
    request: Request, template: str, context: dict[str, Any], status_code: int = 200
) -> Response:
    state = request.app.state
    guard = state.guard
    page = {
        "request": request,
        "engine_name": state.engine.name,
        "can": {capability.value for capability in state.engine.capabilities},
        "Capability": Capability,
        "read_only": guard.read_only,
        "signed_in": guard.signed_in(request),
        "csrf": guard.csrf,
        "here": _here(request),
        "flash": request.query_params.get("flash"),
        **context,
    }
    body = _environment.get_template(template).render(page)
    return HTMLResponse(body, status_code=status_code)


STATUS: Final[tuple[tuple[type[LannerError], int], ...]] = (
    (MalformedArgument, 400),
    (JobNotFound, 404),
    (InvalidState, 409),
    (Unsupported, 501),
    (EngineUnavailable, 503),
)


def error_page(request: Request, error: Exception) -> Response:
    """A LannerError as a page saying what went wrong, with a status that says the same."""
    status = next((code for kind, code in STATUS if isinstance(error, kind)), 500)
    return render(request, "error.html", {"message": str(error), "status": status}, status)
