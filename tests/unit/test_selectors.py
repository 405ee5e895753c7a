"""Queue selectors: exact sequences with seeded randomness, and shares checked statistically.

Statistical checks use a fixed seed, so they cannot flake; their tolerance is 5 binomial standard
deviations, wide enough for any seed (a 5-sigma miss has odds below 1 in a million) and narrow
enough that ignoring or misweighting priorities fails by dozens of sigmas.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import pytest

from lanner.errors import MalformedArgument
from lanner.selectors import (
    DEFAULT_SELECTOR,
    LOTTERY_LOTTERY_TRIES,
    SELECTORS,
    AgeAwareSelector,
    AgedPriority,
    Ages,
    DeficitPriority,
    HighestPriorityFirst,
    HighestPriorityLottery,
    Lottery,
    LotteryLottery,
    Ordered,
    QueueSelector,
    Ready,
    ReducedLottery,
    RoundRobin,
    UniformRandom,
    choose,
    resolve_selector,
)


@dataclass(frozen=True)
class Queue:
    name: str
    priority: int


HIGH, DEFAULT, LOW = Queue("high", 100), Queue("default", 40), Queue("low", 5)
QUEUES = (HIGH, DEFAULT, LOW)
N = 20_000
NAMES = frozenset(q.name for q in QUEUES)
NOTHING: frozenset[str] = frozenset()


def always(names: AbstractSet[str]) -> Ready:
    return lambda: names


def tally(selector: QueueSelector, ready: Ready, n: int = N) -> Counter[str]:
    return Counter(selector.select(QUEUES, ready).name for _ in range(n))


def assert_shares(counts: Counter[str], expected: Mapping[str, float]) -> None:
    """Each queue's count is within 5 binomial standard deviations of its expected share."""
    n = sum(counts.values())
    assert set(counts) <= set(expected)
    for name, p in expected.items():
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(counts[name] - n * p) <= 5 * sigma, (name, counts[name], n * p, sigma)


def by_tickets(*queues: Queue) -> dict[str, float]:
    total = sum(q.priority for q in queues)
    return {q.name: q.priority / total for q in queues}


def test_the_default_is_reduced_lottery() -> None:
    assert DEFAULT_SELECTOR == "reduced-lottery"
    assert isinstance(resolve_selector(DEFAULT_SELECTOR), ReducedLottery)


# Lotteries: shares follow tickets.


@pytest.mark.parametrize("factory", [Lottery, ReducedLottery])
def test_lotteries_pick_queues_in_proportion_to_priority(
    factory: Callable[[random.Random], QueueSelector],
) -> None:
    counts = tally(factory(random.Random(1)), always(NAMES))
    assert_shares(counts, by_tickets(*QUEUES))
    # Sanity of the tolerance: ignoring priorities (1/3 each) would be far outside it.
    assert counts["low"] < N / 10


@pytest.mark.parametrize("factory", [Lottery, ReducedLottery])
def test_lotteries_do_not_starve_the_lowest_priority(
    factory: Callable[[random.Random], QueueSelector],
) -> None:
    # low wins with p = 5/145; a run of 500 losses has p = (140/145)^500 ≈ 2e-8 per start.
    selector = factory(random.Random(2))
    gap = longest = 0
    for _ in range(N):
        gap = 0 if selector.select(QUEUES, always(NAMES)) is LOW else gap + 1
        longest = max(longest, gap)
    assert longest < 500


def test_lottery_ignores_emptiness() -> None:
    assert_shares(tally(Lottery(random.Random(3)), always({"low"})), by_tickets(*QUEUES))


def test_reduced_lottery_never_picks_an_empty_queue_while_some_queue_has_work() -> None:
    selector = ReducedLottery(random.Random(4))
    rng = random.Random(5)
    for _ in range(2_000):
        have = frozenset(q.name for q in QUEUES if rng.random() < 0.5) or {"low"}
        assert selector.select(QUEUES, always(have)).name in have


