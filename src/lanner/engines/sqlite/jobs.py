"""The life of one job in the SQLite engine after its put: locks, finishing, failing, edits.

Each function runs inside the caller's transaction and takes a checked record of
`lanner.checks`; errors are the contract's (`JobNotFound`, `LockLost`, `InvalidState`).
"""

from __future__ import annotations

import json
import sqlite3

from lanner import checks
from lanner.engines.sqlite import eventlog, flow, put, settings, stats
from lanner.engines.sqlite.rows import APPEND_HISTORY, event, json_list
from lanner.errors import InvalidState, JobNotFound, LockLost
from lanner.job import CASCADE_TAG, DEPENDENCY_FAILED_GROUP, JobState
from lanner.records import NewJob


def holder_queue(
    conn: sqlite3.Connection, command: str, jid: str, worker: str, queue: str | None = None
) -> str:
    """Check that `worker` holds the lock of running job `jid`; return the job's queue."""
    row = conn.execute("SELECT state, worker, queue FROM jobs WHERE jid = ?", (jid,)).fetchone()
    if row is None:
        raise JobNotFound(jid, command)
    state, holder, job_queue = row
    if state != JobState.RUNNING:
        raise LockLost(f"{command}(): job {jid} is not currently running: {state}")
    if holder != worker:
        raise LockLost(f"{command}(): job {jid} has been given out to another worker: {holder}")
    if queue is not None and job_queue != queue:
        raise LockLost(
            f"{command}(): job {jid} is not currently running in queue {queue!r}: "
            f"it runs in {job_queue!r}"
        )
    return str(job_queue)


def heartbeat(conn: sqlite3.Connection, command: checks.Heartbeat) -> float:
    extended = extend(conn, [command.jid], command.worker, command.now, command.data)
    if command.jid not in extended:
        holder_queue(conn, "heartbeat", command.jid, command.worker)  # raises: why not held
    return extended[command.jid]


_HELD_BY = "jid IN (SELECT value FROM json_each(:jids)) AND state = 'running' AND worker = :worker"
"""The jobs among `:jids` whose lock `:worker` holds (one that ran out but was not handed
over still counts)."""


def extend(
    conn: sqlite3.Connection, jids: list[str], worker: str, now: float, data: str | None = None
) -> dict[str, float]:
    """Extend `worker`'s locks on the running jobs among `jids` to their queue's heartbeat
    from `now` (and replace their data, if given); return jid -> new expiry of those, in
    the order of `jids`. The others are not `worker`'s: they are left as they are."""
    held = {"jids": json_list(jids), "worker": worker}
    config = settings.read_all(conn)
    extended: dict[str, float] = {}
    # One statement per queue (a process's jobs are of a few): its lock is one duration.
    queues = conn.execute(f"SELECT DISTINCT queue FROM jobs WHERE {_HELD_BY}", held).fetchall()
    for (queue,) in queues:
        expires = now + settings.heartbeat(config, queue)
        # A renewed lock starts afresh: its next expiry gets its own grace period.
        for (jid,) in conn.execute(
            "UPDATE jobs SET expires = :expires, grace = 0, data = coalesce(:data, data) "
            f"WHERE {_HELD_BY} AND queue = :queue RETURNING jid",
            {**held, "expires": expires, "data": data, "queue": queue},
        ).fetchall():
            extended[jid] = expires
    return {jid: extended[jid] for jid in jids if jid in extended}


def complete(conn: sqlite3.Connection, command: checks.Complete) -> str:
    """Complete a job, or advance it to `command.next`; return its new state."""
    jid, worker, queue, at = command.jid, command.worker, command.queue, command.now
    holder_queue(conn, "complete", jid, worker, queue)
    config = settings.read_all(conn)
    conn.execute(
        f"UPDATE jobs SET data = coalesce(:data, data), history = {APPEND_HISTORY} "
        "WHERE jid = :jid",
        {
            "data": command.data,
            "jid": jid,
            "cap": settings.history_cap(config),
            "event": event("done", at),
        },
    )
    if command.next is None:
        finish(conn, [jid], worker, queue, at, config)
        if command.result is not None:
            keep_results(conn, {jid: command.result})
        return JobState.COMPLETE.value
    klass, data, popped_at = conn.execute(
        "SELECT klass, data, popped_at FROM jobs WHERE jid = ?", (jid,)
    ).fetchone()
    stats.record_timings(conn, "run", queue, at, [at - popped_at])
    advance = NewJob(command.next, jid, klass, data, command.delay, depends=command.depends)
    eventlog.emit("advanced", jid, queue, details={"to": command.next})
    put.store(conn, [advance], at, config)
    (state,) = conn.execute("SELECT state FROM jobs WHERE jid = ?", (jid,)).fetchone()
    return str(state)


