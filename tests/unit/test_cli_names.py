"""The commands that name a queue, a failure group or a job, on SQLite, Redis and SQS: a
name that exists nowhere is a one-line error naming what exists, with exit status 1 and
nothing changed; a queue the store has seen, or the app declares, is not."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import lanner
import lanner.task
from lanner import Capability, Engine

KLASS = "myapp.tasks.Work"


@pytest.fixture(autouse=True)
def no_tasks_defined(monkeypatch: pytest.MonkeyPatch) -> None:
    """No task defined yet, as in a new `lanner` process: Kale-style classes that other
    tests defined would publish through the app a command loads, declaring their queues."""
    monkeypatch.setattr(lanner.task, "_REGISTRY", {})


def _redis(request: pytest.FixtureRequest) -> str:
    import redis

    found: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(found) as client:
        client.flushdb()
    return found


@pytest.fixture(params=["sqlite", "redis", "sqs"])
def store(request: pytest.FixtureRequest, url: str) -> str:
    """A fresh store of each engine (`url`, the SQLite one, also clears the environment)."""
    if request.param == "redis":
        return _redis(request)
    if request.param == "sqs":
        return str(request.getfixturevalue("sqs_fresh_url"))
    return url


@pytest.fixture
def engine(store: str) -> Iterator[Engine]:
    opened = lanner.open_engine(store)
    yield opened
    opened.close()


def run(cli: click.Group, store: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--broker", store])


def populate(engine: Engine) -> None:
    """A job waiting in `emails`; where failures are kept, one failed in `reports` (boom)."""
    engine.put("emails", "waiting-job", KLASS)
    if Capability.FAILURES in engine.capabilities:
        engine.put("reports", "failed-job", KLASS)
        [popped] = engine.pop("reports", "worker-1")
        engine.fail(popped.jid, "worker-1", "boom", "it broke")


KNOWN_QUEUES = "(known: default, emails, reports)"
TYPOS = [
    (["pause", "emials"], Capability.PAUSE, f"no queue 'emials' {KNOWN_QUEUES}"),
    (["pause", "emails", "reprots", "x"], Capability.PAUSE,
     f"no queues 'reprots', 'x' {KNOWN_QUEUES}"),
    (["unpause", "emials"], Capability.PAUSE, f"no queue 'emials' {KNOWN_QUEUES}"),
    (["stats", "emials"], Capability.STATS, f"no queue 'emials' {KNOWN_QUEUES}"),
    (["jobs", "emials"], Capability.LISTING, f"no queue 'emials' {KNOWN_QUEUES}"),
    (["failed", "bomb"], Capability.FAILURES, "no failure group 'bomb' (known: boom)"),
    (["retry", "bomb"], Capability.FAILURES, "no failure group 'bomb' (known: boom)"),
    (["retry", "boom", "--queue", "reprots"], Capability.FAILURES,
     f"no queue 'reprots' {KNOWN_QUEUES}"),
    (["cancel", "nope"], Capability.CANCEL,
     "no job 'nope' (finished and removed, or never published)"),
    (["job", "nope"], Capability.LOOKUP, "no job 'nope'"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "capability", "line"), TYPOS, ids=lambda v: str(v))
def test_a_name_that_exists_nowhere_is_one_line_naming_what_exists(
    cli: click.Group,
    store: str,
    engine: Engine,
    args: list[str],
    capability: Capability,
    line: str,
) -> None:
    populate(engine)
    before = sorted(queue.name for queue in engine.queues())
    result = run(cli, store, *args)
    assert result.exit_code == 1, result.output
    if capability in engine.capabilities:
        assert result.output.splitlines()[-1] == f"Error: {line}"
    else:  # the command does not apply: the engine says so, whatever the name
        assert result.output.splitlines() == [result.output.strip()]
        assert f"Error: the {engine.name} engine " in result.output
    assert sorted(queue.name for queue in engine.queues()) == before  # no phantom queue
    if Capability.PAUSE in engine.capabilities:
        assert not engine.queue_counts("emials").paused
    if Capability.FAILURES in engine.capabilities:
        assert engine.failed_groups() == {"boom": 1}  # nothing was retried


def test_known_queues_and_groups_still_work(cli: click.Group, store: str, engine: Engine) -> None:
    """A queue the store has seen, even empty, answers; `default` is always known."""
    populate(engine)
    if Capability.PAUSE not in engine.capabilities:
        pytest.skip(f"the {engine.name} engine has none of these commands")
    assert run(cli, store, "pause", "emails", "default").exit_code == 0
    assert engine.queue_counts("emails").paused
    assert run(cli, store, "unpause", "emails", "default").exit_code == 0
    assert not engine.queue_counts("emails").paused
    empty = run(cli, store, "jobs", "reports")
    assert (empty.exit_code, empty.output) == (0, "no waiting jobs in queue 'reports'\n")
    assert run(cli, store, "stats", "reports").exit_code == 0
    assert run(cli, store, "failed", "boom").exit_code == 0
    retried = run(cli, store, "retry", "boom", "--queue", "emails")
    assert retried.exit_code == 0, retried.output
    assert "retried 1 job of group 'boom': 1 into 'emails'" in retried.output


def test_a_queue_paused_before_its_first_job_can_be_unpaused(
    cli: click.Group, store: str, engine: Engine
) -> None:
    """Redis keeps paused queues apart from those it has seen: such a queue is known."""
    if Capability.PAUSE not in engine.capabilities:
        pytest.skip(f"the {engine.name} engine cannot pause")
    engine.pause(["early"])
    result = run(cli, store, "unpause", "early")
    assert result.exit_code == 0, result.output
    assert not engine.queue_counts("early").paused


def test_cancel_cancels_what_it_can_then_names_what_does_not_exist(
    cli: click.Group, store: str, engine: Engine
) -> None:
    if Capability.CANCEL not in engine.capabilities:
        pytest.skip(f"the {engine.name} engine cannot cancel")
    engine.put("emails", "done", KLASS)
    [popped] = engine.pop("emails", "worker-1")
    engine.complete(popped.jid, "worker-1", "emails")
    engine.put("emails", "a", KLASS)
    engine.put("emails", "b", KLASS)
    result = run(cli, store, "cancel", "a", "done", "b", "typo", "gone")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "cancelled 2 jobs",
        "already complete, not cancelled: done",
        "Error: no jobs 'typo', 'gone' (finished and removed, or never published)",
    ]
    assert [job.jid for job in engine.multiget(["a", "b", "done"])] == ["done"]


def test_many_queues_are_counted_not_listed(cli: click.Group, url: str, tmp_path: Path) -> None:
    with lanner.open_engine(url) as engine:
        for n in range(14):
            engine.put(f"queue{n:02}", f"job{n}", KLASS)
    result = run(cli, url, "pause", "nope")
    assert result.exit_code == 1
    assert result.output == ("Error: no queue 'nope' (15 known: lanner status lists them)\n")


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
               ) -> Iterator[str]:  # fmt: skip
    """A module whose App has a task on queue `nightly`, and a queue config naming `bulk`."""
    name = "names_app_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(
        "import lanner\n"
        "from lanner.queues import QueueConfig\n\n"
        'app = lanner.App(queues=[QueueConfig("bulk")])\n\n\n'
        '@app.task(queue="nightly")\n'
        "def report() -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    module = sys.modules.pop(name, None)
    if module is not None:
        module.app.close()


def test_a_queue_the_app_declares_may_be_paused_before_its_first_job(
    cli: click.Group, store: str, engine: Engine, app_module: str
) -> None:
    if Capability.PAUSE not in engine.capabilities:
        pytest.skip(f"the {engine.name} engine cannot pause")
    result = run(cli, store, "pause", "nightly", "bulk", "-A", app_module)
    assert result.exit_code == 0, result.output
    assert engine.queue_counts("nightly").paused
    assert engine.queue_counts("bulk").paused
    typo = run(cli, store, "pause", "nigthly", "-A", app_module)
    assert typo.output == "Error: no queue 'nigthly' (known: bulk, nightly)\n"
