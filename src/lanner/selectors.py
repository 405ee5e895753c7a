"""Queue selection: which of its queues a worker pops from next.

A worker serves several queues, each with a `priority` (an int >= 1; higher is more important).
Before each round it calls `selector.select(queues, ready)`, where `ready()` returns the names of
the queues that have work right now. This module owns the selector protocol, the built-in
selectors (Kale's lotteries and qless's ordered and round-robin modes), their registry, and
`resolve_selector`, which turns a configured name or dotted class path into a selector.

Every built-in calls `ready()` at most once per `select` (`lottery` and `random` never call it),
returns one of the queues it was given, and breaks ties in priority by the configured order.

A selector may also look at how long each queue's next task has waited: one with a
`select_by_age(queues, ready, ages)` method (`AgeAwareSelector`; the built-in is
`aged-priority`) is called with `ages()` instead, by the worker loop and the simulator; it
costs the worker one peek per queue with work, so only such selectors are given it.
"""

from __future__ import annotations

import importlib
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Final, Protocol, TypeAlias, TypeVar, runtime_checkable

from lanner import kale
from lanner.errors import MalformedArgument

__all__ = [
    "DEFAULT_SELECTOR",
    "LOTTERY_LOTTERY_TRIES",
    "SELECTORS",
    "AgeAwareSelector",
    "AgedPriority",
    "Ages",
    "DeficitPriority",
    "HighestPriorityFirst",
    "HighestPriorityLottery",
    "Lottery",
    "LotteryLottery",
    "Ordered",
    "QueueSelector",
    "Ready",
    "ReducedLottery",
    "RoundRobin",
    "SelectableQueue",
    "SelectorFactory",
    "UniformRandom",
    "choose",
    "resolve_selector",
]


class SelectableQueue(Protocol):
    """What a selector needs to know about a queue; lanner's QueueConfig satisfies it."""

    @property
    def name(self) -> str: ...

    @property
    def priority(self) -> int: ...


Q = TypeVar("Q", bound=SelectableQueue)

Ready: TypeAlias = Callable[[], AbstractSet[str]]
"""Returns the names of the queues that have work now (one cheap call, cached by the caller)."""

Ages: TypeAlias = Callable[[], Mapping[str, float]]
"""Returns, for each queue with work now, how long (seconds) its next task has been ready.

A queue that `ready()` names but whose age is unknown (found empty after all, or an engine
that cannot peek) is missing from the mapping. Asking costs an engine call per queue with
work, so callers supply ages only to selectors that declare `select_by_age`.
"""


@runtime_checkable
class QueueSelector(Protocol):
    def select(self, queues: Sequence[Q], ready: Ready) -> Q:
        """Return the queue to pop next; `queues` is non-empty and in configured order."""
        ...


@runtime_checkable
class AgeAwareSelector(Protocol):
    """A selector that also looks at how long each queue's next task has waited.

    It still has `select(queues, ready)` (used where ages cannot be had); a caller that can
    tell ages calls `select_by_age(queues, ready, ages)` instead (see `choose`)."""

    def select(self, queues: Sequence[Q], ready: Ready) -> Q: ...

    def select_by_age(self, queues: Sequence[Q], ready: Ready, ages: Ages) -> Q: ...


def choose(selector: QueueSelector, queues: Sequence[Q], ready: Ready, ages: Ages) -> Q:
    """Ask `selector` for a queue: with `ages` if it wants them, else `select(queues, ready)`.

    `ages` is called only by a selector that wants it, so a caller can make it lazy."""
    if isinstance(selector, AgeAwareSelector):
        return selector.select_by_age(queues, ready, ages)
    return selector.select(queues, ready)


class SelectorFactory(Protocol):
    def __call__(self, rng: random.Random | None = None) -> QueueSelector: ...


# The default source of randomness. Reseeded in forked children (as the stdlib does for the
# `random` module), so prefork workers do not all draw the same "random" queue in lockstep.
_SHARED_RNG: Final = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SHARED_RNG.seed)

# Kale lottery-lottery: how many draws may land on an empty queue before the last, final draw.
LOTTERY_LOTTERY_TRIES: Final = 10