def complete_many(conn: sqlite3.Connection, command: checks.Settle) -> list[str]:
    config = settings.read_all(conn)
    conn.execute(
        f"UPDATE jobs SET history = {APPEND_HISTORY} "
        "WHERE jid IN (SELECT value FROM json_each(:jids)) "
        "AND state = 'running' AND worker = :worker AND queue = :queue",
        {
            "jids": json_list(command.jids),
            "worker": command.worker,
            "queue": command.queue,
            "cap": settings.history_cap(config),
            "event": event("done", command.now),
        },
    )
    done = finish(conn, command.jids, command.worker, command.queue, command.now, config)
    if command.results:
        keep_results(conn, {jid: command.results[jid] for jid in done if jid in command.results})
    return done


def keep_results(conn: sqlite3.Connection, results: dict[str, str]) -> None:
    """Keep what completed jobs' tasks returned (JSON text), as long as the jobs are kept."""
    conn.executemany(
        "UPDATE jobs SET result = ? WHERE jid = ?", [(r, j) for j, r in results.items()]
    )


def finish(
    conn: sqlite3.Connection,
    jids: list[str],
    worker: str,
    queue: str,
    now: float,
    config: settings.Config,
) -> list[str]:
    """Mark running jobs complete, release their dependents, apply retention."""
    finished = conn.execute(
        "UPDATE jobs SET state = 'complete', queue = '', worker = '', expires = 0, "
        "grace = 0, finished_at = :now "
        "WHERE jid IN (SELECT value FROM json_each(:jids)) "
        "AND state = 'running' AND worker = :worker AND queue = :queue "
        "RETURNING jid, popped_at, size",
        {"jids": json_list(jids), "worker": worker, "queue": queue, "now": now},
    ).fetchall()
    done = [jid for jid, _, _ in finished]
    stats.record_timings(conn, "run", queue, now, [now - popped for _, popped, _ in finished])
    if done:
        # The one place jobs complete: counted here, one row update for them all, where
        # the usage triggers (schema.py) would update it once per job.
        conn.execute(
            "UPDATE queue_usage SET items = items - ?, bytes = bytes - ? WHERE queue = ?",
            (len(done), sum(size for _, _, size in finished), queue),
        )
        if eventlog.listening():
            finished_now = set(done)
            for jid in jids:
                if jid in finished_now:
                    finished_now.discard(jid)
                    eventlog.emit("completed", jid, queue)
        _release_dependents(conn, done, now)
        _apply_retention(conn, config, now)
    return done


def _release_dependents(conn: sqlite3.Connection, done: list[str], now: float) -> None:
    dependents = [
        row[0]
        for row in conn.execute(
            "DELETE FROM dependencies WHERE on_jid IN (SELECT value FROM json_each(?)) "
            "RETURNING jid",
            (json_list(done),),
        )
    ]
    if dependents:
        release_ready(conn, sorted(set(dependents)), now)


def release_ready(conn: sqlite3.Connection, jids: list[str], now: float) -> None:
    """Jobs in `depends` with no dependency left become scheduled or waiting."""
    conn.execute(
        "UPDATE jobs SET "
        "  state = CASE WHEN ready_at > :now THEN 'scheduled' ELSE 'waiting' END, "
        "  ready_at = max(ready_at, :now) "
        "WHERE jid IN (SELECT value FROM json_each(:jids)) AND state = 'depends' "
        "AND NOT EXISTS (SELECT 1 FROM dependencies d WHERE d.jid = jobs.jid)",
        {"jids": json_list(jids), "now": now},
    )


