"""`lanner web` and `lanner demo --db` as commands, in processes of their own."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from click.testing import CliRunner

import lanner
from lanner.cli import main

from .conftest import until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: bytes = response.read()
            return body.decode()
    except (urllib.error.URLError, ConnectionError):
        return None


def test_web_serves_the_store_and_stops_on_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'web.db'}"
    with lanner.open_engine(url) as engine:
        engine.put("emails", "job-1", "tasks.send", "{}")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "lanner", "web", "--broker", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(lambda: _get(f"http://127.0.0.1:{port}/") is not None, timeout=30)
        page = _get(f"http://127.0.0.1:{port}/queues/emails?state=waiting")
        assert page is not None
        assert "job-1" in page
        metrics = _get(f"http://127.0.0.1:{port}/metrics")
        assert metrics is not None
        assert 'lanner_queue_jobs{queue="emails",state="waiting"} 1.0' in metrics
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        process.kill()
        stdout, stderr = process.communicate()
    assert f"http://127.0.0.1:{port}/" in stdout
    assert "read-only" in stdout
    assert "Traceback" not in stderr


def test_web_explains_a_port_in_use_and_a_missing_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'web.db'}"
    lanner.open_engine(url).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["web", "--broker", url, "--port", str(port)])
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}: port in use" in result.output
    missing = CliRunner().invoke(main, ["web", "--broker", f"sqlite:///{tmp_path / 'no.db'}"])
    assert missing.exit_code == 1
    assert "no store at" in missing.output


def test_web_warns_when_listening_beyond_localhost(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'web.db'}"
    with socket.socket() as taken:  # the port is taken: the warning comes, then the error
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["web", "--broker", url, "--host", "0.0.0.0",
                                           "--port", str(port)])  # fmt: skip
    assert "anyone who reaches it reads every job's data, and there is no token" in result.output


def test_demo_keeps_its_database_for_the_dashboard(tmp_path: Path) -> None:
    database = tmp_path / "demo.db"
    done = subprocess.run(
        [sys.executable, "-m", "lanner", "demo", "--db", str(database)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with lanner.open_engine(f"sqlite:///{database}") as engine:
        names = {queue.name for queue in engine.queues()}
        assert names == {"high_priority", "default", "low_priority"}
        assert engine.jobs("complete", None, 0, 5)
    again = CliRunner().invoke(main, ["demo", "--db", str(database)])
    assert again.exit_code == 1
    assert "exists: the demo starts from a new database" in again.output
