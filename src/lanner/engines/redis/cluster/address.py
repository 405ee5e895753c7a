"""Redis Cluster URLs and clients.

`redis+cluster://[user:password@]host:port[,host:port...][?option=value&...]`: seed nodes,
of which any one that answers tells redis-py the whole cluster; `rediss+cluster://` for
TLS. Options are the Redis engine's (`RedisOptions`). There is no database number: a
cluster has only database 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, unquote

from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from lanner.engines import shown_url
from lanner.engines.redis.connection import RedisAddress, RedisOptions, unreachable
from lanner.errors import EngineUnavailable, MalformedArgument

SCHEMES: Final = ("redis+cluster", "rediss+cluster")
DEFAULT_PORT: Final = 6379


@dataclass(frozen=True, slots=True)
class ClusterAddress:
    """The seed nodes and credentials of a `redis+cluster://` URL."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool

    def __repr__(self) -> str:  # never show the password
        user = f"{self.username}@" if self.username else ""
        scheme = SCHEMES[1] if self.tls else SCHEMES[0]
        return f"{scheme}://{user}" + ",".join(f"{host}:{port}" for host, port in self.seeds)

    def node(self, index: int = 0) -> RedisAddress:
        """One seed as a single server's address (for what needs one connection: events)."""
        host, port = self.seeds[index]
        return RedisAddress(host, port, 0, self.username, self.password, self.tls)


def parse_url(url: str) -> tuple[ClusterAddress, RedisOptions]:
    """Split a cluster URL into its seed nodes and lanner's options."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in SCHEMES:
        raise MalformedArgument(
            f"not a Redis Cluster URL (redis+cluster:// or rediss+cluster://): {shown_url(url)!r}"
        )
    rest, _, query = rest.partition("?")
    if "#" in rest or "#" in query:
        raise MalformedArgument(f"a Redis Cluster URL has no #fragment: {shown_url(url)!r}")
    rest, _, path = rest.partition("/")
    if path.strip("/") not in ("", "0"):
        raise MalformedArgument(
            f"a Redis Cluster has only database 0, not /{path}: {shown_url(url)!r}"
        )
    credentials, _, hosts = rest.rpartition("@")
    username, password = None, None
    if credentials:
        user, colon, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    seeds = tuple(_seed(part, url) for part in hosts.split(","))
    options = RedisOptions.from_query(dict(parse_qsl(query, keep_blank_values=True)))
    if options.ssl_ca_certs and scheme != SCHEMES[1]:
        raise MalformedArgument("ssl_ca_certs needs a rediss+cluster:// URL")
    return ClusterAddress(seeds, username, password, scheme == SCHEMES[1]), options


def _seed(text: str, url: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon:
        host, port = text.strip(), str(DEFAULT_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MalformedArgument(f"bad seed node {text!r} in Redis Cluster URL {shown_url(url)!r}")
    return host, int(port)


class LannerCluster(RedisCluster):
    """redis-py's cluster client, routing FCALL by its first key as it routes EVALSHA:
    its generic path asks a node `COMMAND GETKEYS` first, a round trip per call."""

    def determine_slot(self, *args: Any) -> int | None:
        if str(args[0]).upper() == "FCALL" and len(args) > 3 and int(args[2]) >= 1:
            slot: int = key_slot(str(args[3]).encode())
            return slot
        found: int | None = super().determine_slot(*args)
        return found


def cluster_client(
    address: ClusterAddress, options: RedisOptions, socket_timeout: float
) -> LannerCluster:
    """A cluster client as the engine uses one: timeouts, retries with backoff, TLS. It
    follows MOVED and ASK redirections and reloads the slot map after a failover."""
    return LannerCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in address.seeds],  # type: ignore[no-untyped-call]
        username=address.username,
        password=address.password,
        socket_timeout=socket_timeout,
        socket_connect_timeout=options.socket_connect_timeout,
        socket_keepalive=True,
        health_check_interval=options.health_check_interval,
        retry=Retry(
            ExponentialBackoff(cap=options.backoff_cap, base=options.backoff_base),
            options.retries,
        ),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        ssl=address.tls,
        ssl_cert_reqs="required",
        ssl_check_hostname=True,
        ssl_ca_certs=options.ssl_ca_certs or None,
        decode_responses=True,
        client_name="lanner",
    )


@contextmanager
def reachable(address: ClusterAddress) -> Iterator[None]:
    """`unreachable` of one Redis, and a cluster that cannot serve a slot now (down, a
    failover under way, a slot moving) as `EngineUnavailable`: a pool waits it out."""
    try:
        with unreachable(address.node()):
            yield
    except (ClusterError, TryAgainError, RedisClusterException) as error:
        raise EngineUnavailable(f"{address!r} cannot serve it now: {error}") from None
