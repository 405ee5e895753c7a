"""Tests of the admin commands (`lanner status`, `jobs`, `job`, `failed`, `retry`, `pause`,
`unpause`, `cancel`, `publish`) against a real SQLite store set up through the engine."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from lanner import Engine, JobState, NewJob, checks, operations
from lanner.checks.names import QUEUE_NAME_RULE
from lanner.commands.failures import first_line
from lanner.limits import MAX_DELAY_SEC

KLASS = "myapp.tasks.Work"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "tasks.py", line 3, in run_task\n'
    "    send()\n"
    "myapp.errors.SMTPError: connection refused\n"
)


def run(cli: click.Group, url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--broker", url])


def output_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def row(output: str, first: str) -> list[str]:
    """The words of the table line that starts with `first`."""
    return next(line.split() for line in output.splitlines() if line.split()[:1] == [first])


def fail_job(engine: Engine, queue: str, jid: str, group: str, message: str, at: float) -> None:
    engine.put(queue, jid, KLASS, '{"n": 1}', now=at)
    [popped] = engine.pop(queue, "worker-1", now=at)
    assert popped.jid == jid
    engine.fail(jid, "worker-1", group, message, now=at)


def populate(engine: Engine) -> None:
    """emails: one of each state; reports: paused, with one failed job (group boom)."""
    engine.put("emails", "run", KLASS)
    assert [job.jid for job in engine.pop("emails", "worker-1")] == ["run"]
    engine.put("emails", "stall", KLASS)
    assert [job.jid for job in engine.pop("emails", "worker-1")] == ["stall"]
    engine.timeout(["stall"])
    engine.put("emails", "low", KLASS, priority=0)
    engine.put("emails", "high", "myapp.tasks.Urgent", priority=3)
    engine.put("emails", "later", KLASS, delay=3600)
    engine.put("emails", "after", KLASS, depends=["low"])
    engine.recur("emails", "nightly", KLASS, "{}", 3600, 3600)
    fail_job(engine, "reports", "broken", "boom", TRACEBACK, time.time())
    engine.pause(["reports"])


# -- status -------------------------------------------------------------------------------
def test_status_json_is_every_queue_and_failure_group(
    cli: click.Group, url: str, engine: Engine
) -> None:
    populate(engine)
    document = output_json(run(cli, url, "status", "--json"))
    zero = dict.fromkeys(("waiting", "stalled", "running", "scheduled", "depends", "recurring"), 0)
    assert document == {
        "queues": [
            {"name": "emails", "waiting": 2, "stalled": 1, "running": 1, "scheduled": 1,
             "depends": 1, "recurring": 1, "paused": False},
            {"name": "reports", **zero, "paused": True},
        ],
        "failed": {"boom": 1},
    }  # fmt: skip


def test_status_table_shows_counts_totals_and_groups(
    cli: click.Group, url: str, engine: Engine
) -> None:
    populate(engine)
    engine.put("other", "one", KLASS)
    result = run(cli, url, "status")
    assert result.exit_code == 0, result.output
    assert row(result.output, "emails") == ["emails", "2", "1", "1", "1", "1", "1"]
    assert row(result.output, "reports") == ["reports", "0", "0", "0", "0", "0", "0", "yes"]
    assert row(result.output, "total") == ["total", "3", "1", "1", "1", "1", "1"]
    assert row(result.output, "boom") == ["boom", "1"]
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_status_of_an_empty_store(cli: click.Group, url: str, engine: Engine) -> None:
    assert output_json(run(cli, url, "status", "--json")) == {"queues": [], "failed": {}}
    result = run(cli, url, "status")
    assert result.exit_code == 0
    assert "no queues yet" in result.output
    assert "no failed jobs" in result.output


@pytest.mark.parametrize("command", ["status", "jobs", "job", "failed", "retry", "cancel"])
def test_commands_that_look_refuse_to_create_a_missing_store(
    cli: click.Group, url: str, tmp_path: Path, command: str
) -> None:
    args = {"job": ["x"], "retry": ["boom"], "cancel": ["x"]}.get(command, [])
    result = run(cli, url, command, *args)
    assert result.exit_code == 1
    assert f"no store at {url}" in result.output
    assert "does not exist" in result.output
    assert not (tmp_path / "x.db").exists()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("scheme", ["redis", "sqs"])
def test_a_store_that_cannot_be_reached_fails_a_command_within_seconds(
    cli: click.Group, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """A worker retries through a restart of the store (33 s for Redis); a command run once
    says at once that it cannot reach it (it took 35 s)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")  # so that SQS is tried, and cannot be reached
    port = _closed_port()
    url = {
        "redis": f"redis://127.0.0.1:{port}/0",
        "sqs": f"sqs://us-east-1?endpoint_url=http://127.0.0.1:{port}",
    }[scheme]
    started = time.monotonic()
    result = run(cli, url, "status")
    took = time.monotonic() - started
    assert result.exit_code == 1, result.output
    assert "cannot reach" in result.output
    assert took < 10, f"{took:.1f} s"  # about a second; generous for a busy machine


