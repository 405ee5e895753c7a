"""How the Redis engine reaches Redis: URLs, options, and redis-py clients that retry.

URLs: `redis://[user:password@]host[:port][/db][?option=value&...]`; `rediss://` for TLS
with certificate and host name verification; `redis+sentinel://[user:password@]host:port
[,host:port...]/primary_name[/db]` (and `rediss+sentinel://`) to find the primary through
Sentinel (`sentinel.py`). Options are `RedisOptions`' fields.

Clients retry a command with exponential backoff on connection errors and timeouts
(reconnecting), and check idle connections (`health_check_interval`), so that a worker
survives a Redis restart. A command whose reply was lost in a disconnection is sent again:
a `pop` may then lock a job nobody receives, which comes back when its lock expires
(delivery is at-least-once).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from lanner.errors import ConfigError, EngineUnavailable, MalformedArgument, StoreMisconfigured

try:
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import AuthenticationError, InvalidResponse, NoPermissionError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.retry import Retry
except ModuleNotFoundError as missing:  # pragma: no cover - depends on the installation
    raise ConfigError(
        f"the Redis engine needs redis-py ({missing}): pip install 'lanner[redis]'"
    ) from None

from lanner.engines import shown_url
from lanner.engines.redis import sentinel
from lanner.engines.redis.caller import LUA_MODES, LuaMode
from lanner.engines.redis.replies import UNAVAILABLE
from lanner.engines.urloptions import options_from_query

__all__ = [
    "RedisAddress",
    "RedisOptions",
    "impatient",
    "one_shot",
    "parse_url",
    "redis_client",
    "unreachable",
]

DEFAULT_PORT: Final = 6379
SCHEMES: Final = ("redis", "rediss", *sentinel.SCHEMES)
ONE_SHOT_RETRIES: Final = 2
ONE_SHOT_CONNECT_SEC: Final = 2.0

T = TypeVar("T")

logger = logging.getLogger("lanner.redis")

# Set while this thread is inside a retrying call, so that a retrying call nested in it
# (redis-py reconnects inside a command, with the same policy) tries only once.
_RETRYING = threading.local()


class _Retry(Retry):
    """redis-py's retry with backoff, counted once per command, and never for a bad password.

    redis-py retries a command, and inside it the reconnection, each with the same policy:
    a server that is down would be tried (retries + 1) squared times. Here the nested
    reconnection tries once and the command's retries pace the whole wait. An
    `AuthenticationError` (a `ConnectionError` to redis-py) is raised at once. The first
    failure of a command is logged at once ("cannot reach ...: retrying"): a whole retry
    budget is tens of seconds, too long to be silent.
    """

    def __init__(self, backoff: ExponentialBackoff, retries: int, server: str) -> None:
        super().__init__(backoff, retries)
        self._server = server

    def call_with_retry(
        self, do: Callable[[], T], fail: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> T:
        is_retryable = kwargs.get("is_retryable", args[0] if args else None)
        counted = bool(kwargs.get("with_failure_count", args[1] if len(args) > 1 else False))

        def failed(error: Exception, failures: int) -> None:
            if counted:
                fail(error, failures)
            else:
                fail(error)

        if getattr(_RETRYING, "active", False):
            try:
                return do()
            except self._supported_errors as error:
                failed(error, 1)
                raise
        _RETRYING.active = True
        try:
            backoff: Any = self._backoff  # reset() has no type hints in redis-py
            backoff.reset()
            failures = 0
            while True:
                try:
                    return do()
                except self._supported_errors as error:
                    failures += 1
                    failed(error, failures)
                    if (
                        isinstance(error, AuthenticationError)
                        or (is_retryable is not None and not is_retryable(error))
                        or 0 <= self._retries < failures
                    ):
                        raise
                    if failures == 1:
                        logger.warning("cannot reach %s: %s; retrying", self._server, error)
                    time.sleep(backoff.compute(failures))
        finally:
            _RETRYING.active = False


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """How the Redis engine connects, and its limits (URL query parameters).

    max_data_bytes          the largest job data `put` accepts (Redis allows 512 MB).
    socket_timeout          seconds to wait for a command's reply.
    socket_connect_timeout  seconds to wait for a connection.
    health_check_interval   a connection idle this many seconds is checked (PING) first.
    retries                 how many times a command is retried after a connection error
                            or timeout (reconnecting), with exponential backoff: by
                            default for about 33 s, then the error is raised.
    backoff_base            the first pause between retries is twice this (seconds),
                            doubling each time ...
    backoff_cap             ... up to this many seconds.
    ssl_ca_certs            for rediss://: a CA bundle file to verify the server with
                            (default: the system's).
    lua                     how the Lua core is called: "function" (FCALL of a function
                            library, Redis 7+), "script" (EVALSHA, as qless does) or
                            "auto": a function where Redis allows it, else a script.
    wait                    after each write whose loss in a failover would lose a job or
                            run one again (put, complete, fail, cancel, recurring
                            templates), WAIT until this many replicas have it (0: no WAIT).
    wait_timeout            ... for at most this many seconds; fewer replicas by then is
                            `EngineUnavailable` (the write is on the primary, unconfirmed).
    sentinel_password       for redis+sentinel://: the Sentinels' own password, if they
                            have one (the URL's user and password are the primary's).
    """

    max_data_bytes: int = 10 * 1024 * 1024
    socket_timeout: float = 10.0
    socket_connect_timeout: float = 5.0
    health_check_interval: int = 30
    retries: int = 20
    backoff_base: float = 0.05
    backoff_cap: float = 2.0
    ssl_ca_certs: str = ""
    lua: LuaMode = "auto"
    wait: int = 0
    wait_timeout: float = 5.0
    sentinel_password: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.lua not in LUA_MODES:
            raise MalformedArgument(f"lua must be one of {', '.join(LUA_MODES)}, not {self.lua!r}")
        for name in (
            "socket_timeout", "socket_connect_timeout", "backoff_base", "backoff_cap",
            "wait_timeout",
        ):  # fmt: skip
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise MalformedArgument(f"{name} must be > 0 seconds, not {value}")
        if self.health_check_interval < 0:
            raise MalformedArgument("health_check_interval must be >= 0 seconds")
        if self.retries < 0:
            raise MalformedArgument("retries must be >= 0")
        if self.max_data_bytes < 2:
            raise MalformedArgument("max_data_bytes must be at least 2")
        if self.wait < 0:
            raise MalformedArgument("wait must be >= 0 replicas")
        if self.wait and self.wait_timeout >= self.socket_timeout:
            raise MalformedArgument(
                f"wait_timeout ({self.wait_timeout:g} s) must be shorter than socket_timeout "
                f"({self.socket_timeout:g} s), which would cut a WAIT short"
            )

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RedisOptions:
        return options_from_query(cls, query, "Redis")


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where the server is, parsed from a Redis URL: a host and port, or for Sentinel the
    Sentinels' hosts and ports and the name they know the primary by."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    tls: bool
    sentinels: tuple[tuple[str, int], ...] = ()
    primary: str = ""

    def __repr__(self) -> str:  # never show the password
        user = f"{self.username}@" if self.username else ""
        scheme = "rediss" if self.tls else "redis"
        if self.sentinels:
            hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
            return f"{scheme}+sentinel://{user}{hosts}/{self.primary}/{self.db}"
        return f"{scheme}://{user}{self.host}:{self.port}/{self.db}"


def parse_url(url: str) -> tuple[RedisAddress, RedisOptions]:
    """Split a Redis URL (redis://, rediss://, redis+sentinel://, rediss+sentinel://) into
    the server's address and lanner's options."""
    if not isinstance(url, str):
        raise MalformedArgument(f"Redis URL must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise MalformedArgument(
            f"not a Redis URL ({', '.join(s + '://' for s in SCHEMES)}): {shown_url(url)!r}"
        )
    if parts.fragment:
        raise MalformedArgument(f"a Redis URL has no #fragment: {shown_url(url)!r}")
    if parts.scheme in sentinel.SCHEMES:
        address = _sentinel_address(url, parts.netloc, parts.path)
    else:
        address = _server_address(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    options = RedisOptions.from_query(query)
    if options.ssl_ca_certs and not address.tls:
        raise MalformedArgument("ssl_ca_certs needs a rediss:// URL")
    if options.sentinel_password and not address.sentinels:
        raise MalformedArgument("sentinel_password needs a redis+sentinel:// URL")
    return address, options


def _server_address(url: str) -> RedisAddress:
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise MalformedArgument(f"bad port in Redis URL {shown_url(url)!r}") from None
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise MalformedArgument(
            f"bad database in Redis URL {shown_url(url)!r}: the path must be a number (/0)"
        )
    return RedisAddress(
        host=parts.hostname or "localhost",
        port=port,
        db=int(path) if path else 0,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=parts.scheme == "rediss",
    )


def _sentinel_address(url: str, netloc: str, path: str) -> RedisAddress:
    userinfo, _, hosts = netloc.rpartition("@")
    username, colon, password = userinfo.partition(":")
    sentinels = sentinel.parse_hosts(hosts, shown_url(url))
    primary, db = sentinel.parse_path(path, shown_url(url))
    first_host, first_port = sentinels[0]
    return RedisAddress(
        host=first_host,
        port=first_port,
        db=db,
        username=unquote(username) if username else None,
        password=unquote(password) if colon else None,
        tls=url.startswith("rediss+"),
        sentinels=sentinels,
        primary=primary,
    )


def redis_client(
    address: RedisAddress, options: RedisOptions, socket_timeout: float
) -> redis.Redis:
    """A redis-py client as the engine uses one: timeouts, retries with backoff, TLS; for a
    Sentinel address, one that asks the Sentinels for the primary at each new connection."""
    settings: dict[str, Any] = {
        "db": address.db,
        "username": address.username,
        "password": address.password,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": options.socket_connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": options.health_check_interval,
        "retry": _Retry(
            ExponentialBackoff(cap=options.backoff_cap, base=options.backoff_base),
            options.retries,
            repr(address),
        ),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "decode_responses": True,
        "client_name": "lanner",
    }
    tls: dict[str, Any] = {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": options.ssl_ca_certs or None,
    }
    if address.sentinels:
        return sentinel.primary_client(
            address.sentinels,
            address.primary,
            settings,
            tls if address.tls else None,
            options.sentinel_password or None,
        )
    return redis.Redis(host=address.host, port=address.port, ssl=address.tls, **settings, **tls)


def impatient(options: RedisOptions, max_wait: float) -> RedisOptions:
    """`options` for commands that give up after about `max_wait` seconds: one try, and no
    longer a wait for a connection or a reply than that (a WAIT for replicas: half)."""
    socket_timeout = min(options.socket_timeout, max_wait)
    return replace(
        options,
        retries=0,
        socket_connect_timeout=min(options.socket_connect_timeout, max_wait),
        socket_timeout=socket_timeout,
        wait_timeout=min(options.wait_timeout, socket_timeout / 2),
    )


def one_shot(options: RedisOptions) -> RedisOptions:
    """`options` for a command run once (the command line's): a server that cannot be
    reached fails it within seconds (at most ONE_SHOT_RETRIES retries, a connection
    waited for ONE_SHOT_CONNECT_SEC), where a worker or a publisher retries through a
    restart of Redis. Replies are waited for as long as ever."""
    return replace(
        options,
        retries=min(options.retries, ONE_SHOT_RETRIES),
        socket_connect_timeout=min(options.socket_connect_timeout, ONE_SHOT_CONNECT_SEC),
    )


@contextmanager
def unreachable(address: RedisAddress) -> Iterator[None]:
    """A server that cannot be reached, after the client's retries, as `EngineUnavailable`;
    one that refuses the URL's user or password, or lacks a permission lanner needs, as
    `StoreMisconfigured` (waiting cannot fix those; the message says what to fix).

    A host name that does not resolve is an outage: in docker compose or Kubernetes a
    store's name resolves only while the store runs, so a worker waits for it.
    """
    try:
        yield
    except AuthenticationError as error:
        if "required" in str(error):  # NOAUTH: the URL gives no password
            raise StoreMisconfigured(
                f"{address!r} asks for a password ({error}): give it in the broker URL, "
                "redis://:PASSWORD@host:port/db (or redis://USER:PASSWORD@...)"
            ) from None
        raise StoreMisconfigured(
            f"{address!r} refused the broker URL's user or password ({error}): correct them "
            "in the URL, redis://[USER]:PASSWORD@host:port/db"
        ) from None
    except NoPermissionError as error:
        raise StoreMisconfigured(
            f"{address!r} does not let the broker URL's user run what lanner needs ({error}): "
            "grant it (Redis ACL: +@all on ~* and &*), or name another user in the URL"
        ) from None
    except (RedisConnectionError, RedisTimeoutError) as error:
        raise EngineUnavailable(f"cannot reach {address!r}: {error}") from None
    except InvalidResponse as error:
        raise EngineUnavailable(f"{address!r} does not answer as Redis does: {error}") from None
    except redis.ResponseError as error:
        if str(error).startswith(UNAVAILABLE):  # e.g. loading the core at a NOREPLICAS
            raise EngineUnavailable(f"{address!r} cannot serve it now: {error}") from None
        if "DB index" not in str(error):
            raise
        raise ConfigError(
            f"{address!r}: the server has no database {address.db} ({error})"
        ) from None
