"""The canvas: signatures and the three ways to combine them (Celery's names and meanings).

    add.s(2, 3)                          a signature: a task with arguments, not yet published
    add.si(2, 3)                         immutable: it ignores the previous step's result
    lanner.chain(add.s(1, 2), add.s(10)) each step gets the previous result as its first argument
    add.s(1, 2) | add.s(10)              the same chain
    lanner.group(add.s(1, 1), add.s(2, 2))   in parallel: its result is every result, in order
    lanner.chord(group, tsum.s())        the callback gets the group's list of results first

Nested freely: a chain of groups, a group of chains, a chord whose callback is a chain.
A chain step after a group gets the group's list (a chord, as in Celery). Nothing here
touches a store: `.delay()` hands the canvas to `lanner.workflows.plan`, which turns it
into jobs, and publishes them in one `put_many` (`lanner.workflows.handle`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from lanner.errors import MalformedArgument
from lanner.prepared import PublishOptions

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.task import Task
    from lanner.workflows.handle import WorkflowHandle

FailurePolicy: TypeAlias = Literal["fail", "include"]
"""What a chord's callback does when a parent fails for good: `fail` (the default) fails it
into `lanner-dependency-failed`, naming the parent; `include` runs it with the failures in
the list (each a `lanner.workflows.ParentFailed`)."""


class Canvas:
    """What every node of a workflow shares: publishing it, and chaining it with `|`."""

    def delay(self) -> WorkflowHandle:
        """Publish the whole workflow in one engine round trip; return its handle."""
        from lanner.workflows.handle import publish

        return publish(self)

    async def adelay(self) -> WorkflowHandle:
        """`delay()` for async code: the event loop goes on while it is published."""
        from lanner import offload

        return await offload.call(self.delay)

    def apply_async(self) -> WorkflowHandle:
        """Celery's name for `delay()`."""
        return self.delay()

    def __or__(self, other: Canvas) -> Chain:
        if not isinstance(other, Canvas):
            return NotImplemented
        return chain(self, other)

    def signatures(self) -> list[Signature]:
        """Every signature of the workflow, in the order its jobs are put."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Signature(Canvas):
    """A task with its arguments and publish options, not yet published (`task.s(...)`)."""

    task: type[Task]
    app: App
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: PublishOptions = field(default_factory=PublishOptions)
    app_data: Any = None
    immutable: bool = False  # `.si()`: the previous result is not passed

    def __post_init__(self) -> None:
        if self.options.depends is not None:
            raise MalformedArgument(
                f"{self.task.name}: a signature takes no depends=: its workflow says what it "
                "waits for"
            )
        if self.options.jid is not None or self.options.unique:
            raise MalformedArgument(f"{self.task.name}: a signature takes no jid= nor unique=")

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.task.name}.{'si' if self.immutable else 's'}({', '.join(shown)})"

    def set(self, **options: Any) -> Signature:
        """The same signature with publish options changed (queue, priority, delay, tags,
        retries), as Celery's `sig.set(...)`."""
        changed = replace(self.options, **options)  # names an unknown option: TypeError
        # Built whole (one dataclasses.replace is 10 µs; a chord's header may be 10,000).
        return type(self)(
            self.task, self.app, self.args, self.kwargs, changed, self.app_data, self.immutable
        )

    def signatures(self) -> list[Signature]:
        return [self]


@dataclass(frozen=True, eq=False)
class Chain(Canvas):
    """Steps run one after the other; each gets the previous step's result first."""

    steps: tuple[Canvas, ...]

    def signatures(self) -> list[Signature]:
        return [s for step in self.steps for s in step.signatures()]


@dataclass(frozen=True, eq=False)
class Group(Canvas):
    """Members run in parallel; the group's result is the list of theirs, in order."""

    members: tuple[Canvas, ...]

    def signatures(self) -> list[Signature]:
        return [s for member in self.members for s in member.signatures()]


@dataclass(frozen=True, eq=False)
class Chord(Canvas):
    """A group, then a callback given the list of the group's results first."""

    header: Group
    body: Canvas
    failures: FailurePolicy = "fail"

    def signatures(self) -> list[Signature]:
        return [*self.header.signatures(), *self.body.signatures()]


def _nodes(given: tuple[Any, ...], what: str) -> tuple[Canvas, ...]:
    """`f(a, b)` or `f([a, b])`: the nodes given, each checked."""
    if len(given) == 1 and isinstance(given[0], Iterable) and not isinstance(given[0], Canvas):
        given = tuple(given[0])
    for node in given:
        if not isinstance(node, Canvas):
            raise MalformedArgument(
                f"{what}() takes signatures (task.s(...)), chains, groups or chords, not "
                f"{type(node).__name__}"
            )
    return given


def chain(*steps: Canvas | Iterable[Canvas]) -> Chain:
    """`chain(a, b, c)` or `chain([a, b, c])`: b gets a's result first, c gets b's."""
    nodes = _nodes(steps, "chain")
    if not nodes:
        raise MalformedArgument("chain() needs at least one step")
    flat: list[Canvas] = []
    for node in nodes:  # a chain in a chain is its steps
        flat.extend(node.steps if isinstance(node, Chain) else (node,))
    return Chain(tuple(flat))


def group(*members: Canvas | Iterable[Canvas]) -> Group:
    """`group(a, b)` or `group([a, b])`: run in parallel; the result is the list of theirs."""
    return Group(_nodes(members, "group"))


def chord(
    header: Group | Iterable[Canvas], body: Canvas, *, failures: FailurePolicy = "fail"
) -> Chord:
    """`chord(group, callback)`: the callback gets the list of the group's results first,
    once every member completed. `failures`: see `FailurePolicy`."""
    if failures not in ("fail", "include"):
        raise MalformedArgument(f"chord() failures must be 'fail' or 'include', not {failures!r}")
    if not isinstance(body, Canvas):
        raise MalformedArgument(f"chord() callback must be a signature, not {type(body).__name__}")
    members = header if isinstance(header, Group) else group(header)
    return Chord(members, body, failures)