def test_reduced_lottery_among_queues_with_work_keeps_their_relative_odds() -> None:
    # Kale's drop-and-redraw loop: high is dropped, so default:low stays 40:5.
    counts = tally(ReducedLottery(random.Random(6)), always({"default", "low"}))
    assert_shares(counts, by_tickets(DEFAULT, LOW))


def test_reduced_lottery_with_no_work_anywhere_still_follows_priorities() -> None:
    assert_shares(tally(ReducedLottery(random.Random(7)), always(NOTHING)), by_tickets(*QUEUES))


def test_lottery_lottery_gives_up_after_ten_empty_draws() -> None:
    # Only low has work: it wins unless all 10 draws miss, and then the final draw decides.
    p_low = LOW.priority / 145
    miss_all = (1 - p_low) ** 10
    p = 1 - miss_all + miss_all * p_low  # ≈ 0.319; with 9 tries it would be ≈ 0.298
    rest = {name: miss_all * share for name, share in by_tickets(*QUEUES).items() if name != "low"}
    assert LOTTERY_LOTTERY_TRIES == 10
    assert_shares(tally(LotteryLottery(random.Random(8)), always({"low"})), {"low": p, **rest})


def test_lottery_lottery_with_work_everywhere_is_a_plain_lottery() -> None:
    assert_shares(tally(LotteryLottery(random.Random(9)), always(NAMES)), by_tickets(*QUEUES))


def test_random_is_uniform_whatever_the_priorities_and_work() -> None:
    counts = tally(UniformRandom(random.Random(10)), always({"low"}))
    assert_shares(counts, dict.fromkeys(NAMES, 1 / 3))


