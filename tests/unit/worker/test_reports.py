"""What the loop reports of each job's end, for the pool's metrics: its outcome, its task,
how long it ran; and the engine's failures; and how every report crosses the pipe."""

from __future__ import annotations

import math
import multiprocessing
import time

import pytest

from lanner.errors import EngineUnavailable, StoreMisconfigured
from lanner.worker.child import (
    BatchPopped,
    BatchSettled,
    EngineFailed,
    JobFinished,
    JobsCompleted,
    JobStarted,
    JobStopping,
    PipeReporter,
    Report,
    StoreRefused,
    WorkerExiting,
    decode_report,
    encode_report,
    frame,
    split_frames,
)
from lanner.worker.children import Child

from .world import QUEUE, WLBoom, WLEcho, WLNoRetries, WLShouldRunRaises, WLSleepy, World

pytestmark = pytest.mark.timeout(60, method="thread")


def test_a_success_is_completed_with_its_task_and_run_time(world: World) -> None:
    jid = world.app.publish(WLSleepy, [0.05])
    world.work()
    [(reported, outcome, klass, seconds)] = world.recorder.outcomes
    assert (reported, outcome, klass) == (jid, "completed", world.get(jid).klass)
    assert 0.05 <= seconds < 60  # the task's run, however slow the machine: not a clock reading


def test_failures_are_retried_or_failed(world: World) -> None:
    retried = world.app.publish(WLBoom)  # retries left
    failed = world.app.publish(WLNoRetries)
    world.work()
    assert {(jid, outcome) for jid, outcome, _, _ in world.recorder.outcomes} == {
        (retried, "retried"),
        (failed, "failed"),
    }


def test_jobs_refused_before_their_task_runs_are_reported_failed(world: World) -> None:
    world.engine.put(QUEUE, "unknown", "no.such.Task", "{}")
    refused = world.app.publish(WLShouldRunRaises)
    echo = world.app.publish(WLEcho, ["hi"])
    world.work()
    found = {
        jid: (outcome, klass, seconds) for jid, outcome, klass, seconds in world.recorder.outcomes
    }
    assert found["unknown"] == ("failed", "no.such.Task", 0.0)
    assert found[refused][0] == "failed"
    assert found[echo][0] == "completed"
    assert ("finished", "unknown", False) in world.recorder.reports


def test_engine_errors_are_reported(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def away(*args: object, **kwargs: object) -> list[object]:
        calls.append(1)
        world.loop.stop()
        raise EngineUnavailable("the store is away")

    monkeypatch.setattr(world.engine, "pop", away)
    world.loop.outage_first_pause = 0.01
    world.loop.run()
    assert calls
    assert ("engine_error",) in world.recorder.reports


@pytest.mark.parametrize(
    "report",
    [
        BatchPopped("q", ["a", "b"]),
        JobStarted("a", math.inf, None),
        JobStarted("a", 12.5, 60.0),
        JobStopping("a", "its lock was lost"),
        JobFinished("a", True, "completed", "tasks.noop", 0.25),
        JobsCompleted(["a"]),
        BatchSettled(),
        WorkerExiting("stopped"),
        EngineFailed(),
        StoreRefused(StoreMisconfigured("no")),
    ],
)
def test_a_report_crosses_the_pipe_as_it_was_made(report: Report) -> None:
    got = decode_report(encode_report(report))
    assert type(got) is type(report)
    assert repr(got) == repr(report)


def test_frames_cut_anywhere_come_out_whole_and_in_order() -> None:
    reports: list[Report] = [
        BatchPopped("q", [f"j{i}" for i in range(500)]),
        JobStarted("a", 1.0, None),
    ]
    stream = b"".join(frame(encode_report(report)) for report in reports)
    for cut in range(len(stream) + 1):
        buffer = bytearray(stream[:cut])
        got = split_frames(buffer)
        buffer += stream[cut:]
        got += split_frames(buffer)
        assert not buffer
        assert [repr(decode_report(data)) for data in got] == [repr(r) for r in reports]


def test_reports_past_pipe_buf_cross_a_real_pipe_whole() -> None:
    # A batch's report can pass PIPE_BUF (4,096 bytes): written in as many writes as it
    # takes, read by the supervisor's side as one report, after and before small ones.
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    big = BatchPopped("q", [f"job-{i:06}" for i in range(2_000)])
    reporter = PipeReporter(send)
    reporter.started("a", 1.0, None)
    reporter.batch(big.queue, big.jids)
    reporter.completed(["a"])
    child = Child(context.Process(target=print), receive, "host-1")
    got: list[Report] = []
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        got += [decode_report(data) for data in child.take_reports()]
    assert [repr(r) for r in got] == [
        repr(JobStarted("a", 1.0, None)),
        repr(big),
        repr(JobsCompleted(["a"])),
    ]
    send.close()
    assert child.take_reports() == []  # the writer's end closed: nothing more, no error
    receive.close()
