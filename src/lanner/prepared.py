"""A publish, prepared: the options chosen for it, and the task run it asks for.

Not to be confused with Kale's `message.py` (what a failing task's policy is given).

`App.publish_many` takes `Message`s (made by `task.message(...)` or by hand) and puts them
in one engine round trip. The publish options are written here once: their keyword
arguments (`PublishArguments`, `FlowArguments`), taken by `App.publish`, `task.options`
and `@app.task` alike, and the value they make (`PublishOptions`, with the defaults).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypedDict

from lanner.flow import Debounce, FlowOptions, KeySpec, as_debounce

if TYPE_CHECKING:
    from lanner.task import Task


class PublishArguments(TypedDict, total=False):
    """The keyword arguments of one publish (`App.publish`, `task.options`); the defaults
    are `PublishOptions`'s.

    queue: the task's unless given. delay: seconds before it may run. priority: the
    task's unless given (higher first). tags, depends: jids it waits for. jid: its own
    (publishing it again moves a waiting job, never a running one). retries: the task's
    unless given. unique: with a jid, keep a live job of that jid rather than publish.
    """

    queue: str | None
    delay: float
    priority: int | None
    tags: Sequence[str] | None
    depends: Sequence[str] | None
    jid: str | None
    retries: int | None
    unique: bool


class FlowArguments(TypedDict, total=False):
    """FLOW's keyword arguments: a task's (`@app.task`) and one run's (`task.options`),
    over the task's (docs/flow-control.md)."""

    rate_limit: str | None
    rate_key: KeySpec
    concurrency_key: KeySpec
    max_concurrency: int | None
    fair_key: KeySpec
    debounce: Debounce | float | None


class OptionsArguments(PublishArguments, FlowArguments, total=False):
    """What `task.options(...)` takes besides `app_data`."""


FLOW_KEYS: Final = frozenset(FlowArguments.__annotations__)


def flow_choices(arguments: Mapping[str, Any]) -> tuple[FlowOptions | None, Debounce | None]:
    """The FLOW options and debounce of `arguments` (FlowArguments); None: none given."""
    flow = None
    rate_limit, max_concurrency = arguments.get("rate_limit"), arguments.get("max_concurrency")
    rate_key, fair_key = arguments.get("rate_key"), arguments.get("fair_key")
    concurrency_key = arguments.get("concurrency_key")
    if rate_limit or rate_key or concurrency_key or max_concurrency or fair_key:
        flow = FlowOptions(rate_limit, rate_key, concurrency_key, max_concurrency, fair_key)
        flow = flow.check()
    return flow, as_debounce(arguments.get("debounce"))


@dataclass(frozen=True, slots=True)
class PublishOptions:
    """Per-publish choices (`PublishArguments` documents them); None: the task's default."""

    queue: str | None = None
    delay: float = 0.0
    priority: int | None = None
    tags: Sequence[str] | None = None
    depends: Sequence[str] | None = None
    jid: str | None = None
    retries: int | None = None
    unique: bool = False  # with a jid: keep a live job of that jid rather than publish
    flow: FlowOptions | None = None  # rate limit and concurrency key, over the task's
    debounce: Debounce | None = None  # over the task's

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> PublishOptions:
        """The options `arguments` (OptionsArguments) choose."""
        flow, debounce = flow_choices(arguments)
        chosen = {key: value for key, value in arguments.items() if key not in FLOW_KEYS}
        return cls(**chosen, flow=flow, debounce=debounce)


@dataclass(frozen=True, slots=True)
class Message:
    """One publish, prepared: for `App.publish_many`."""

    task: type[Task]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    app_data: Any = None
    options: PublishOptions = PublishOptions()