@pytest.mark.parametrize("factory", [Lottery, ReducedLottery, LotteryLottery])
def test_the_same_seed_gives_the_same_choices(
    factory: Callable[[random.Random], QueueSelector],
) -> None:
    def run(seed: int) -> list[str]:
        selector = factory(random.Random(seed))
        return [selector.select(QUEUES, always({"default", "low"})).name for _ in range(50)]

    assert run(11) == run(11)
    assert run(11) != run(12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_workers_do_not_draw_in_lockstep() -> None:
    queues = [Queue(f"q{i}", 1) for i in range(30)]
    selector = Lottery()  # the shared default source, reseeded in the child

    def draws() -> str:
        return ",".join(selector.select(queues, always(NOTHING)).name for _ in range(20))

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write_end, draws().encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    assert child.count(",") == 19
    assert draws() != child


# Deterministic selectors: exact sequences.


def pop_order(selector: QueueSelector, counts: dict[str, int], queues: Sequence[Queue]) -> str:
    """Pop one job per selection until every queue is empty; return the picks."""
    counts = dict(counts)
    picks = []
    while any(counts.values()):
        name = selector.select(queues, lambda: {n for n, c in counts.items() if c > 0}).name
        assert counts[name] > 0
        counts[name] -= 1
        picks.append(name)
    return ",".join(picks)


QLESS_QUEUES = (Queue("C", 1), Queue("B", 1), Queue("A", 1))
QLESS_COUNTS = {"A": 5, "B": 2, "C": 3}


def test_ordered_matches_the_qless_example() -> None:
    assert pop_order(Ordered(), QLESS_COUNTS, QLESS_QUEUES) == "C,C,C,B,B,A,A,A,A,A"


def test_round_robin_matches_the_qless_example() -> None:
    assert pop_order(RoundRobin(), QLESS_COUNTS, QLESS_QUEUES) == "C,B,A,C,B,A,C,A,A,A"


def test_ordered_with_no_work_returns_the_first_queue() -> None:
    assert Ordered().select(QLESS_QUEUES, always(NOTHING)).name == "C"


def test_round_robin_with_no_work_keeps_rotating() -> None:
    selector = RoundRobin()
    picks = [selector.select(QLESS_QUEUES, always(NOTHING)).name for _ in range(4)]
    assert picks == ["C", "B", "A", "C"]


def test_round_robin_keeps_its_place_per_instance_and_survives_a_changed_queue_list() -> None:
    first, second = RoundRobin(), RoundRobin()
    assert first.select(QLESS_QUEUES, always({"A", "B", "C"})).name == "C"
    assert first.select(QLESS_QUEUES, always({"A", "B", "C"})).name == "B"
    assert second.select(QLESS_QUEUES, always({"A", "B", "C"})).name == "C"
    # The last pick (B) was removed from the configuration: start again from the top.
    assert first.select([Queue("A", 1), Queue("C", 1)], always({"A", "C"})).name == "A"


def test_highest_priority_first_drains_queues_by_priority() -> None:
    queues = (LOW, HIGH, DEFAULT)  # configured order does not matter, priority does
    order = pop_order(HighestPriorityFirst(), {"high": 2, "default": 2, "low": 1}, queues)
    assert order == "high,high,default,default,low"
    assert HighestPriorityFirst().select(queues, always(NOTHING)) is HIGH


@pytest.mark.parametrize("factory", [HighestPriorityFirst, HighestPriorityLottery])
def test_ties_in_priority_keep_the_configured_order(
    factory: Callable[[random.Random], QueueSelector],
) -> None:
    queues = (Queue("x", 1), Queue("b", 7), Queue("a", 7), Queue("c", 7))
    selector = factory(random.Random(13))
    assert selector.select(queues, always({"x", "a", "c"})).name == "a"


def test_highest_priority_lottery_picks_the_highest_with_work() -> None:
    order = pop_order(HighestPriorityLottery(random.Random(14)), {"default": 2, "low": 1}, QUEUES)
    assert order == "default,default,low"


def test_highest_priority_lottery_with_no_work_runs_a_lottery() -> None:
    counts = tally(HighestPriorityLottery(random.Random(15)), always(NOTHING))
    assert_shares(counts, by_tickets(*QUEUES))


# Contract shared by every built-in.


@pytest.mark.parametrize("name", sorted(SELECTORS))
def test_every_selector_calls_ready_at_most_once_and_returns_a_given_queue(name: str) -> None:
    selector = resolve_selector(name, rng=random.Random(16))
    calls = 0

    def ready() -> AbstractSet[str]:
        nonlocal calls
        calls += 1
        return {"low"}

    for _ in range(200):
        calls = 0
        chosen = selector.select(QUEUES, ready)
        assert calls <= 1
        assert any(chosen is q for q in QUEUES)


@pytest.mark.parametrize("name", ["lottery", "random"])
def test_selectors_that_ignore_work_never_ask_for_it(name: str) -> None:
    def ready() -> AbstractSet[str]:
        raise AssertionError("ready() must not be called")

    resolve_selector(name).select(QUEUES, ready)


@pytest.mark.parametrize("name", sorted(SELECTORS))
def test_no_queues_is_a_clear_error(name: str) -> None:
    with pytest.raises(MalformedArgument, match="at least one queue"):
        resolve_selector(name).select([], always(NOTHING))


@pytest.mark.parametrize("name", ["lottery", "reduced-lottery", "lottery-lottery"])
def test_lotteries_reject_priorities_below_one(name: str) -> None:
    with pytest.raises(MalformedArgument, match=r"'zero' has priority 0"):
        resolve_selector(name).select([HIGH, Queue("zero", 0)], always(NOTHING))


# resolve_selector.


class FirstQueue:
    """A user-defined selector, resolved by its dotted path."""

    def select(self, queues: Sequence[Queue], ready: Ready) -> Queue:
        return queues[0]


class NoSelect:
    pass


class NeedsArguments:
    def __init__(self, queue_info: object) -> None:
        self.queue_info = queue_info

    def select(self, queues: Sequence[Queue], ready: Ready) -> Queue:
        return queues[0]


EXPECTED_CLASSES = {
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


def test_the_registry_lists_every_built_in() -> None:
    assert dict(SELECTORS) == EXPECTED_CLASSES


@pytest.mark.parametrize(("name", "cls"), sorted(EXPECTED_CLASSES.items()))
def test_resolve_by_name_gives_a_fresh_instance(name: str, cls: type[object]) -> None:
    selector = resolve_selector(name)
    assert type(selector) is cls
    assert resolve_selector(name) is not selector


@pytest.mark.parametrize(
    ("kale", "cls"),
    [
        ("ReducedLottery", ReducedLottery),
        ("Lottery", Lottery),
        ("HighestPriorityFirst", HighestPriorityFirst),
        ("HighestPriorityLottery", HighestPriorityLottery),
        ("LotteryLottery", LotteryLottery),
        ("Random", UniformRandom),
    ],
)
def test_kale_class_paths_resolve_to_the_built_ins(kale: str, cls: type[object]) -> None:
    assert type(resolve_selector(f"kale.queue_selector.{kale}")) is cls


def test_resolve_passes_the_rng_to_built_ins() -> None:
    def run() -> list[str]:
        selector = resolve_selector("lottery", rng=random.Random(17))
        return [selector.select(QUEUES, always(NAMES)).name for _ in range(50)]

    assert run() == run()


def test_resolve_by_dotted_path() -> None:
    selector = resolve_selector(f"{__name__}.FirstQueue")
    assert isinstance(selector, FirstQueue)
    assert selector.select(QUEUES, always(NOTHING)) is HIGH


def test_resolve_by_dotted_path_to_a_built_in_class() -> None:
    assert type(resolve_selector("lanner.selectors.RoundRobin")) is RoundRobin


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nope", "is not a known selector"),
        ("", "is not a known selector"),
        ("Lottery", "is not a known selector"),
        (".relative.Thing", "is not a known selector"),
        ("a..b.Thing", "is not a known selector"),
        ("no_such_package_xyz.Selector", "cannot be imported"),
        ("kale.queue_selector.Custom", "cannot be imported"),
        ("lanner.selectors.NoSuchClass", "names nothing callable"),
        ("lanner.selectors.DEFAULT_SELECTOR", "names nothing callable"),
        (f"{__name__}.NoSelect", "has no select"),
        (f"{__name__}.NeedsArguments", "cannot be created with no arguments"),
    ],
)
def test_bad_specs_name_the_spec_and_the_known_selectors(spec: str, problem: str) -> None:
    with pytest.raises(MalformedArgument) as caught:
        resolve_selector(spec)
    message = str(caught.value)
    assert f"{spec!r} {problem}" in message
    assert all(name in message for name in SELECTORS)


