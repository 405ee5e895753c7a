"""The Redis engine: lanner's job contract on Redis, through one qless-compatible Lua script.

Data layout. Everything lives under `ql:*` keys, exactly as qless-core lays it out, so
qless clients and lanner share queues: a hash per job (`ql:j:<jid>`), sorted sets per
queue and state (`ql:q:<queue>-work|scheduled|locks|depends|recur`), failure groups,
tags, workers, statistics, `ql:config`, and lanner's wake-up lists
`ql:lanner:notify:<queue>`. The header of the script (`lua/layout.lua`, printed by
`lanner redis-script`) documents every key, command, reply and error.

How Python talks to it. The core is loaded once, as a function library on Redis 7+
(`FCALL`) or else as a script (`EVALSHA`), see `caller.py`; every command is then
`<command> <now> <args...>`: one atomic round trip. The script keeps
lanner's order of waiting jobs itself, for every caller (`Queue.place` in `lua/queue.lua`:
jobs of equal priority that became ready at the same time pop in put order, where qless's
score alone would tie them). After a Redis restart or a flush, Redis's reply that it lacks
the core makes the engine load it again and repeat the call. `now` is this process's clock
(or the caller's `now`), sent as `repr(float)`. Arguments are checked here with
`lanner.names`, as the SQLite engine checks them, before anything is sent (the script is
permissive, as qless's is). Error replies are mapped to lanner's errors by their stable
wording. Where qless's replies differ from lanner's contract the engine adapts them (see
docs/engines/redis.md); where the difference is behaviour (a read-only `peek`, `cancel`
replying with what it cancelled, `release` with a delay, a heartbeat's fractional expiry)
it calls the script's `lanner.*` extensions. Only `config_get` and `config_all` read a key
directly (`ql:config`), to tell what was set from the script's qless defaults.

Connections. redis-py's clients are thread-safe; commands use one connection pool, and a
blocking `pop` waits with `BLPOP` on a second pool so that it never holds up other
threads' commands. Both retry with exponential backoff on connection errors and timeouts
and check idle connections (`health_check_interval`), so a worker survives a Redis restart.
A command whose reply was lost in a disconnection is sent again: a `pop` may then lock a
job nobody receives, which comes back when its lock expires (delivery is at-least-once).

URLs: `redis://[user:password@]host[:port][/db][?option=value&...]`; `rediss://` for TLS
with certificate and host name verification. Options are `RedisOptions`' fields.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

try:
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import AuthenticationError, ResponseError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.retry import Retry
except ModuleNotFoundError as missing:  # pragma: no cover - depends on the installation
    raise ModuleNotFoundError(
        "the Redis engine needs redis-py: pip install 'lanner[redis]'", name=missing.name
    ) from missing

from lanner import names
from lanner.engine import CONFIG_DEFAULTS, Capability
from lanner.engines.redis.caller import LUA_MODES, LuaCaller, LuaMode
from lanner.engines.urloptions import options_from_query
from lanner.errors import (
    InvalidState,
    JobNotFound,
    LannerError,
    LockLost,
    MalformedArgument,
)
from lanner.job import Failure, Job, JobState
from lanner.records import (
    ConfigValue,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    RecurringJob,
    TimingStats,
    WorkerCounts,
    WorkerJobs,
)

_STATES: Final = {state.value: state for state in JobState}
_LISTABLE_STATES: Final = ("complete", "waiting", "running", "stalled", "scheduled", "depends")
_NOTIFY_PREFIX: Final = "ql:lanner:notify:"
_HANDOFF_PREFIX: Final = "ql:lanner:handoff:"
_CONFIG_KEY: Final = "ql:config"
_DEFAULT_PORT: Final = 6379
# A blocked pop waits in BLPOP for at most this long at a time, so that a connection to a
# server that vanished without closing it is noticed (the socket timeout is longer).
_BLOCK_CHUNK: Final = 30.0
# When something is already due but a pop could not take it (e.g. the queue is at its
# concurrency limit), the wait between looks grows from the first to the second value.
_IDLE_PAUSES: Final = (0.01, 1.0)

Arg = str | int | float
T = TypeVar("T")

# Set while this thread is inside a retrying call, so that a retrying call nested in it
# (redis-py reconnects inside a command, with the same policy) tries only once.
_RETRYING = threading.local()


class _Retry(Retry):
    """redis-py's retry with backoff, counted once per command, and never for a bad password.

    redis-py retries a command, and inside it the reconnection, each with the same policy:
    a server that is down would be tried (retries + 1) squared times. Here the nested
    reconnection tries once and the command's retries pace the whole wait. An
    `AuthenticationError` (a `ConnectionError` to redis-py) is raised at once.
    """

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

    def __post_init__(self) -> None:
        if self.lua not in LUA_MODES:
            raise MalformedArgument(f"lua must be one of {', '.join(LUA_MODES)}, not {self.lua!r}")
        for name in ("socket_timeout", "socket_connect_timeout", "backoff_base", "backoff_cap"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise MalformedArgument(f"{name} must be > 0 seconds, not {value}")
        if self.health_check_interval < 0:
            raise MalformedArgument("health_check_interval must be >= 0 seconds")
        if self.retries < 0:
            raise MalformedArgument("retries must be >= 0")
        if self.max_data_bytes < 2:
            raise MalformedArgument("max_data_bytes must be at least 2")

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RedisOptions:
        return options_from_query(cls, query, "Redis")


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where the server is, parsed from a redis:// or rediss:// URL."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    tls: bool

    def __repr__(self) -> str:  # never show the password
        user = f"{self.username}@" if self.username else ""
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{user}{self.host}:{self.port}/{self.db}"


def parse_url(url: str) -> tuple[RedisAddress, RedisOptions]:
    """Split a redis:// or rediss:// URL into the server's address and lanner's options."""
    if not isinstance(url, str):
        raise MalformedArgument(f"Redis URL must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise MalformedArgument(f"not a Redis URL (redis:// or rediss://): {_hide(url)!r}")
    try:
        port = parts.port or _DEFAULT_PORT
    except ValueError:
        raise MalformedArgument(f"bad port in Redis URL {_hide(url)!r}") from None
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise MalformedArgument(
            f"bad database in Redis URL {_hide(url)!r}: the path must be a number (/0)"
        )
    if parts.fragment:
        raise MalformedArgument(f"a Redis URL has no #fragment: {_hide(url)!r}")
    address = RedisAddress(
        host=parts.hostname or "localhost",
        port=port,
        db=int(path) if path else 0,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=parts.scheme == "rediss",
    )
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    options = RedisOptions.from_query(query)
    if options.ssl_ca_certs and not address.tls:
        raise MalformedArgument("ssl_ca_certs needs a rediss:// URL")
    return address, options


def _hide(url: str) -> str:
    """The URL without its password, for error messages."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)


# -- error replies ------------------------------------------------------------------------
_JOB_MISSING: Final = re.compile(r"(?:Recurring job|Job) (.+) does not exist")
_NOT_RUNNING: Final = re.compile(r"Job (.+) not currently running: (.*)")
_NOT_DEPENDS: Final = re.compile(r"Job (.+) not in the depends state: (.*)")
_LOCK_ELSEWHERE: Final = re.compile(
    r"Job (.+) (?:given out to another worker|running in another queue): .*"
)
_DEPENDED_ON: Final = re.compile(r"Job (.+) is a dependency of (.+), which is not being canceled")


def _translate(command: str, message: str) -> LannerError:
    """The lanner error for an error reply of the script (wording: the script's header)."""
    if message.startswith("Malformed"):
        return MalformedArgument(f"{command}(): {message}")
    if found := _JOB_MISSING.fullmatch(message):
        return JobNotFound(found.group(1), command)
    if found := _NOT_RUNNING.fullmatch(message):
        if command == "timeout":
            return InvalidState(f"timeout(): job {found.group(1)} is not running: {found[2]}")
        return LockLost(f"{command}(): job {found.group(1)} is not currently running: {found[2]}")
    if _LOCK_ELSEWHERE.fullmatch(message):
        return LockLost(f"{command}(): {message}")
    if found := _NOT_DEPENDS.fullmatch(message):
        if found.group(2) == "missing":
            return JobNotFound(found.group(1), command)
        return InvalidState(f"{command}(): {message}")
    if _DEPENDED_ON.fullmatch(message):
        return InvalidState(f"{command}(): {message}")
    return LannerError(f"{command}(): the Redis engine's script failed: {message}")


# -- replies --------------------------------------------------------------------------------
def _list(value: Any) -> list[Any]:
    """A JSON array from the script; cjson writes an empty one as {}."""
    return value if isinstance(value, list) else []


def _float_when(entry: dict[str, Any]) -> dict[str, Any]:
    when = entry.get("when")
    if isinstance(when, int):
        entry["when"] = float(when)
    return entry


def _job(obj: Mapping[str, Any]) -> Job:
    """A Job from the script's JSON job object."""
    state = _STATES[obj["state"]]
    failure = obj.get("failure")
    history = [_float_when(entry) for entry in _list(obj.get("history"))]
    spawned = obj.get("spawned_from_jid")
    return Job(
        jid=obj["jid"],
        klass=obj["klass"],
        queue=obj.get("queue") or "",
        data=obj.get("data") or "{}",
        priority=int(obj.get("priority") or 0),
        tags=tuple(_list(obj.get("tags"))),
        state=state,
        retries=int(obj.get("retries") or 0),
        remaining=int(obj.get("remaining") or 0),
        worker=obj.get("worker") or "",
        expires=float(obj.get("expires") or 0),
        # qless keeps the last failure until the job completes; lanner's contract shows it
        # only while the job is failed.
        failure=(
            Failure(
                group=failure["group"],
                message=failure.get("message", ""),
                when=float(failure.get("when", 0)),
                worker=failure.get("worker", ""),
            )
            if state is JobState.FAILED and isinstance(failure, dict) and "group" in failure
            else None
        ),
        dependencies=tuple(sorted(_list(obj.get("dependencies")))),
        dependents=tuple(sorted(_list(obj.get("dependents")))),
        spawned_from_jid=spawned if isinstance(spawned, str) and spawned else None,
        tracked=bool(obj.get("tracked")),
        history_json=json.dumps(history, separators=(",", ":")),
    )


def _jobs(reply: Any) -> list[Job]:
    return [_job(obj) for obj in _list(json.loads(reply))]


def _config_value(text: str) -> ConfigValue:
    """A stored setting, as the int or float it was set as when it reads as one."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _timing(obj: Mapping[str, Any]) -> TimingStats:
    return TimingStats(
        count=int(obj.get("count") or 0),
        mean=float(obj.get("mean") or 0),
        std=float(obj.get("std") or 0),
        histogram=tuple(int(n) for n in _list(obj.get("histogram"))),
    )


def _text(value: Arg) -> str:
    """An argument as the script reads it: floats with full precision."""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _json_list(values: Sequence[str]) -> str:
    return json.dumps(list(values), separators=(",", ":"))


def _blpop_timeout(seconds: float) -> float:
    """BLPOP's timeout: whole milliseconds, rounded up, never 0 (which blocks forever)."""
    return max(0.001, math.ceil(min(seconds, _BLOCK_CHUNK) * 1000) / 1000)


def _decoded(value: bytes | str) -> str:
    """A reply string (the clients decode replies; redis-py's types allow bytes)."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def redis_client(
    address: RedisAddress, options: RedisOptions, socket_timeout: float
) -> redis.Redis:
    """A redis-py client as the engine uses one: timeouts, retries with backoff, TLS."""
    return redis.Redis(
        host=address.host,
        port=address.port,
        db=address.db,
        username=address.username,
        password=address.password,
        socket_timeout=socket_timeout,
        socket_connect_timeout=options.socket_connect_timeout,
        socket_keepalive=True,
        health_check_interval=options.health_check_interval,
        retry=_Retry(
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


class RedisEngine:
    """The Redis engine. Safe to share between threads (and usable after fork)."""

    name: Final = "redis"
    capabilities: Final = frozenset(Capability)

    def __init__(self, url: str = "redis://127.0.0.1:6379/0") -> None:
        self.address, self.options = parse_url(url)
        self._client = redis_client(self.address, self.options, self.options.socket_timeout)
        # BLPOP blocks its connection: blocked pops get their own pool, whose reads may
        # take a whole wait chunk longer than a command.
        self._blocking = redis_client(
            self.address, self.options, self.options.socket_timeout + _BLOCK_CHUNK
        )
        try:
            self._lua = LuaCaller(self._client, self.options.lua)
        except BaseException:
            self.close()
            raise

    @property
    def max_data_bytes(self) -> int:
        return self.options.max_data_bytes

    def __repr__(self) -> str:
        return f"RedisEngine({self.address!r})"

    def __enter__(self) -> RedisEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()
        self._blocking.close()
        self._client.connection_pool.disconnect()
        self._blocking.connection_pool.disconnect()

    # -- talking to the script ------------------------------------------------------------
    def _call(self, command: str, now: float, *args: Arg, name: str | None = None) -> Any:
        """Run one script command; `name` is the lanner method named in errors."""
        try:
            return self._lua.call([command, repr(now), *map(_text, args)])
        except ResponseError as error:
            raise _translate(name or command, str(error)) from None

    # -- configuration --------------------------------------------------------------------
    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None:
        key = names.label(key, "config key")
        value = self._client.hget(_CONFIG_KEY, key)
        if value is None:
            return CONFIG_DEFAULTS.get(key)
        return _config_value(_decoded(value))

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        # Read directly: the script's own defaults name qless as the application.
        stored = self._client.hgetall(_CONFIG_KEY)
        merged: dict[str, ConfigValue] = dict(CONFIG_DEFAULTS)
        merged.update(
            (_decoded(key), _config_value(_decoded(value))) for key, value in stored.items()
        )
        return merged

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None:
        key = names.label(key, "config key")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise MalformedArgument(
                f"config value must be a str, int or float, not {type(value).__name__}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise MalformedArgument(f"config value must be finite, not {value}")
        self._call("config.set", names.now(now), key, value, name="config_set")

    def config_unset(self, key: str, *, now: float | None = None) -> None:
        key = names.label(key, "config key")
        self._call("config.unset", names.now(now), key, name="config_unset")

    # -- putting work ---------------------------------------------------------------------
    def _put_args(
        self,
        queue: object,
        jid: object,
        klass: object,
        data: object,
        delay: object,
        priority: object,
        tags: object,
        retries: object,
        depends: object,
    ) -> dict[str, Any]:
        """Check one put's arguments; the result is a `lanner.put_many` job object."""
        checked = names.put_arguments(
            queue, jid, klass, data, delay, priority, tags, retries, depends,
            self.options.max_data_bytes,
        )  # fmt: skip
        job: dict[str, Any] = {
            "queue": checked.queue,
            "jid": checked.jid,
            "klass": checked.klass,
            "data": checked.data,
            "delay": checked.delay,
        }
        for option in ("priority", "tags", "retries", "depends"):
            value = getattr(checked, option)
            if value is not None:
                job[option] = value
        return job

    def _put(self, command: str, job: Mapping[str, Any], worker: object, now: float) -> str:
        worker = "" if worker == "" else names.label(worker, "worker")
        args: list[Arg] = [worker, job["queue"], job["jid"], job["klass"], job["data"]]
        args.append(job["delay"])
        for option in ("priority", "retries"):
            if option in job:
                args += [option, job[option]]
        for option in ("tags", "depends"):
            if option in job:
                args += [option, _json_list(job[option])]
        return str(self._call(command, now, *args))

    def put(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        now: float | None = None,
    ) -> str:
        job = self._put_args(queue, jid, klass, data, delay, priority, tags, retries, depends)
        return self._put("put", job, worker, names.now(now))

    def requeue(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str = "{}",
        *,
        delay: float = 0.0,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
        retries: int | None = None,
        depends: Sequence[str] | None = None,
        worker: str = "",
        now: float | None = None,
    ) -> str:
        job = self._put_args(queue, jid, klass, data, delay, priority, tags, retries, depends)
        return self._put("requeue", job, worker, names.now(now))

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        if not isinstance(jobs, Sequence):
            raise MalformedArgument(f"jobs must be a list of NewJob, not {type(jobs).__name__}")
        checked = []
        for job in jobs:
            if not isinstance(job, NewJob):
                raise MalformedArgument(f"put_many() takes NewJob values, not {type(job).__name__}")
            checked.append(
                self._put_args(
                    job.queue, job.jid, job.klass, job.data, job.delay, job.priority,
                    job.tags, job.retries, job.depends,
                )
            )  # fmt: skip
        at = names.now(now)
        if not checked:
            return []
        payload = json.dumps(checked, separators=(",", ":"))
        reply = self._call("lanner.put_many", at, "", payload, name="put_many")
        return [str(jid) for jid in reply]

    # -- taking work ----------------------------------------------------------------------
    def pop(
        self,
        queue: str,
        worker: str,
        count: int = 1,
        *,
        wait: float = 0.0,
        now: float | None = None,
    ) -> list[Job]:
        queue = names.queue_name(queue)
        worker = names.label(worker, "worker")
        count = names.integer(count, "count", 1)
        wait = names.seconds(wait, "wait")
        fixed_now = None if now is None else names.timestamp(now)
        return self._pop(queue, worker, count, fixed_now, wait)

    def _pop(
        self, queue: str, worker: str, count: int, fixed_now: float | None, wait: float
    ) -> list[Job]:
        """Pop; with nothing to take, wait (if `wait` > 0) in BLPOP for jobs handed off or
        a wake-up token.

        `lanner.pop_wait` registers the worker as waiting when it finds nothing: a command
        that makes jobs ready then pops them for the worker and pushes them to
        `ql:lanner:handoff:<queue>:<worker>`, so the BLPOP reply is the jobs themselves.
        Ready jobs not handed off push tokens to `ql:lanner:notify:<queue>`, which wake
        the worker to pop again. Jobs that become ready with time (delays, expiring locks,
        recurring runs) are due at the `next_due` pop_wait replies with, which bounds the
        wait. Every wait ends with a pop_wait that registers nothing, so jobs handed off
        as a BLPOP timed out are taken, not left behind.
        """
        deadline = time.monotonic() + wait
        handoff, notify = f"{_HANDOFF_PREFIX}{queue}:{worker}", _NOTIFY_PREFIX + queue
        idle = _IDLE_PAUSES[0]
        while True:
            at = time.time() if fixed_now is None else fixed_now
            remaining = deadline - time.monotonic()
            block = min(max(remaining, 0.0), _BLOCK_CHUNK)
            reply = self._call("lanner.pop_wait", at, queue, worker, count, block, name="pop")
            jobs = _jobs(reply[0])
            if jobs or remaining <= 0:
                return jobs
            timeout = block
            next_due = reply[1] if len(reply) > 1 else None
            if next_due is not None:
                clock = time.time() if fixed_now is None else fixed_now
                if float(next_due) > clock:
                    timeout = min(timeout, float(next_due) - clock)
                else:
                    # Due, yet the pop could not take it (e.g. max-concurrency): look later.
                    timeout = min(timeout, idle)
                    idle = min(idle * 2, _IDLE_PAUSES[1])
            woken = self._blocking.blpop([handoff, notify], timeout=_blpop_timeout(timeout))
            if woken is not None and woken[0] == handoff:
                return _jobs(woken[1])

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        queue = names.queue_name(queue)
        count = names.integer(count, "count", 1)
        return _jobs(self._call("lanner.peek", names.now(now), queue, count, name="peek"))

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        jid = names.label(jid, "jid")
        worker = names.label(worker, "worker")
        args: list[Arg] = [jid, worker]
        if data is not None:
            args.append(names.json_text(data, "data", self.options.max_data_bytes))
        return float(self._call("lanner.heartbeat", names.now(now), *args, name="heartbeat"))

    # -- finishing work -------------------------------------------------------------------
    def complete(
        self,
        jid: str,
        worker: str,
        queue: str,
        data: str | None = None,
        *,
        next: str | None = None,
        delay: float = 0.0,
        depends: Sequence[str] | None = None,
        now: float | None = None,
    ) -> str:
        jid = names.label(jid, "jid")
        worker = names.label(worker, "worker")
        queue = names.queue_name(queue)
        if data is not None:
            data = names.json_text(data, "data", self.options.max_data_bytes)
        delay = names.seconds(delay, "delay")
        args: list[Arg] = [jid, worker, queue, data or ""]
        if next is None:
            if delay or depends:
                raise MalformedArgument("complete(): delay and depends need a next queue")
        else:
            args += ["next", names.queue_name(next, "next queue"), "delay", delay]
            if depends is not None:
                args += ["depends", _json_list(names.unique_labels(depends, "depends"))]
        return str(self._call("complete", names.now(now), *args))

    def complete_many(
        self, jids: Sequence[str], worker: str, queue: str, *, now: float | None = None
    ) -> list[str]:
        checked = names.unique_labels(jids, "jids")
        worker = names.label(worker, "worker")
        queue = names.queue_name(queue)
        at = names.now(now)
        if not checked:
            return []
        reply = self._call(
            "lanner.complete_many", at, worker, queue, *checked, name="complete_many"
        )
        return [str(jid) for jid in _list(reply)]

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        now: float | None = None,
    ) -> list[str]:
        checked = names.unique_labels(jids, "jids")
        worker = names.label(worker, "worker")
        queue = names.queue_name(queue)
        delay = names.seconds(delay, "delay")
        at = names.now(now)
        if not checked:
            return []
        reply = self._call("lanner.release_in", at, worker, queue, delay, *checked, name="release")
        return [str(jid) for jid in _list(reply)]

    def fail(
        self,
        jid: str,
        worker: str,
        group: str,
        message: str,
        data: str | None = None,
        *,
        now: float | None = None,
    ) -> str:
        jid = names.label(jid, "jid")
        worker = names.label(worker, "worker")
        group = names.label(group, "group")
        message = names.message(message)
        args: list[Arg] = [jid, worker, group, message]
        if data is not None:
            args.append(names.json_text(data, "data", self.options.max_data_bytes))
        return str(self._call("fail", names.now(now), *args))

    def retry(
        self,
        jid: str,
        queue: str,
        worker: str,
        delay: float = 0.0,
        group: str | None = None,
        message: str | None = None,
        *,
        now: float | None = None,
    ) -> int:
        jid = names.label(jid, "jid")
        queue = names.queue_name(queue)
        worker = names.label(worker, "worker")
        delay = names.seconds(delay, "delay")
        args: list[Arg] = [jid, queue, worker, delay]
        if group is not None or message is not None:
            # qless takes a message only with a group: name the default group then.
            args.append(f"failed-retries-{queue}" if group is None else names.label(group, "group"))
            if message is not None:
                args.append(names.message(message))
        return int(self._call("retry", names.now(now), *args))

    # -- managing jobs --------------------------------------------------------------------
    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        checked = names.unique_labels(jids, "jids")
        if not checked:
            return []
        reply = self._call("lanner.cancel", names.now(now), *checked, name="cancel")
        return [str(jid) for jid in _list(reply)]

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        checked = names.unique_labels(jids, "jids")
        at = names.now(now)
        if checked:
            self._call("timeout", at, *checked)

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        priority = names.integer(priority, "priority")
        self._call("priority", names.now(now), jid, priority)

    def get(self, jid: str, *, now: float | None = None) -> Job | None:
        jid = names.label(jid, "jid")
        reply = self._call("get", names.now(now), jid)
        return None if reply is None else _job(json.loads(reply))

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        checked = names.labels(jids, "jids")
        if not checked:
            return []
        return _jobs(self._call("multiget", names.now(now), *checked))

    # -- queues ---------------------------------------------------------------------------
    def queues(self, *, now: float | None = None) -> list[QueueCounts]:
        counts = [_counts(obj) for obj in _list(json.loads(self._call("queues", names.now(now))))]
        return sorted(counts, key=lambda c: c.name)

    def queue_counts(self, queue: str, *, now: float | None = None) -> QueueCounts:
        queue = names.queue_name(queue)
        return _counts(json.loads(self._call("queues", names.now(now), queue, name="queue_counts")))

    def length(self, queue: str, *, now: float | None = None) -> int:
        queue = names.queue_name(queue)
        return int(self._call("length", names.now(now), queue))

    def jobs(
        self,
        state: str,
        queue: str | None = None,
        offset: int = 0,
        count: int = 25,
        *,
        now: float | None = None,
    ) -> list[str]:
        if state not in (*_LISTABLE_STATES, "recurring"):
            raise MalformedArgument(
                f"jobs(): unknown state {state!r}; known: {', '.join(_LISTABLE_STATES)}, recurring"
            )
        offset = names.integer(offset, "offset", 0)
        count = names.integer(count, "count", 0)
        at = names.now(now)
        args: list[Arg] = [state]
        if state != "complete":
            if queue is None:
                raise MalformedArgument(f"jobs(): state {state!r} needs a queue")
            args.append(names.queue_name(queue))
        if count == 0:
            return []
        reply = self._call("jobs", at, *args, offset, count)
        return [str(jid) for jid in _list(reply)]

    def pause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        checked = names.queue_names(queues)
        if checked:
            self._call("pause", names.now(now), *checked)

    def unpause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        checked = names.queue_names(queues)
        if checked:
            self._call("unpause", names.now(now), *checked)

    # -- failures -------------------------------------------------------------------------
    def failed_groups(self, *, now: float | None = None) -> dict[str, int]:
        groups = json.loads(self._call("failed", names.now(now), name="failed_groups"))
        if not isinstance(groups, dict):
            return {}
        return {group: int(n) for group, n in sorted(groups.items())}

    def failed(
        self, group: str, start: int = 0, limit: int = 25, *, now: float | None = None
    ) -> JobPage:
        group = names.label(group, "group")
        start = names.integer(start, "start", 0)
        limit = names.integer(limit, "limit", 0)
        at = names.now(now)
        page = json.loads(self._call("failed", at, group, start, limit))
        return JobPage(total=int(page["total"]), jobs=tuple(self._objects(page["jobs"], at)))

    def _objects(self, jids: Any, now: float) -> list[Job]:
        wanted = [str(jid) for jid in _list(jids)]
        return self.multiget(wanted, now=now) if wanted else []

    def unfail(self, queue: str, group: str, count: int = 25, *, now: float | None = None) -> int:
        queue = names.queue_name(queue)
        group = names.label(group, "group")
        count = names.integer(count, "count", 0)
        return int(self._call("unfail", names.now(now), queue, group, count))

    # -- dependencies ---------------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        wanted = names.unique_labels(jids, "jids")
        self._call("depends", names.now(now), jid, "on", *wanted, name="depends_add")

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        jid = names.label(jid, "jid")
        wanted = ["all"] if jids is None else names.unique_labels(jids, "jids")
        self._call("depends", names.now(now), jid, "off", *wanted, name="depends_remove")

    # -- tags and log ---------------------------------------------------------------------
    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        jid = names.label(jid, "jid")
        checked = names.unique_labels(tags, "tags")
        reply = self._call("tag", names.now(now), "add", jid, *checked, name="tag_add")
        return [str(tag) for tag in _list(json.loads(reply))]

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        jid = names.label(jid, "jid")
        checked = names.unique_labels(tags, "tags")
        reply = self._call("tag", names.now(now), "remove", jid, *checked, name="tag_remove")
        return [str(tag) for tag in _list(json.loads(reply))]

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        tag = names.label(tag, "tag")
        offset = names.integer(offset, "offset", 0)
        count = names.integer(count, "count", 0)
        at = names.now(now)
        if count == 0:
            page = json.loads(self._call("tag", at, "get", tag, 0, 0, name="tagged"))
            return JobPage(total=int(page["total"]), jobs=())
        page = json.loads(self._call("tag", at, "get", tag, offset, count, name="tagged"))
        return JobPage(total=int(page["total"]), jobs=tuple(self._objects(page["jobs"], at)))

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        offset = names.integer(offset, "offset", 0)
        count = names.integer(count, "count", 0)
        if count == 0:
            return []
        reply = self._call("tag", names.now(now), "top", offset, count, name="tags_top")
        return [str(tag) for tag in _list(json.loads(reply))]

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        jid = names.label(jid, "jid")
        message = names.label(message, "message")
        if data is not None and not isinstance(data, Mapping):
            raise MalformedArgument(f"log data must be a mapping, not {type(data).__name__}")
        details = {k: v for k, v in (data or {}).items() if k not in ("what", "when")}
        try:
            text = json.dumps(details, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise MalformedArgument(f"log data is not JSON-serialisable: {error}") from None
        self._call("log", names.now(now), jid, message, text)

    # -- tracking, statistics and workers --------------------------------------------------
    def track(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        self._call("track", names.now(now), "track", jid)

    def untrack(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        at = names.now(now)
        # qless's untrack does not check that the job exists; the contract does.
        if self._call("get", at, jid, name="untrack") is None:
            raise JobNotFound(jid, "untrack")
        self._call("track", at, "untrack", jid)

    def tracked(self, *, now: float | None = None) -> list[Job]:
        reply = json.loads(self._call("track", names.now(now)))
        return [_job(obj) for obj in _list(reply.get("jobs"))]

    def stats(self, queue: str, date: float, *, now: float | None = None) -> QueueStats:
        queue = names.queue_name(queue)
        date = names.timestamp(date)
        obj = json.loads(self._call("stats", names.now(now), queue, date))
        return QueueStats(
            retries=int(obj.get("retries") or 0),
            failed=int(obj.get("failed") or 0),
            failures=int(obj.get("failures") or 0),
            wait=_timing(obj["wait"]),
            run=_timing(obj["run"]),
        )

    def workers(self, *, now: float | None = None) -> list[WorkerCounts]:
        reply = _list(json.loads(self._call("workers", names.now(now))))
        return [WorkerCounts(w["name"], int(w["jobs"]), int(w["stalled"])) for w in reply]

    def worker_jobs(self, worker: str, *, now: float | None = None) -> WorkerJobs:
        worker = names.label(worker, "worker")
        obj = json.loads(self._call("workers", names.now(now), worker, name="worker_jobs"))
        return WorkerJobs(
            jobs=tuple(str(jid) for jid in _list(obj.get("jobs"))),
            stalled=tuple(str(jid) for jid in _list(obj.get("stalled"))),
        )

    def worker_deregister(self, workers: Sequence[str], *, now: float | None = None) -> None:
        checked = names.labels(workers, "workers")
        if checked:
            self._call("worker.deregister", names.now(now), *checked, name="worker_deregister")

    # -- recurring jobs --------------------------------------------------------------------
    def recur(
        self,
        queue: str,
        jid: str,
        klass: str,
        data: str,
        interval: float,
        offset: float = 0.0,
        *,
        priority: int = 0,
        tags: Sequence[str] = (),
        retries: int = 0,
        backlog: int = 0,
        now: float | None = None,
    ) -> str:
        args: list[Arg] = [
            names.queue_name(queue),
            names.label(jid, "jid"),
            names.label(klass, "klass"),
            names.json_text(data, "data", self.options.max_data_bytes),
            "interval",
            names.interval(interval),
            names.seconds(offset, "offset"),
            "priority",
            names.integer(priority, "priority"),
            "tags",
            _json_list(names.unique_labels(tags, "tags")),
            "retries",
            names.integer(retries, "retries", 0),
            "backlog",
            names.integer(backlog, "backlog", 0),
        ]
        return str(self._call("recur", names.now(now), *args))

    def unrecur(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        self._call("unrecur", names.now(now), jid)

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None:
        jid = names.label(jid, "jid")
        reply = self._call("recur.get", names.now(now), jid, name="recur_get")
        if reply is None:
            return None
        obj = json.loads(reply)
        return RecurringJob(
            jid=obj["jid"],
            klass=obj["klass"],
            queue=obj["queue"],
            data=obj.get("data") or "{}",
            priority=int(obj.get("priority") or 0),
            tags=tuple(_list(obj.get("tags"))),
            retries=int(obj.get("retries") or 0),
            interval=float(obj["interval"]),
            count=int(obj.get("count") or 0),
            backlog=int(obj.get("backlog") or 0),
        )

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        jid = names.label(jid, "jid")
        args: list[Arg] = [jid]
        for key, value in names.recur_changes(changes, self.options.max_data_bytes).items():
            args += [key, value]
        self._call("recur.update", names.now(now), *args, name="recur_update")

    def recur_tag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        jid = names.label(jid, "jid")
        checked = names.unique_labels(tags, "tags")
        reply = self._call("recur.tag", names.now(now), jid, *checked, name="recur_tag")
        return [str(tag) for tag in _list(json.loads(reply))]

    def recur_untag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        jid = names.label(jid, "jid")
        checked = names.unique_labels(tags, "tags")
        reply = self._call("recur.untag", names.now(now), jid, *checked, name="recur_untag")
        return [str(tag) for tag in _list(json.loads(reply))]

    # -- forgetting queues -----------------------------------------------------------------
    def queue_forget(self, queues: Sequence[str], *, now: float | None = None) -> None:
        checked = names.queue_names(queues)
        if checked:
            self._call("queue.forget", names.now(now), *checked, name="queue_forget")


def _counts(obj: Mapping[str, Any]) -> QueueCounts:
    return QueueCounts(
        name=obj["name"],
        waiting=int(obj["waiting"]),
        stalled=int(obj["stalled"]),
        running=int(obj["running"]),
        scheduled=int(obj["scheduled"]),
        depends=int(obj["depends"]),
        recurring=int(obj["recurring"]),
        paused=bool(obj["paused"]),
    )
