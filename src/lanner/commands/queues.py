"""The commands that change a queue rather than a job:

    lanner pause QUEUE...     workers take none of their jobs until unpaused
    lanner unpause QUEUE...   workers take their jobs again

Kept apart from `publish`, which acts on jobs: these change a queue's state. A queue
neither the store nor the app knows is refused (`lanner.commands.known`): a typo would
pause a queue no one uses.
"""

from __future__ import annotations

from typing import Final

import click

from lanner.commands.common import connection_options, session
from lanner.commands.known import require, require_queues
from lanner.commands.rendering import say
from lanner.engine import Capability

__all__ = ["COMMANDS", "pause_command", "unpause_command"]


def pausing_command(pause: bool) -> click.Command:
    """`pause` or `unpause`: one command body for both."""
    verb = "pause" if pause else "unpause"
    effect = "take none of their jobs until unpaused" if pause else "take their jobs again"

    @click.command(verb, help=f"{verb.capitalize()} QUEUES: workers {effect}.")
    @click.argument("queues", nargs=-1, required=True)
    @connection_options
    def command(app_path: str | None, broker: str | None, queues: tuple[str, ...]) -> None:
        with session(app_path, broker, create=True) as app:
            require(app, Capability.PAUSE, verb)
            require_queues(app, queues)
            (app.engine.pause if pause else app.engine.unpause)(list(queues))
        say(f"{verb}d {', '.join(queues)}")

    return command


pause_command: Final = pausing_command(pause=True)
unpause_command: Final = pausing_command(pause=False)
COMMANDS: Final = (pause_command, unpause_command)
