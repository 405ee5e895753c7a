"""What the worker-pool tests share: a directory with a task module, a store and an output file.

Each test writes its own small task module into its tmp_path. Its tasks append lines
`<what> <jid> <pid> <time>` to an output file, which tells the test which process ran what
and when. The module is importable from the test process (to publish, or to hand its App to
an in-process WorkerPool) and from a `lanner worker -A <module>` subprocess.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest

import lanner
from lanner import Engine, Job

HEADER = """\
import os
import time

from lanner.app import App
from lanner.exceptions import TimeLimitExceeded
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.task import Task

BROKER = {broker!r}
OUT = {out!r}


def record(what, jid):
    with open(OUT, "a") as out:
        out.write(f"{{what}} {{jid}} {{os.getpid()}} {{time.time()!r}}\\n")

"""

APP = """
app = App(
    BROKER,
    settings=Settings(broker=BROKER, {settings}),
    queues=[{queues}],
)

"""

WORKER_MAIN = "from lanner.cli import main; main()"


@dataclass(frozen=True)
class Line:
    """One line a task wrote: what happened to which job, in which process, when."""

    what: str
    jid: str
    pid: int
    when: float


class Workspace:
    """One test's directory: its task module, store, output file and worker log."""

    def __init__(self, tmp_path: Path, module_name: str) -> None:
        self.dir = tmp_path
        self.db = tmp_path / "jobs.db"
        self.url = "sqlite:///" + str(self.db)
        self.out = tmp_path / "out.txt"
        self.log_path = tmp_path / "worker.log"
        self.module_name = module_name
        self._engine: Engine | None = None
        self._processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    # -- the task module ------------------------------------------------------------------
    def write_module(
        self,
        tasks: str,
        *,
        queues: str = 'QueueConfig("work", batch_size=10, visibility_timeout_sec=10, '
        "long_poll_time_sec=0.2)",
        settings: str = "retry_delay_multiple_sec=0.05, time_limit_grace_sec=0.5",
        query: str = "",
        with_app: bool = True,
    ) -> ModuleType:
        """Write the module (header, optional `app`, then `tasks`) and import it here."""
        text = HEADER.format(broker=self.url + query, out=str(self.out))
        if with_app:
            text += APP.format(settings=settings, queues=queues)
        text += tasks
        (self.dir / f"{self.module_name}.py").write_text(text)
        sys.path.insert(0, str(self.dir))
        try:
            return importlib.import_module(self.module_name)
        finally:
            sys.path.remove(str(self.dir))

    # -- what happened --------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """An engine of the test's own on the store (no size limit of the worker's)."""
        if self._engine is None:
            self._engine = lanner.open_engine(self.url)
        return self._engine

    def job(self, jid: str) -> Job:
        job = self.engine.get(jid)
        assert job is not None, f"job {jid} does not exist"
        return job

    def lines(self, what: str | None = None, jid: str | None = None) -> list[Line]:
        if not self.out.exists():
            return []
        found = []
        for text in self.out.read_text().splitlines():
            kind, job, pid, when = text.split()
            line = Line(kind, job, int(pid), float(when))
            if (what is None or line.what == what) and (jid is None or line.jid == jid):
                found.append(line)
        return found

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    # -- `lanner worker` subprocesses -----------------------------------------------------
    def start_worker(
        self,
        *args: str,
        environment: Mapping[str, str] | None = None,
        open_files: int | None = None,
    ) -> subprocess.Popen[bytes]:
        """Run `lanner worker <args>` in its own session, logging to `log_path`, with no
        lanner configuration in its environment but `environment`; with `open_files`,
        allowed to open no more files than that (RLIMIT_NOFILE)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.dir), *filter(None, [env.get("PYTHONPATH")])])
        for variable in ("LANNER_BROKER", "LANNER_SETTINGS_MODULE", "LANNER_QUEUE_CONFIG"):
            env.pop(variable, None)
        env.update(environment or {})
        log = self.log_path.open("ab")
        self._logs.append(log)
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER_MAIN, "worker", *args],
            cwd=self.dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=None if open_files is None else lambda: _limit_open_files(open_files),
        )
        self._processes.append(process)
        return process

    def close(self) -> None:
        for process in self._processes:
            # Its own session: the worker, the children it forked (each leading a process
            # group of its own) and whatever their tasks started.
            kill_session(process.pid)
            process.wait(timeout=10)
        for log in self._logs:
            log.close()
        if self._engine is not None:
            self._engine.close()
        module = sys.modules.pop(self.module_name, None)
        app = getattr(module, "app", None)
        if app is not None:
            app.close()


def _limit_open_files(count: int) -> None:
    import resource

    resource.setrlimit(
        resource.RLIMIT_NOFILE, (count, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )


def kill_session(sid: int) -> None:
    """SIGKILL every process of a session (read from /proc)."""
    for pid in session_processes(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def session_processes(sid: int) -> list[int]:
    """The live processes of a session (read from /proc; zombies are dead already)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()  # state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != b"Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def workspace(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Workspace]:
    name = "pooltasks_" + re.sub(r"\W", "_", request.node.name)
    made = Workspace(tmp_path, name)
    yield made
    made.close()


def wait_until(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    *,
    step: Callable[[], None] | None = None,
    details: Callable[[], str] | None = None,
) -> Any:
    """Call `step` (default: a short sleep) until `condition()` is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        if step is None:
            time.sleep(0.02)
        else:
            step()