def _apply_retention(conn: sqlite3.Connection, config: settings.Config, now: float) -> None:
    removed = [
        row[0]
        for row in conn.execute(
            "DELETE FROM jobs WHERE state = 'complete' AND finished_at < ? RETURNING jid",
            (now - settings.number(config, "jobs-history"),),
        )
    ]
    (kept,) = conn.execute("SELECT value FROM counters WHERE name = 'complete'").fetchone()
    excess = int(kept) - int(settings.number(config, "jobs-history-count"))
    if excess > 0:
        removed += [
            row[0]
            for row in conn.execute(
                "DELETE FROM jobs WHERE jid IN (SELECT jid FROM jobs WHERE state = 'complete' "
                "ORDER BY finished_at, seq LIMIT ?) RETURNING jid",
                (excess,),
            )
        ]
    if removed:
        conn.execute(
            "DELETE FROM tags WHERE jid IN (SELECT value FROM json_each(?))",
            (json_list(removed),),
        )


def release(conn: sqlite3.Connection, command: checks.Settle) -> set[str]:
    """Give held jobs back (spending a retry only if asked); return the jids released."""
    # Without a delay, ready_at and seq are untouched: the job keeps its place.
    released = conn.execute(
        "UPDATE jobs SET worker = '', expires = 0, grace = 0, "
        "remaining = CASE WHEN :spend AND remaining > 0 THEN remaining - 1 ELSE remaining END, "
        "state = CASE WHEN :delay > 0 THEN 'scheduled' ELSE 'waiting' END, "
        "ready_at = CASE WHEN :delay > 0 THEN :now + :delay ELSE ready_at END, "
        f"history = {APPEND_HISTORY} "
        "WHERE jid IN (SELECT value FROM json_each(:jids)) "
        "AND state = 'running' AND worker = :worker AND queue = :queue RETURNING jid",
        {
            "jids": json_list(command.jids),
            "worker": command.worker,
            "queue": command.queue,
            "cap": settings.history_cap(settings.read_all(conn)),
            "event": event("released", command.now),
            "delay": command.delay,
            "now": command.now,
            "spend": command.spend_retry,
        },
    )
    jids = {row[0] for row in released}
    if jids and not command.spend_retry and flow.in_use(conn, command.queue):
        flow.unstarted(conn, sorted(jids))  # their runs did not start
    return jids


def fail(conn: sqlite3.Connection, command: checks.Fail) -> None:
    holder_queue(conn, "fail", command.jid, command.worker)
    if command.data is not None:
        conn.execute("UPDATE jobs SET data = ? WHERE jid = ?", (command.data, command.jid))
    cap = settings.history_cap(settings.read_all(conn))
    fail_job(conn, command.jid, command.group, command.message, command.worker, command.now, cap)
    details = {"group": command.group, "message": command.message}
    eventlog.emit("failed", command.jid, worker=command.worker, details=details)


def fail_job(
    conn: sqlite3.Connection,
    jid: str,
    group: str,
    message: str,
    worker: str,
    now: float,
    cap: int,
) -> None:
    failure = {"group": group, "message": message, "when": now, "worker": worker}
    (queue,) = conn.execute(
        "UPDATE jobs SET state = 'failed', failure = :failure, failure_group = :group, "
        "finished_at = :now, worker = '', expires = 0, grace = 0, "
        f"history = {APPEND_HISTORY} WHERE jid = :jid RETURNING queue",
        {
            "failure": json.dumps(failure),
            "group": group,
            "now": now,
            "jid": jid,
            "cap": cap,
            "event": event("failed", now, group=group),
        },
    ).fetchone()
    stats.count(conn, "failures", [(queue, now)])
    stats.count(conn, "failed", [(queue, now)])
    _fail_dependents(conn, jid, f"dependency {jid} failed ({group}): {message}", now, cap)


