"""`lanner flow` and `lanner schedules` against a real SQLite store and an app module
(`lanner flow` on Redis Cluster too, its partitions' state merged)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

import lanner
from lanner import Flow, NewJob, RateLimit

MODULE = """
from lanner import App

app = App({url!r})


@app.periodic(cron="*/5 * * * *", tz="Europe/Paris", args=("daily",))
@app.task(name="clitasks.report")
def report(kind):
    pass


@app.periodic(every=60)
@app.task(name="clitasks.ping")
def ping():
    pass
"""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/jobs.db"


@pytest.fixture
def module(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "clitasks_flow.py").write_text(MODULE.format(url=url))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "clitasks_flow"
    sys.modules.pop("clitasks_flow", None)


def run(cli: click.Group, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("store", ["sqlite", "redis-cluster"])
def test_flow_shows_keys_and_buckets_holding_jobs(
    cli: click.Group, url: str, store: str, request: pytest.FixtureRequest
) -> None:
    if store == "redis-cluster":
        cluster = request.getfixturevalue("redis_cluster")
        cluster.flush()
        url = cluster.url
    with lanner.open_engine(url) as engine:
        now = time.time()
        engine.put_many(
            [NewJob("q", f"k{i}", "Task", flow=Flow("tenant-1", 1)) for i in range(3)]
            + [NewJob("q", f"r{i}", "Task", flow=Flow(rates=(RateLimit("api", 1, 60.0),)))
               for i in range(2)],
            now=now,
        )  # fmt: skip
        for _ in range(3):  # k0, then r0 alone, then r1 held
            engine.pop("q", "w", 10, now=now)
    result = run(cli, "flow", "--broker", url)
    assert result.exit_code == 0, result.output
    assert "tenant-1" in result.output
    assert "1/60 s" in result.output
    shown = json.loads(run(cli, "flow", "--json", "--broker", url).stdout)
    assert shown["keys"] == [{"key": "tenant-1", "running": 1, "cap": 1, "held": 2}]
    assert [b["held"] for b in shown["buckets"]] == [1]


def test_schedules_lists_the_apps_with_their_next_run(cli: click.Group, module: str) -> None:
    result = run(cli, "schedules", "-A", module)
    assert result.exit_code == 0, result.output
    assert "clitasks.report" in result.output
    shown = json.loads(run(cli, "schedules", "--json", "-A", module).stdout)
    whens = {s["name"]: s["when"] for s in shown["schedules"]}
    assert whens == {
        "clitasks.ping": "every 60 s",
        "clitasks.report": 'cron "*/5 * * * *" Europe/Paris',
    }
    assert all(s["next_run"] > time.time() - 1 for s in shown["schedules"])


def test_schedules_prune_removes_what_the_app_no_longer_declares(
    cli: click.Group, module: str, url: str
) -> None:
    with lanner.open_engine(url) as engine:
        engine.config_set("lanner-schedule:old.task", json.dumps(
            {"spec": json.dumps({"task": "old.task", "cron": None, "every": 30.0, "tz": "UTC",
                                 "catch_up": "once"}), "registered": 1.0}))  # fmt: skip
    listed = run(cli, "schedules", "-A", module)
    assert "old.task (every 30 s)" in listed.output
    pruned = run(cli, "schedules", "--prune", "-A", module)
    assert pruned.exit_code == 0, pruned.output
    assert "removed: old.task" in pruned.output
    with lanner.open_engine(url) as engine:
        assert "lanner-schedule:old.task" not in engine.config_all()
