"""The simulator's event loop: exact waits in small hand-checked cases, then the properties
of bigger runs (determinism, conservation, load, windows, starvation, static assignment)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

import pytest

from lanner.queues import QueueConfig
from lanner.selectors import Ages, Ready, SelectableQueue
from lanner.simulate import Costs, Scenario, SimQueue, Window, simulate
from lanner.simulate import core as simulate_core
from lanner.simulate.arrivals import ArrivalSpec
from lanner.simulate.distributions import Exponential, Fixed
from lanner.simulate.runner import Job, run_jobs

COSTS = Costs(pop_sec=0.01, task_sec=0.0, wake_sec=0.002)


def queue(
    name: str,
    arrivals: ArrivalSpec,
    run: float = 1.0,
    *,
    priority: int = 1,
    batch: int = 1,
    iterations: int = 1,
    long_poll: float = 1.0,
) -> SimQueue:
    config = QueueConfig(name, priority=priority, batch_size=batch, num_iterations=iterations,
                         long_poll_time_sec=long_poll)  # fmt: skip
    return SimQueue(config, arrivals, Fixed(run))


def replay(*times: float) -> ArrivalSpec:
    return ArrivalSpec(replay=tuple(times))


def scenario(*queues: SimQueue, workers: int = 1, duration: float = 10.0, **kw: object) -> Scenario:
    options: dict[str, object] = {"costs": COSTS, **kw}
    return Scenario("test", tuple(queues), workers=workers, duration=duration, **options)  # type: ignore[arg-type]


# -- exact cases -----------------------------------------------------------------------------


def test_a_blocked_worker_is_woken_by_an_arrival_and_a_busy_one_makes_tasks_wait() -> None:
    # t=0: nothing to do, the worker long-polls. 0.5 arrives: woken 2 ms later, pops, runs
    # from 0.512 to 1.512. The task of 0.6 waits until then (0.912 s). At 2.522 it polls
    # again and the task of 3.0 wakes it (2 ms).
    result = simulate(scenario(queue("q", replay(0.5, 0.6, 3.0))), "reduced-lottery")
    wait = result.queue("q").wait
    assert wait.count == 3
    assert wait.max == pytest.approx(0.912)
    assert wait.p50 == pytest.approx(0.002)
    assert wait.mean == pytest.approx((0.002 + 0.912 + 0.002) / 3)
    assert result.tasks == 3


def test_a_round_pops_num_iterations_batches_then_selects_again() -> None:
    # Batches of 2 tasks of 0.5 s, 2 batches a round: at 0 two tasks (waits 0), at 1.01 two
    # more (1.01);
    # the round is over, and the selection at 2.02 takes the last one (2.02).
    q = queue("q", replay(0, 0, 0, 0, 0), run=0.5, batch=2, iterations=2)
    result = simulate(scenario(q), "reduced-lottery")
    wait = result.queue("q").wait
    assert wait.count == 5
    assert wait.max == pytest.approx(2.02)
    assert wait.mean == pytest.approx((0 + 0 + 1.01 + 1.01 + 2.02) / 5)


def test_a_queue_that_runs_dry_mid_round_ends_the_round_and_polls_expire_empty() -> None:
    # One task at 0 and one at 5.5: between them the worker's long polls (1 s) run out
    # empty, each followed by a pop's cost, until the second task wakes the last one.
    q = queue("q", replay(0, 5.5), iterations=3)
    result = simulate(scenario(q), "reduced-lottery")
    row = result.queue("q")
    assert row.wait.max == pytest.approx(0.002)
    # Free at 1.02 (the empty pop after the batch), then polls 1.02-2.02, 2.03-3.03, ...
    assert row.empty_polls == 4


def test_starvation_is_the_longest_a_queue_with_work_went_without_a_pop() -> None:
    # One worker that always prefers `high`: `low`'s task of 0 waits until high's ten
    # back-to-back tasks (each 1 s + 10 ms pop) are done.
    high = queue("high", replay(*[0.0] * 10), priority=10, batch=1, iterations=10)
    low = queue("low", replay(0.0), priority=1)
    result = simulate(scenario(high, low, duration=20), "highest-priority-first")
    assert result.queue("low").starvation == pytest.approx(10 * 1.01)
    assert result.queue("low").wait.max == pytest.approx(10 * 1.01)
    assert result.queue("high").starvation == pytest.approx(1.01)  # a pop every batch


def test_the_measured_window_counts_only_the_tasks_arriving_in_it() -> None:
    q = queue("q", replay(0.5, 1.5, 2.5, 3.5), run=0.1)
    result = simulate(scenario(q, window=Window(1.0, 3.0)), "reduced-lottery")
    assert result.queue("q").wait.count == 2
    assert result.tasks == 4
    assert result.window == Window(1.0, 3.0)
    assert result.queue("q").throughput == pytest.approx(2 / 2.0)


def test_the_static_baseline_pins_workers_to_queues() -> None:
    # Two workers pinned one to each queue: `a`'s burst of 4 is served by one worker only,
    # even though `b`'s worker has nothing to do.
    a = queue("a", replay(0, 0, 0, 0))
    b = queue("b", replay(0))
    pinned = simulate(scenario(a, b, workers=2), "static")
    assert pinned.queue("a").workers == 1
    assert pinned.queue("a").wait.max == pytest.approx(3 * 1.01)
    shared = simulate(scenario(a, b, workers=2), "reduced-lottery")
    assert shared.queue("a").wait.max < pinned.queue("a").wait.max
    assert shared.queue("a").workers is None


def test_a_drain_limit_leaves_tasks_unserved_and_counts_their_wait_so_far() -> None:
    q = queue("q", replay(*[0.0] * 5), run=10.0)
    result = simulate(scenario(q, duration=1.0, drain_limit=15.0), "reduced-lottery")
    row = result.queue("q")
    assert row.unserved >= 3
    assert row.wait.count == 5  # the unserved ones too, waiting until the end
    assert result.tasks == 5 - row.unserved


def test_the_selector_sees_the_queues_with_work_through_the_workers_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[AbstractSet[str]] = []

    class Recorder:
        def select(self, queues: Sequence[SelectableQueue], ready: Ready) -> SelectableQueue:
            names = ready()
            seen.append(names)
            return next((q for q in queues if q.name in names), queues[0])

    def fake_resolve(name: str, *, rng: random.Random | None = None) -> Recorder:
        return Recorder()

    monkeypatch.setattr(simulate_core, "resolve_selector", fake_resolve)
    a = queue("a", replay(0.0, 0.2), run=0.1, batch=1, iterations=1)
    b = queue("b", replay(0.05), run=0.1)
    simulate(scenario(a, b, ready_cache_sec=0.5), "recorder")
    # At 0 only `a` has work. At 0.11 the view of 0 is reused (cached for 0.5 s), though
    # `b` has had work since 0.05.
    assert seen[0] == {"a"}
    assert seen[1] == {"a"}


def test_a_selector_that_asks_is_given_each_queues_age_from_the_workers_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, float]] = []

    class AgeRecorder:
        def select(self, queues: Sequence[SelectableQueue], ready: Ready) -> SelectableQueue:
            raise AssertionError("a selector with select_by_age is asked with ages")

        def select_by_age(
            self, queues: Sequence[SelectableQueue], ready: Ready, ages: Ages
        ) -> SelectableQueue:
            known = dict(ages())
            seen.append(known)
            return max(queues, key=lambda q: known.get(q.name, -1.0))

    def fake_resolve(name: str, *, rng: random.Random | None = None) -> AgeRecorder:
        return AgeRecorder()

    monkeypatch.setattr(simulate_core, "resolve_selector", fake_resolve)
    a = queue("a", replay(0.0, 0.3), run=0.4, batch=1, iterations=1)
    b = queue("b", replay(0.1), run=0.1)
    simulate(scenario(a, b, ready_cache_sec=0.0), "recorder")
    # At 0: a's task has just come. At 0.41: a's second task has waited 0.11 s, b's 0.31 s;
    # the oldest is taken, then a's at 0.52 (0.22 s).
    assert seen[0] == {"a": 0.0}
    assert seen[1] == pytest.approx({"a": 0.41 - 0.3, "b": 0.41 - 0.1})
    assert seen[2] == pytest.approx({"a": 0.52 - 0.3})


def test_aged_priority_runs_in_the_simulator_on_the_same_arrivals() -> None:
    mix = poisson_mix(workers=3)
    aged = simulate(mix, "aged-priority")
    lottery = simulate(mix, "reduced-lottery")
    assert aged.policy == "aged-priority"
    assert sum(q.unserved for q in aged.queues) == 0
    assert [q.wait.count for q in aged.queues] == [q.wait.count for q in lottery.queues]
    assert aged.queues != lottery.queues
    assert aged.queue("high").wait.mean < aged.queue("low").wait.mean


# -- properties of bigger runs ---------------------------------------------------------------


def poisson_mix(seed: int = 3, workers: int = 4) -> Scenario:
    high = SimQueue(QueueConfig("high", priority=100, batch_size=5, num_iterations=4,
                                long_poll_time_sec=0.5),
                    ArrivalSpec(rates=(6.0,)), Exponential(0.2))  # fmt: skip
    low = SimQueue(QueueConfig("low", priority=5, batch_size=5, num_iterations=2,
                               long_poll_time_sec=2.0),
                   ArrivalSpec(rates=(1.0,)), Exponential(1.0))  # fmt: skip
    return Scenario("mix", (high, low), workers=workers, duration=600.0, seed=seed)


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    first = simulate(poisson_mix(), "reduced-lottery")
    again = simulate(poisson_mix(), "reduced-lottery")
    other = simulate(poisson_mix(seed=4), "reduced-lottery")
    assert first.queues == again.queues
    assert first.depth == again.depth
    assert first.queues != other.queues


def test_every_task_is_popped_and_the_workers_are_as_busy_as_the_load() -> None:
    mix = poisson_mix()
    result = simulate(mix, "reduced-lottery")
    assert sum(q.unserved for q in result.queues) == 0
    assert result.tasks == sum(q.wait.count for q in result.queues)
    # Offered: 6 × 0.2 + 1 × 1.0 = 2.2 busy workers of 4.
    assert mix.utilisation_offered() == pytest.approx(0.55)
    assert result.utilisation == pytest.approx(0.55, abs=0.05)
    assert result.queue("high").throughput == pytest.approx(6.0, rel=0.1)


def test_reduced_lottery_serves_the_high_queue_sooner_than_the_low_one() -> None:
    result = simulate(poisson_mix(workers=3), "reduced-lottery")
    assert result.queue("high").wait.mean < result.queue("low").wait.mean


def test_policies_share_their_arrivals_so_comparisons_are_paired() -> None:
    mix = poisson_mix()
    lottery = simulate(mix, "reduced-lottery")
    static = simulate(mix, "static")
    assert [q.wait.count for q in lottery.queues] == [q.wait.count for q in static.queues]


def test_depth_is_sampled_over_the_run() -> None:
    result = simulate(poisson_mix(), "reduced-lottery")
    assert len(result.depth.times) >= 700
    assert set(result.depth.depths) == {"high", "low"}
    assert max(result.depth.depths["high"]) > 0


def test_progress_is_reported_up_to_every_task() -> None:
    calls: list[tuple[int, int]] = []
    result = simulate(
        poisson_mix(), "reduced-lottery", lambda done, total: calls.append((done, total))
    )
    assert calls[-1] == (result.tasks, result.tasks)
    assert all(done <= result.tasks for done, _ in calls)


def test_runs_in_several_processes_give_the_same_results_as_here() -> None:
    jobs = [Job(poisson_mix(), "reduced-lottery"), Job(poisson_mix(), "static")]
    here = run_jobs(jobs, processes=1)
    apart = run_jobs(jobs, processes=2)
    assert [r.queues for r in here] == [r.queues for r in apart]
    assert [r.policy for r in apart] == ["reduced-lottery", "static"]


def test_costs_must_make_a_pop_take_time() -> None:
    slow = replace(poisson_mix(), costs=Costs(pop_sec=0.05))
    fast = simulate(poisson_mix(), "reduced-lottery")
    assert simulate(slow, "reduced-lottery").queue("high").wait.mean > fast.queue("high").wait.mean
