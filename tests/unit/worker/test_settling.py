"""A worker process leaves nothing half-done, and tells its supervisor things in the order
they happen: what its keeper thread started for a batch ends before the loop moves on (or
exits), a job's end is reported before its completion, and a loop whose supervisor is gone
stops, idle or not. So a clean exit is never taken for a death."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time

import pytest

from lanner.worker.child import WorkerExiting, send_report
from lanner.worker.children import Child
from lanner.worker.keeper import Keeper
from lanner.worker.loop import WorkerLoop
from lanner.worker.pool import WorkerPool
from lanner.worker.reporter import Outcome

from .world import QUEUE, Recorder, WLEcho, World

pytestmark = pytest.mark.timeout(60, method="thread")


def test_keep_none_returns_once_the_batch_duty_in_flight_has_ended(world: World) -> None:
    keeper = Keeper(lambda: world.engine, "w1")
    started, release = threading.Event(), threading.Event()
    ended: list[float] = []

    def duty() -> None:  # a give-back or a completion, slow on a busy store
        started.set()
        release.wait(10)
        ended.append(time.monotonic())

    keeper.keep(duty)
    try:
        assert started.wait(10), "the keeper never ran the duty"
        threading.Timer(0.2, release.set).start()
        keeper.keep(None)
        returned = time.monotonic()
        assert ended, "keep(None) returned while the duty still ran"
        assert ended[0] <= returned
    finally:
        release.set()
        keeper.stop()


class CompletionWatcher(Recorder):
    """Holds a job's `finished` report for a while, in which the keeper (which completes
    what ran after 0.1 s) could complete the job if it already could."""

    def finished(
        self,
        jid: str,
        succeeded: bool,
        outcome: Outcome = "",
        klass: str = "",
        seconds: float = 0.0,
    ) -> None:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not self.was_completed(jid):
            time.sleep(0.01)
        super().finished(jid, succeeded, outcome, klass, seconds)

    def was_completed(self, jid: str) -> bool:
        return any(report[0] == "completed" and jid in report[1] for report in self.reports)


def test_a_job_is_reported_finished_before_it_can_be_completed(world: World) -> None:
    watcher = CompletionWatcher()
    world.loop.reporter = watcher
    jid = world.app.publish(WLEcho, ["hi"])
    world.work()
    finished = watcher.reports.index(("finished", jid, True))
    completed = next(n for n, r in enumerate(watcher.reports) if r[0] == "completed")
    assert finished < completed, watcher.reports


def test_an_idle_loop_stops_once_its_supervisor_is_gone(world: World) -> None:
    # Its supervisor's pid, given before the fork, is not its parent's now (here: no
    # process at all is). An idle loop (empty queue, short long polls) must notice.
    loop = WorkerLoop(world.app, [world.queue], world.loop.selector, worker="orphan",
                      reporter=Recorder(), configure=False, supervisor=2**22 + 1)  # fmt: skip
    try:
        began = time.monotonic()
        assert loop.run() == "orphaned"
        assert time.monotonic() - began < 10
    finally:
        loop.close()


def _exit_at_once() -> None:
    pass


def test_a_clean_exit_with_jobs_left_is_settled_not_called_a_death(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # A child that exited on purpose (it said so) before all was settled, as one whose
    # store was away at its end: the supervisor settles what is left, and says so.
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_exit_at_once)
    process.start()
    send_report(send, WorkerExiting("stopped"))
    send.close()
    process.join(10)
    assert process.pid is not None
    assert process.exitcode == 0
    pool = WorkerPool(world.app, concurrency=1)
    child = Child(process, receive, "host-1", finished={"j1": (time.monotonic(), QUEUE)})
    pool._children[process.pid] = child
    with caplog.at_level(logging.INFO, logger="lanner.pool"):
        pool._reap(process.pid, child)
    said = [record.getMessage() for record in caplog.records]
    assert "worker host-1 exits: stopped" in said
    assert "worker host-1 exited before settling 1 job(s): settling them" in said
    assert not any("died" in line for line in said), said
    assert len(pool._chores) == 1  # what is left, settled by the supervisor
    pool._chores.close()