def test_bad_spec_is_also_a_value_error() -> None:
    with pytest.raises(ValueError, match="round-robin"):
        resolve_selector("nope")


def test_a_non_str_spec_is_rejected() -> None:
    with pytest.raises(MalformedArgument, match="must be a str"):
        resolve_selector(42)  # type: ignore[arg-type]


# -- deficit-priority ---------------------------------------------------------------------


def picks(selector: QueueSelector, ready: Ready, n: int) -> str:
    """The first letters of `n` successive choices: 'hhhd...'."""
    return "".join(selector.select(QUEUES, ready).name[0] for _ in range(n))


def test_deficit_priority_is_registered_and_resolves_with_its_rng() -> None:
    assert SELECTORS["deficit-priority"] is DeficitPriority
    rng = random.Random(3)
    selector = resolve_selector("deficit-priority", rng=rng)
    assert type(selector) is DeficitPriority
    assert selector._rng is rng


def test_deficit_priority_takes_the_highest_queue_that_just_got_work() -> None:
    selector = DeficitPriority(random.Random(1))
    assert picks(selector, always({"low", "default"}), 1) == "d"
    assert picks(DeficitPriority(random.Random(1)), always(NAMES), 1) == "h"


def test_deficit_priority_gives_a_busy_queue_its_turns_in_a_fixed_order() -> None:
    # 100 and 40 always busy: 40 earns 0.4 of a turn per pass, so 2 turns in every 7.
    pattern = picks(DeficitPriority(random.Random(1)), always({"high", "default"}), 700)
    assert pattern[:14] == "hhhdhhdhhhdhhd"
    assert pattern.count("d") == 200
    assert "hhhh" not in pattern


