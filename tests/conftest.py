"""Fixtures shared by every test folder: private Redis and SQS servers for the engines' tests.

`redis_url` (session-scoped) is `LANNER_REDIS_URL` if set, else the URL of a redis-server
started from PATH on a free loopback port, with no persistence, for the whole session. It
is only started when a test asks for it, so SQLite-only runs never need Redis. Without
redis-server the tests that need it are skipped, or fail under CI (CI=true) where a missing
server is a broken set-up, not an optional extra.

`redis_server_factory` starts further private servers (with extra arguments such as
`--requirepass`), each of which a test can stop, start and restart on the same port.

`redis_sentinel` (session-scoped) is a primary, two replicas and three `redis-sentinel`
processes watching them, for tests that never fail it over (the conformance suite);
`sentinel_factory` starts a setup of one test's own, whose primary the test may kill -9
(`SentinelSetup.kill_primary`, then `wait_for_failover`). Without redis-sentinel those
tests are skipped, or fail under CI.

`sqs_url` (session-scoped) is `LANNER_SQS_URL` if set, else the sqs:// URL of moto's SQS
server (`python -m moto.server`, a process of its own: the tests' pools fork, and a
server thread must not be copied into them) on a free loopback port, with dummy AWS
credentials in the environment so that boto3 never reaches AWS. Without moto the tests
that need it are skipped, or fail under CI. `sqs_fresh_url` gives each test its own
queue prefix (moto slows as a queue grows: tests keep their queues shallow and apart).
`sqs_denying_url` is another moto server, one that denies every request's credentials.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from redis_cluster import RedisCluster

START_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not on PATH: the Redis engine's tests need it"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI installs it in .ci/run)")
        pytest.skip(message)
    return binary


def _ping(port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis server answers PING on the port (raw RESP, so no client is needed).

    A server with a password answers -NOAUTH, which still says that it is up.
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


class RedisServer:
    """A redis-server child process on a fixed loopback port, without persistence."""

    def __init__(self, directory: Path, args: Sequence[str] = (), port: int | None = None) -> None:
        self.binary = _redis_server_binary()
        self.directory = directory
        self.args = list(args)
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (empty: nothing is saved) and wait until it answers PING."""
        if self.process is not None:
            raise RuntimeError("the server is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        log = self.directory / "redis.log"
        self.process = subprocess.Popen(
            [
                self.binary,
                "--save", "",
                "--appendonly", "no",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--logfile", str(log),
                *self.args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{text}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Terminate the server and wait for it to exit (its data is gone)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop the server and start a new, empty one on the same port."""
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server for the session: LANNER_REDIS_URL, or a private redis-server."""
    external = os.environ.get("LANNER_REDIS_URL")
    if external:
        yield external
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A Redis Cluster of 3 primaries for the session (tests/redis_cluster.py): its `url`
    is a `redis+cluster://` URL; `flush()` empties it."""
    cluster = RedisCluster(tmp_path_factory.mktemp("cluster"), RedisServer, _free_port)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A Redis Cluster of 3 primaries with a replica each, for the session: what the
    `wait` option needs (the conformance suite runs on it with `wait=1`)."""
    cluster = RedisCluster(
        tmp_path_factory.mktemp("cluster-replicated"), RedisServer, _free_port, 3, 1
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster_factory(tmp_path: Path) -> Iterator[Callable[..., RedisCluster]]:
    """Start private clusters for one test: `factory(primaries=3, replicas=1)`."""
    clusters: list[RedisCluster] = []

    def start(primaries: int = 3, replicas: int = 0) -> RedisCluster:
        directory = tmp_path / f"cluster-{len(clusters)}"
        cluster = RedisCluster(directory, RedisServer, _free_port, primaries, replicas)
        clusters.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start private redis-servers for one test: `factory(*extra_args)`; stopped afterwards."""
    servers: list[RedisServer] = []

    def start(*args: str) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(servers)}", args)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


# -- SQS ----------------------------------------------------------------------------------
_DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _serves(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _need_moto() -> None:
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("boto3") is None:
        message = "moto[server] and boto3 are not installed: the SQS engine's tests need them"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (pip install -e '.[dev]')")
        pytest.skip(message)


@contextlib.contextmanager
def _moto_server(log: Path, environment: dict[str, str] | None = None) -> Iterator[str]:
    """moto's server on a free loopback port while inside: its sqs:// URL."""
    port = _free_port()
    with log.open("wb") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(environment or {})},
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT * 3
        while not _serves(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto's server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield f"sqs://us-east-1?endpoint_url=http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session")
def sqs_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An SQS endpoint for the session: LANNER_SQS_URL, or moto's server on loopback."""
    external = os.environ.get("LANNER_SQS_URL")
    if external:
        yield external
        return
    _need_moto()
    saved = {name: os.environ.get(name) for name in (*_DUMMY_AWS, "AWS_PROFILE")}
    os.environ.update(_DUMMY_AWS)
    os.environ.pop("AWS_PROFILE", None)
    try:
        with _moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as url:
            yield url
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def sqs_denying_url(sqs_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's SQS server checking credentials, which knows none: it denies the tests' own
    (InvalidClientTokenId), as AWS denies unknown or revoked keys."""
    _need_moto()
    log = tmp_path_factory.mktemp("moto-denying") / "moto.log"
    with _moto_server(log, {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as url:
        yield url


@pytest.fixture
def sqs_fresh_url(sqs_url: str) -> str:
    """The session's SQS endpoint with a queue prefix of this test's own."""
    return f"{sqs_url}&prefix=t{uuid.uuid4().hex[:8]}-"


# -- Redis Sentinel -----------------------------------------------------------------------
SENTINEL_PRIMARY = "lanner"


def _redis_sentinel_binary() -> str:
    binary = shutil.which("redis-sentinel")
    if binary is None:
        message = "redis-sentinel is not on PATH: the Redis Sentinel tests need it"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI installs it in .ci/run)")
        pytest.skip(message)
    return binary


class SentinelSetup:
    """A primary, its replicas and three Sentinels watching them (quorum 2), on free
    loopback ports. `down_after` (ms) is how long the primary must be silent to be declared
    down."""

    def __init__(self, directory: Path, down_after: int = 1000, replicas: int = 1) -> None:
        self.binary = _redis_sentinel_binary()
        self.directory = directory
        self.down_after = down_after
        # The replica's first sync is diskless and at once (Redis 7 waits 5 s by default).
        self.primary = RedisServer(directory / "primary", ["--repl-diskless-sync-delay", "0"])
        self.replicas = [
            RedisServer(
                directory / f"replica-{index}",
                [
                    "--repl-diskless-sync-delay",
                    "0",
                    "--replicaof",
                    "127.0.0.1",
                    str(self.primary.port),
                ],
            )
            for index in range(replicas)
        ]
        self.sentinel_ports = [_free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SENTINEL_PRIMARY}/0"

    def start(self) -> None:
        """Start every server, and return once the Sentinels know the replicas and each
        other (a failover can then be agreed on)."""
        self.primary.start()
        for replica in self.replicas:
            replica.start()
        self._wait_for(self._replicas_synced, "the replicas to sync")
        # Sentinels that never agree were seen once in CI, with nothing to say why; they
        # are started again on fresh ports (and a fresh config) before giving up, and
        # what each knew goes into the error.
        for attempt in range(2):
            self._start_sentinels(attempt)
            try:
                self._wait_for(self._sentinels_agree, "the Sentinels to know the replicas")
                return
            except RuntimeError:
                seen = self._sentinels_seen()
                self._stop_sentinels()
                self.sentinel_ports = [_free_port() for _ in range(3)]
        raise RuntimeError(f"the Sentinels never agreed, twice; last seen: {seen}")

    def _start_sentinels(self, attempt: int) -> None:
        for index, port in enumerate(self.sentinel_ports):
            folder = self.directory / f"sentinel-{attempt}-{index}"
            folder.mkdir(parents=True, exist_ok=True)
            config = folder / "sentinel.conf"  # rewritten by the Sentinel as it learns
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\nlogfile {folder / 'sentinel.log'}\n"
                f"sentinel monitor {SENTINEL_PRIMARY} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SENTINEL_PRIMARY} {self.down_after}\n"
                f"sentinel failover-timeout {SENTINEL_PRIMARY} {self.down_after * 5}\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    [self.binary, str(config)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def _sentinels_seen(self) -> list[str]:
        """What each Sentinel says of the primary, or why it says nothing, and its log's
        last lines."""
        import redis

        seen = []
        running = zip(self.sentinel_ports, self.sentinels, strict=True)
        for index, (port, process) in enumerate(running):
            if process.poll() is not None:
                state = f"exited with {process.returncode}"
            else:
                try:
                    with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as one:
                        found = one.sentinel_master(SENTINEL_PRIMARY)
                    state = ", ".join(
                        f"{key}={found.get(key)}"
                        for key in ("ip", "port", "flags", "num-slaves", "num-other-sentinels")
                    )
                except redis.RedisError as error:
                    state = f"no answer: {error}"
            logs = sorted(self.directory.glob(f"sentinel-*-{index}/sentinel.log"))
            tail = logs[-1].read_text(errors="replace").splitlines()[-5:] if logs else []
            seen.append(f"sentinel on {port}: {state}; log: {' | '.join(tail)}")
        return seen

    def _stop_sentinels(self) -> None:
        for process in self.sentinels:
            process.terminate()
        for process in self.sentinels:
            try:
                process.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.sentinels = []

    def primary_port(self) -> int | None:
        """The port of the primary a Sentinel names now (None: none answers)."""
        import redis

        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=2) as sentinel:
                    found = sentinel.execute_command(
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_PRIMARY
                    )
            except redis.RedisError:
                continue
            if found:
                return int(found[1])
        return None

    def server(self, port: int) -> RedisServer:
        [found] = [one for one in (self.primary, *self.replicas) if one.port == port]
        return found

    def kill_primary(self) -> int:
        """kill -9 the primary the Sentinels name (nothing flushed, nothing said): its port."""
        port = self.primary_port()
        assert port is not None, "no Sentinel names a primary"
        process = self.server(port).process
        assert process is not None, f"the primary on port {port} is not running"
        process.kill()
        process.wait()
        self.server(port).process = None
        return port

    def wait_for_failover(self, old_port: int, timeout: float = 90.0) -> int:
        """Wait until the Sentinels name a primary other than `old_port`, and it takes
        writes: its port."""
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port is not None and port != old_port:
                with (
                    contextlib.suppress(redis.RedisError),
                    redis.Redis(port=port, socket_timeout=2) as client,
                ):
                    if client.info("replication").get("role") == "master":
                        return port
            time.sleep(0.1)
        raise RuntimeError(f"no failover from port {old_port} within {timeout:g} s")

    def flush(self) -> None:
        """Empty database 0 on the current primary (and so on its replica)."""
        import redis

        port = self.primary_port()
        assert port is not None, "no Sentinel names a primary"
        with redis.Redis(port=port, socket_timeout=10) as client:
            client.flushdb()

    def _replicas_synced(self) -> bool:
        import redis

        for replica in self.replicas:
            with redis.Redis(port=replica.port, socket_timeout=2) as client:
                if client.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _sentinels_agree(self) -> bool:
        import redis

        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as sentinel:
                    state = sentinel.sentinel_master(SENTINEL_PRIMARY)
            except redis.RedisError:
                return False
            known = int(state["num-slaves"]), int(state["num-other-sentinels"])
            if known < (len(self.replicas), 2):
                return False
        return True

    @staticmethod
    def _wait_for(ready: Callable[[], bool], what: str) -> None:
        import redis

        deadline = time.monotonic() + START_TIMEOUT * 6
        while True:
            try:
                if ready():
                    return
            except (redis.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gave up waiting for {what}")
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop_sentinels()
        for replica in self.replicas:
            replica.stop()
        self.primary.stop()


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A Sentinel setup for the session's tests that never fail it over (the conformance
    suite): a primary is declared down only after 5 s of silence, not by a busy machine;
    should a failover happen all the same, the new primary keeps a replica to confirm the
    tests' `wait=1`."""
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel"), down_after=5000, replicas=2)
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


@pytest.fixture
def sentinel_factory(tmp_path: Path) -> Iterator[Callable[..., SentinelSetup]]:
    """Start a Sentinel setup of one test's own (to fail over):
    `factory(down_after=ms, replicas=n)`."""
    setups: list[SentinelSetup] = []

    def start(down_after: int = 1000, replicas: int = 1) -> SentinelSetup:
        setup = SentinelSetup(tmp_path / f"sentinel-{len(setups)}", down_after, replicas)
        setups.append(setup)
        setup.start()
        return setup

    yield start
    for setup in setups:
        setup.stop()