def test_an_empty_broker_counts_as_unset_and_says_so(
    cli: click.Group, url: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(cli, ["status", "--broker", ""])
    assert result.exit_code == 1
    assert "--broker (or LANNER_BROKER) is empty: it counts as unset" in result.output
    assert f"no store at sqlite:///lanner.db ({tmp_path / 'lanner.db'}" in result.output
    assert not (tmp_path / "lanner.db").exists()


# -- cancel -------------------------------------------------------------------------------
def test_cancel_deletes_jobs_and_names_those_not_found(
    cli: click.Group, url: str, engine: Engine
) -> None:
    engine.put("emails", "a", KLASS)
    engine.put("emails", "b", KLASS)
    result = run(cli, url, "cancel", "a", "b", "nope")
    assert result.exit_code == 1, result.output
    assert "cancelled 2 jobs" in result.output
    assert "no job 'nope' (finished and removed, or never published)" in result.output
    assert engine.multiget(["a", "b"]) == []


# -- jobs ---------------------------------------------------------------------------------
def test_jobs_json_lists_waiting_jobs_highest_priority_first(
    cli: click.Group, url: str, engine: Engine
) -> None:
    populate(engine)
    listed = output_json(run(cli, url, "jobs", "emails", "--json"))
    assert all(isinstance(item.pop("due"), float) for item in listed)  # ready since then
    assert listed == [
        {"jid": "high", "queue": "emails", "state": "waiting", "klass": "myapp.tasks.Urgent",
         "priority": 3},
        {"jid": "low", "queue": "emails", "state": "waiting", "klass": KLASS, "priority": 0},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("state", "jids"),
    [
        ("running", ["run"]),
        ("stalled", ["stall"]),
        ("scheduled", ["later"]),
        ("depends", ["after"]),
        ("recurring", ["nightly"]),
    ],
)
def test_jobs_by_state(
    cli: click.Group, url: str, engine: Engine, state: str, jids: list[str]
) -> None:
    populate(engine)
    listed = output_json(run(cli, url, "jobs", "emails", "--state", state, "--json"))
    assert [item["jid"] for item in listed] == jids
    assert {item["state"] for item in listed} == {state}


def test_jobs_without_queue_lists_every_queue_up_to_the_limit(
    cli: click.Group, url: str, engine: Engine
) -> None:
    for queue, jid in [("alpha", "a1"), ("alpha", "a2"), ("beta", "b1"), ("gamma", "g1")]:
        engine.put(queue, jid, KLASS)
    listed = output_json(run(cli, url, "jobs", "--json"))
    assert [(item["queue"], item["jid"]) for item in listed] == [
        ("alpha", "a1"), ("alpha", "a2"), ("beta", "b1"), ("gamma", "g1"),
    ]  # fmt: skip
    limited = output_json(run(cli, url, "jobs", "--limit", "3", "--json"))
    assert [item["jid"] for item in limited] == ["a1", "a2", "b1"]


def test_jobs_complete(cli: click.Group, url: str, engine: Engine) -> None:
    engine.put("emails", "done", KLASS)
    engine.pop("emails", "worker-1")
    engine.complete("done", "worker-1", "emails")
    listed = output_json(run(cli, url, "jobs", "--state", "complete", "--json"))
    assert listed == [
        {"jid": "done", "queue": "", "state": "complete", "klass": KLASS, "priority": 0,
         "due": None}
    ]  # fmt: skip
    result = run(cli, url, "jobs", "emails", "--state", "complete")
    assert result.exit_code == 2
    assert "complete jobs belong to no queue" in result.output


def test_jobs_table(cli: click.Group, url: str, engine: Engine) -> None:
    jid = "5f0c8a1e9b7d4c2aa1b3c4d5e6f70812"
    engine.put("emails", jid, "myapp.tasks.SendAVeryLongWelcomeEmailTask", priority=7)
    result = run(cli, url, "jobs", "emails")
    assert result.exit_code == 0, result.output
    assert "waiting jobs in 'emails'" in result.output
    assert row(result.output, jid)[-1] == "7"  # the jid is never broken across lines
    assert max(len(line) for line in result.output.splitlines()) <= 80
    engine.put("drained", "done", KLASS)
    engine.pop("drained", "worker-1")
    engine.complete("done", "worker-1", "drained")
    empty = run(cli, url, "jobs", "drained")
    assert empty.exit_code == 0
    assert "no waiting jobs in queue 'drained'" in empty.output


def test_scheduled_jobs_and_a_job_show_when_they_are_due(
    cli: click.Group, url: str, engine: Engine
) -> None:
    now = time.time()
    engine.put("emails", "later", KLASS, delay=3600, now=now)
    due = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now + 3600))
    listed = run(cli, url, "jobs", "emails", "--state", "scheduled")
    assert "due (UTC)" in listed.output
    assert row(listed.output, "later")[-2:] == due.split()
    shown = run(cli, url, "job", "later")
    assert row(shown.output, "due") == ["due", *due.split(), "UTC"]
    assert output_json(run(cli, url, "job", "later", "--json"))["due"] == pytest.approx(now + 3600)


