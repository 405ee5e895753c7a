"""Process groups: each worker process leads its own, so that a task's subprocesses go too.

A time-limit kill or a cold shutdown kills the whole group of a worker process, not just
the process, so a subprocess a task started cannot outlive it; after a soft time limit, a
worker process kills what its task left running in its group. A group's leader is the
worker process itself, so its pid is the group's id. Also: a process's memory, whether
a process is alive, and a signal at its parent's death.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import Final

_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def lead_own_group() -> None:
    """Make this (worker) process the leader of a new process group."""
    os.setpgid(0, 0)


def stop_with_parent(signum: int) -> bool:
    """Have Linux send this process `signum` when the thread that forked it ends (in a
    process forked by a main thread: when its parent dies), however the parent died; True
    if set. Elsewhere, or if libc cannot be loaded, nothing: the process still notices a
    new parent pid, later."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def kill_group(pgid: int, signum: int = signal.SIGKILL) -> None:
    """Signal every process of a group (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def kill_strays() -> int:
    """Kill the other processes of this process's group, if it leads one; return how many.

    Only a group leader does: in a process that shares its parent's group (a test, a
    shell's job) the other members are not this process's to kill. Reads /proc (Linux);
    elsewhere nothing is killed.
    """
    me = os.getpid()
    if os.getpgrp() != me:
        return 0
    killed = 0
    for member in _group_members(me):
        if member != me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, signal.SIGKILL)
                killed += 1
    return killed


def _group_members(pgid: int) -> list[int]:
    members = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    text = stat.read()
            except OSError:
                continue  # gone meanwhile
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
            fields = text[text.rindex(b")") + 2 :].split()
            if int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def rss_mb() -> float:
    """This process's resident memory in MiB (current on Linux, peak elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists (another user's counts; so may an unrelated process
    that reuses the pid: callers only lose time by that, never a job)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
