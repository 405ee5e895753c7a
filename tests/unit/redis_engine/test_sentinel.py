"""The Redis engine through Sentinel: URLs, the primary found by name, failovers, and WAIT.

Servers are real: tests/conftest.py's `redis_sentinel` (a primary, a replica and three
Sentinels, for the session) and `sentinel_factory` (a setup of the test's own, to fail
over by kill -9 of its primary).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis
from redis.connection import SSLConnection

import lanner
from lanner import EngineUnavailable, Event, EventStream, Job, MalformedArgument
from lanner.engines.redis.connection import RedisAddress, RedisOptions, parse_url, redis_client
from lanner.engines.redis.engine import RedisEngine
from lanner.engines.redis.sentinel import PrimarySSLConnection, close_sentinels

from .support import RedisServer


class Sentinels(Protocol):
    """What tests/conftest.py's `SentinelSetup` gives."""

    @property
    def url(self) -> str: ...

    def primary_port(self) -> int | None: ...

    def flush(self) -> None: ...

    def kill_primary(self) -> int: ...

    def wait_for_failover(self, old_port: int, timeout: float = 90.0) -> int: ...


# Through a failover a command is retried for long enough on a loaded machine: the
# Sentinels need a second to call the primary down, then an election and a promotion.
PATIENT = "retries=200&backoff_cap=0.5"


@pytest.fixture
def sentinels(redis_sentinel: Sentinels) -> Sentinels:
    redis_sentinel.flush()
    return redis_sentinel


@pytest.fixture
def engine(sentinels: Sentinels) -> Iterator[RedisEngine]:
    opened = lanner.open_engine(sentinels.url)
    assert isinstance(opened, RedisEngine)
    yield opened
    opened.close()


def commands_run(port: int, name: str) -> int:
    with redis.Redis(port=port) as client:
        stats: dict[str, Any] = client.info("commandstats").get(f"cmdstat_{name}", {})
        return int(stats.get("calls", 0))


# -- URLs ---------------------------------------------------------------------------------


def test_sentinel_url_with_everything() -> None:
    address, options = parse_url(
        "rediss+sentinel://bob:s%40cret@s1.example:26380,s2.example,[::1]:26381/cache/2"
        "?wait=1&wait_timeout=0.5&sentinel_password=sp"
    )
    assert address == RedisAddress(
        "s1.example", 26380, 2, "bob", "s@cret", tls=True,
        sentinels=(("s1.example", 26380), ("s2.example", 26379), ("::1", 26381)),
        primary="cache",
    )  # fmt: skip
    assert options == RedisOptions(wait=1, wait_timeout=0.5, sentinel_password="sp")
    shown = repr(address) + repr(options)
    assert "s@cret" not in shown
    assert "sentinel_password" not in shown
    assert repr(address).startswith("rediss+sentinel://bob@s1.example:26380,")


def test_sentinel_url_defaults() -> None:
    address, options = parse_url("redis+sentinel://127.0.0.1/mymaster")
    assert address.sentinels == (("127.0.0.1", 26379),)
    assert (address.primary, address.db, address.tls, address.password) == (
        "mymaster", 0, False, None,
    )  # fmt: skip
    assert options.wait == 0


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://127.0.0.1:26379", "PRIMARY_NAME"),
        ("redis+sentinel://127.0.0.1:26379/", "PRIMARY_NAME"),
        ("redis+sentinel://127.0.0.1:26379/bad name", "PRIMARY_NAME"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/x", "database"),
        ("redis+sentinel://127.0.0.1:port/mymaster", "port"),
        ("redis+sentinel://127.0.0.1:1,,127.0.0.1:2/mymaster", "host:port"),
        ("redis+sentinel://h/mymaster?colour=blue", "unknown"),
        ("redis+sentinel://h/mymaster?wait=-1", "wait"),
        ("redis+sentinel://h/mymaster?wait=1&wait_timeout=10", "wait_timeout"),
        ("redis+sentinel://h/mymaster?ssl_ca_certs=/ca.pem", "rediss"),
        ("redis://h/0?sentinel_password=x", "sentinel_password"),
    ],
)
def test_bad_sentinel_urls_are_rejected(url: str, says: str) -> None:
    with pytest.raises(MalformedArgument, match=says):
        lanner.open_engine(url)


def test_rediss_sentinel_speaks_tls_to_the_sentinels_and_to_the_primary() -> None:
    address, options = parse_url("rediss+sentinel://h1:26380/cache?ssl_ca_certs=/ca.pem")
    client = redis_client(address, options, options.socket_timeout)
    try:
        pool = client.connection_pool
        assert pool.connection_class is PrimarySSLConnection
        assert pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"
        assert pool.connection_kwargs["ssl_check_hostname"] is True
        [asking] = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
        assert issubclass(asking.connection_pool.connection_class, SSLConnection)
        assert asking.connection_pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"
    finally:
        client.close()
        close_sentinels(client)


