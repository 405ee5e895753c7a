"""A job's page: its progress, and the graph of the workflow it is a step of, drawn as SVG
(over every engine; SQS keeps no jobs to look up)."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from lanner import Capability, Engine
from lanner.records import NewJob


def put_workflow(engine: Engine, workflow_id: str = "wf1") -> list[str]:
    """A chord as the workflows layer puts one: two parents and a callback taking both."""
    jids = [f"{workflow_id}-{n}" for n in range(3)]
    first = {"wf": {"id": workflow_id, "jobs": 3, "out": 2}}
    second = {"wf": {"id": workflow_id}}
    callback = {"wf": {"id": workflow_id, "in": [0, 1]}}
    engine.put_many([
        NewJob("wf", jids[0], "tasks.add", json.dumps(first)),
        NewJob("wf", jids[1], "tasks.add", json.dumps(second)),
        NewJob("wf", jids[2], "tasks.total", json.dumps(callback), depends=jids[:2]),
    ])  # fmt: skip
    return jids


def test_a_job_page_draws_its_workflow(engine: Engine, client: TestClient) -> None:
    if Capability.DEPENDENCIES not in engine.capabilities:
        return  # no workflows there (docs/workflows.md)
    jids = put_workflow(engine)
    [popped] = engine.pop("wf", "w1")
    engine.complete(popped.jid, "w1", "wf")

    page = client.get("/job", params={"jid": jids[2]})

    assert page.status_code == 200
    assert 'data-workflow="wf1"' in page.text
    svg = page.text.split('<svg class="workflow"')[1].split("</svg>")[0]
    assert svg.count('<g class="node') == 3
    assert svg.count('<line class="edge"') == 2
    assert f'<g class="node complete" data-jid="{jids[0]}">' in svg
    assert f'<g class="node waiting" data-jid="{jids[1]}">' in svg
    assert f'<g class="node depends focus" data-jid="{jids[2]}">' in svg
    assert f'href="/job?jid={jids[0]}"' in svg
    assert "3 jobs: 1 complete, 1 depends, 1 waiting" in page.text


def test_a_job_outside_any_workflow_has_no_graph(engine: Engine, client: TestClient) -> None:
    if Capability.LOOKUP not in engine.capabilities:
        return
    engine.put("q", "alone", "tasks.add", "{}")
    page = client.get("/job", params={"jid": "alone"})
    assert page.status_code == 200
    assert "svg" not in page.text.split("<main")[1]
    assert "data-workflow" not in page.text


def test_data_that_only_looks_like_a_workflow_draws_nothing(
    engine: Engine, client: TestClient
) -> None:
    if Capability.LOOKUP not in engine.capabilities:
        return
    engine.put("q", "odd", "tasks.add", json.dumps({"wf": {"id": "no such workflow!"}}))
    engine.put("q", "odd2", "tasks.add", json.dumps({"wf": {"id": "odd2", "in": "x"}}))
    for jid in ("odd", "odd2"):
        page = client.get("/job", params={"jid": jid})
        assert page.status_code == 200
        assert "data-workflow" not in page.text


def test_a_job_page_shows_its_progress(engine: Engine, client: TestClient) -> None:
    if Capability.LOG not in engine.capabilities:
        return
    engine.put("q", "busy", "tasks.add", "{}")
    engine.pop("q", "w1")
    engine.log("busy", "progress", {"fraction": 0.4, "message": "step <2> of 5"})
    page = client.get("/job", params={"jid": "busy"}).text
    assert '<progress max="1" value="0.4">' in page
    assert "40% step &lt;2&gt; of 5" in page  # escaped


def test_a_big_workflow_is_drawn_in_part(engine: Engine, client: TestClient) -> None:
    if Capability.DEPENDENCIES not in engine.capabilities:
        return
    parents = 40
    jobs = [
        NewJob("wf", f"big-{n}", "tasks.add",
               json.dumps({"wf": {"id": "big", "jobs": parents + 1, "out": parents}}
                          if n == 0 else {"wf": {"id": "big"}}))
        for n in range(parents)
    ]  # fmt: skip
    callback = {"wf": {"id": "big", "in": list(range(parents))}}
    jobs.append(NewJob("wf", f"big-{parents}", "tasks.total", json.dumps(callback),
                       depends=[job.jid for job in jobs]))  # fmt: skip
    engine.put_many(jobs)
    page = client.get("/job", params={"jid": f"big-{parents}"}).text
    svg = page.split('<svg class="workflow"')[1].split("</svg>")[0]
    assert svg.count('<g class="node') == 13  # 12 parents and the callback
    assert "+28 more" in svg
