"""`lanner bench publish`: single `.delay()` calls from threads and processes, every job
stored once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lanner import open_engine
from lanner.cli import main


@pytest.mark.parametrize(("threads", "processes"), [(3, 1), (2, 2)])
def test_bench_publish_json_smoke(tmp_path: Path, threads: int, processes: int) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    sizes = ["--jobs", "41", "--threads", str(threads), "--processes", str(processes)]
    result = CliRunner().invoke(main, ["bench", "publish", "--url", url, *sizes, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["jobs"], report["threads"], report["processes"]) == (41, threads, processes)
    assert report["publish_per_s"] > 0
    assert report["cpu_us_per_publish"] > 0
    assert 0 < report["latency_ms"]["p50"] <= report["latency_ms"]["p99"]
    engine = open_engine(url)
    try:
        # Each process's first publish (opening the store) is not counted.
        assert engine.queues()[0].waiting == 41 + processes
    finally:
        engine.close()