def test_a_bad_sentinel_url_does_not_show_the_password() -> None:
    with pytest.raises(MalformedArgument) as raised:
        parse_url("redis+sentinel://:hunter2@h:26379/")
    assert "hunter2" not in str(raised.value)


# -- the primary found through the Sentinels ----------------------------------------------


def test_the_engine_works_on_the_primary_the_sentinels_name(
    engine: RedisEngine, sentinels: Sentinels
) -> None:
    engine.put("q", "job-1", "k", "{}")
    port = sentinels.primary_port()
    assert port is not None
    with redis.Redis(port=port, decode_responses=True) as primary:
        assert primary.hget("ql:j:job-1", "queue") == "q"


def test_an_unknown_primary_name_is_engine_unavailable(sentinels: Sentinels) -> None:
    url = sentinels.url.replace("/lanner/", "/nosuchname/") + "?retries=0"
    with pytest.raises(EngineUnavailable, match="nosuchname"):
        lanner.open_engine(url)


def test_sentinels_that_are_all_away_are_engine_unavailable() -> None:
    url = "redis+sentinel://127.0.0.1:1,127.0.0.1:2/lanner?retries=1&backoff_base=0.01"
    with pytest.raises(EngineUnavailable, match=r"redis\+sentinel://127.0.0.1:1,127.0.0.1:2"):
        lanner.open_engine(url)


# -- WAIT ---------------------------------------------------------------------------------


def test_wait_sends_wait_after_durable_writes_only(sentinels: Sentinels) -> None:
    port = sentinels.primary_port()
    assert port is not None
    engine = lanner.open_engine(sentinels.url + "?wait=1")
    try:
        before = commands_run(port, "wait")
        engine.put("q", "job-1", "k", "{}")
        [job] = engine.pop("q", "w", count=1)
        engine.heartbeat(job.jid, "w")
        assert commands_run(port, "wait") == before + 1  # the pop and heartbeat: none
        engine.complete(job.jid, "w", "q")
        assert commands_run(port, "wait") == before + 2
    finally:
        engine.close()


def test_wait_that_no_replica_confirms_is_engine_unavailable(redis_url: str) -> None:
    # The session's server has no replica: the put is done, but unconfirmed.
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()
    engine = lanner.open_engine(redis_url + "?wait=1&wait_timeout=0.05")
    try:
        with pytest.raises(EngineUnavailable, match="0 of the 1 replica"):
            engine.put("q", "job-1", "k", "{}")
        [job] = engine.multiget(["job-1"])
        assert job.queue == "q"
    finally:
        engine.close()


@pytest.mark.parametrize("lua", ["function", "script"])
def test_a_primary_short_of_its_min_replicas_is_engine_unavailable(
    redis_server_factory: Callable[..., RedisServer], lua: str
) -> None:
    # Redis' own guard against writing to a primary cut off from its replicas: loading
    # the core as a function is refused at once, a script's first write inside it.
    server = redis_server_factory("--min-replicas-to-write", "1")
    opened: list[lanner.Engine] = []

    def put_one() -> None:
        opened.append(lanner.open_engine(f"{server.url}?lua={lua}"))
        opened[0].put("q", "job-1", "k", "{}")

    try:
        with pytest.raises(EngineUnavailable, match="NOREPLICAS"):
            put_one()
    finally:
        for engine in opened:
            engine.close()


def test_an_impatient_engine_waits_for_replicas_less_than_it_waits_for_a_reply(
    sentinels: Sentinels,
) -> None:
    # The pool's supervisor reopens its engine with max_wait=0.5: a WAIT must fit in that.
    with lanner.open_engine(sentinels.url + "?wait=1") as engine:
        quick = engine.reopen(max_wait=0.5)
        try:
            assert isinstance(quick, RedisEngine)
            assert quick.options.wait_timeout < quick.options.socket_timeout <= 0.5
        finally:
            quick.close()


# -- failovers ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("lua", ["function", "script"])
def test_an_engine_carries_on_after_a_failover(
    sentinel_factory: Callable[..., Sentinels], lua: str
) -> None:
    """kill -9 of the primary: the engine's next commands wait for the promoted replica,
    and the core is there (a function library is replicated; a script is loaded again).
    Waiting for the replica's copy of the first put makes sure the failover keeps it."""
    setup = sentinel_factory()
    engine = lanner.open_engine(f"{setup.url}?lua={lua}&{PATIENT}")
    try:
        with lanner.open_engine(f"{setup.url}?wait=1") as durable:
            durable.put("q", "before", "k", "{}")
        old = setup.kill_primary()
        engine.put("q", "after", "k", "{}")
        new = setup.wait_for_failover(old)
        assert new != old
        popped = engine.pop("q", "w", count=2)
        assert sorted(job.jid for job in popped) == ["after", "before"]
        for job in popped:
            assert engine.complete(job.jid, "w", "q") == "complete"
    finally:
        engine.close()


