"""Who may act on the dashboard: the token, its session cookie, cross-site protection.

Without a token the dashboard is read-only: every action is refused. With one, a browser
signs in once (`POST /login`) and gets a session cookie; scripts send
`Authorization: Bearer <token>` instead. Neither the cookie nor the forms carry the token
itself, only HMACs of it, so a page's source or a cookie jar does not give it away.

A request from another site must not act in the name of a signed-in browser (CSRF): the
session cookie is `SameSite=Strict`, every form carries a CSRF value derived from the token
that a page of another site cannot know, and a request whose `Origin` (or `Referer`) is
not this dashboard is refused. Pages also forbid being framed and run only this
dashboard's own scripts (Content-Security-Policy), and requests naming a host other than
the one served are refused (DNS rebinding).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_COOKIE: Final = "lanner_session"

HEADERS: Final = (
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; "
     b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)  # fmt: skip


class Guard:
    """The token (None: read-only), and what is derived from it for sessions and forms."""

    def __init__(self, token: str | None) -> None:
        self.token = token or None
        key = (token or "").encode()
        self._session = _derive(key, "session")
        self.csrf = _derive(key, "csrf") if self.token else ""

    @property
    def read_only(self) -> bool:
        return self.token is None

    def check_token(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def session_value(self) -> str:
        return self._session

    def signed_in(self, request: Request) -> bool:
        """Whether the request carries the token (Bearer) or a session made with it."""
        if self.token is None:
            return False
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            return self.check_token(credentials.strip())
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self._session.encode())

    def may_act(self, request: Request, form: Mapping[str, Any] | None) -> str | None:
        """Why this state-changing request is refused, or None if it may go ahead."""
        if self.token is None:
            return "the dashboard is read-only: start it with --token (or LANNER_WEB_TOKEN)"
        if not self.signed_in(request):
            return "sign in first"
        if request.headers.get("authorization"):  # a script: browsers never send it cross-site
            return None
        if not same_origin(request):
            return "refused: the request came from another site"
        given = str((form or {}).get("csrf", ""))
        if not hmac.compare_digest(given.encode(), self.csrf.encode()):
            return "refused: the form's CSRF value is missing or wrong (reload the page)"
        return None


def same_origin(request: Request) -> bool:
    """Whether Origin (else Referer), when the browser sent one, names this dashboard."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return True  # not a browser's cross-site request: browsers send Origin on POST
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc == request.headers.get("host")


def _derive(key: bytes, purpose: str) -> str:
    return hmac.new(key, f"lanner-web:{purpose}".encode(), hashlib.sha256).hexdigest()


class SecurityHeaders:
    """ASGI middleware: HEADERS on every HTTP response, and requests for other hosts refused."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed_hosts = frozenset(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._host_allowed(scope):
            await _refuse_host(send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _host_allowed(self, scope: Scope) -> bool:
        if "*" in self.allowed_hosts:
            return True
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
                hostname = urlsplit(f"//{host}").hostname or ""
                return hostname in self.allowed_hosts
        return False


async def _refuse_host(send: Send) -> None:
    body = b"unknown host: open the dashboard by the address it listens on\n"
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *HEADERS]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
