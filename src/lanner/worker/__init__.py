"""Running tasks: the loop of one worker process, the pool that supervises several, and
Kale's single-process `Worker` (`from lanner import worker; worker.Worker().run()`).

`Worker` is loaded on first use, so that importing this package (as every module of it
does) loads nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lanner.worker.standalone import Worker

__all__ = ["Worker"]

if not TYPE_CHECKING:  # for type checkers, Worker is imported above

    def __getattr__(name: str) -> Any:
        if name == "Worker":
            from lanner.worker.standalone import Worker

            return Worker
        raise AttributeError(f"module 'lanner.worker' has no attribute {name!r}")
