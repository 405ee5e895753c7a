"""`lanner serve` as a command: it listens, warns off localhost, applies queue bounds from a
queue config file, and `shutdown` ends it with the items it held open given back."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import lanner

from .conftest import reply, until


def _start(*args: str) -> tuple[subprocess.Popen[str], int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "lanner", "serve", "--port", str(port), *args],
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, port


def _connect(port: int) -> socket.socket:
    found: list[socket.socket] = []

    def listening() -> bool:
        try:
            found.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        except OSError:
            return False
        return True

    until(listening, timeout=30)
    return found[0]


def test_serve_then_shutdown_gives_back_open_items(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    process, port = _start("--broker", url)
    try:
        with _connect(port) as sock:
            sock.sendall(b"set work 0 0 4\r\nheld\r\nget work/open\r\n")
            assert reply(sock) == b"STORED\r\nVALUE work/open 0 4\r\nheld\r\nEND\r\n"
            with _connect(port) as other:
                other.sendall(b"shutdown\r\n")
                assert other.recv(10) == b""
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        stderr = process.communicate()[1]
    assert f"memcache protocol on 127.0.0.1:{port}" in stderr
    assert "Traceback" not in stderr
    with lanner.open_engine(url) as engine:
        assert engine.queue_counts("work").waiting == 1


def test_serving_beyond_localhost_warns(tmp_path: Path) -> None:
    process, port = _start("--broker", f"sqlite:///{tmp_path / 'x.db'}", "--host", "0.0.0.0")
    try:
        _connect(port).close()
    finally:
        process.terminate()
        stderr = process.communicate(timeout=30)[1]
    assert "no authentication" in stderr
    assert process.returncode == 0


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "lanner", "serve", "--port", str(port),
             "--broker", f"sqlite:///{tmp_path / 'x.db'}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_queue_bounds_from_a_queue_config_file(tmp_path: Path) -> None:
    config = tmp_path / "queues.yaml"
    config.write_text("- name: work\n  priority: 1\n  max_items: 5\n  max_age: 60\n")
    url = f"sqlite:///{tmp_path / 'bounded.db'}"
    with lanner.open_engine(url) as engine:
        bounded = lanner.Capability.LIMITS in engine.capabilities
    process, port = _start("--broker", url, "--queues", str(config))
    try:
        if bounded:
            _connect(port).close()
    finally:
        if bounded:
            process.terminate()
        stderr = process.communicate(timeout=30)[1]
    if not bounded:  # an engine that cannot bound a queue says so, and serves nothing
        assert process.returncode == 1
        assert "capability 'limits'" in stderr
        return
    with lanner.open_engine(url) as engine:
        assert engine.config_get("work-max-items") == 5
        assert engine.config_get("work-max-age") == 60