# -- job ----------------------------------------------------------------------------------
def test_job_json_has_every_field_with_data_decoded(
    cli: click.Group, url: str, engine: Engine
) -> None:
    at = time.time()
    fail_job(engine, "reports", "broken", "boom", TRACEBACK, at)
    document = output_json(run(cli, url, "job", "broken", "--json"))
    history = document.pop("history")
    assert document == {
        "jid": "broken",
        "klass": KLASS,
        "queue": "reports",
        "state": "failed",
        "priority": 0,
        "tags": [],
        "retries": 5,
        "remaining": 5,
        "worker": "",
        "expires": 0,
        "due": None,
        "data": {"n": 1},
        "result": None,
        "failure": {"group": "boom", "message": TRACEBACK, "when": at, "worker": "worker-1"},
        "dependencies": [],
        "dependents": [],
        "spawned_from_jid": None,
        "tracked": False,
        "progress": None,
        "workflow": None,
    }
    assert [(event["what"], event["when"]) for event in history] == [
        ("put", at), ("popped", at), ("failed", at),
    ]  # fmt: skip
    assert history[0]["q"] == "reports"


def test_job_detail_shows_data_failure_and_history_in_utc(
    cli: click.Group, url: str, engine: Engine
) -> None:
    at = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
    fail_job(engine, "reports", "broken", "boom", TRACEBACK, at)
    result = run(cli, url, "job", "broken")
    assert result.exit_code == 0, result.output
    assert row(result.output, "klass") == ["klass", KLASS]
    assert row(result.output, "state") == ["state", "failed"]
    assert '"n": 1' in result.output
    assert "Traceback (most recent call last):" in result.output
    assert "myapp.errors.SMTPError: connection refused" in result.output
    assert "when    2023-11-14 22:13:20 UTC" in result.output
    assert row(result.output, "2023-11-14")[2:] == ["put", "q=reports"]


def test_job_that_does_not_exist_exits_1(cli: click.Group, url: str, engine: Engine) -> None:
    result = run(cli, url, "job", "nope")
    assert result.exit_code == 1
    assert "no job 'nope'" in result.output


# -- failed -------------------------------------------------------------------------------
def test_failed_groups(cli: click.Group, url: str, engine: Engine) -> None:
    at = time.time()
    fail_job(engine, "emails", "e1", "boom", "first", at)
    fail_job(engine, "emails", "e2", "boom", "second", at + 1)
    fail_job(engine, "emails", "e3", "other", "third", at + 2)
    assert output_json(run(cli, url, "failed", "--json")) == {"boom": 2, "other": 1}
    result = run(cli, url, "failed")
    assert row(result.output, "boom") == ["boom", "2"]
    assert row(result.output, "total") == ["total", "3"]


