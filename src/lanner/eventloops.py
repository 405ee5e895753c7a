"""The event loop lanner runs its own asyncio code on: uvloop's where it is installed (the
`uvloop` extra), else asyncio's. One place for the choice, so that the worker's async tasks
(worker/concurrent.py) and the Kestrel server (`lanner serve`) always make the same one."""

from __future__ import annotations

import asyncio


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (the `uvloop` extra), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