def _fail_dependents(conn: sqlite3.Connection, jid: str, why: str, now: float, cap: int) -> None:
    """Fail, with `jid`, its dependents in state depends that carry CASCADE_TAG, and so
    on down (a workflow's later steps); other dependents keep waiting, as in qless."""
    pending = [jid]
    while pending:
        failed = conn.execute(
            "UPDATE jobs SET state = 'failed', failure = :failure, failure_group = :group, "
            f"finished_at = :now, history = {APPEND_HISTORY} "
            "WHERE state = 'depends' AND jid IN (SELECT d.jid FROM dependencies d "
            "JOIN tags t ON t.jid = d.jid AND t.tag = :tag WHERE d.on_jid = :on) "
            "RETURNING jid, queue",
            {
                "failure": json.dumps(
                    {"group": DEPENDENCY_FAILED_GROUP, "message": why, "when": now, "worker": ""}
                ),
                "group": DEPENDENCY_FAILED_GROUP,
                "now": now,
                "cap": cap,
                "event": event("failed", now, group=DEPENDENCY_FAILED_GROUP),
                "tag": CASCADE_TAG,
                "on": pending.pop(),
            },
        ).fetchall()
        stats.count(conn, "failures", [(queue, now) for _, queue in failed])
        stats.count(conn, "failed", [(queue, now) for _, queue in failed])
        for dependent, queue in sorted(failed):
            details = {"group": DEPENDENCY_FAILED_GROUP, "message": why}
            eventlog.emit("failed", dependent, queue, details=details)
            pending.append(dependent)


def retry(conn: sqlite3.Connection, command: checks.Retry) -> int:
    """Give a running job back for another try; return the retries left (below 0: failed)."""
    jid, queue, at = command.jid, command.queue, command.now
    holder_queue(conn, "retry", jid, command.worker, queue)
    (remaining,) = conn.execute(
        "UPDATE jobs SET remaining = remaining - 1 WHERE jid = ? RETURNING remaining", (jid,)
    ).fetchone()
    cap = settings.history_cap(settings.read_all(conn))
    if remaining < 0:
        fail_job(
            conn,
            jid,
            command.group or f"failed-retries-{queue}",
            command.message or f'Job exhausted retries in queue "{queue}"',
            command.worker if command.group else "",
            at,
            cap,
        )
    else:
        # The `retried` entry is where the history shows the run failed (and why, by group).
        group = {"group": command.group} if command.group else {}
        conn.execute(
            "UPDATE jobs SET state = :state, ready_at = :ready, seq = :seq, worker = '', "
            f"expires = 0, grace = 0, history = {APPEND_HISTORY} WHERE jid = :jid",
            {
                "state": JobState.SCHEDULED if command.delay > 0 else JobState.WAITING,
                "ready": at + command.delay,
                "seq": put.take_seq(conn, 1),
                "jid": jid,
                "cap": cap,
                "event": event("retried", at, worker=command.worker, **group),
            },
        )
    return int(remaining)


def cancel(conn: sqlite3.Connection, jids: list[str]) -> set[str]:
    """Delete jobs everywhere; refuse if a job not being cancelled depends on one."""
    wanted = json_list(jids)
    for on_jid, dependent in conn.execute(
        "SELECT on_jid, jid FROM dependencies WHERE on_jid IN (SELECT value FROM json_each(?))",
        (wanted,),
    ):
        if dependent not in jids:
            raise InvalidState(
                f"cancel(): job {on_jid} is a dependency of {dependent}, "
                "which is not being cancelled"
            )
    deleted = conn.execute(
        "DELETE FROM jobs WHERE jid IN (SELECT value FROM json_each(?)) "
        "AND state != 'complete' RETURNING jid, state, queue, finished_at, worker",
        (wanted,),
    ).fetchall()
    cancelled = {row[0] for row in deleted}
    stats.uncount_failed(
        conn, [(queue, at) for _, state, queue, at, _ in deleted if state == JobState.FAILED]
    )
    if eventlog.listening():
        where = {jid: (queue, holder) for jid, _, queue, _, holder in deleted}
        for jid in jids:
            if jid in where:
                queue, holder = where.pop(jid)
                eventlog.emit("canceled", jid, queue, holder)
    _delete_links(conn, json_list(sorted(cancelled)))
    return cancelled