def test_failed_group_jobs_newest_first(cli: click.Group, url: str, engine: Engine) -> None:
    at = 1_700_000_000.0
    fail_job(engine, "emails", "e1", "boom", "first\nmore", at)
    fail_job(engine, "reports", "r1", "boom", TRACEBACK, at + 1)
    assert output_json(run(cli, url, "failed", "boom", "--limit", "1", "--json")) == {
        "group": "boom",
        "total": 2,
        "jobs": [
            {"jid": "r1", "klass": KLASS, "queue": "reports", "when": at + 1,
             "worker": "worker-1", "message": TRACEBACK},
        ],
    }  # fmt: skip
    result = run(cli, url, "failed", "boom")
    assert result.exit_code == 0, result.output
    assert "boom: 2 of 2, newest first" in result.output
    assert row(result.output, "r1") == ["r1", "reports", "2023-11-14", "22:13:21"]
    assert "myapp.errors.SMTPError: connection refused" in result.output  # a traceback's point
    assert "Traceback" not in result.output
    assert "first" in result.output
    assert "more" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_failed_when_nothing_failed(cli: click.Group, url: str, engine: Engine) -> None:
    assert output_json(run(cli, url, "failed", "--json")) == {}
    assert "no failed jobs" in run(cli, url, "failed").output
    unknown = run(cli, url, "failed", "boom")
    assert unknown.exit_code == 1
    assert "no failure group 'boom' (no job has failed)" in unknown.output


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("", ""),
        ("one line", "one line"),
        ("\n  first\nsecond\n", "first"),
        (TRACEBACK, "myapp.errors.SMTPError: connection refused"),
    ],
)
def test_first_line(message: str, line: str) -> None:
    assert first_line(message) == line


# -- retry --------------------------------------------------------------------------------
def fail_interleaved(engine: Engine) -> list[tuple[str, str]]:
    """Five jobs of group boom, oldest first, from queues in runs: a a b a b."""
    jobs = [("a", "j1"), ("a", "j2"), ("b", "j3"), ("a", "j4"), ("b", "j5")]
    at = time.time() - 100
    for n, (queue, jid) in enumerate(jobs):
        fail_job(engine, queue, jid, "boom", "no", at + n)
    return jobs


def states(engine: Engine) -> dict[str, tuple[str, JobState]]:
    jids = ["j1", "j2", "j3", "j4", "j5"]
    return {job.jid: (job.queue, job.state) for job in engine.multiget(jids)}


