"""examples/fastapi_app.py, run as its docstring says: the API (through Starlette's test
client, its lifespan included) and `lanner worker -A fastapi_app:tasks` as a real process, on one
SQLite file."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from .workers import lanner_worker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    monkeypatch.setenv("LANNER_BROKER", url)
    monkeypatch.delenv("LANNER_WEB_TOKEN", raising=False)
    return url


@pytest.fixture
def example(broker: str) -> Iterator[ModuleType]:
    """The example module, imported as uvicorn would (under its own name)."""
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLES / "fastapi_app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fastapi_app"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["fastapi_app"]
        module.tasks.close()


@pytest.fixture
def worker(broker: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`lanner worker -A fastapi_app:tasks -c 1 -t 4`, the example on its PYTHONPATH."""
    environment = {**os.environ, "PYTHONPATH": str(EXAMPLES), "LANNER_BROKER": broker}
    with lanner_worker(
        ["-A", "fastapi_app:tasks", "-c", "1", "-t", "4"], tmp_path, environment
    ) as process:
        yield process


def test_the_api_publishes_and_reads_results_a_pool_makes(
    example: ModuleType, worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    with TestClient(example.api, base_url="http://127.0.0.1") as client:
        published = client.post("/api/counts", json={"text": "To be or not to be"})
        assert published.status_code == 202
        jid = published.json()["jid"]
        assert published.json()["result"] == f"/api/counts/{jid}"

        answer = client.get(f"/api/counts/{jid}", params={"wait": 30}).json()
        log = (tmp_path / "worker.log").read_text(errors="replace")
        assert answer == {
            "jid": jid,
            "state": "complete",
            "result": {"words": 6, "distinct": 4},
        }, log

        empty = client.post("/api/counts", json={"text": " "}).json()["jid"]
        answer = client.get(f"/api/counts/{empty}", params={"wait": 30}).json()
        assert answer == {"jid": empty, "state": "failed", "error": "ValueError"}

        # The dashboard, mounted beside the API: the queue, and the job's own page.
        overview = client.get("/")
        assert overview.status_code == 200
        assert "words" in overview.text
        page = client.get("/job", params={"jid": jid})
        assert page.status_code == 200
        assert jid in page.text


def test_a_job_not_run_yet_is_said_to_wait(example: ModuleType) -> None:
    with TestClient(example.api, base_url="http://127.0.0.1") as client:
        jid = client.post("/api/counts", json={"text": "one two"}).json()["jid"]
        assert client.get(f"/api/counts/{jid}").json() == {"jid": jid, "state": "waiting"}
        assert client.get("/api/counts/unknown").status_code == 404
        assert client.get(f"/api/counts/{jid}", params={"wait": 99}).status_code == 422
        assert client.post("/api/counts", json={}).status_code == 422
