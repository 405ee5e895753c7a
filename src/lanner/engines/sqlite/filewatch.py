"""Waiting for a SQLite file's commits without polling: Linux's inotify on its WAL file.

In WAL mode every commit appends to `<file>-wal` with write(2), whichever process makes
it, and inotify reports each such write (IN_MODIFY) to every watcher: a process waiting
for other processes' commits sleeps in poll(2) until one writes, at no cost meanwhile.
The WAL file is deleted when the last connection closes and made anew by the next, so its
directory is watched for the WAL's creation too.

A write to the WAL comes before the commit is visible to readers (SQLite then syncs the
file, then publishes the commit in its shared-memory index): a waiter woken by it may need
to wait for the writer's lock before it sees the change (`connection.py` does).

`FileWatch.open` returns None where inotify cannot be had (not Linux, or the per-user
limit of inotify instances reached): callers then poll, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import struct
import sys
from typing import Final

logger = logging.getLogger("lanner.sqlite")

_IN_MODIFY: Final = 0x00000002
_IN_MOVED_TO: Final = 0x00000080
_IN_CREATE: Final = 0x00000100
_IN_Q_OVERFLOW: Final = 0x00004000
_IN_IGNORED: Final = 0x00008000
_IN_NONBLOCK: Final = os.O_NONBLOCK  # inotify's flags are the open(2) flags
_IN_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

_libc: ctypes.CDLL | None = None
_unavailable = sys.platform != "linux"
_said = False


def _inotify() -> ctypes.CDLL | None:
    global _libc, _unavailable
    if _libc is None and not _unavailable:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            _libc = libc
        except (OSError, AttributeError):
            _unavailable = True
    return _libc


class FileWatch:
    """Changes of one SQLite file's WAL, by any process; for one process (never shared
    across a fork) and one waiting thread at a time."""

    def __init__(self, libc: ctypes.CDLL, fd: int, path: str) -> None:
        self._libc = libc
        self.fd = fd
        self._wal = os.fsencode(os.path.abspath(path) + "-wal")  # the same after a chdir
        self._wal_name = os.path.basename(self._wal)
        self._wal_wd = -1
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    @classmethod
    def open(cls, path: str) -> FileWatch | None:
        """A watch of `path`'s WAL, or None where inotify cannot be had."""
        global _said
        libc = _inotify()
        if libc is None:
            return None
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            if not _said:  # EMFILE: fs.inotify.max_user_instances reached
                _said = True
                logger.info("cannot watch %s (%s): checking it for commits every few ms "
                            "instead", path, os.strerror(ctypes.get_errno()))  # fmt: skip
            return None
        watch = cls(libc, fd, path)
        directory = os.fsencode(os.path.dirname(os.path.abspath(path)))
        if libc.inotify_add_watch(fd, directory, _IN_CREATE | _IN_MOVED_TO) < 0:
            watch.close()
            return None
        watch._watch_wal()
        return watch

    def _watch_wal(self) -> None:
        # -1 while there is no WAL file: its creation, reported by the directory's watch,
        # is a change, and watching it starts then.
        self._wal_wd = self._libc.inotify_add_watch(self.fd, self._wal, _IN_MODIFY)

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a write to the WAL (or its creation); whether
        one came. Every change reported so far is consumed."""
        try:
            if not self._poller.poll(max(0, int(timeout * 1000) + 1)):
                return False
            changed = False
            with contextlib.suppress(BlockingIOError):
                while data := os.read(self.fd, 4096):
                    changed = self._read(data) or changed
        except OSError:
            return True  # cannot tell: the caller looks
        return changed

    def _read(self, data: bytes) -> bool:
        changed = False
        offset = 0
        while offset < len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:  # events were lost: any of them may have been a write
                changed = True
            elif wd == self._wal_wd:
                if mask & _IN_IGNORED:  # the WAL was deleted
                    self._wal_wd = -1
                changed = changed or bool(mask & _IN_MODIFY)
            elif name == self._wal_name:  # made anew (or moved into place)
                self._watch_wal()
                changed = True
        return changed

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
