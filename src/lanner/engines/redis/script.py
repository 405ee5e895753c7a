"""The Redis engine's Lua script, assembled from the sources in ``lua/``.

The engine is one script (run with ``EVALSHA <sha> 0 <command> <now> <args...>``),
kept as several files that each hold one part: helpers, configuration, events,
statistics, workers, jobs, queues, recurring jobs, lanner's extensions and the
command table. They are concatenated in the order of ``SCRIPT_FILES``; every
name in them is a Lua ``local``, so a file may only use what earlier files define.
``lua/layout.lua`` comes first: its comment block documents the keys and commands.
"""

from __future__ import annotations

from importlib import resources

SCRIPT_FILES: tuple[str, ...] = (
    "layout.lua",
    "base.lua",
    "config.lua",
    "events.lua",
    "stats.lua",
    "worker.lua",
    "job.lua",
    "queue.lua",
    "recurring.lua",
    "lanner.lua",
    "api.lua",
)


def build_script() -> str:
    """Return the whole script: the files of ``SCRIPT_FILES``, in order."""
    folder = resources.files(__package__).joinpath("lua")
    parts = [folder.joinpath(name).read_text(encoding="utf-8") for name in SCRIPT_FILES]
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)
