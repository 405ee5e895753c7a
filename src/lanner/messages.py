"""A publish, prepared: the options chosen for it, and the task run it asks for.

`App.publish_many` takes `Message`s (made by `task.message(...)` or by hand) and puts them
in one engine round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lanner.flow import Debounce, FlowOptions
    from lanner.task import Task


@dataclass(frozen=True, slots=True)
class PublishOptions:
    """Per-publish choices; None means the task's default."""

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


@dataclass(frozen=True, slots=True)
class Message:
    """One publish, prepared: for `App.publish_many`."""

    task: type[Task]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    app_data: Any = None
    options: PublishOptions = PublishOptions()