class _Selector:
    """Shared plumbing: the random source, the non-empty check, and the draws."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else _SHARED_RNG

    def select(self, queues: Sequence[Q], ready: Ready) -> Q:
        self._check_given(queues)
        return self._select(queues, ready)

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        raise NotImplementedError

    def _check_given(self, queues: Sequence[Q]) -> None:
        if not queues:
            raise MalformedArgument(f"{type(self).__name__}.select() needs at least one queue")

    def _draw(self, queues: Sequence[Q], exponent: float = 1) -> Q:
        """One weighted lottery: each queue holds `priority ** exponent` tickets."""
        self._check_priorities(queues)
        return self._rng.choices(queues, weights=[q.priority**exponent for q in queues])[0]

    @staticmethod
    def _check_priorities(queues: Sequence[Q]) -> None:
        for q in queues:
            if q.priority < 1:
                raise MalformedArgument(
                    f"queue {q.name!r} has priority {q.priority}; a lottery needs priorities >= 1"
                )


def _with_work(queues: Sequence[Q], ready: Ready) -> list[Q]:
    have = ready()
    return [q for q in queues if q.name in have]


def _highest(queues: Sequence[Q]) -> Q:
    return max(queues, key=lambda q: q.priority)  # max() keeps the first of equals


class Lottery(_Selector):
    """`lottery`: one draw weighted by priority; whether the winner has work is ignored."""

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        return self._draw(queues)


class ReducedLottery(_Selector):
    """`reduced-lottery` (the default, Kale's ReducedLottery).

    Kale draws from a pool of all queues, drops each winner that has no work and draws again;
    when the pool runs dry it draws over all queues (the worker then blocks on the winner).
    Dropping losers never changes the odds between the queues that remain, so with all of
    `ready()` known at once that loop is exactly one draw among the queues with work, or,
    if none has work, one draw among all of them.
    """

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        return self._draw(_with_work(queues, ready) or queues)


class HighestPriorityFirst(_Selector):
    """`highest-priority-first`: the highest-priority queue with work, else the highest."""

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        return _highest(_with_work(queues, ready) or queues)


class HighestPriorityLottery(_Selector):
    """`highest-priority-lottery`: the highest-priority queue with work, else a lottery."""

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        with_work = _with_work(queues, ready)
        return _highest(with_work) if with_work else self._draw(queues)


class LotteryLottery(_Selector):
    """`lottery-lottery`: up to 10 draws until one has work, then one final draw (may be empty)."""

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        have = ready()
        for _ in range(LOTTERY_LOTTERY_TRIES):
            winner = self._draw(queues)
            if winner.name in have:
                return winner
        return self._draw(queues)


class UniformRandom(_Selector):
    """`random`: a uniform choice; priorities and work are ignored."""

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        return self._rng.choice(queues)


class Ordered(_Selector):
    """`ordered` (qless): the first queue in configured order with work, else the first queue."""

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        return (_with_work(queues, ready) or queues)[0]


class RoundRobin(_Selector):
    """`round-robin` (qless): the next queue in configured order after the last pick that has
    work; if none has work, simply the next one. Each instance keeps its own place."""

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        self._last: str | None = None

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        names = [q.name for q in queues]
        start = names.index(self._last) + 1 if self._last in names else 0
        rotation = [*queues[start:], *queues[:start]]
        chosen = (_with_work(rotation, ready) or rotation)[0]
        self._last = chosen.name
        return chosen


class DeficitPriority(_Selector):
    """`deficit-priority`: the highest-priority queue with work, unless another queue with work
    has earned its turn.

    Each time a queue with work is passed over it earns priority / top of a turn, where top is
    the highest priority among the queues with work; once it holds a whole turn it is due, and
    the most overdue queue that is due is taken, spending one turn. A queue without work loses
    its credit. So the highest-priority queue with work never waits on luck, and a queue that
    stays busy still gets Reduced Lottery's share (with priorities 100 and 40 busy, 2 rounds in
    7 go to the 40), in a fixed, evenly spread order. When no queue has work it draws among all
    as Reduced Lottery does. Each worker keeps its own credits; docs/simulate.md has the
    simulated comparison with Reduced Lottery.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        self._credit: dict[str, float] = {}

    def _select(self, queues: Sequence[Q], ready: Ready) -> Q:
        with_work = _with_work(queues, ready)
        if not with_work:
            self._credit.clear()
            return self._draw(queues)
        for q in with_work:
            if q.priority < 1:
                raise MalformedArgument(
                    f"queue {q.name!r} has priority {q.priority}; {type(self).__name__} needs "
                    "priorities >= 1"
                )
        credit = {q.name: self._credit.get(q.name, 0.0) for q in with_work}
        due = [q for q in with_work if credit[q.name] >= 1.0]
        chosen = max(due, key=lambda q: credit[q.name]) if due else _highest(with_work)
        top = _highest(with_work).priority
        for q in with_work:
            if q is chosen:
                credit[q.name] -= 1.0 if due else credit[q.name]
            else:
                credit[q.name] += q.priority / top
        self._credit = credit
        return chosen


