"""Merging what the partitions of a cluster answer into one answer, as one Redis gives it.

Each partition is a whole qless store for its queues, so a question about every queue
(queues, failure groups, workers, tags, tracked and completed jobs) is asked of each and
the answers merged: counts summed, lists ordered as the core orders them (newest failure
first, oldest tagging first, most used tag first, latest completion first).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from lanner.engines.redis import replies
from lanner.job import Job
from lanner.records import QueueCounts, WorkerCounts, WorkerJobs


def queues(answers: Iterable[Any]) -> list[QueueCounts]:
    """Queues by name, counts summed: a partition may know a queue of another (a job sent
    on to it passed through), with nothing in it."""
    merged: dict[str, QueueCounts] = {}
    for answer in answers:
        for obj in replies.as_list(json.loads(answer)):
            counts = replies.counts(obj)
            seen = merged.get(counts.name)
            merged[counts.name] = counts if seen is None else _summed(seen, counts)
    return sorted(merged.values(), key=lambda counts: counts.name)


def _summed(a: QueueCounts, b: QueueCounts) -> QueueCounts:
    return QueueCounts(
        a.name, a.waiting + b.waiting, a.stalled + b.stalled, a.running + b.running,
        a.scheduled + b.scheduled, a.depends + b.depends, a.recurring + b.recurring,
        a.paused or b.paused,
    )  # fmt: skip


def groups(answers: Iterable[Any]) -> dict[str, int]:
    """Failure groups summed over partitions."""
    total: dict[str, int] = {}
    for answer in answers:
        for group, count in replies.groups(answer).items():
            total[group] = total.get(group, 0) + count
    return dict(sorted(total.items()))


def workers(answers: Iterable[Any]) -> list[WorkerCounts]:
    """Workers summed over partitions, in the order first seen (each partition lists its
    own most recently seen first)."""
    merged: dict[str, list[int]] = {}
    for answer in answers:
        for counts in replies.workers(answer):
            sums = merged.setdefault(counts.name, [0, 0])
            sums[0] += counts.jobs
            sums[1] += counts.stalled
    return [WorkerCounts(name, jobs, stalled) for name, (jobs, stalled) in merged.items()]


def worker_jobs(answers: Iterable[Any]) -> WorkerJobs:
    jobs: list[str] = []
    stalled: list[str] = []
    for answer in answers:
        found = replies.worker_jobs(answer)
        jobs.extend(found.jobs)
        stalled.extend(found.stalled)
    return WorkerJobs(tuple(jobs), tuple(stalled))


def scored(answers: Iterable[list[tuple[str, float]]], *, newest_first: bool) -> list[str]:
    """Members of sorted sets read in each partition (member, score), in one order."""
    pairs = [pair for answer in answers for pair in answer]
    pairs.sort(key=lambda pair: (pair[1], pair[0]), reverse=newest_first)
    return [member for member, _ in pairs]


def top_tags(answers: Iterable[list[tuple[str, float]]]) -> list[str]:
    """Tags on two jobs or more, most used first (ties by name, as ZREVRANGEBYSCORE)."""
    counts: dict[str, float] = {}
    for answer in answers:
        for tag, count in answer:
            counts[tag] = counts.get(tag, 0) + count
    ranked = sorted(counts.items(), key=lambda pair: (pair[1], pair[0]), reverse=True)
    return [tag for tag, count in ranked if count >= 2]


def failed_newest_first(jobs: Iterable[Job]) -> list[Job]:
    """Failed jobs newest failure first, as each partition's group list holds them."""
    return sorted(jobs, key=lambda job: job.failure.when if job.failure else 0.0, reverse=True)


def tracked(answers: Iterable[Any]) -> list[Job]:
    return [
        replies.job(obj)
        for answer in answers
        for obj in replies.as_list(json.loads(answer).get("jobs"))
    ]