@pytest.mark.parametrize("page", [500, 2])
def test_retry_puts_each_job_back_into_its_own_queue(
    cli: click.Group, url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(operations, "RETRY_PAGE", page)
    jobs = fail_interleaved(engine)
    result = run(cli, url, "retry", "boom")
    assert result.exit_code == 0, result.output
    assert "retried 5 jobs of group 'boom': 3 into 'a', 2 into 'b'" in result.output
    assert states(engine) == {jid: (queue, JobState.WAITING) for queue, jid in jobs}
    assert engine.failed_groups() == {}


def test_retry_count_takes_the_oldest(cli: click.Group, url: str, engine: Engine) -> None:
    fail_interleaved(engine)
    result = run(cli, url, "retry", "boom", "--count", "3")
    assert result.exit_code == 0, result.output
    assert "retried 3 jobs of group 'boom': 2 into 'a', 1 into 'b'" in result.output
    assert states(engine) == {
        "j1": ("a", JobState.WAITING),
        "j2": ("a", JobState.WAITING),
        "j3": ("b", JobState.WAITING),
        "j4": ("a", JobState.FAILED),
        "j5": ("b", JobState.FAILED),
    }


@pytest.mark.parametrize("page", [500, 2])
def test_retry_into_one_queue(
    cli: click.Group, url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr(operations, "RETRY_PAGE", page)
    fail_interleaved(engine)
    engine.pause(["c"])  # a queue the store knows
    engine.unpause(["c"])
    result = run(cli, url, "retry", "boom", "--queue", "c", "--count", "4")
    assert result.exit_code == 0, result.output
    assert "retried 4 jobs of group 'boom': 4 into 'c'" in result.output
    assert engine.failed_groups() == {"boom": 1}
    assert engine.queue_counts("c").waiting == 4
    assert states(engine)["j5"] == ("b", JobState.FAILED)


def test_retry_of_a_group_that_does_not_exist(cli: click.Group, url: str, engine: Engine) -> None:
    result = run(cli, url, "retry", "boom")
    assert result.exit_code == 1
    assert "no failure group 'boom' (no job has failed)" in result.output


# -- pause / unpause ----------------------------------------------------------------------
def test_pause_and_unpause(cli: click.Group, url: str, engine: Engine) -> None:
    engine.put("a", "job-a", KLASS)
    engine.put("b", "job-b", KLASS)
    result = run(cli, url, "pause", "a", "b")
    assert result.exit_code == 0, result.output
    assert "paused a, b" in result.output
    assert engine.queue_counts("a").paused
    assert engine.queue_counts("b").paused
    result = run(cli, url, "unpause", "a")
    assert result.exit_code == 0, result.output
    assert "unpaused a" in result.output
    assert not engine.queue_counts("a").paused
    assert engine.queue_counts("b").paused


@pytest.mark.parametrize(
    "args", [("pause", "9lives"), ("unpause", "bad name"), ("jobs", "bad/queue")]
)
def test_bad_queue_name_is_an_error_not_a_traceback(
    cli: click.Group, url: str, engine: Engine, args: tuple[str, ...]
) -> None:
    result = run(cli, url, *args)
    assert result.exit_code == 1
    assert QUEUE_NAME_RULE in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an uncaught error


def test_pause_needs_a_queue(cli: click.Group, url: str) -> None:
    assert run(cli, url, "pause").exit_code == 2


# -- publish ------------------------------------------------------------------------------
@pytest.fixture
def task_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> Iterator[str]:
    """A module in tmp_path with a Kale-style task class `Greet`; its name is unique per test."""
    name = f"admin_tasks_{request.node.name.replace('[', '_').replace(']', '').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from lanner import task\n\n\n"
        "class Greet(task.Task):\n"
        '    queue = "greetings"\n'
        "    time_limit = 5\n\n"
        "    def run_task(self, *args, **kwargs):\n"
        "        return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_publish_with_app_module(
    cli: click.Group, url: str, engine: Engine, task_module: str
) -> None:
    result = run(
        cli, url, "publish", f"{task_module}.Greet", '["ann", 2]', "--kwargs", '{"loud": true}',
        "--priority", "5", "--tag", "vip", "--tag", "new", "-A", task_module,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    jid = result.stdout.strip()
    job = engine.get(jid)
    assert job is not None
    assert (job.klass, job.queue, job.state) == (f"{task_module}.Greet", "greetings", "waiting")
    assert (job.priority, job.tags) == (5, ("vip", "new"))
    assert json.loads(job.data) == {"v": 1, "args": ["ann", 2], "kwargs": {"loud": True}}


def test_publish_finds_the_task_by_name(
    cli: click.Group, url: str, engine: Engine, task_module: str
) -> None:
    result = run(cli, url, "publish", f"{task_module}.Greet", "--queue", "q2", "--delay", "60")
    assert result.exit_code == 0, result.output
    job = engine.get(result.stdout.strip())
    assert job is not None
    assert (job.queue, job.state) == ("q2", "scheduled")
    assert json.loads(job.data) == {"v": 1, "args": []}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["[1,"], "Invalid value for '[ARGS_JSON]': it is not valid JSON"),
        (['{"a": 1}'], "Invalid value for '[ARGS_JSON]': must be a JSON array"),
        (["[NaN]"], "Invalid value for '[ARGS_JSON]': it is not valid JSON"),
        (["--kwargs", "{oops"], "Invalid value for '--kwargs': it is not valid JSON"),
        (["--kwargs", "[1]"], "Invalid value for '--kwargs': must be a JSON object"),
    ],
)
def test_publish_bad_json_is_a_usage_error(
    cli: click.Group, url: str, task_module: str, args: list[str], message: str
) -> None:
    result = run(cli, url, "publish", f"{task_module}.Greet", *args)
    assert result.exit_code == 2
    assert message in result.output


def test_publish_unknown_task(cli: click.Group, url: str) -> None:
    result = run(cli, url, "publish", "nowhere.Missing")
    assert result.exit_code == 1
    assert "unknown task 'nowhere.Missing'" in result.output


def test_publish_bad_queue_name(cli: click.Group, url: str, task_module: str) -> None:
    result = run(cli, url, "publish", f"{task_module}.Greet", "--queue", "no good")
    assert result.exit_code == 1
    assert QUEUE_NAME_RULE in result.output