def drop(conn: sqlite3.Connection, jids: list[str], now: float, why: str) -> None:
    """Delete jobs that will never run (LIMITS: `why` is expired, or discarded to make room,
    each an event)."""
    if jids:
        gone = conn.execute(
            "DELETE FROM jobs WHERE jid IN (SELECT value FROM json_each(?)) RETURNING jid, queue",
            (json_list(jids),),
        ).fetchall()
        if eventlog.listening():
            queues = dict(gone)
            for jid in jids:
                if jid in queues:
                    eventlog.emit(why, jid, queues.pop(jid))
        forget_links(conn, jids, now)


def forget_links(conn: sqlite3.Connection, gone: list[str], now: float) -> None:
    """Drop the tags and dependencies of deleted jobs; release the jobs that waited for
    them, as a put ignores a dependency on a job that does not exist."""
    gone_json = json_list(gone)
    dependents = [
        row[0]
        for row in conn.execute(
            "SELECT jid FROM dependencies WHERE on_jid IN (SELECT value FROM json_each(?))",
            (gone_json,),
        )
    ]
    _delete_links(conn, gone_json)
    if dependents:
        release_ready(conn, sorted(set(dependents) - set(gone)), now)


def _delete_links(conn: sqlite3.Connection, gone: str) -> None:
    """Delete the dependencies and tags of the jobs in `gone` (a JSON list of jids)."""
    conn.execute(
        "DELETE FROM dependencies WHERE jid IN (SELECT value FROM json_each(:j)) "
        "OR on_jid IN (SELECT value FROM json_each(:j))",
        {"j": gone},
    )
    conn.execute("DELETE FROM tags WHERE jid IN (SELECT value FROM json_each(?))", (gone,))


def timeout(conn: sqlite3.Connection, command: checks.Jids) -> None:
    """Force running jobs' locks to expire: they become stalled, first in line."""
    cap = settings.history_cap(settings.read_all(conn))
    for jid in command.jids:
        row = conn.execute(
            "SELECT state, worker, tracked FROM jobs WHERE jid = ?", (jid,)
        ).fetchone()
        if row is None:
            raise JobNotFound(jid, "timeout")
        if row[0] != JobState.RUNNING:
            raise InvalidState(f"timeout(): job {jid} is not running: {row[0]}")
        conn.execute(
            "UPDATE jobs SET state = 'stalled', worker = '', expires = 0, grace = 0, "
            f"history = {APPEND_HISTORY} WHERE jid = :jid",
            {"jid": jid, "cap": cap, "event": event("timed-out", command.now)},
        )
        if row[2]:
            eventlog.emit("stalled", jid)
        eventlog.emit("lock_lost", jid, worker=row[1])


def set_priority(conn: sqlite3.Connection, command: checks.JobPriority) -> None:
    changed = conn.execute(
        "UPDATE jobs SET priority = ? WHERE jid = ?", (command.priority, command.jid)
    ).rowcount
    if not changed:
        raise JobNotFound(command.jid, "priority")


def depends_add(conn: sqlite3.Connection, command: checks.Depends) -> None:
    _require_depends_state(conn, "depends_add", command.jid)
    conn.execute(
        "INSERT OR IGNORE INTO dependencies (jid, on_jid) SELECT ?, jid FROM jobs "
        "WHERE jid IN (SELECT value FROM json_each(?)) AND state != 'complete' AND jid != ?",
        (command.jid, json_list(command.jids or []), command.jid),
    )


def depends_remove(conn: sqlite3.Connection, command: checks.Depends) -> None:
    _require_depends_state(conn, "depends_remove", command.jid)
    if command.jids is None:
        conn.execute("DELETE FROM dependencies WHERE jid = ?", (command.jid,))
    else:
        conn.execute(
            "DELETE FROM dependencies WHERE jid = ? AND on_jid IN (SELECT value FROM json_each(?))",
            (command.jid, json_list(command.jids)),
        )
    release_ready(conn, [command.jid], command.now)


def _require_depends_state(conn: sqlite3.Connection, command: str, jid: str) -> None:
    row = conn.execute("SELECT state FROM jobs WHERE jid = ?", (jid,)).fetchone()
    if row is None:
        raise JobNotFound(jid, command)
    if row[0] != JobState.DEPENDS:
        raise InvalidState(f"{command}(): job {jid} is not in the depends state: {row[0]}")
