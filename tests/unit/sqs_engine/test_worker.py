"""lanner's worker side on the SQS engine: drain, bad messages, handles, the admin commands.

Each either works on SQS or says in one line what the sqs engine cannot do; none of them
raises a traceback or does nothing silently. (Real pools on SQS: tests/integration/.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

import lanner.app
from lanner import App, Unsupported
from lanner.codec import JobIdentity, Payload, SignedPickleCodec
from lanner.commands import register_admin
from lanner.engines.sqs.engine import SQSEngine
from lanner.operations import drain
from lanner.queues import QueueConfig
from lanner.settings import Settings

from .conftest import Raw

QUEUE = "sqsw"
RAN: list[Any] = []


@pytest.fixture
def app(sqs_fresh_url: str) -> Iterator[App]:
    RAN.clear()
    made = App(
        sqs_fresh_url,
        settings=Settings(broker=sqs_fresh_url, pickle_hmac_key=b"k" * 32),
        queues=[QueueConfig(QUEUE, visibility_timeout_sec=30, long_poll_time_sec=0)],
    )
    yield made
    made.close()


def add_task(app: App) -> Any:
    @app.task(queue=QUEUE, max_retries=0, time_limit=10)
    def sqs_add(a: int, b: int) -> int:
        RAN.append(a + b)
        return a + b

    return sqs_add


def test_drain_runs_published_jobs_on_sqs(app: App) -> None:
    add = add_task(app)
    app.publish_many([add.message(i, 1) for i in range(12)])
    assert drain(app, queues=[QUEUE]) == 12
    assert sorted(RAN) == list(range(1, 13))
    counts = app.engine.queue_counts(QUEUE)
    assert (counts.waiting, counts.running) == (0, 0)
    assert app.engine.config_get(f"{QUEUE}-heartbeat") == 30


def test_bad_messages_are_dead_lettered_with_their_reasons_and_the_rest_runs(
    app: App, raw: Raw
) -> None:
    add = add_task(app)
    forged = SignedPickleCodec(b"x" * 32).encode(
        Payload((1, 2), {}), JobIdentity("forged", add.name, QUEUE)
    )
    engine = app.engine
    engine.put(QUEUE, "forged", add.name, forged)
    engine.put(QUEUE, "unknown", "nowhere.Missing", '{"v": 1, "args": [], "kwargs": {}}')
    raw.send(QUEUE, "not json at all")
    raw.send(QUEUE, '{"id": "kale-1", "task": "tasks.Add", "payload": {}}')
    add.delay(2, 3)

    assert drain(app, queues=[QUEUE], raise_errors=False) == 1
    assert RAN == [5]
    letters = {
        letter.get("jid", letter.get("foreign")): letter["failure"]
        for letter in raw.dead_letters(QUEUE)
    }
    assert letters["forged"]["group"] == "lanner-bad-signature"
    assert letters["unknown"]["group"] == "lanner-unknown-task"
    assert "nowhere.Missing" in letters["unknown"]["message"]
    assert letters["not json at all"]["group"] == "lanner-not-a-job"
    assert "not JSON" in letters["not json at all"]["message"]
    kale = '{"id": "kale-1", "task": "tasks.Add", "payload": {}}'
    assert "not a lanner job" in letters[kale]["message"]
    assert app.engine.queue_counts(QUEUE).waiting == 0


def test_a_handle_says_in_one_line_what_sqs_cannot_do(app: App) -> None:
    add = add_task(app)
    handle = add.delay(1, 1)
    for call, says in [
        (handle.state, "cannot find a job by its id"),
        (lambda: handle.result(timeout=0), "cannot wait for a job to finish"),
        (handle.cancel, "cannot cancel a job"),
    ]:
        with pytest.raises(Unsupported, match=says) as refused:
            call()
        assert "\n" not in str(refused.value)
    assert drain(app, queues=[QUEUE]) == 1  # the job was untouched


# -- the admin commands ---------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> click.Group:
    for name in ("LANNER_BROKER", "LANNER_SETTINGS_MODULE", "LANNER_QUEUE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setattr(lanner.app, "_default_app", None)
    group = click.Group("lanner")
    register_admin(group)
    return group


def test_status_shows_the_queues_and_says_failures_are_not_countable(
    cli: click.Group, engine: SQSEngine, sqs_fresh_url: str
) -> None:
    engine.put("emails", "j1", "Task")
    result = CliRunner().invoke(cli, ["status", "--broker", sqs_fresh_url])
    assert result.exit_code == 0, result.output
    assert "emails" in result.output
    assert "the sqs engine cannot count them by group" in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["jobs", "emails"], "cannot list or peek"),
        (["job", "j1"], "cannot find a job by its id"),
        (["failed"], "cannot count, list or put back failed jobs"),
        (["retry", "boom", "--queue", "emails"], "cannot count, list or put back failed jobs"),
        (["cancel", "j1"], "cannot cancel a job"),
    ],
    ids=["jobs", "job", "failed", "retry", "cancel"],
)
def test_admin_commands_sqs_cannot_serve_say_so_in_one_line(
    cli: click.Group, engine: SQSEngine, sqs_fresh_url: str, args: list[str], says: str
) -> None:
    engine.put("emails", "j1", "Task")
    result = CliRunner().invoke(cli, [*args, "--broker", sqs_fresh_url])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line.startswith("Error: the sqs engine cannot")
    assert says in line
    assert engine.queue_counts("emails").waiting == 1
