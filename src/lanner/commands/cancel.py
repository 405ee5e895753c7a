"""The command that takes jobs away:

    lanner cancel JID...    delete the jobs; a running one's task is stopped (JobCancelled)

A job another job depends on is not cancelled (cancel its dependents first, or together).
A jid the store does not know is an error (exit status 1), after the others are cancelled.
"""

from __future__ import annotations

from typing import Final

import click

from lanner.commands.common import connection_options, session
from lanner.commands.known import quoted
from lanner.commands.rendering import say

__all__ = ["COMMANDS"]


@click.command("cancel")
@click.argument("jids", nargs=-1, required=True)
@connection_options
def cancel_command(app_path: str | None, broker: str | None, jids: tuple[str, ...]) -> None:
    """Cancel the jobs JIDS: they are deleted, and a running task is stopped within about
    a second (JobCancelled is raised in it; its process is killed if it does not stop)."""
    with session(app_path, broker) as app:
        cancelled = set(app.engine.cancel(list(jids)))
        left = [jid for jid in jids if jid not in cancelled]
        complete = app.engine.multiget(left) if left else []
    say(f"cancelled {len(cancelled)} job{'' if len(cancelled) == 1 else 's'}")
    if complete:
        say(f"already complete, not cancelled: {', '.join(job.jid for job in complete)}")
    shown = {job.jid for job in complete}
    missing = [jid for jid in left if jid not in shown]
    if missing:
        noun = "job" if len(missing) == 1 else "jobs"
        raise click.ClickException(
            f"no {noun} {quoted(missing)} (finished and removed, or never published)"
        )


COMMANDS: Final = (cancel_command,)