@pytest.mark.slow
def test_a_blocked_pop_follows_a_failover(sentinel_factory: Callable[..., Sentinels]) -> None:
    setup = sentinel_factory()
    engine = lanner.open_engine(f"{setup.url}?{PATIENT}")
    popped: list[list[Job]] = []
    try:
        engine.pop("q", "w", count=1)  # the worker is known before the wait starts
        waiting = threading.Thread(
            target=lambda: popped.append(engine.pop("q", "w", count=1, wait=120))
        )
        waiting.start()
        old = setup.kill_primary()
        setup.wait_for_failover(old)
        engine.put("q", "job-1", "k", "{}")
        waiting.join(timeout=120)
        assert not waiting.is_alive()
        assert [job.jid for job in popped[0]] == ["job-1"]
    finally:
        engine.close()


@pytest.mark.slow
def test_events_follow_a_failover(sentinel_factory: Callable[..., Sentinels]) -> None:
    setup = sentinel_factory()
    with lanner.open_engine(f"{setup.url}?{PATIENT}") as engine, engine.events() as stream:
        engine.put("q", "before", "k", "{}")
        assert next_event(stream) == Event("put", jid="before", queue="q")
        setup.wait_for_failover(setup.kill_primary())
        assert next_event(stream, within=60) == Event("gap")
        engine.put("q", "after", "k", "{}")
        assert next_event(stream) == Event("put", jid="after", queue="q")


def next_event(stream: EventStream, within: float = 10.0) -> Event:
    event = stream.get(timeout=within)
    assert event is not None, f"no event within {within} s"
    return event


# -- TLS ----------------------------------------------------------------------------------


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not on PATH: the Sentinel TLS test needs it"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI installs it in .ci/run)")
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _certificates(folder: Path) -> dict[str, str]:
    """A CA, and a server certificate it signed for 127.0.0.1 (openssl)."""
    openssl = _tool("openssl")
    files = {name: str(folder / name) for name in ("ca.crt", "ca.key", "server.crt", "server.key")}
    csr, extensions = folder / "server.csr", folder / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1\n")
    quiet: dict[str, Any] = {"check": True, "capture_output": True}
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=lanner-test-ca", "-keyout", files["ca.key"], "-out", files["ca.crt"]],
        **quiet,
    )  # fmt: skip
    subprocess.run(
        [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", files["server.key"], "-out", str(csr)],
        **quiet,
    )  # fmt: skip
    subprocess.run(
        [openssl, "x509", "-req", "-in", str(csr), "-CA", files["ca.crt"],
         "-CAkey", files["ca.key"], "-CAcreateserial", "-days", "2",
         "-extfile", str(extensions), "-out", files["server.crt"]],
        **quiet,
    )  # fmt: skip
    return files


def test_rediss_sentinel_against_servers_that_speak_tls_only(tmp_path: Path) -> None:
    """A primary and a Sentinel that listen on TLS ports only (no plain port), the
    certificate checked against a CA of the test's own and the address 127.0.0.1."""
    files = _certificates(tmp_path)
    tls = [
        "--port", "0", "--tls-cert-file", files["server.crt"],
        "--tls-key-file", files["server.key"], "--tls-ca-cert-file", files["ca.crt"],
        "--tls-auth-clients", "no", "--tls-replication", "yes",
    ]  # fmt: skip
    primary_port, sentinel_port = _free_port(), _free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"bind 127.0.0.1\ndir {tmp_path}\nsentinel monitor lanner 127.0.0.1 {primary_port} 1\n"
    )
    servers = [
        subprocess.Popen(
            [_tool("redis-server"), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1",
             "--dir", str(tmp_path), "--tls-port", str(primary_port), *tls],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [_tool("redis-sentinel"), str(config), "--tls-port", str(sentinel_port), *tls],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    url = (
        f"rediss+sentinel://127.0.0.1:{sentinel_port}/lanner"
        f"?ssl_ca_certs={files['ca.crt']}&{PATIENT}"
    )
    try:
        with lanner.open_engine(url) as engine:
            engine.put("q", "job-1", "k", "{}")
            [job] = engine.pop("q", "w", count=1)
            assert engine.complete(job.jid, "w", "q") == "complete"
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=10)
