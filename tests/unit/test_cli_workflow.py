"""`lanner job`: a job's progress, and the graph of the workflow a job is a step of (text
and `--json`), on a real SQLite store."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

import lanner
from lanner import App, Engine
from lanner.job import JobState
from lanner.operations import drain
from lanner.workflows import graph

app = App("sqlite:///unused-by-tests.db")


@app.task(queue="wf")
def add(x: int, y: int = 0) -> int:
    return x + y


@app.task(queue="wf")
def total(values: list[int]) -> int:
    return sum(values)


@pytest.fixture
def store(url: str) -> Any:
    app.use_broker(url)
    yield app
    app.close()


def run(cli: click.Group, url: str, *args: str) -> Result:
    result = CliRunner().invoke(cli, [*args, "--broker", url])
    assert result.exit_code == 0, result.output
    return result


def words(output: str, first: str) -> list[str]:
    return next(line.split() for line in output.splitlines() if first in line.split()[:2])


def test_job_shows_its_workflow_by_level_with_states(
    cli: click.Group, url: str, store: App
) -> None:
    handle = lanner.chain(lanner.group(add.s(1, 1), add.s(2, 2)), total.s(), add.s(10)).delay()
    drain(store, queues=["wf"], max_jobs=2)  # the group ran; the callback is ready
    callback = handle.jids[2]

    shown = run(cli, url, "job", callback).output

    assert f"workflow {handle.id} (4 jobs: 2 complete, 1 depends, 1 waiting)" in " ".join(
        shown.split()
    )
    assert words(shown, "#0")[1:] == [add.name, "complete"]
    assert words(shown, ">")[1:] == ["#2", total.name, "waiting",
                                     "#0", "#1"]  # fmt: skip
    assert words(shown, "#3")[1:] == [add.name, "depends", "#2"]


def test_job_json_has_every_job_of_its_workflow(cli: click.Group, url: str, store: App) -> None:
    handle = lanner.chord([add.s(i) for i in range(3)], total.s()).delay()
    document = json.loads(run(cli, url, "job", handle.jids[0], "--json").stdout)
    assert document["workflow"]["id"] == handle.id
    assert [(j["jid"], j["after"], j["state"]) for j in document["workflow"]["jobs"]] == [
        (handle.jids[0], [], "waiting"),
        (handle.jids[1], [], "waiting"),
        (handle.jids[2], [], "waiting"),
        (handle.jids[3], handle.jids[:3], "depends"),
    ]


def test_job_shows_its_progress(cli: click.Group, url: str, engine: Engine) -> None:
    engine.put("q", "j1", "Task")
    engine.pop("q", "w1")
    engine.log("j1", "progress", {"fraction": 0.4, "message": "step 2 of 5"})
    assert words(run(cli, url, "job", "j1").output, "progress") == [
        "progress", "40%", "step", "2", "of", "5",
    ]  # fmt: skip
    document = json.loads(run(cli, url, "job", "j1", "--json").stdout)
    assert document["progress"]["fraction"] == 0.4
    assert document["progress"]["message"] == "step 2 of 5"
    assert document["workflow"] is None


def test_a_big_workflow_is_shown_in_part_around_the_job(store: App) -> None:
    handle = lanner.chord([add.s(i) for i in range(100)], total.s()).delay()
    shown = graph.read(store.engine, handle.id, focus=handle.jids[50])
    assert shown is not None
    first = [node.jid for node in shown.nodes if node.level == 0]
    assert len(first) == graph.MAX_PER_LEVEL
    assert handle.jids[50] in first
    assert shown.hidden == (100 - graph.MAX_PER_LEVEL, 0)
    assert shown.states == {"waiting": 100, "depends": 1}
    assert [n.state for n in shown.nodes if n.level == 1] == [JobState.DEPENDS]