def test_publish_due_past_ten_years_is_one_line_and_stores_nothing(
    cli: click.Group, url: str, engine: Engine, task_module: str
) -> None:
    for delay in ("1e308", "1e12", str(MAX_DELAY_SEC + 1)):
        result = run(cli, url, "publish", f"{task_module}.Greet", "--delay", delay)
        assert result.exit_code == 1
        assert result.output.startswith("Error: delay must be at most 315576000 seconds (ten")
        assert result.output.count("\n") == 1
    assert engine.queue_counts("greetings").scheduled == 0
    assert (
        run(cli, url, "publish", f"{task_module}.Greet", "--delay", str(MAX_DELAY_SEC)).exit_code
        == 0
    )


def test_a_job_due_past_year_9999_is_shown_as_it_is(
    cli: click.Group, url: str, engine: Engine
) -> None:
    # A store written before due dates were bounded may hold one (put through the engine's
    # hook, past the contract's checks, as the engine then took it).
    far = NewJob("q", "far", KLASS, "{}", delay=1e308)
    engine._put("put", checks.Put([far], "", time.time()))
    shown = run(cli, url, "job", "far")
    assert shown.exit_code == 0, shown.output
    assert row(shown.output, "due") == ["due", "1e+308"]
    listed = run(cli, url, "jobs", "q", "--state", "scheduled")
    assert listed.exit_code == 0, listed.output
    assert row(listed.output, "far")[-1] == "1e+308"
    assert output_json(run(cli, url, "job", "far", "--json"))["due"] == 1e308


def test_register_adds_every_admin_command(cli: click.Group) -> None:
    assert sorted(cli.commands) == [
        "cancel", "failed", "flow", "job", "jobs", "pause", "publish", "retry", "schedules",
        "stats", "status", "unpause",
    ]  # fmt: skip


def test_lanner_has_every_command() -> None:
    import click

    from lanner.cli import main

    assert main.list_commands(click.Context(main)) == [
        "bench", "cancel", "chaos", "demo", "failed", "flow", "job", "jobs", "pause", "publish",
        "redis-script", "retry", "schedules", "serve", "simulate", "stats", "status", "unpause",
        "web", "worker",
    ]  # fmt: skip


def test_worker_options_are_checked_and_explained() -> None:
    from lanner.cli import main

    bad = CliRunner().invoke(main, ["worker", "--log-level", "verbose"])
    assert bad.exit_code == 2
    assert "'verbose' is not one of 'debug', 'info', 'warning', 'error'" in bad.output
    helped = CliRunner().invoke(main, ["worker", "--help"], env={"COLUMNS": "200"})
    assert "Jobs each process runs at once: async tasks share its event loop" in " ".join(
        helped.output.split()
    )


# -- -A MODULE that fails at import ---------------------------------------------------------
BROKEN_MODULES = {
    "name_error": ("import lanner\n\nx = undefined_name\n",
                   "NameError: name 'undefined_name' is not defined (name_error.py:3)"),
    "missing_package": ("import lanner\nimport no_such_package_anywhere\n",
                        "ModuleNotFoundError: No module named 'no_such_package_anywhere' "
                        "(missing_package.py:2)"),
    "syntax_error": ("def f(:\n", "SyntaxError: invalid syntax (syntax_error.py:1)"),
    "raises": ("import lanner\n\n\nraise RuntimeError('no config')\n",
               "RuntimeError: no config (raises.py:4)"),
    "no_such_module": (None, "ModuleNotFoundError: No module named 'no_such_module'"),
}  # fmt: skip


def lanner_subprocess(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lanner", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("command", "module"),
    [
        *((["status"], module) for module in BROKEN_MODULES),
        (["worker", "-c", "1"], "name_error"),
        (["worker", "-c", "1"], "syntax_error"),
        (["jobs"], "missing_package"),
        (["publish", "x.Task"], "raises"),
    ],
)
def test_a_module_that_fails_at_import_is_one_line_naming_the_error_and_where(
    url: str, tmp_path: Path, command: list[str], module: str
) -> None:
    source, error = BROKEN_MODULES[module]
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    shown = lanner_subprocess(tmp_path, *command, "-A", module, "--broker", url)
    assert shown.returncode == 1, shown.stderr
    assert shown.stderr.splitlines() == [f"Error: cannot import {module!r}: {error}"]
    assert shown.stdout == ""


def test_the_command_line_defines_no_task_of_its_own() -> None:
    """A worker serves the queues of the tasks defined: the CLI's own must not count."""
    probe = "import lanner.cli; from lanner.task import registered_tasks; print(registered_tasks())"
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert shown.stdout.strip() == "{}"
