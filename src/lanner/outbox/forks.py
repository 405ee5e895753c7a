"""The lock a fork of the relay's process waits for while the relay has the application's
database open.

The relay runs in a thread of the pool's supervisor, which forks workers. A database
connection must never cross a fork (the child could close it, and SQLite's cleanup would
then write to, or release the locks of, a file the parent uses: see
`engines/sqlite/connection.py`), so the relay opens its connection for one step at a time,
under this lock, and closes it before letting go; a fork takes the lock first.
"""

from __future__ import annotations

import os
import threading

FORK_LOCK = threading.Lock()

os.register_at_fork(
    before=FORK_LOCK.acquire,
    after_in_parent=FORK_LOCK.release,
    after_in_child=FORK_LOCK.release,
)
