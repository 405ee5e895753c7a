"""The Redis engine's connection: URLs and options, reconnection, and error replies."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from lanner import (
    Capability,
    ConfigError,
    EngineUnavailable,
    InvalidState,
    JobNotFound,
    LannerError,
    LockLost,
    MalformedArgument,
    PayloadTooLarge,
    StoreMisconfigured,
)
from lanner.engines.redis.connection import RedisAddress, RedisOptions, parse_url
from lanner.engines.redis.engine import RedisEngine
from lanner.engines.redis.replies import translate

from .support import T0, RedisServer, raw

# -- URLs ---------------------------------------------------------------------------------


def test_url_with_everything() -> None:
    address, options = parse_url(
        "rediss://alice:s%40cret@cache.example:6380/3?socket_timeout=2.5&max_data_bytes=1000"
    )
    assert address == RedisAddress("cache.example", 6380, 3, "alice", "s@cret", tls=True)
    assert options == RedisOptions(socket_timeout=2.5, max_data_bytes=1000)
    assert "s@cret" not in repr(address)


def test_url_defaults() -> None:
    address, options = parse_url("redis://localhost")
    assert address == RedisAddress("localhost", 6379, 0, None, None, tls=False)
    assert options == RedisOptions()
    assert options.max_data_bytes == 10 * 1024 * 1024


def test_url_with_a_password_only() -> None:
    address, _ = parse_url("redis://:pw@127.0.0.1:7000/1")
    assert (address.username, address.password, address.db) == (None, "pw", 1)


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost/x",
        "redis://localhost:notaport/0",
        "redis://localhost/0?colour=blue",
        "redis://localhost/0?socket_timeout=soon",
        "redis://localhost/0?socket_timeout=0",
        "redis://localhost/0?retries=-1",
        "redis://localhost/0?ssl_ca_certs=/ca.pem",
        "http://localhost/0",
    ],
)
def test_bad_urls_are_rejected(url: str) -> None:
    with pytest.raises(MalformedArgument):
        parse_url(url)


def test_bad_url_errors_do_not_show_the_password() -> None:
    with pytest.raises(MalformedArgument) as error:
        parse_url("redis://user:hunter2@localhost/zero")
    assert "hunter2" not in str(error.value)


def test_open_engine_dispatches_redis_urls(engine: RedisEngine) -> None:
    assert engine.name == "redis"
    assert engine.capabilities == frozenset(Capability)


def test_the_database_number_is_used(redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/3"
    with raw(url) as client:
        client.flushdb()
    with RedisEngine(url) as engine:
        engine.put("q", "in-db-3", "Task", now=T0)
    with raw(url) as db3, raw(redis_url.rsplit("/", 1)[0] + "/0") as db0:
        assert db3.exists("ql:j:in-db-3") == 1
        assert db0.exists("ql:j:in-db-3") == 0
        db3.flushdb()


def test_password_and_acl_user(redis_server_factory: Callable[..., RedisServer]) -> None:
    server = redis_server_factory(
        "--requirepass", "s3cret", "--user", "alice", "on", ">wonder land", "~*", "&*", "+@all"
    )
    base = f"127.0.0.1:{server.port}"
    for url in [f"redis://:s3cret@{base}/0", f"redis://alice:wonder%20land@{base}/1"]:
        with RedisEngine(url) as engine:
            engine.put("q", "j1", "Task", now=T0)
            assert engine.get("j1", now=T0) is not None


@pytest.mark.parametrize(
    ("credentials", "said"),
    [("", "asks for a password"), (":wrong@", "refused"), ("alice:x@", "refused")],
    ids=["none", "wrong-password", "wrong-user-password"],
)
def test_a_refused_password_is_misconfigured_at_once_not_an_outage(
    redis_server_factory: Callable[..., RedisServer],
    caplog: pytest.LogCaptureFixture,
    credentials: str,
    said: str,
) -> None:
    server = redis_server_factory(
        "--requirepass", "s3cret", "--user", "alice", "on", ">wonder land", "~*", "&*", "+@all"
    )
    start = time.monotonic()
    with (
        caplog.at_level("WARNING", logger="lanner.redis"),
        pytest.raises(StoreMisconfigured, match=said) as refused,
    ):
        RedisEngine(f"redis://{credentials}127.0.0.1:{server.port}/0")
    assert time.monotonic() - start < 5.0, "a refused password is not retried"
    assert not isinstance(refused.value, EngineUnavailable)  # workers must not wait on it
    assert isinstance(refused.value.__context__, redis.AuthenticationError)
    assert f"redis://{'alice@' if 'alice' in credentials else ''}127.0.0.1:{server.port}/0" in str(
        refused.value
    )
    assert "PASSWORD@" in str(refused.value)  # what to fix
    assert "wrong" not in str(refused.value)
    assert "retrying" not in caplog.text


def test_a_user_without_the_permissions_lanner_needs_is_misconfigured(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory("--user", "reader", "on", ">pw", "~*", "&*", "+@read")
    with pytest.raises(StoreMisconfigured, match="does not let the broker URL's user"):
        RedisEngine(f"redis://reader:pw@127.0.0.1:{server.port}/0")


def test_max_data_bytes_option(redis_url: str) -> None:
    with RedisEngine(redis_url + "?max_data_bytes=20") as engine:
        assert engine.max_data_bytes == 20
        engine.put("q", "small", "Task", '{"a": 1}', now=T0)
        with pytest.raises(PayloadTooLarge):
            engine.put("q", "big", "Task", '{"a": "' + "x" * 20 + '"}', now=T0)
        assert engine.get("big", now=T0) is None


# -- reconnection -------------------------------------------------------------------------


def test_an_engine_carries_on_after_a_redis_restart(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    with RedisEngine(server.url) as engine:
        engine.put("q", "before", "Task", now=T0)
        server.restart()  # empty: the script must be loaded again (NOSCRIPT)
        assert engine.get("before", now=T0) is None
        engine.put("q", "after", "Task", now=T0)
        assert [job.jid for job in engine.pop("q", "w", 5, now=T0)] == ["after"]


def test_an_engine_waits_for_redis_to_come_back(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    with RedisEngine(server.url) as engine:
        engine.put("q", "j1", "Task", now=T0)
        server.stop()
        starter = threading.Timer(0.5, server.start)
        starter.start()
        try:
            start = time.monotonic()
            engine.put("q", "j2", "Task", now=T0)  # retried with backoff until it is back
            assert time.monotonic() - start >= 0.4
        finally:
            starter.join()
        assert engine.jobs("waiting", "q", now=T0) == ["j2"]


def test_a_blocked_pop_survives_a_restart(redis_server_factory: Callable[..., RedisServer]) -> None:
    server = redis_server_factory()
    with RedisEngine(server.url) as engine, RedisEngine(server.url) as other:
        got: list[list[str]] = []
        popper = threading.Thread(
            target=lambda: got.append([j.jid for j in engine.pop("q", "w", wait=10)])
        )
        popper.start()
        time.sleep(0.3)
        server.restart()
        time.sleep(0.3)
        other.put("q", "j1", "Task")
        popper.join(timeout=15)
        assert got == [["j1"]]


def test_retries_give_up_after_the_configured_number(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    with RedisEngine(server.url + "?retries=2&backoff_base=0.05") as engine:
        server.stop()
        for command in (
            lambda: engine.get("j1"),
            lambda: engine.pop("q", "w", wait=0.5),
            lambda: engine.config_all(),
        ):
            start = time.monotonic()
            # Issue 10, fault 3: the client's error never escapes the engine.
            with pytest.raises(EngineUnavailable, match=r"cannot reach redis://127\.0\.0\.1"):
                command()
            assert time.monotonic() - start < 2.0  # 0.1 + 0.2 s of backoff, not (n + 1)²


def test_opening_an_engine_on_a_server_that_is_away_is_engine_unavailable(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    server.stop()
    with pytest.raises(EngineUnavailable, match="cannot reach"):
        RedisEngine(server.url + "?retries=1&backoff_base=0.01")


def test_the_first_failure_to_reach_a_server_is_said_at_once(
    redis_server_factory: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_server_factory()
    server.stop()
    with caplog.at_level("WARNING", logger="lanner.redis"), pytest.raises(EngineUnavailable):
        RedisEngine(server.url + "?retries=2&backoff_base=0.01")
    said = [m for m in caplog.messages if m.startswith(f"cannot reach {server.url}")]
    assert len(said) == 1
    assert said[0].endswith("; retrying")


def test_a_database_the_server_does_not_have_is_a_config_error(redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/999"
    with pytest.raises(ConfigError, match="the server has no database 999"):
        RedisEngine(url)


def test_a_server_that_does_not_speak_redis_is_engine_unavailable() -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_http() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer_http, daemon=True).start()
        with pytest.raises(EngineUnavailable, match="does not answer as Redis does"):
            RedisEngine(f"redis://127.0.0.1:{port}/0?retries=0")


@pytest.mark.parametrize(
    "reply",
    [
        "READONLY You can't write against a read only replica.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "LOADING Redis is loading the dataset in memory",
        "NOREPLICAS Not enough good replicas to write.",
        "Internal error in put: NOREPLICAS Not enough good replicas to write.",
        "Internal error in lanner.complete_many: OOM command not allowed when used memory",
    ],
)
def test_replies_of_a_server_that_cannot_serve_now_are_engine_unavailable(reply: str) -> None:
    assert isinstance(translate("put", reply), EngineUnavailable)


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "message", "error"),
    [
        ("get", "Malformed count: not a non-negative integer: -1", MalformedArgument),
        ("complete", "Job j1 does not exist", JobNotFound),
        ("recur_update", "Recurring job r1 does not exist", JobNotFound),
        ("complete", "Job j1 not currently running: waiting", LockLost),
        ("heartbeat", "Job j1 given out to another worker: w2", LockLost),
        ("retry", "Job j1 running in another queue: other", LockLost),
        ("depends_add", "Job j1 not in the depends state: waiting", InvalidState),
        ("depends_add", "Job j1 not in the depends state: missing", JobNotFound),
        ("cancel", "Job a is a dependency of b, which is not being canceled", InvalidState),
        ("pop", "Internal error in pop: boom", LannerError),
    ],
)
def test_error_replies_map_to_lanner_errors(
    command: str, message: str, error: type[LannerError]
) -> None:
    translated = translate(command, message)
    assert type(translated) is error
    assert command in str(translated)


def test_timeout_of_a_job_that_is_not_running_is_invalid_state_not_lock_lost(
    engine: RedisEngine,
) -> None:
    engine.put("q", "j1", "Task", now=T0)
    with pytest.raises(InvalidState) as error:
        engine.timeout(["j1"], now=T0)
    assert type(error.value) is InvalidState


def test_live_error_replies(engine: RedisEngine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.pop("q", "w1", now=T0)
    with pytest.raises(LockLost):
        engine.complete("j1", "w2", "q", now=T0)
    with pytest.raises(LockLost):
        engine.complete("j1", "w1", "other", now=T0)
    with pytest.raises(JobNotFound):
        engine.heartbeat("nope", "w1", now=T0)
    with pytest.raises(JobNotFound):
        engine.recur_update("nope", {"priority": 1}, now=T0)
    with pytest.raises(JobNotFound):
        engine.depends_add("nope", ["j1"], now=T0)


def test_heartbeat_returns_the_exact_expiry(engine: RedisEngine) -> None:
    engine.put("q", "j1", "Task", now=T0)
    engine.pop("q", "w1", now=T0)
    assert engine.heartbeat("j1", "w1", now=T0 + 0.125) == T0 + 0.125 + 60


def test_config_values_come_back_as_set(engine: RedisEngine) -> None:
    assert engine.config_get("application") == "lanner"
    engine.config_set("heartbeat", 30)
    engine.config_set("q-heartbeat", 0.5)
    engine.config_set("application", "shop")
    assert engine.config_get("heartbeat") == 30
    assert engine.config_get("q-heartbeat") == 0.5
    assert engine.config_all()["application"] == "shop"


def test_close_is_idempotent(redis_url: str) -> None:
    engine = RedisEngine(redis_url)
    engine.close()
    engine.close()
