"""FLOW in the worker (`lanner.worker.rates`): a rate-limited job starts within the window
its pop gave it, or goes back to its queue unspent; other jobs never wait for one."""

from __future__ import annotations

import time
from typing import Any

from lanner import JobState
from lanner.worker import rates, running

from .world import EVENTS, WLTask, World, events, whats


class WLRated(WLTask):
    rate_limit = "5/s"

    def run_task(self, value: Any) -> None:
        EVENTS.append(("rated", self.task_id, time.time()))


def test_a_rated_job_starts_in_its_window_not_before(world: World) -> None:
    jid = world.app.publish(WLRated, ["x"])
    [job] = world.pop()
    window = rates.start_window(job)
    assert window is not None
    start, by = window
    assert start < by
    world.loop.run_batch(world.queue, [job])
    [(_, ran, at)] = events("rated")
    assert ran == jid
    assert at >= start  # held until its counted start
    assert world.get(jid).state == JobState.COMPLETE


def test_a_rated_job_that_cannot_start_in_its_window_goes_back_unspent(world: World) -> None:
    jid = world.app.publish(WLRated, ["x"])
    # Popped as if 5 s ago: the start the store counted for it is long past.
    jobs = world.pop(now=time.time() - 5)
    world.loop.run_batch(world.queue, jobs)
    assert events("rated") == []
    job = world.get(jid)
    assert job.state == JobState.WAITING
    assert whats(job)[-1] == "released"
    assert job.remaining == jobs[0].remaining  # no retry spent
    world.work()  # popped again now: it runs
    assert [event[1] for event in events("rated")] == [jid]


def test_a_job_without_a_rate_has_no_window(world: World) -> None:
    jid = world.app.publish(WLTask, [])
    [job] = world.pop()
    assert job.jid == jid
    assert rates.start_window(job) is None


def test_the_loop_reads_the_history_only_of_a_job_with_a_window(world: World) -> None:
    """`running.start_window` skips decoding a history without a `start`: it finds what
    `rates.start_window` finds, for a rated job and for any other."""
    world.app.publish(WLRated, ["x"])
    world.app.publish(WLTask, [])
    jobs = world.pop() + world.pop()
    assert [running.start_window(job) for job in jobs] == [rates.start_window(job) for job in jobs]
    assert sum(running.start_window(job) is not None for job in jobs) == 1
