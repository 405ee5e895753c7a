"""The pool under test, from outside: `lanner worker` subprocesses, and a reader beside them.

`Supervisor` runs the real `lanner worker -A <module> -c P -t N --threads T --queues
<yaml>` in a session of its own (so everything it forks can be found, and cleaned up, by
session id), logging to the run's worker log. Its worker processes are whatever processes
have it as parent.

`StatusReader` runs `lanner status --json` in a loop from a thread, each a new process
reading the store while the pool works, and counts the runs that failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from lanner.tools.chaos import procs
from lanner.tools.chaos.workload import Workload, WorkloadSpec

CLEAN_ENV_VARIABLES = ("LANNER_BROKER", "LANNER_SETTINGS_MODULE", "LANNER_QUEUE_CONFIG")


def _env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [env.get("PYTHONPATH")])])
    for variable in CLEAN_ENV_VARIABLES:
        env.pop(variable, None)
    return env


class Supervisor:
    """One `lanner worker` process (the supervisor) and its session."""

    def __init__(self, workload: Workload, spec: WorkloadSpec, log_path: Path) -> None:
        self._log: IO[bytes] = log_path.open("ab")
        command = [
            sys.executable, "-m", "lanner", "worker",
            "-A", workload.module_name,
            "-c", str(spec.concurrency),
            "-t", str(spec.tasks_per_process),
            "--threads", str(spec.threads),
            "--queues", str(workload.queues_file),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            cwd=workload.folder,
            env=_env(workload.folder),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.process.pid
        self.started_at = time.time()
        self.expected_exit = False  # set when the harness stops or kills it

    def poll(self) -> int | None:
        return self.process.poll()

    def children(self) -> list[int]:
        return procs.children(self.pid)

    def kill(self) -> None:
        self.expected_exit = True
        procs.send(self.pid, signal.SIGKILL)
        self.process.wait()

    def terminate(self, timeout: float) -> int | None:
        """SIGTERM (a warm shutdown); its exit status, or None if it did not exit in time."""
        self.expected_exit = True
        procs.send(self.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self.process.poll() is None:
            self.expected_exit = True
            self.process.kill()
            self.process.wait()
        self._log.close()


class StatusReader:
    """`lanner status --json` run again and again until stopped, each a new process."""

    def __init__(self, broker: str, folder: Path, log_path: Path) -> None:
        self.broker = broker
        self.folder = folder
        self.log_path = log_path
        self.runs = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-status-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_for_runs(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.runs < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.runs >= count

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        command = [sys.executable, "-m", "lanner", "status", "--json", "--broker", self.broker]
        with self.log_path.open("ab") as log:
            while not self._stop.is_set():
                done = subprocess.run(
                    command,
                    cwd=self.folder,
                    env=_env(self.folder),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    check=False,
                )
                self.runs += 1
                if done.returncode != 0:
                    self.failures += 1
