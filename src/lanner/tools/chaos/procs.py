"""Processes as Linux shows them in /proc: who is whose child, in which session, alive or not.

The harness finds a pool's worker processes as the processes whose parent is the supervisor
(nothing the supervisor reports is trusted), finds what a run leaves behind by session id
and by the marker a task's subprocess carries on its command line, and signals them.
Every function here tolerates a process that exits while it is being looked at.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    session: int
    state: str  # R, S, D, T (stopped), Z (zombie), ...


def info(pid: int) -> ProcInfo | None:
    """What /proc/<pid>/stat says, or None if the process is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return ProcInfo(pid, int(fields[1]), int(fields[3]), fields[0])
    except (IndexError, ValueError):
        return None


def all_processes() -> list[ProcInfo]:
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            proc = info(int(entry.name))
            if proc is not None:
                found.append(proc)
    return found


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    proc = info(pid)
    return proc is not None and proc.state not in ("Z", "X")


def children(parent: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `parent`, sorted."""
    return sorted(
        proc.pid for proc in all_processes() if proc.ppid == parent and proc.state not in ("Z", "X")
    )


def in_sessions(sessions: set[int]) -> list[int]:
    """Live processes whose session is one of `sessions`."""
    return sorted(
        proc.pid
        for proc in all_processes()
        if proc.session in sessions and proc.state not in ("Z", "X")
    )


def cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def with_argument(argument: str) -> list[int]:
    """Live processes that have `argument` as one of their command-line arguments."""
    return sorted(
        proc.pid
        for proc in all_processes()
        if proc.state not in ("Z", "X") and argument in cmdline(proc.pid)[1:]
    )


def send(pid: int, signum: int) -> bool:
    """Signal a process; False if it was already gone."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of `pids` (processes the harness started or its pools forked)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