def test_deficit_priority_shares_match_reduced_lottery_when_every_queue_is_busy() -> None:
    counts = Counter(picks(DeficitPriority(random.Random(1)), always(NAMES), 21_000))
    # Each lower queue's share while busy: its priority against the top's, as for a lottery
    # between the two (40:100 gives 2/7 of the turns; 5:100 gives 1/21).
    assert counts["d"] == pytest.approx(21_000 * 2 / 7, rel=0.02)
    assert counts["l"] == pytest.approx(21_000 / 21, rel=0.05)
    assert counts["h"] == 21_000 - counts["d"] - counts["l"]


def test_deficit_priority_forgets_the_credit_of_a_queue_that_ran_dry() -> None:
    selector = DeficitPriority(random.Random(1))
    both, high_only = always({"high", "default"}), always({"high"})
    assert picks(selector, both, 2) == "hh"  # default holds 0.8 of a turn
    assert picks(selector, high_only, 1) == "h"  # default had no work: its credit is gone
    assert picks(selector, both, 4) == "hhhd"  # so it waits three passes again


def test_deficit_priority_with_no_work_anywhere_draws_like_reduced_lottery() -> None:
    assert_shares(tally(DeficitPriority(random.Random(5)), always(NOTHING)), by_tickets(*QUEUES))


def test_deficit_priority_rejects_priorities_below_one() -> None:
    with pytest.raises(MalformedArgument, match=r"'zero' has priority 0"):
        DeficitPriority().select([HIGH, Queue("zero", 0)], always({"high", "zero"}))


def test_deficit_priority_keeps_credit_per_instance() -> None:
    first, second = DeficitPriority(random.Random(1)), DeficitPriority(random.Random(1))
    both = always({"high", "default"})
    assert picks(first, both, 3) == "hhh"
    assert picks(second, both, 1) == "h"
    assert picks(first, both, 1) == "d"


# -- aged-priority ------------------------------------------------------------------------


def aged(ages: Mapping[str, float]) -> tuple[Ready, Ages]:
    """`ready` and `ages` for queues whose next tasks have waited `ages` seconds."""
    return always(frozenset(ages)), lambda: ages


def by_age(selector: AgedPriority, ages: Mapping[str, float]) -> str:
    ready, ages_now = aged(ages)
    return selector.select_by_age(QUEUES, ready, ages_now).name


def test_aged_priority_is_registered_and_wants_ages() -> None:
    assert SELECTORS["aged-priority"] is AgedPriority
    rng = random.Random(3)
    selector = resolve_selector("aged-priority", rng=rng)
    assert type(selector) is AgedPriority
    assert selector._rng is rng
    assert isinstance(selector, AgeAwareSelector)
    assert not isinstance(ReducedLottery(), AgeAwareSelector)


def test_aged_priority_weighs_each_queues_age_by_its_priority_below_the_top() -> None:
    selector = AgedPriority(random.Random(1))
    # A priority-40 queue beside a 100 counts exp(-0.4 * 1.5) = 0.55 of its age.
    ratio = math.exp(AgedPriority.AGE_KAPPA * (100 / 40 - 1))
    assert 1.8 < ratio < 1.85
    assert by_age(selector, {"high": 1.0, "default": 1.8}) == "high"
    assert by_age(selector, {"high": 1.0, "default": 1.85}) == "default"
    # A priority 5 counts 5e-4 of its age: half an hour weighs as about a second of high's.
    assert by_age(selector, {"high": 1.0, "low": 1800.0}) == "high"
    assert by_age(selector, {"high": 0.8, "low": 1800.0}) == "low"
    assert by_age(selector, {"high": 0.0, "low": 3600.0}) == "low"


def test_aged_priority_weighs_against_the_top_queue_with_work() -> None:
    # Without high, default is the top: it counts its age in full against low's weighted one.
    selector = AgedPriority(random.Random(1))
    assert by_age(selector, {"default": 1.0, "low": 1.0}) == "default"
    ratio = math.exp(AgedPriority.AGE_KAPPA * (40 / 5 - 1))
    assert by_age(selector, {"default": 1.0, "low": ratio * 1.01}) == "low"


