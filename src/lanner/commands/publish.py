"""`lanner publish TASK [ARGS_JSON] [--kwargs JSON] [--queue Q] [--delay S] [--priority P]
[--tag T ...]`: publish one run of a task from the command line and print its jid.

Arguments are JSON (an array, and an object for `--kwargs`); text that is not, or not of
that type, is a usage error (exit status 2), as is JSON's non-standard NaN and Infinity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import click
from rich.console import Console

from lanner.checks.values import strict_json
from lanner.commands.common import connection_options, session
from lanner.errors import MalformedArgument
from lanner.task import find_task

__all__ = ["COMMANDS"]


def json_value(kind: type, label: str) -> Callable[[click.Context, click.Parameter, str], Any]:
    """A click callback that parses a parameter as JSON of type `kind`."""

    def parse(ctx: click.Context, param: click.Parameter, value: str) -> Any:
        try:
            parsed = strict_json(value, "it")
        except MalformedArgument as error:
            raise click.BadParameter(str(error)) from None
        if not isinstance(parsed, kind):
            raise click.BadParameter(f"must be a JSON {label}, not {value!r}")
        return parsed

    return parse


@click.command("publish")
@click.argument("task")
@click.argument(
    "args", metavar="[ARGS_JSON]", required=False, default="[]", callback=json_value(list, "array")
)
@click.option(
    "--kwargs",
    metavar="JSON",
    default="{}",
    callback=json_value(dict, "object"),
    help="Keyword arguments, a JSON object.",
)
@click.option("--queue", metavar="Q", help="Queue to publish to (default: the task's).")
@click.option(
    "--delay",
    metavar="S",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Run no sooner than S seconds.",
)
@click.option("--priority", metavar="P", type=int, help="Priority within the queue, higher first.")
@click.option("--tag", "tags", metavar="T", multiple=True, help="Tag the job (repeatable).")
@connection_options
def publish_command(
    app_path: str | None,
    broker: str | None,
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    queue: str | None,
    delay: float,
    priority: int | None,
    tags: tuple[str, ...],
) -> None:
    """Publish a run of TASK (its dotted name) with ARGS_JSON, a JSON array; print its jid."""
    with session(app_path, broker, create=True) as app:
        task_class = find_task(task)
        if task_class is None:
            raise click.ClickException(
                f"unknown task {task!r}: no lanner Task has that name "
                "(give its module with -A, or check the spelling)"
            )
        jid = app.publish(
            task_class,
            args,
            kwargs,
            queue=queue,
            delay=delay,
            priority=priority,
            tags=list(tags) or None,
        )
    Console().out(jid, highlight=False)


COMMANDS: Final = (publish_command,)
