"""Kale's `Worker`: one process, Kale's hooks where Kale calls them, signals, memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner import JobState
from lanner.app import App
from lanner.message import KaleMessage
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.worker import Worker

from .world import EVENTS, WLTask

# The worker arms SIGALRM for time limits; pytest-timeout's signal method would share it.
pytestmark = pytest.mark.timeout(60, method="thread")

QUEUES = [
    QueueConfig("sw-high", priority=100, batch_size=10, visibility_timeout_sec=30,
                long_poll_time_sec=0.1),
    QueueConfig("sw-low", priority=5, batch_size=10, visibility_timeout_sec=30,
                long_poll_time_sec=0.1),
]  # fmt: skip


class SWEcho(WLTask):
    queue = "sw-high"

    def run_task(self, value: Any) -> None:
        EVENTS.append(("run", self.task_id, value))


class SWBoom(WLTask):
    queue = "sw-low"
    max_retries = 1

    def run_task(self) -> None:
        raise ValueError("boom")


class SWTerminates(WLTask):
    """Sends its own process SIGTERM `times` times, then runs on for `seconds`."""

    queue = "sw-high"
    time_limit = 10

    def run_task(self, times: int, seconds: float) -> None:
        try:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(seconds)
        except lanner.JobCancelled:
            EVENTS.append(("stopped", self.task_id))
            raise
        EVENTS.append(("finished", self.task_id))


class RecordingWorker(Worker):
    """Records Kale's hooks; stops once `until` tasks ran."""

    until = 3

    def _on_pre_run_worker(self) -> None:
        EVENTS.append(("pre_run_worker",))

    def _on_pre_batch_run(self, messages: list[KaleMessage]) -> None:
        EVENTS.append(("pre_batch", self._queue_name, [m.task_id for m in messages]))

    def _on_post_batch_run(
        self, num_completed: int, num_incomplete: int, messages: list[KaleMessage]
    ) -> None:
        EVENTS.append(("post_batch", num_completed, num_incomplete))
        if self._total_messages_processed >= self.until:
            self.stop()

    def _on_task_succeeded(self, message: KaleMessage, time_remaining_sec: float) -> None:
        assert message.task_inst is not None
        assert 0 < time_remaining_sec <= 30
        EVENTS.append(("succeeded", message.task_id, message.task_inst.task_id))

    def _on_task_failed(
        self,
        message: KaleMessage,
        time_remaining_sec: float,
        err: BaseException,
        permanent_failure: bool,
    ) -> None:
        EVENTS.append(("failed", message.task_id, type(err).__name__, permanent_failure))

    def _on_permanent_failure_batch(self) -> None:
        EVENTS.append(("permanent_batch", [m.task_id for m in self._permanent_failures]))

    def _on_shutdown(self, num_completed: int, num_incomplete: int) -> None:
        EVENTS.append(("shutdown", num_completed, num_incomplete))


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    calls = tmp_path / "calls"

    def note(what: str) -> None:
        with calls.open("a") as out:
            out.write(what + "\n")

    settings = Settings(broker=url, retry_delay_multiple_sec=0,
                        on_worker_startup=lambda: note("startup"),
                        on_worker_shutdown=lambda: note("shutdown"))  # fmt: skip
    made = App(url, settings=settings, queues=QUEUES)
    yield made
    made.close()
    lanner.set_default_app(None)


def _state(app: App, jid: str) -> JobState:
    job = app.engine.get(jid)
    assert job is not None
    return job.state


def _calls(app: App, tmp_path: Path) -> list[str]:
    calls = tmp_path / "calls"
    return calls.read_text().split() if calls.exists() else []


def test_kales_hooks_are_called_around_batches_and_runs(app: App, tmp_path: Path) -> None:
    ok = app.publish(SWEcho, ["hi"])
    boom = app.publish(SWBoom)
    worker = RecordingWorker(app)
    assert _calls(app, tmp_path) == ["startup"]  # as Kale: when the worker is made
    worker.run()  # ok; boom fails and is retried at once; boom fails for good: 3 runs
    assert EVENTS[0] == ("pre_run_worker",)
    assert ("pre_batch", "sw-high", [ok]) in EVENTS
    assert ("succeeded", ok, ok) in EVENTS
    failed = [event for event in EVENTS if event[0] == "failed"]
    assert failed == [("failed", boom, "ValueError", False), ("failed", boom, "ValueError", True)]
    assert EVENTS.count(("post_batch", 1, 0)) == 3
    assert ("permanent_batch", [boom]) in EVENTS
    assert EVENTS[-1] == ("shutdown", 1, 0)
    assert _calls(app, tmp_path) == ["startup", "shutdown"]
    assert _state(app, ok) == JobState.COMPLETE
    assert _state(app, boom) == JobState.FAILED
    assert lanner.app.default_app() is app  # Kale-style tasks publish where it runs


def test_sigterm_finishes_the_running_task_and_gives_back_the_rest(app: App) -> None:
    first = app.publish(SWTerminates, [1, 0.2])
    rest = [app.publish(SWEcho, [n]) for n in range(3)]
    RecordingWorker(app).run()
    assert ("finished", first) in EVENTS
    assert _state(app, first) == JobState.COMPLETE
    assert [_state(app, jid) for jid in rest] == [JobState.WAITING] * 3
    assert not [event for event in EVENTS if event[0] == "run"]
    assert EVENTS[-1] == ("shutdown", 1, 3)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_a_second_signal_stops_the_running_task_and_gives_its_job_back(app: App) -> None:
    jid = app.publish(SWTerminates, [2, 8])
    started = time.monotonic()
    RecordingWorker(app).run()
    assert time.monotonic() - started < 5
    assert ("stopped", jid) in EVENTS
    job = app.engine.get(jid)
    assert job is not None
    assert job.state == JobState.WAITING
    assert job.remaining == job.retries  # given back as it was: no retry spent


def test_past_its_memory_limit_the_worker_exits_with_status_1(
    app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    class Thrifty(RecordingWorker):
        def _on_exceeding_memory_limit(self, ru_maxrss_mb: int) -> None:
            seen.append(ru_maxrss_mb)

    app.settings = Settings(broker=app.settings.broker, die_on_resident_set_size_mb=1,
                            on_worker_shutdown=app.settings.on_worker_shutdown)  # fmt: skip
    app.publish(SWEcho, ["one"])
    with pytest.raises(SystemExit) as exited:
        Thrifty(app).run()
    assert exited.value.code == 1
    assert len(seen) == 1
    assert seen[0] > 1
    assert _calls(app, tmp_path) == ["shutdown"]  # ON_WORKER_SHUTDOWN first, as Kale


def test_importing_lanner_worker_stays_cheap() -> None:
    probe = (
        "import sys, lanner.worker; "
        "print(','.join(sorted(m for m in sys.modules if m.partition('.')[0] in "
        "('lanner', 'yaml', 'sqlite3', 'multiprocessing', 'redis'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded.split(",") == ["lanner", "lanner._version", "lanner.errors", "lanner.worker"]
