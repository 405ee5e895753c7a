"""The Redis Cluster engine: lanner's job contract over partitions of one Lua core.

Every call of the core runs in one partition (`partitions.py`): a command about one queue
(put, pop and its blocking wait, peek, complete, retry, release, counts, listings, pause,
unfail, statistics, recurring templates) is one atomic call in that queue's partition, as
on one Redis. A command about jobs by jid (heartbeat, fail, cancel, get, wait, tags, log,
track, dependencies, priority) finds each job's partition and is one call per partition
it touches. A question about every queue (queues, failure groups and pages, workers, tags,
tracked and completed jobs) is asked of every partition and the answers merged
(`gather.py`). Settings are written to every partition (a new one gets a copy, see
`partitions.py`). A put of a jid that lives in another queue's partition, or a complete
that sends a job on to such a queue, moves it in idempotent steps (`transfer.py`).

What one Redis does atomically across queues is several calls here: a put_many into
queues of several partitions is all or nothing per partition; a dependency between jobs
of different partitions is refused (`Unsupported`), as the job that finishes cannot
release one in another slot in the same call. Flow control lives in each queue's
partition, so a concurrency key or rate bucket named from a second partition is refused
too (`flow.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from redis.exceptions import ResponseError

from lanner import checks, records
from lanner.engine import Capability
from lanner.engines.redis import arguments, blocking, replies
from lanner.engines.redis.arguments import Arg
from lanner.engines.redis.cluster import flow, gather, transfer
from lanner.engines.redis.cluster.address import (
    ClusterAddress,
    cluster_client,
    parse_url,
    reachable,
)
from lanner.engines.redis.cluster.caller import ClusterCaller
from lanner.engines.redis.cluster.partitions import CONFIG, GLOBAL, Partitions, key, of_queue
from lanner.engines.redis.connection import RedisOptions, impatient, one_shot
from lanner.engines.redis.events import RedisEventStream
from lanner.engines.redis.family import RedisFamilyEngine, core_argv, put_jobs
from lanner.errors import JobNotFound, Unsupported
from lanner.events import EventStream
from lanner.job import Job

_SCATTER_PAGE: Final = 10_000
"""The most jids a merged listing reads from each partition (offset + count)."""


def open_cluster(
    url: str, *, max_wait: float | None = None, one_shot_command: bool = False
) -> RedisClusterEngine:
    """`open_engine` for a `redis+cluster://` or `rediss+cluster://` URL."""
    options = parse_url(url)[1]
    if one_shot_command:
        options = one_shot(options)
    if max_wait is not None:
        options = impatient(options, max_wait)
    return RedisClusterEngine(url, options=options)


class RedisClusterEngine(RedisFamilyEngine):
    """The Redis engine on Redis Cluster. Safe to share between threads."""

    name = "redis-cluster"
    # A control's state lives in the partition of its queue (the pop that checks it is one
    # call there), so a key or bucket is enforced over one partition's queues only: one
    # named from a second partition is refused (`flow.py`).
    capabilities = frozenset(Capability) - {
        Capability.CROSS_QUEUE_DEPENDENCIES,
        Capability.CROSS_QUEUE_FLOW,
    }

    def __init__(self, url: str, *, options: RedisOptions | None = None) -> None:
        """`options` replace those of the URL's query."""
        self._url = url
        self.address: ClusterAddress
        self.address, self.options = parse_url(url)
        if options is not None:
            self.options = options
        # redis-py asks the seed nodes for the cluster's layout as it makes a client.
        with reachable(self.address):
            self.client = cluster_client(self.address, self.options, self.options.socket_timeout)
            # BLPOP blocks its connection: blocked pops get their own clients, whose reads
            # may take a whole wait chunk longer than a command.
            self._blocking = cluster_client(
                self.address, self.options, self.options.socket_timeout + blocking.BLOCK_CHUNK
            )
        self.partitions = Partitions(self.client)
        self._flow_owners = flow.FlowOwners(self.name)
        try:
            with reachable(self.address):
                self._lua = ClusterCaller(
                    self.client, self.options.lua, self.options.wait, self.options.wait_timeout
                )
                transfer.finish_all(self, time.time())
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"RedisClusterEngine({self.address!r})"

    def close(self) -> None:
        self.client.close()
        self._blocking.close()

    def _events(self, worker: str | None) -> EventStream:
        # PUBLISH reaches every node of a cluster: one node's subscription hears them all.
        return RedisEventStream(self.address.node(), self.options, worker)

    # -- talking to the core --------------------------------------------------------------
    def call_in(
        self,
        partition: str,
        command: str,
        now: float,
        *args: Arg,
        name: str | None = None,
        durable: bool = False,
    ) -> Any:
        """Run one command of the core in one partition. `durable`: a write whose loss in
        a failover would lose a job or run one again, confirmed by replicas with `wait`."""
        try:
            with reachable(self.address):
                return self._lua.call(partition, core_argv(command, now, args), durable)
        except ResponseError as error:
            raise replies.translate(name or command, str(error)) from None

    def _in_queue(self, queue: str, command: str, now: float, *args: Arg, **kw: Any) -> Any:
        """`call_in` the queue's partition (`kw`: its `name` and `durable`)."""
        partition = of_queue(queue)
        with reachable(self.address):
            self.partitions.register(partition)
        return self.call_in(partition, command, now, *args, **kw)

    def _every(self, command: str, now: float, *args: Arg, name: str | None = None) -> list[Any]:
        """The command's reply in every partition."""
        with reachable(self.address):
            every = self.partitions.every()
        return [self.call_in(p, command, now, *args, name=name) for p in every]

    def _by_job(
        self, jids: list[str], call: Callable[[str, list[str]], Any], *, kind: str = "j"
    ) -> list[Any]:
        """`call(partition, jids)` for the jids of each partition; a cached partition that
        no longer holds a job is looked up again."""
        with reachable(self.address):
            grouped = self.partitions.group(jids, kind=kind)
            if self.partitions.stranded:
                for jid, source in self.partitions.take_stranded():
                    transfer.finish(self, source, jid, time.time())
                grouped = self.partitions.group(jids, kind=kind)
        results = []
        for partition, members in grouped.items():
            try:
                results.append(call(partition, members))
            except JobNotFound:
                if partition == GLOBAL or kind != "j":
                    raise
                for jid in members:
                    self.partitions.forget(jid)
                with reachable(self.address):
                    fresh = self.partitions.group(members)
                results.extend(call(p, m) for p, m in fresh.items())
        return results

    def _one_job(self, jid: str, call: Callable[[str], Any], *, kind: str = "j") -> Any:
        [result] = self._by_job([jid], lambda partition, _: call(partition), kind=kind)
        return result

    def _same_partition(self, partition: str, jids: list[str], command: str) -> None:
        """Refuse dependencies on jobs of another partition."""
        with reachable(self.address):
            where = self.partitions.locate(jids)
        elsewhere = sorted(jid for jid, found in where.items() if found != partition)
        if elsewhere:
            capability = Capability.CROSS_QUEUE_DEPENDENCIES.value
            raise Unsupported(
                self.name, command, capability,
                f"job(s) {', '.join(elsewhere)} live in another queue's partition; on Redis "
                "Cluster a job may depend only on jobs of its own queue (or fanout family): "
                f"capability {capability!r}",
            )  # fmt: skip

    # -- configuration --------------------------------------------------------------------
    def _config_get(self, key_name: str) -> records.ConfigValue | None:
        with reachable(self.address):
            return replies.setting(key_name, self.client.hget(CONFIG, key_name))

    def _config_all(self) -> dict[str, records.ConfigValue]:
        with reachable(self.address):
            return replies.settings(self.client.hgetall(CONFIG))

    def _config_set(self, setting: checks.Setting, now: float) -> None:
        # The shared copy first: a partition registered from now on copies it.
        self.call_in(GLOBAL, "config.set", now, setting.key, setting.value, name="config_set")
        value = arguments.text(setting.value)
        with reachable(self.address):
            for partition in self.partitions.every():
                self.client.hset(key(partition, "config"), setting.key, value)

    def _config_unset(self, key_name: str, now: float) -> None:
        self.call_in(GLOBAL, "config.unset", now, key_name, name="config_unset")
        with reachable(self.address):
            for partition in self.partitions.every():
                self.client.hdel(key(partition, "config"), key_name)

    # -- putting work ---------------------------------------------------------------------
    def _put(self, command: str, checked: checks.Put) -> list[str]:
        if any(job.flow is not None for job in checked.jobs):
            self._flow_owners.claim(self.call_in, checked, command)
        by_partition: dict[str, list[Any]] = {}
        for job in checked.jobs:
            by_partition.setdefault(of_queue(job.queue), []).append(job)
        with reachable(self.address):
            for partition in by_partition:
                self.partitions.register(partition)
            where = self.partitions.locate([job.jid for job in checked.jobs], fresh=True)
        put: list[str] = []
        for partition, jobs in by_partition.items():
            for job in jobs:
                if job.depends:
                    self._same_partition(partition, list(job.depends), command)
            staying = [job for job in jobs if where.get(job.jid, partition) == partition]
            if staying:
                done = self.put_in(partition, command, staying, checked)
                self.partitions.remember(done, partition)
                put.extend(done)
            for job in jobs:
                if where.get(job.jid, partition) != partition:
                    put.append(transfer.move(self, where[job.jid], job, checked, command))
        order = {job.jid: index for index, job in enumerate(checked.jobs)}
        return sorted(put, key=lambda jid: order.get(jid, len(order)))

    def put_in(
        self, partition: str, command: str, jobs: list[Any], checked: checks.Put
    ) -> list[str]:
        return put_jobs(partial(self.call_in, partition), command, jobs, checked)

    # -- taking work ----------------------------------------------------------------------
    def _pop(self, command: checks.Pop) -> list[Job]:
        partition = of_queue(command.queue)
        call = partial(self.call_in, partition)
        with reachable(self.address):
            self.partitions.register(partition)
            jobs = blocking.pop(call, self._blocking, command, partition + ":")
        self.partitions.remember([job.jid for job in jobs], partition)
        return jobs

    def _peek(self, command: checks.Peek) -> list[Job]:
        reply = self._in_queue(command.queue, "lanner.peek", command.now, command.queue,
                               command.limit, name="peek")  # fmt: skip
        return replies.jobs(reply)

    def _heartbeat(self, command: checks.Heartbeat) -> float:
        args = arguments.optional(command.jid, command.worker, command.data)
        return float(self._one_job(command.jid, lambda p: self.call_in(
            p, "lanner.heartbeat", command.now, *args, name="heartbeat")))  # fmt: skip

    def _heartbeat_many(self, command: checks.Heartbeats) -> dict[str, float]:
        with reachable(self.address):
            grouped = self.partitions.group(command.jids)
        extended: dict[str, float] = {}
        for partition, jids in grouped.items():
            reply = self.call_in(partition, "lanner.heartbeat_many", command.now,
                                  command.worker, *jids, name="heartbeat_many")  # fmt: skip
            pairs = replies.as_list(reply)
            extended.update(
                (str(jid), float(at)) for jid, at in zip(pairs[::2], pairs[1::2], strict=True)
            )
        return extended

    # -- finishing work -------------------------------------------------------------------
    def _complete(self, command: checks.Complete) -> str:
        # In the job's partition (a worker knows it from its pop): a wrong queue is then
        # refused as on one Redis, not taken for a missing job.
        def call(partition: str) -> str:
            if command.depends:
                target = partition if command.next is None else of_queue(command.next)
                self._same_partition(target, command.depends, "complete")
            if command.next is not None and of_queue(command.next) != partition:
                return transfer.complete_to(self, partition, command)
            return str(self.call_in(partition, "complete", command.now,
                                    *arguments.complete(command), durable=True))  # fmt: skip

        result: str = self._one_job(command.jid, call)
        return result

    def _settle(self, command: checks.Settle, function: str, *args: Arg) -> list[str]:
        """complete_many or release: one call in each partition holding some of the jids
        (a durable one for complete_many, as on one Redis)."""
        releasing = "release" in function
        answers = self._by_job(command.jids, lambda p, jids: replies.as_list(self.call_in(
            p, function, command.now, command.worker, command.queue, *args, *jids,
            name="release" if releasing else "complete_many",
            durable=not releasing)))  # fmt: skip
        done = {str(jid) for answer in answers for jid in answer}
        return [jid for jid in command.jids if jid in done]

    def _complete_many(self, command: checks.Settle) -> list[str]:
        if command.results:
            results = json.dumps(command.results, separators=(",", ":"))
            return self._settle(command, "lanner.complete_results", results)
        return self._settle(command, "lanner.complete_many")

    def _release(self, command: checks.Settle) -> list[str]:
        function = "lanner.release_tried" if command.spend_retry else "lanner.release_in"
        return self._settle(command, function, command.delay)

    def _fail(self, command: checks.Fail) -> None:
        args = arguments.optional(
            command.jid, command.worker, command.group, command.message, command.data
        )
        self._one_job(
            command.jid, lambda p: self.call_in(p, "fail", command.now, *args, durable=True)
        )

    def _retry(self, command: checks.Retry) -> int:
        args = arguments.retry(command)
        return int(self._one_job(command.jid, lambda p: self.call_in(
            p, "retry", command.now, *args)))  # fmt: skip

    # -- managing jobs --------------------------------------------------------------------
    def _cancel(self, command: checks.Jids) -> list[str]:
        # Dependencies stay inside a partition, so each partition's cancel is whole.
        answers = self._by_job(command.jids, lambda p, jids: self.call_in(
            p, "lanner.cancel", command.now, *jids, name="cancel", durable=True))  # fmt: skip
        cancelled = {str(jid) for answer in answers for jid in replies.as_list(answer)}
        return [jid for jid in command.jids if jid in cancelled]

    def _timeout(self, command: checks.Jids) -> None:
        self._by_job(command.jids, lambda p, jids: self.call_in(
            p, "timeout", command.now, *jids))  # fmt: skip

    def _set_priority(self, command: checks.JobPriority) -> None:
        self._one_job(command.jid, lambda p: self.call_in(
            p, "priority", command.now, command.jid, command.priority))  # fmt: skip

    def _multiget(self, command: checks.Jids) -> list[Job]:
        answers = self._by_job(command.jids, lambda p, jids: replies.jobs(
            self.call_in(p, "lanner.multiget", command.now, *jids)))  # fmt: skip
        found = {job.jid: job for answer in answers for job in answer}
        return [found[jid] for jid in command.jids if jid in found]

    def _outcomes(self, command: checks.Jids) -> list[records.JobOutcome]:
        answers = self._by_job(command.jids, lambda p, jids: replies.outcomes(
            self.call_in(p, "lanner.outcomes", command.now, *jids)))  # fmt: skip
        found = {outcome.jid: outcome for answer in answers for outcome in answer}
        return [found[jid] for jid in command.jids if jid in found]

    def _wait(self, command: checks.Wait) -> Job | None:
        def waited(partition: str) -> Job | None:
            call = partial(self.call_in, partition)
            with reachable(self.address):
                return blocking.wait(call, self._blocking, command, partition + ":")

        result: Job | None = self._one_job(command.jid, waited)
        return result

    # -- queues ---------------------------------------------------------------------------
    def _queues(self, now: float) -> list[records.QueueCounts]:
        return gather.queues(self._every("queues", now))

    def _queue_counts(self, command: checks.QueueAt) -> records.QueueCounts:
        reply = self._in_queue(command.queue, "queues", command.now, command.queue,
                               name="queue_counts")  # fmt: skip
        return replies.counts(json.loads(reply))

    def _flow_state(self, now: float) -> records.FlowState:
        return flow.state(self._every("lanner.flow_state", now, name="flow_state"))

    def _queue_usage(self, command: checks.QueueAt) -> records.QueueUsage:
        reply = self._in_queue(command.queue, "lanner.usage", command.now, command.queue,
                               name="queue_usage")  # fmt: skip
        return replies.usage(command.queue, reply)

    def _jobs(self, command: checks.Listing) -> list[str]:
        if command.queue is not None:
            reply = self._in_queue(command.queue, "jobs", command.now, command.state,
                                   command.queue, command.offset, command.limit)  # fmt: skip
            return [str(jid) for jid in replies.as_list(reply)]
        # Only `complete` lists every queue: latest completion first, over partitions.
        end = min(command.offset + command.limit, _SCATTER_PAGE) - 1
        answers = self._read_each(lambda pipe, p: pipe.zrevrange(
            key(p, "completed"), 0, end, withscores=True))  # fmt: skip
        merged = gather.scored(answers, newest_first=True)
        return merged[command.offset : command.offset + command.limit]

    def _read_each(self, read: Callable[[Any, str], Any]) -> list[Any]:
        """One read of every partition, pipelined."""
        with reachable(self.address):
            every = self.partitions.every()
            pipe: Any = self.client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
            for partition in every:
                read(pipe, partition)
            answers: list[Any] = pipe.execute()
        return answers

    def _set_paused(self, command: checks.Queues, paused: bool) -> None:
        for queue in command.queues:
            self._in_queue(queue, "pause" if paused else "unpause", command.now, queue)

    def _queue_forget(self, command: checks.Queues) -> None:
        for queue in command.queues:
            self._in_queue(queue, "queue.forget", command.now, queue, name="queue_forget")

    # -- failures -------------------------------------------------------------------------
    def _failed_groups(self, now: float) -> dict[str, int]:
        return gather.groups(self._every("failed", now, name="failed_groups"))

    def _failed(self, command: checks.Page) -> records.JobPage:
        with reachable(self.address):
            every = self.partitions.every()
        depth = min(command.offset + command.limit, _SCATTER_PAGE)
        total, jobs = 0, []
        for partition in every:
            page = json.loads(self.call_in(partition, "failed", command.now, command.key, 0,
                                            depth))  # fmt: skip
            total += int(page["total"])
            jids = [str(jid) for jid in replies.as_list(page["jobs"])]
            if jids:
                jobs.extend(replies.jobs(self.call_in(partition, "lanner.multiget",
                                                       command.now, *jids)))  # fmt: skip
        ordered = gather.failed_newest_first(jobs)
        return records.JobPage(
            total, tuple(ordered[command.offset : command.offset + command.limit])
        )

    def _unfail(self, command: checks.Unfail) -> int:
        """The queue's own partition first (one call), then failed jobs of the group in
        other partitions, each moved as a put would move it."""
        moved = int(self._in_queue(command.queue, "unfail", command.now, command.queue,
                                   command.group, command.limit))  # fmt: skip
        if moved < command.limit:
            with reachable(self.address):
                moved += transfer.unfail_elsewhere(self, command, command.limit - moved)
        return moved

    # -- dependencies, tags, tracking and log ---------------------------------------------
    def _depends(self, command: checks.Depends, add: bool) -> None:
        def call(partition: str) -> Any:
            if add:
                wanted = command.jids or []
                self._same_partition(partition, wanted, "depends_add")
                return self.call_in(partition, "depends", command.now, command.jid, "on",
                                     *wanted, name="depends_add")  # fmt: skip
            wanted = ["all"] if command.jids is None else command.jids
            return self.call_in(partition, "depends", command.now, command.jid, "off",
                                 *wanted, name="depends_remove")  # fmt: skip

        self._one_job(command.jid, call)

    def _retag(self, command: checks.Retag, add: bool) -> list[str]:
        verb, name = ("add", "tag_add") if add else ("remove", "tag_remove")
        reply = self._one_job(command.jid, lambda p: self.call_in(
            p, "tag", command.now, verb, command.jid, *command.tags, name=name))  # fmt: skip
        return [str(tag) for tag in replies.as_list(json.loads(reply))]

    def _tagged(self, command: checks.Page) -> records.JobPage:
        end = min(command.offset + command.limit, _SCATTER_PAGE) - 1
        answers = self._read_each(lambda pipe, p: pipe.zrange(
            key(p, f"t:{command.key}"), 0, end, withscores=True))  # fmt: skip
        totals = self._read_each(lambda pipe, p: pipe.zcard(key(p, f"t:{command.key}")))
        jids = gather.scored(answers, newest_first=False)[
            command.offset : command.offset + command.limit
        ]
        jobs = self._multiget(checks.Jids(jids, command.now)) if jids else []
        return records.JobPage(sum(int(n) for n in totals), tuple(jobs))

    def _tags_top(self, command: checks.Page) -> list[str]:
        answers = self._read_each(lambda pipe, p: pipe.zrange(key(p, "tags"), 0, -1,
                                                              withscores=True))  # fmt: skip
        return gather.top_tags(answers)[command.offset : command.offset + command.limit]

    def _log(self, command: checks.Log) -> None:
        details = json.dumps(command.details, separators=(",", ":"))
        self._one_job(command.jid, lambda p: self.call_in(
            p, "log", command.now, command.jid, command.message, details))  # fmt: skip

    def _track(self, jid: str, tracked: bool, now: float) -> None:
        def call(partition: str) -> Any:
            if not tracked and self.call_in(partition, "get", now, jid, name="untrack") is None:
                raise JobNotFound(jid, "untrack")
            return self.call_in(partition, "track", now, "track" if tracked else "untrack", jid)

        self._one_job(jid, call)

    def _tracked(self, now: float) -> list[Job]:
        return gather.tracked(self._every("track", now))

    # -- statistics and workers -----------------------------------------------------------
    def _stats(self, command: checks.Stats, now: float) -> records.QueueStats:
        return replies.stats(self._in_queue(command.queue, "stats", now, command.queue,
                                            command.date))  # fmt: skip

    def _workers(self, now: float) -> list[records.WorkerCounts]:
        return gather.workers(self._every("workers", now))

    def _worker_jobs(self, command: checks.WorkerAt) -> records.WorkerJobs:
        return gather.worker_jobs(
            self._every("workers", command.now, command.worker, name="worker_jobs")
        )

    def _worker_deregister(self, worker_names: list[str], now: float) -> None:
        self._every("worker.deregister", now, *worker_names, name="worker_deregister")

    # -- recurring jobs -------------------------------------------------------------------
    def _recur(self, command: checks.Recur) -> None:
        with reachable(self.address):
            where = self.partitions.locate([command.jid], kind="r").get(command.jid)
        if where is not None and where != of_queue(command.queue):
            with reachable(self.address):
                transfer.move_template(self, where, command.jid, arguments.recur(command),
                                       command.now)  # fmt: skip
            return
        self._in_queue(command.queue, "recur", command.now, *arguments.recur(command), durable=True)

    def _unrecur(self, jid: str, now: float) -> None:
        self._one_job(jid, lambda p: self.call_in(p, "unrecur", now, jid, durable=True), kind="r")

    def _recur_get(self, jid: str, now: float) -> records.RecurringJob | None:
        reply = self._one_job(jid, lambda p: self.call_in(
            p, "recur.get", now, jid, name="recur_get"), kind="r")  # fmt: skip
        return None if reply is None else replies.recurring(reply)

    def _recur_update(self, command: checks.RecurUpdate) -> None:
        queue = command.changes.get("queue")
        if queue is not None:
            with reachable(self.address):
                where = self.partitions.locate([command.jid], kind="r").get(command.jid)
                if where is not None and where != of_queue(str(queue)):
                    recur_args = transfer.template_args(self, where, command.jid, str(queue),
                                                        command.now)  # fmt: skip
                    if recur_args is not None:
                        transfer.move_template(self, where, command.jid, recur_args, command.now)
                        others = {k: v for k, v in command.changes.items() if k != "queue"}
                        if not others:
                            return
                        command = command._replace(changes=others)
        args = arguments.recur_update(command)
        self._one_job(command.jid, lambda p: self.call_in(
            p, "recur.update", command.now, *args, name="recur_update", durable=True),
            kind="r")  # fmt: skip

    def _recur_retag(self, command: checks.Retag, add: bool) -> list[str]:
        verb, name = ("recur.tag", "recur_tag") if add else ("recur.untag", "recur_untag")
        reply = self._one_job(command.jid, lambda p: self.call_in(
            p, verb, command.now, command.jid, *command.tags, name=name), kind="r")  # fmt: skip
        return [str(tag) for tag in replies.as_list(json.loads(reply))]