def test_aged_priority_breaks_ties_by_priority_then_order() -> None:
    selector = AgedPriority(random.Random(1))
    assert by_age(selector, {"high": 0.0, "default": 0.0, "low": 0.0}) == "high"
    twin = Queue("twin", 100)
    ready, ages = aged({"high": 2.0, "twin": 2.0})
    assert selector.select_by_age([twin, HIGH], ready, ages) is twin
    ready, ages = aged({"high": 2.0, "twin": 2.5})
    assert selector.select_by_age([HIGH, twin], ready, ages) is twin


def test_aged_priority_skips_queues_without_an_age() -> None:
    # ready() named default, but its peek found nothing: it is not chosen.
    selector = AgedPriority(random.Random(1))
    got = selector.select_by_age(QUEUES, always({"high", "default"}), lambda: {"high": 0.0})
    assert got is HIGH


def test_aged_priority_without_ages_is_reduced_lottery() -> None:
    # select() (no ages), and ages() that knows none (an engine that cannot peek).
    for ages in (None, dict):
        plain, lottery = AgedPriority(random.Random(4)), ReducedLottery(random.Random(4))
        for ready in (always(NAMES), always({"high", "low"}), always(NOTHING)):
            for _ in range(200):
                got = (
                    plain.select(QUEUES, ready)
                    if ages is None
                    else plain.select_by_age(QUEUES, ready, ages)
                )
                if ages is not None and not ready():
                    lottery._rng.random()  # the idle draws are not Reduced Lottery's
                    continue
                assert got is lottery.select(QUEUES, ready)


def test_aged_priority_with_no_work_waits_on_the_top_queue_after_work_else_spreads() -> None:
    selector = AgedPriority(random.Random(5))
    calls: list[int] = []

    def ages() -> Mapping[str, float]:
        calls.append(1)
        return {"high": 0.5}

    after_work: Counter[str] = Counter()
    after_a_wait: Counter[str] = Counter()
    for _ in range(N):
        selector.select_by_age(QUEUES, always({"high"}), ages)  # found work...
        after_work[selector.select_by_age(QUEUES, always(NOTHING), ages).name] += 1
        # ...then nothing, waited, and found nothing again: the fleet is keeping up.
        after_a_wait[selector.select_by_age(QUEUES, always(NOTHING), ages).name] += 1
    squared = sum(q.priority**2 for q in QUEUES)
    assert_shares(after_work, {q.name: q.priority**2 / squared for q in QUEUES})
    assert_shares(after_a_wait, by_tickets(*QUEUES))
    assert len(calls) == N  # ages are asked for only when some queue has work


def test_aged_priority_asks_for_ages_once_a_selection() -> None:
    selector = AgedPriority(random.Random(1))
    calls: list[int] = []

    def ages() -> Mapping[str, float]:
        calls.append(1)
        return {"high": 0.5, "low": 10.0}

    selector.select_by_age(QUEUES, always({"high", "low"}), ages)
    assert calls == [1]


def test_aged_priority_rejects_priorities_below_one() -> None:
    ready, ages = aged({"high": 1.0, "zero": 1.0})
    with pytest.raises(MalformedArgument, match=r"'zero' has priority 0"):
        AgedPriority().select_by_age([HIGH, Queue("zero", 0)], ready, ages)
    with pytest.raises(MalformedArgument, match="at least one queue"):
        AgedPriority().select_by_age([], ready, ages)


def test_choose_gives_ages_only_to_selectors_that_want_them() -> None:
    asked: list[int] = []

    def ages() -> Mapping[str, float]:
        asked.append(1)
        return {"default": 100.0, "high": 1.0}

    ready = always({"high", "default"})
    assert choose(HighestPriorityFirst(), QUEUES, ready, ages) is HIGH
    assert asked == []
    assert choose(AgedPriority(random.Random(1)), QUEUES, ready, ages) is DEFAULT
    assert asked == [1]
