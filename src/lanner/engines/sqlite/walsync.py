"""Group commit: one fsync of the WAL for the commits of every thread waiting on it.

With `synchronous=full` SQLite syncs the WAL inside each COMMIT, while the connection
holds the file's write lock: a process's threads, which share one connection, and other
processes' writers all wait behind each fsync in turn, one commit per disk flush.

Instead, where lanner's connection would sync (`full` or `extra`, in WAL mode), it runs
with `synchronous=normal` (a commit writes its frames to the WAL, in the kernel's cache,
without waiting for the disk; checkpoints and a reused WAL's header are still synced by
SQLite) and, after the COMMIT, with the write lock let go, the committing thread calls
`WalSync.sync(commit)`: that returns once an `fdatasync` of the WAL *begun after that
commit* has returned, which makes it durable as SQLite's own sync would have (an fsync
flushes the file's every dirty page, whichever descriptor or process wrote them). One
thread syncs at a time; the commits made meanwhile by the others are all covered by the
next sync, which one of their threads makes for all. A write command still returns only
once its commit is on the disk; what changes is that others may commit, and read what it
wrote, while it waits for the disk (a commit lost to a power cut was never acknowledged,
and a job read from it by a worker meanwhile was then run once without having been
published: at-least-once allows it).

Other processes: their commits take the write lock without waiting for this process's
fsync, and a sync finding their pages already flushed by another's returns sooner (the
kernel's own grouping); no state is shared between processes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final

_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)
"""What SQLite itself calls on Linux to sync the WAL; fsync where there is none (macOS)."""

GROUPED_MODES: Final = frozenset({"full", "extra"})
"""The `synchronous` modes whose commits are synced here, after the write lock is let go."""


class WalSync:
    """The syncs of one process's connection to one file's WAL (thread-safe)."""

    def __init__(self, wal_path: str) -> None:
        self.wal_path = wal_path
        self._cond = threading.Condition(threading.Lock())
        self._committed = 0  # commits made so far (numbers handed out by `committed`)
        self._synced = 0  # every commit up to this number is on the disk
        self._syncing = False
        self.syncs = 0
        """fdatasync calls made (benchmarks and tests compare them with the commits)."""

    def committed(self) -> int:
        """Count a commit just made (call it before the write lock is let go, so that a
        sync begun after any later commit covers this one too); return its number."""
        with self._cond:
            self._committed += 1
            return self._committed

    def sync(self, commit: int) -> None:
        """Return once commit number `commit` is on the disk: a sync begun after it ended.

        The first thread to find none running makes one for every commit made so far; the
        others wait for it, and the first of them still uncovered makes the next."""
        with self._cond:
            while self._synced < commit:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                covered = self._committed
                try:
                    self._cond.release()
                    try:
                        self._sync_file()
                    finally:
                        self._cond.acquire()
                finally:
                    self._syncing = False
                    self._cond.notify_all()
                # Only after a sync returned: a failed one covers nothing (raised above).
                self._synced = max(self._synced, covered)
                self.syncs += 1

    def _sync_file(self) -> None:
        # Opened for each sync: the WAL may be a new file since the last (the connection
        # reopened, after a fork or the file replaced), and opening costs microseconds
        # beside the flush. Read-only is enough: fsync flushes the file, not the descriptor.
        try:
            fd = os.open(self.wal_path, os.O_RDONLY)
        except FileNotFoundError:
            return  # the last connection closed: SQLite checkpointed it, synced, and deleted it
        try:
            _fdatasync(fd)
        finally:
            os.close(fd)
