"""The command that takes jobs away:

    lanner cancel JID...    delete the jobs; a running one's task is stopped (JobCancelled)

A job another job depends on is not cancelled (cancel its dependents first, or together).
"""

from __future__ import annotations

from typing import Final

import click

from lanner.commands.common import connection_options, session
from lanner.commands.rendering import say

__all__ = ["COMMANDS"]


@click.command("cancel")
@click.argument("jids", nargs=-1, required=True)
@connection_options
def cancel_command(app_path: str | None, broker: str | None, jids: tuple[str, ...]) -> None:
    """Cancel the jobs JIDS: they are deleted, and a running task is stopped within about
    a second (JobCancelled is raised in it; its process is killed if it does not stop)."""
    with session(app_path, broker) as app:
        cancelled = app.engine.cancel(list(jids))
    left = [jid for jid in jids if jid not in set(cancelled)]
    say(f"cancelled {len(cancelled)} job{'' if len(cancelled) == 1 else 's'}")
    if left:
        say(f"not found (finished and removed, or never published): {', '.join(left)}")


COMMANDS: Final = (cancel_command,)
