"""Redis Sentinel: finding the primary through the Sentinels, again after each failover.

`redis+sentinel://[user:password@]host:port[,host:port...]/primary_name[/db]` names the
Sentinels (port 26379 by default) and the name they monitor the primary by
(`sentinel monitor <primary_name> ...`); `rediss+sentinel://` speaks TLS to the Sentinels
and to the primary. The URL's user and password are the primary's; Sentinels that have a
password of their own take it from the `sentinel_password` option.

The client is redis-py's own (`redis.sentinel.Sentinel.master_for`): each new connection
asks the Sentinels where the primary is, and a connection to a primary that has become a
replica (a `READONLY` reply) is dropped as a lost connection. So the engine's retries
(`connection.py`) carry a command through a failover as through a restart: while no
Sentinel names a primary that is up, the connection fails (`MasterNotFoundError`, a
connection error), and is tried again with backoff until the new primary is elected.
A Sentinel that is down is skipped at once (one try, no backoff), so that a lookup never
waits on it longer than `socket_connect_timeout`.

One change to redis-py's connection (`PrimaryConnection`): redis-py (8.1) asks the
Sentinels only when the pool hands out a connection; a command that lost its connection
and is retried reconnects to the address it had, the dead primary's, until its retries
run out. Every reconnection here asks the Sentinels first.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.connection import SSLConnection
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelManagedConnection

from lanner.errors import MalformedArgument

SCHEMES: Final = ("redis+sentinel", "rediss+sentinel")
DEFAULT_PORT: Final = 26379
_PRIMARY_NAME: Final = re.compile(r"[A-Za-z0-9._:-]{1,200}")


def parse_hosts(hosts: str, shown: str) -> tuple[tuple[str, int], ...]:
    """The Sentinels of `host:port,host:port,...` (`shown`: the URL as errors show it)."""
    found: list[tuple[str, int]] = []
    for item in hosts.split(","):
        parts = urlsplit("//" + item.strip())
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise MalformedArgument(f"bad port {item!r} in Sentinel URL {shown!r}") from None
        if not parts.hostname or parts.username is not None:
            raise MalformedArgument(
                f"bad Sentinel {item!r} in {shown!r}: give host:port[,host:port...]"
            )
        found.append((parts.hostname, port))
    return tuple(found)


def parse_path(path: str, shown: str) -> tuple[str, int]:
    """The primary's name and the database of `/primary_name[/db]`."""
    name, _, db = path.strip("/").partition("/")
    name = unquote(name)
    if not _PRIMARY_NAME.fullmatch(name):
        raise MalformedArgument(
            f"bad Sentinel URL {shown!r}: the path must be /PRIMARY_NAME[/DB], the name "
            "the Sentinels monitor the primary by (letters, digits, . _ : -)"
        )
    if db and not db.isdigit():
        raise MalformedArgument(
            f"bad database in Sentinel URL {shown!r}: /PRIMARY_NAME/DB takes a number"
        )
    return name, int(db) if db else 0


class PrimaryConnection(SentinelManagedConnection):
    """A connection to the primary that asks the Sentinels where it is at every
    (re)connection, those of a retried command included (see the module's docstring)."""

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if self._sock is None:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(
            check_health=check_health, retry_socket_connect=retry_socket_connect
        )

    def _connect_retry(self) -> None:
        if self._sock is None:  # asks the Sentinels once, in connect_check_health
            self.connect_check_health(
                check_health=self.connection_pool.check_connection, retry_socket_connect=False
            )


class PrimarySSLConnection(PrimaryConnection, SSLConnection):
    """`PrimaryConnection` over TLS."""


def primary_client(
    sentinels: tuple[tuple[str, int], ...],
    primary: str,
    settings: dict[str, Any],
    tls: dict[str, Any] | None,
    sentinel_password: str | None,
) -> redis.Redis:
    """A client of the primary the Sentinels name: `settings` are the connections' (as for
    `redis.Redis`), `tls` the TLS settings of every connection (None: no TLS)."""
    secure: dict[str, Any] = {"ssl": True, **tls} if tls is not None else {}
    asking = Sentinel(  # type: ignore[no-untyped-call]
        list(sentinels),
        sentinel_kwargs={
            "socket_timeout": settings["socket_connect_timeout"],
            "socket_connect_timeout": settings["socket_connect_timeout"],
            "password": sentinel_password,
            "retry": Retry(NoBackoff(), 0),
            "client_name": settings["client_name"],
            **secure,
        },
    )
    connection = PrimarySSLConnection if tls is not None else PrimaryConnection
    client: redis.Redis = asking.master_for(  # type: ignore[no-untyped-call]
        primary, connection_class=connection, **settings, **secure
    )
    return client


def close_sentinels(client: redis.Redis) -> None:
    """Close the connections to the Sentinels of a client from `primary_client` (its own
    pool's are closed by the caller); nothing for another client."""
    asking = getattr(client.connection_pool, "sentinel_manager", None)
    if isinstance(asking, Sentinel):
        for one in asking.sentinels:
            one.close()
            one.connection_pool.disconnect()