class AgedPriority(ReducedLottery):
    """`aged-priority`: the queue whose next task has waited longest, each queue's wait
    weighted down by how far its priority is below the top's; it needs the queues' ages,
    which `WorkerLoop` and the simulator supply (one peek per queue with work).

    Among the queues with work, with top the highest of their priorities, a queue's score is
    the age of its next task times exp(-AGE_KAPPA * (top / priority - 1)): 1 for the top
    queue, 0.55 for a priority-40 queue beside a 100 (it is served once its next task is
    1.8 times as old as the top queue's), 5e-4 for a priority 5 (a backlog half an hour old
    counts as a second). The highest score is served (ties: the higher priority, then the
    configured order). A lower queue is served when its tasks have waited long enough for
    their priority, not at random, so its worst wait stays short, and the top queue is
    served whenever it is the most behind.

    With no queue with work it draws a queue to wait on. A worker whose previous selection
    found work draws with priority ** IDLE_EXPONENT tickets (priority squared: mostly the
    top queue, whose next task most likely matters while the fleet is busy). One whose
    previous selection found nothing waiting either (since then it has waited, and run only
    what its wait brought in) draws with priority ** QUIET_EXPONENT tickets (Reduced
    Lottery's): the fleet is keeping up, and the lower queues need workers waiting on them
    too. Without ages (`select`, or an engine that cannot peek) it is Reduced Lottery. Each
    worker keeps its own state; docs/simulate.md has the simulated comparison.
    """

    AGE_KAPPA: Final = 0.4
    IDLE_EXPONENT: Final = 2.0
    QUIET_EXPONENT: Final = 1.0

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        self._waited = False  # whether the last selection found no work anywhere

    def select_by_age(self, queues: Sequence[Q], ready: Ready, ages: Ages) -> Q:
        """Return the queue to pop next; `ages()` gives each queue's next task's age (s)."""
        self._check_given(queues)
        self._check_priorities(queues)
        with_work = _with_work(queues, ready)
        if not with_work:
            exponent = self.QUIET_EXPONENT if self._waited else self.IDLE_EXPONENT
            self._waited = True
            return self._draw(queues, exponent)
        self._waited = False
        known = ages()
        aged = [q for q in with_work if q.name in known]
        if not aged:
            return self._draw(with_work)
        top = _highest(aged).priority
        kappa = self.AGE_KAPPA
        return max(
            aged,
            key=lambda q: (known[q.name] * math.exp(-kappa * (top / q.priority - 1)), q.priority),
        )


DEFAULT_SELECTOR: Final = "reduced-lottery"

SELECTORS: Final[Mapping[str, SelectorFactory]] = MappingProxyType(
    {
        "reduced-lottery": ReducedLottery,
        "lottery": Lottery,
        "highest-priority-first": HighestPriorityFirst,
        "highest-priority-lottery": HighestPriorityLottery,
        "lottery-lottery": LotteryLottery,
        "random": UniformRandom,
        "ordered": Ordered,
        "round-robin": RoundRobin,
        "deficit-priority": DeficitPriority,
        "aged-priority": AgedPriority,
    }
)


def resolve_selector(spec: str, *, rng: random.Random | None = None) -> QueueSelector:
    """Return a new selector for `spec`: a name in `SELECTORS`, one of Kale's class paths, or
    `package.module.ClassName` (instantiated with no arguments; `rng` is then not used)."""
    if not isinstance(spec, str):
        raise MalformedArgument(f"queue selector must be a str, not {type(spec).__name__}")
    name = kale.SELECTOR_PATHS.get(spec, spec)
    if name in SELECTORS:
        return SELECTORS[name](rng)
    module_name, _, attr = name.rpartition(".")
    if not module_name or not all(part.isidentifier() for part in name.split(".")):
        raise _bad_spec(spec, "is not a known selector")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _bad_spec(spec, f"cannot be imported ({exc})") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise _bad_spec(spec, f"names nothing callable in module {module_name!r}")
    try:
        selector: QueueSelector = factory()
    except TypeError as exc:
        raise _bad_spec(spec, f"cannot be created with no arguments ({exc})") from exc
    if not callable(getattr(selector, "select", None)):
        raise _bad_spec(spec, "has no select(queues, ready) method")
    return selector


def _bad_spec(spec: object, problem: str) -> MalformedArgument:
    return MalformedArgument(
        f"queue selector {spec!r} {problem}; use one of {', '.join(SELECTORS)}, "
        "or a dotted path package.module.ClassName to a class with a select(queues, ready) method"
    )
