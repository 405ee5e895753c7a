"""The Redis engine: lanner's job contract on Redis, through one qless-compatible Lua core.

Data layout. Everything lives under `ql:*` keys, exactly as qless-core lays it out, so
qless clients and lanner share queues: a hash per job (`ql:j:<jid>`), sorted sets per
queue and state (`ql:q:<queue>-work|scheduled|locks|depends|recur`), failure groups,
tags, workers, statistics, `ql:config`, and lanner's wake-up and hand-off lists
`ql:lanner:notify:<queue>`, `ql:lanner:handoff:<queue>:<worker>`. LIMITS and FANOUT add
`ql:lanner:usage:<queue>` (a hash of the bytes of data the queue's live jobs brought in,
how many jobs entered it, expired and were discarded, and how many children it has; and
marks that spare a put reads: `listed` in `ql:queues`, `fractional` priorities placed,
`waiting`, the latest end of a blocked worker's registration; and the queue's count of
sequence numbers, `seq`),
`ql:lanner:children:<parent>` (the set of a fanout parent's children), and per job its
counted size (`lanner_size`, left out while it is the data's length) and expiry
(`lanner_expires_at`); a queue's items are the
sizes of its zsets. Bounds are settings in `ql:config`. The header of the core
(`lua/layout.lua`, printed by `lanner redis-script`) documents every key, command, reply
and error.

How Python talks to it. Each command checks its arguments (`lanner.checks`), as every
engine does, before anything is sent (the core is permissive, as qless's is), then makes
one atomic call `<command> <now> <args...>` (`caller.py`: a function library on Redis 7,
else a script). `now` is this process's clock (or the caller's `now`), sent as
`repr(float)`. Replies and error replies become lanner's values and errors in
`replies.py`. Where the difference from qless is behaviour (a read-only `peek`, `cancel`
replying with what it cancelled, `release` with a delay, a heartbeat's fractional expiry,
batch put, heartbeat and complete, blocking pop with hand-off, a queue's usage) the face calls the
core's `lanner.*` extensions; put's `expires_at` is an option of qless's `put`, as
`if_exists` is, and bounded and fanout queues are part of qless's `put`, `pop` and
`peek`, so that qless clients keep to them too. Only `config_get` and `config_all` read
a key directly (`ql:config`), to tell what was set from the core's qless defaults.

Connections (`connection.py`): redis-py's clients are thread-safe; commands use one
connection pool (the core's calls one connection of it, held: `held.py`), and a blocking
`pop` waits with `BLPOP` on a second pool so that it never holds up other threads'
commands. Both retry with backoff through a Redis restart, and,
for a `redis+sentinel://` URL, through a failover (`sentinel.py`). With the `wait` option,
the writes whose loss would lose a job or run one again (`durable=True` below) wait for
replicas (`caller.py`).
"""

from __future__ import annotations

import json
from typing import Any, Final

from redis.exceptions import ResponseError

from lanner import checks, records
from lanner.engine import Capability
from lanner.engines.redis import arguments, blocking, replies
from lanner.engines.redis.arguments import Arg
from lanner.engines.redis.caller import LuaCaller
from lanner.engines.redis.connection import RedisOptions, parse_url, redis_client, unreachable
from lanner.engines.redis.events import RedisEventStream
from lanner.engines.redis.family import RedisFamilyEngine, core_argv, put_jobs
from lanner.engines.redis.sentinel import close_sentinels
from lanner.errors import JobNotFound
from lanner.events import EventStream
from lanner.job import Job

_CONFIG_KEY: Final = "ql:config"


