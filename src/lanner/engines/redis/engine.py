"""The Redis engine: lanner's job contract on Redis, through one qless-compatible Lua core.

Data layout. Everything lives under `ql:*` keys, exactly as qless-core lays it out, so
qless clients and lanner share queues: a hash per job (`ql:j:<jid>`), sorted sets per
queue and state (`ql:q:<queue>-work|scheduled|locks|depends|recur`), failure groups,
tags, workers, statistics, `ql:config`, and lanner's wake-up and hand-off lists
`ql:lanner:notify:<queue>`, `ql:lanner:handoff:<queue>:<worker>`. The header of the core
(`lua/layout.lua`, printed by `lanner redis-script`) documents every key, command, reply
and error.

How Python talks to it. Each command checks its arguments (`lanner.checks`), as every
engine does, before anything is sent (the core is permissive, as qless's is), then makes
one atomic call `<command> <now> <args...>` (`caller.py`: a function library on Redis 7,
else a script). `now` is this process's clock (or the caller's `now`), sent as
`repr(float)`. Replies and error replies become lanner's values and errors in
`replies.py`. Where the difference from qless is behaviour (a read-only `peek`, `cancel`
replying with what it cancelled, `release` with a delay, a heartbeat's fractional expiry,
batch put and complete, blocking pop with hand-off) the face calls the core's `lanner.*`
extensions. Only `config_get` and `config_all` read a key directly (`ql:config`), to tell
what was set from the core's qless defaults.

Connections (`connection.py`): redis-py's clients are thread-safe; commands use one
connection pool, and a blocking `pop` waits with `BLPOP` on a second pool so that it never
holds up other threads' commands. Both retry with backoff through a Redis restart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from redis.exceptions import ResponseError

from lanner import checks, names
from lanner.engine import CONFIG_DEFAULTS, Capability
from lanner.engines.redis import arguments, blocking, replies
from lanner.engines.redis.arguments import Arg
from lanner.engines.redis.caller import LuaCaller
from lanner.engines.redis.connection import parse_url, redis_client
from lanner.errors import JobNotFound
from lanner.job import Job
from lanner.records import (
    ConfigValue,
    JobPage,
    NewJob,
    QueueCounts,
    QueueStats,
    RecurringJob,
    WorkerCounts,
    WorkerJobs,
)

_CONFIG_KEY: Final = "ql:config"


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
            self.address, self.options, self.options.socket_timeout + blocking.BLOCK_CHUNK
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

    # -- talking to the core --------------------------------------------------------------
    def _call(self, command: str, now: float, *args: Arg, name: str | None = None) -> Any:
        """Run one command of the core; `name` is the lanner method named in errors."""
        try:
            return self._lua.call([command, repr(now), *map(arguments.text, args)])
        except ResponseError as error:
            raise replies.translate(name or command, str(error)) from None

    # -- configuration --------------------------------------------------------------------
    def config_get(self, key: str, *, now: float | None = None) -> ConfigValue | None:
        key = checks.config_key(key)
        value = self._client.hget(_CONFIG_KEY, key)
        if value is None:
            return CONFIG_DEFAULTS.get(key)
        return replies.config_value(replies.decoded(value))

    def config_all(self, *, now: float | None = None) -> dict[str, ConfigValue]:
        # Read directly: the core's own defaults name qless as the application.
        stored = self._client.hgetall(_CONFIG_KEY)
        merged: dict[str, ConfigValue] = dict(CONFIG_DEFAULTS)
        merged.update(
            (replies.decoded(key), replies.config_value(replies.decoded(value)))
            for key, value in stored.items()
        )
        return merged

    def config_set(self, key: str, value: ConfigValue, *, now: float | None = None) -> None:
        setting = checks.config_set(key, value)
        self._call("config.set", checks.now(now), setting.key, setting.value, name="config_set")

    def config_unset(self, key: str, *, now: float | None = None) -> None:
        key = checks.config_key(key)
        self._call("config.unset", checks.now(now), key, name="config_unset")

    # -- putting work ---------------------------------------------------------------------
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
        return self._put("put", checks.put(
            queue, jid, klass, data, delay, priority, tags, retries, depends, worker, now,
            self.max_data_bytes,
        ))  # fmt: skip

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
        return self._put("requeue", checks.put(
            queue, jid, klass, data, delay, priority, tags, retries, depends, worker, now,
            self.max_data_bytes,
        ))  # fmt: skip

    def _put(self, command: str, checked: checks.Put) -> str:
        """put and requeue: the core's own commands, which qless clients also call."""
        [job] = checked.jobs
        return str(self._call(command, checked.now, *arguments.put(job, checked.worker)))

    def put_many(self, jobs: Sequence[NewJob], *, now: float | None = None) -> list[str]:
        checked = checks.put_many(jobs, now, self.max_data_bytes)
        if not checked.jobs:
            return []
        payload = arguments.put_many(checked.jobs)
        reply = self._call("lanner.put_many", checked.now, "", payload, name="put_many")
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
        command = checks.pop(queue, worker, count, wait, now)
        return blocking.pop(self._call, self._blocking, command)

    def peek(self, queue: str, count: int = 1, *, now: float | None = None) -> list[Job]:
        command = checks.peek(queue, count, now)
        reply = self._call("lanner.peek", command.now, command.queue, command.limit, name="peek")
        return replies.jobs(reply)

    def heartbeat(
        self, jid: str, worker: str, data: str | None = None, *, now: float | None = None
    ) -> float:
        command = checks.heartbeat(jid, worker, data, now, self.max_data_bytes)
        args = arguments.optional(command.jid, command.worker, command.data)
        return float(self._call("lanner.heartbeat", command.now, *args, name="heartbeat"))

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
        command = checks.complete(
            jid, worker, queue, data, next, delay, depends, now, self.max_data_bytes
        )
        return str(self._call("complete", command.now, *arguments.complete(command)))

    def complete_many(
        self, jids: Sequence[str], worker: str, queue: str, *, now: float | None = None
    ) -> list[str]:
        command = checks.settle(jids, worker, queue, 0.0, now)
        if not command.jids:
            return []
        reply = self._call(
            "lanner.complete_many", command.now, command.worker, command.queue, *command.jids,
            name="complete_many",
        )  # fmt: skip
        return [str(jid) for jid in replies.as_list(reply)]

    def release(
        self,
        jids: Sequence[str],
        worker: str,
        queue: str,
        *,
        delay: float = 0.0,
        now: float | None = None,
    ) -> list[str]:
        command = checks.settle(jids, worker, queue, delay, now)
        if not command.jids:
            return []
        reply = self._call(
            "lanner.release_in", command.now, command.worker, command.queue, command.delay,
            *command.jids, name="release",
        )  # fmt: skip
        return [str(jid) for jid in replies.as_list(reply)]

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
        command = checks.fail(jid, worker, group, message, data, now, self.max_data_bytes)
        args = arguments.optional(
            command.jid, command.worker, command.group, command.message, command.data
        )
        return str(self._call("fail", command.now, *args))

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
        command = checks.retry(jid, queue, worker, delay, group, message, now)
        return int(self._call("retry", command.now, *arguments.retry(command)))

    # -- managing jobs --------------------------------------------------------------------
    def cancel(self, jids: Sequence[str], *, now: float | None = None) -> list[str]:
        command = checks.jids(jids, now)
        if not command.jids:
            return []
        reply = self._call("lanner.cancel", command.now, *command.jids, name="cancel")
        return [str(jid) for jid in replies.as_list(reply)]

    def timeout(self, jids: Sequence[str], *, now: float | None = None) -> None:
        command = checks.jids(jids, now)
        if command.jids:
            self._call("timeout", command.now, *command.jids)

    def priority(self, jid: str, priority: int, *, now: float | None = None) -> None:
        command = checks.priority(jid, priority, now)
        self._call("priority", command.now, command.jid, command.priority)

    def get(self, jid: str, *, now: float | None = None) -> Job | None:
        jid = names.label(jid, "jid")
        reply = self._call("get", checks.now(now), jid)
        return None if reply is None else replies.job(json.loads(reply))

    def multiget(self, jids: Sequence[str], *, now: float | None = None) -> list[Job]:
        command = checks.jids(jids, now, unique=False)
        if not command.jids:
            return []
        return replies.jobs(self._call("multiget", command.now, *command.jids))

    # -- queues ---------------------------------------------------------------------------
    def queues(self, *, now: float | None = None) -> list[QueueCounts]:
        reply = json.loads(self._call("queues", checks.now(now)))
        return sorted((replies.counts(obj) for obj in replies.as_list(reply)), key=_by_name)

    def queue_counts(self, queue: str, *, now: float | None = None) -> QueueCounts:
        command = checks.queue_at(queue, now)
        reply = self._call("queues", command.now, command.queue, name="queue_counts")
        return replies.counts(json.loads(reply))

    def length(self, queue: str, *, now: float | None = None) -> int:
        command = checks.queue_at(queue, now)
        return int(self._call("length", command.now, command.queue))

    def jobs(
        self,
        state: str,
        queue: str | None = None,
        offset: int = 0,
        count: int = 25,
        *,
        now: float | None = None,
    ) -> list[str]:
        command = checks.listing(state, queue, offset, count, now)
        if command.limit == 0:
            return []
        args: list[Arg] = (
            [command.state] if command.queue is None else [command.state, command.queue]
        )
        reply = self._call("jobs", command.now, *args, command.offset, command.limit)
        return [str(jid) for jid in replies.as_list(reply)]

    def pause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        command = checks.queues(queues, now)
        if command.queues:
            self._call("pause", command.now, *command.queues)

    def unpause(self, queues: Sequence[str], *, now: float | None = None) -> None:
        command = checks.queues(queues, now)
        if command.queues:
            self._call("unpause", command.now, *command.queues)

    def queue_forget(self, queues: Sequence[str], *, now: float | None = None) -> None:
        command = checks.queues(queues, now)
        if command.queues:
            self._call("queue.forget", command.now, *command.queues, name="queue_forget")

    # -- failures -------------------------------------------------------------------------
    def failed_groups(self, *, now: float | None = None) -> dict[str, int]:
        return replies.groups(self._call("failed", checks.now(now), name="failed_groups"))

    def failed(
        self, group: str, start: int = 0, limit: int = 25, *, now: float | None = None
    ) -> JobPage:
        command = checks.failed_page(group, start, limit, now)
        page = json.loads(self._call("failed", command.now, *arguments.page(command)))
        return JobPage(int(page["total"]), tuple(self._objects(page["jobs"], command.now)))

    def _objects(self, jids: Any, now: float) -> list[Job]:
        wanted = [str(jid) for jid in replies.as_list(jids)]
        return self.multiget(wanted, now=now) if wanted else []

    def unfail(self, queue: str, group: str, count: int = 25, *, now: float | None = None) -> int:
        command = checks.unfail(queue, group, count, now)
        return int(self._call("unfail", command.now, command.queue, command.group, command.limit))

    # -- dependencies ---------------------------------------------------------------------
    def depends_add(self, jid: str, jids: Sequence[str], *, now: float | None = None) -> None:
        command = checks.depends(jid, jids, now)
        wanted = command.jids or []
        self._call("depends", command.now, command.jid, "on", *wanted, name="depends_add")

    def depends_remove(
        self, jid: str, jids: Sequence[str] | None, *, now: float | None = None
    ) -> None:
        command = checks.depends(jid, jids, now)
        wanted = ["all"] if command.jids is None else command.jids
        self._call("depends", command.now, command.jid, "off", *wanted, name="depends_remove")

    # -- tags, tracking and log -----------------------------------------------------------
    def tag_add(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._retag("tag", "add", checks.retag(jid, tags, now), "tag_add")

    def tag_remove(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._retag("tag", "remove", checks.retag(jid, tags, now), "tag_remove")

    def _retag(self, command: str, verb: str | None, checked: checks.Retag, name: str) -> list[str]:
        """The tags of a job (tag add/remove) or a template (recur.tag/untag), changed."""
        args: list[Arg] = [] if verb is None else [verb]
        reply = self._call(command, checked.now, *args, checked.jid, *checked.tags, name=name)
        return [str(tag) for tag in replies.as_list(json.loads(reply))]

    def tagged(
        self, tag: str, offset: int = 0, count: int = 25, *, now: float | None = None
    ) -> JobPage:
        command = checks.tagged_page(tag, offset, count, now)
        page = json.loads(
            self._call("tag", command.now, *arguments.page(command, "get"), name="tagged")
        )
        jobs = self._objects(page["jobs"], command.now) if command.limit else []
        return JobPage(int(page["total"]), tuple(jobs))

    def tags_top(self, offset: int = 0, count: int = 25, *, now: float | None = None) -> list[str]:
        command = checks.top_page(offset, count, now)
        if command.limit == 0:
            return []
        reply = self._call("tag", command.now, *arguments.page(command, "top"), name="tags_top")
        return [str(tag) for tag in replies.as_list(json.loads(reply))]

    def log(
        self,
        jid: str,
        message: str,
        data: Mapping[str, object] | None = None,
        *,
        now: float | None = None,
    ) -> None:
        command = checks.log(jid, message, data, now)
        details = json.dumps(command.details, separators=(",", ":"))
        self._call("log", command.now, command.jid, command.message, details)

    def track(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        self._call("track", checks.now(now), "track", jid)

    def untrack(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        at = checks.now(now)
        # qless's untrack does not check that the job exists; the contract does.
        if self._call("get", at, jid, name="untrack") is None:
            raise JobNotFound(jid, "untrack")
        self._call("track", at, "untrack", jid)

    def tracked(self, *, now: float | None = None) -> list[Job]:
        reply = json.loads(self._call("track", checks.now(now)))
        return [replies.job(obj) for obj in replies.as_list(reply.get("jobs"))]

    # -- statistics and workers -----------------------------------------------------------
    def stats(self, queue: str, date: float, *, now: float | None = None) -> QueueStats:
        command = checks.stats(queue, date)
        return replies.stats(self._call("stats", checks.now(now), command.queue, command.date))

    def workers(self, *, now: float | None = None) -> list[WorkerCounts]:
        return replies.workers(self._call("workers", checks.now(now)))

    def worker_jobs(self, worker: str, *, now: float | None = None) -> WorkerJobs:
        command = checks.worker_at(worker, now)
        reply = self._call("workers", command.now, command.worker, name="worker_jobs")
        return replies.worker_jobs(reply)

    def worker_deregister(self, workers: Sequence[str], *, now: float | None = None) -> None:
        checked = names.labels(workers, "workers")
        if checked:
            self._call("worker.deregister", checks.now(now), *checked, name="worker_deregister")

    # -- recurring jobs -------------------------------------------------------------------
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
        command = checks.recur(
            queue, jid, klass, data, interval, offset, priority, tags, retries, backlog, now,
            self.max_data_bytes,
        )  # fmt: skip
        return str(self._call("recur", command.now, *arguments.recur(command)))

    def unrecur(self, jid: str, *, now: float | None = None) -> None:
        jid = names.label(jid, "jid")
        self._call("unrecur", checks.now(now), jid)

    def recur_get(self, jid: str, *, now: float | None = None) -> RecurringJob | None:
        jid = names.label(jid, "jid")
        reply = self._call("recur.get", checks.now(now), jid, name="recur_get")
        return None if reply is None else replies.recurring(reply)

    def recur_update(
        self, jid: str, changes: Mapping[str, object], *, now: float | None = None
    ) -> None:
        command = checks.recur_update(jid, changes, now, self.max_data_bytes)
        args = arguments.recur_update(command)
        self._call("recur.update", command.now, *args, name="recur_update")

    def recur_tag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._retag("recur.tag", None, checks.retag(jid, tags, now), "recur_tag")

    def recur_untag(self, jid: str, tags: Sequence[str], *, now: float | None = None) -> list[str]:
        return self._retag("recur.untag", None, checks.retag(jid, tags, now), "recur_untag")


def _by_name(counts: QueueCounts) -> str:
    return counts.name