class RedisEngine(RedisFamilyEngine):
    """The Redis engine. Safe to share between threads (and usable after fork)."""

    name = "redis"
    capabilities = frozenset(Capability)

    def __init__(
        self, url: str = "redis://127.0.0.1:6379/0", *, options: RedisOptions | None = None
    ) -> None:
        """`options` replace those of the URL's query."""
        self._url = url
        self.address, self.options = parse_url(url)
        if options is not None:
            self.options = options
        self._client = redis_client(self.address, self.options, self.options.socket_timeout)
        # BLPOP blocks its connection: blocked pops get their own pool, whose reads may
        # take a whole wait chunk longer than a command.
        self._blocking = redis_client(
            self.address, self.options, self.options.socket_timeout + blocking.BLOCK_CHUNK
        )
        try:
            with unreachable(self.address):
                self._lua = LuaCaller(
                    self._client, self.options.lua, self.options.wait, self.options.wait_timeout
                )
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"RedisEngine({self.address!r})"

    def close(self) -> None:
        for client in (self._client, self._blocking):
            client.close()
            client.connection_pool.disconnect()
            close_sentinels(client)

    def _events(self, worker: str | None) -> EventStream:
        return RedisEventStream(self.address, self.options, worker)

    # -- talking to the core --------------------------------------------------------------
    def _call(
        self, command: str, now: float, *args: Arg, name: str | None = None, durable: bool = False
    ) -> Any:
        """Run one command of the core; `name` is the lanner method named in errors.
        `durable`: a write whose loss in a failover would lose a job or run one again,
        confirmed by replicas with the `wait` option."""
        try:
            with unreachable(self.address):
                return self._lua.call(core_argv(command, now, args), durable)
        except ResponseError as error:
            raise replies.translate(name or command, str(error)) from None

    # -- configuration --------------------------------------------------------------------
    def _config_get(self, key: str) -> records.ConfigValue | None:
        with unreachable(self.address):
            return replies.setting(key, self._client.hget(_CONFIG_KEY, key))

    def _config_all(self) -> dict[str, records.ConfigValue]:
        with unreachable(self.address):
            return replies.settings(self._client.hgetall(_CONFIG_KEY))

    def _config_set(self, setting: checks.Setting, now: float) -> None:
        self._call("config.set", now, setting.key, setting.value, name="config_set")

    def _config_unset(self, key: str, now: float) -> None:
        self._call("config.unset", now, key, name="config_unset")

    # -- putting work ---------------------------------------------------------------------
    def _put(self, command: str, checked: checks.Put) -> list[str]:
        return put_jobs(self._call, command, checked.jobs, checked)

    # -- taking work ----------------------------------------------------------------------
    def _pop(self, command: checks.Pop) -> list[Job]:
        with unreachable(self.address):  # the BLPOP's connection too
            return blocking.pop(self._call, self._blocking, command)

    def _peek(self, command: checks.Peek) -> list[Job]:
        reply = self._call("lanner.peek", command.now, command.queue, command.limit, name="peek")
        return replies.jobs(reply)

    def _heartbeat(self, command: checks.Heartbeat) -> float:
        args = arguments.optional(command.jid, command.worker, command.data)
        return float(self._call("lanner.heartbeat", command.now, *args, name="heartbeat"))

    def _heartbeat_many(self, command: checks.Heartbeats) -> dict[str, float]:
        reply = self._call(
            "lanner.heartbeat_many", command.now, command.worker, *command.jids,
            name="heartbeat_many",
        )  # fmt: skip
        pairs = replies.as_list(reply)  # jid, expiry, jid, expiry, ...
        return {str(jid): float(at) for jid, at in zip(pairs[::2], pairs[1::2], strict=True)}

    # -- finishing work -------------------------------------------------------------------
    def _complete(self, command: checks.Complete) -> str:
        args = arguments.complete(command)
        return str(self._call("complete", command.now, *args, durable=True))

    def _complete_many(self, command: checks.Settle) -> list[str]:
        if command.results:
            results = json.dumps(command.results, separators=(",", ":"))
            reply = self._call(
                "lanner.complete_results", command.now, command.worker, command.queue, results,
                *command.jids, name="complete_many", durable=True,
            )  # fmt: skip
            return [str(jid) for jid in replies.as_list(reply)]
        reply = self._call(
            "lanner.complete_many", command.now, command.worker, command.queue, *command.jids,
            name="complete_many", durable=True,
        )  # fmt: skip
        return [str(jid) for jid in replies.as_list(reply)]

    def _release(self, command: checks.Settle) -> list[str]:
        function = "lanner.release_tried" if command.spend_retry else "lanner.release_in"
        reply = self._call(
            function, command.now, command.worker, command.queue, command.delay,
            *command.jids, name="release",
        )  # fmt: skip
        return [str(jid) for jid in replies.as_list(reply)]

    def _fail(self, command: checks.Fail) -> None:
        args = arguments.optional(
            command.jid, command.worker, command.group, command.message, command.data
        )
        self._call("fail", command.now, *args, durable=True)

    def _retry(self, command: checks.Retry) -> int:
        return int(self._call("retry", command.now, *arguments.retry(command)))

    # -- managing jobs --------------------------------------------------------------------
    def _cancel(self, command: checks.Jids) -> list[str]:
        reply = self._call("lanner.cancel", command.now, *command.jids, name="cancel", durable=True)
        return [str(jid) for jid in replies.as_list(reply)]

    def _timeout(self, command: checks.Jids) -> None:
        self._call("timeout", command.now, *command.jids)

    def _set_priority(self, command: checks.JobPriority) -> None:
        self._call("priority", command.now, command.jid, command.priority)

    def _multiget(self, command: checks.Jids) -> list[Job]:
        return replies.jobs(self._call("lanner.multiget", command.now, *command.jids))

    def _outcomes(self, command: checks.Jids) -> list[records.JobOutcome]:
        return replies.outcomes(self._call("lanner.outcomes", command.now, *command.jids))

    def _wait(self, command: checks.Wait) -> Job | None:
        with unreachable(self.address):  # the BLPOP's connection too
            return blocking.wait(self._call, self._blocking, command)

    # -- queues ---------------------------------------------------------------------------
    def _queues(self, now: float) -> list[records.QueueCounts]:
        reply = json.loads(self._call("queues", now))
        return sorted((replies.counts(obj) for obj in replies.as_list(reply)), key=_by_name)

    def _queue_counts(self, command: checks.QueueAt) -> records.QueueCounts:
        reply = self._call("queues", command.now, command.queue, name="queue_counts")
        return replies.counts(json.loads(reply))

    def _flow_state(self, now: float) -> records.FlowState:
        reply = json.loads(self._call("lanner.flow_state", now, name="flow_state"))
        return records.FlowState(
            tuple(records.FlowKey(str(k), int(r), int(c), int(h)) for k, r, c, h in reply["keys"]),
            tuple(
                records.FlowBucket(
                    str(b), int(limit), float(period), int(recent), int(held), float(at)
                )
                for b, limit, period, recent, held, at in reply["buckets"]
            ),
        )

    def _queue_usage(self, command: checks.QueueAt) -> records.QueueUsage:
        reply = self._call("lanner.usage", command.now, command.queue, name="queue_usage")
        return replies.usage(command.queue, reply)

    def _jobs(self, command: checks.Listing) -> list[str]:
        where: list[Arg] = (
            [command.state] if command.queue is None else [command.state, command.queue]
        )
        reply = self._call("jobs", command.now, *where, command.offset, command.limit)
        return [str(jid) for jid in replies.as_list(reply)]

    def _set_paused(self, command: checks.Queues, paused: bool) -> None:
        self._call("pause" if paused else "unpause", command.now, *command.queues)

    def _queue_forget(self, command: checks.Queues) -> None:
        self._call("queue.forget", command.now, *command.queues, name="queue_forget")

    # -- failures -------------------------------------------------------------------------
    def _failed_groups(self, now: float) -> dict[str, int]:
        return replies.groups(self._call("failed", now, name="failed_groups"))

    def _failed(self, command: checks.Page) -> records.JobPage:
        page = json.loads(self._call("failed", command.now, *arguments.page(command)))
        return records.JobPage(int(page["total"]), tuple(self._objects(page["jobs"], command.now)))

    def _objects(self, jids: Any, now: float) -> list[Job]:
        wanted = [str(jid) for jid in replies.as_list(jids)]
        return self._multiget(checks.Jids(wanted, now)) if wanted else []

    def _unfail(self, command: checks.Unfail) -> int:
        return int(self._call("unfail", command.now, command.queue, command.group, command.limit))

    # -- dependencies, tags, tracking and log ---------------------------------------------
    def _depends(self, command: checks.Depends, add: bool) -> None:
        if add:
            wanted = command.jids or []
            self._call("depends", command.now, command.jid, "on", *wanted, name="depends_add")
        else:
            wanted = ["all"] if command.jids is None else command.jids
            self._call("depends", command.now, command.jid, "off", *wanted, name="depends_remove")

    def _retag(self, command: checks.Retag, add: bool) -> list[str]:
        verb, name = ("add", "tag_add") if add else ("remove", "tag_remove")
        reply = self._call("tag", command.now, verb, command.jid, *command.tags, name=name)
        return [str(tag) for tag in replies.as_list(json.loads(reply))]

    def _tagged(self, command: checks.Page) -> records.JobPage:
        page = json.loads(
            self._call("tag", command.now, *arguments.page(command, "get"), name="tagged")
        )
        jobs = self._objects(page["jobs"], command.now) if command.limit else []
        return records.JobPage(int(page["total"]), tuple(jobs))

    def _tags_top(self, command: checks.Page) -> list[str]:
        reply = self._call("tag", command.now, *arguments.page(command, "top"), name="tags_top")
        return [str(tag) for tag in replies.as_list(json.loads(reply))]

    def _log(self, command: checks.Log) -> None:
        details = json.dumps(command.details, separators=(",", ":"))
        self._call("log", command.now, command.jid, command.message, details)

    def _track(self, jid: str, tracked: bool, now: float) -> None:
        # qless's untrack does not check that the job exists; the contract does.
        if not tracked and self._call("get", now, jid, name="untrack") is None:
            raise JobNotFound(jid, "untrack")
        self._call("track", now, "track" if tracked else "untrack", jid)

    def _tracked(self, now: float) -> list[Job]:
        reply = json.loads(self._call("track", now))
        return [replies.job(obj) for obj in replies.as_list(reply.get("jobs"))]

    # -- statistics and workers -----------------------------------------------------------
    def _stats(self, command: checks.Stats, now: float) -> records.QueueStats:
        return replies.stats(self._call("stats", now, command.queue, command.date))

    def _workers(self, now: float) -> list[records.WorkerCounts]:
        return replies.workers(self._call("workers", now))

    def _worker_jobs(self, command: checks.WorkerAt) -> records.WorkerJobs:
        reply = self._call("workers", command.now, command.worker, name="worker_jobs")
        return replies.worker_jobs(reply)

    def _worker_deregister(self, worker_names: list[str], now: float) -> None:
        self._call("worker.deregister", now, *worker_names, name="worker_deregister")

    # -- recurring jobs -------------------------------------------------------------------
    def _recur(self, command: checks.Recur) -> None:
        self._call("recur", command.now, *arguments.recur(command), durable=True)

    def _unrecur(self, jid: str, now: float) -> None:
        self._call("unrecur", now, jid, durable=True)

    def _recur_get(self, jid: str, now: float) -> records.RecurringJob | None:
        reply = self._call("recur.get", now, jid, name="recur_get")
        return None if reply is None else replies.recurring(reply)

    def _recur_update(self, command: checks.RecurUpdate) -> None:
        args = arguments.recur_update(command)
        self._call("recur.update", command.now, *args, name="recur_update", durable=True)

    def _recur_retag(self, command: checks.Retag, add: bool) -> list[str]:
        verb, name = ("recur.tag", "recur_tag") if add else ("recur.untag", "recur_untag")
        reply = self._call(verb, command.now, command.jid, *command.tags, name=name)
        return [str(tag) for tag in replies.as_list(json.loads(reply))]


def _by_name(counts: records.QueueCounts) -> str:
    return counts.name
