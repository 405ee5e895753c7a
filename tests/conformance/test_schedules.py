"""Schedules (`@app.periodic`): each tick is one job, however many pools put it.

The store keeps one job per jid, complete ones included (`if_exists="once"`), which is what
makes two pools fire a tick once; catch-up and removal are `lanner.schedules`' own, run
here against every engine that can hold schedules.
"""

from __future__ import annotations

import pytest

from lanner import Capability, Engine, NewJob, Unsupported
from lanner.app import App
from lanner.schedules import CONFIG_PREFIX, register, stored

from .helpers import T0, get, pop_jids

held = pytest.mark.requires(Capability.UNIQUE, Capability.DELAY, Capability.LOOKUP)

MINUTE = 60.0
START = 1_800_000_000.0  # a whole number of minutes


@held
@pytest.mark.driven_clock
def test_once_keeps_a_job_of_the_jid_in_any_state(engine: Engine) -> None:
    engine.put("q", "tick", "Task", if_exists="once", now=T0)
    assert pop_jids(engine, "q", now=T0) == ["tick"]
    engine.complete("tick", "w1", "q", now=T0)
    engine.put_many([NewJob("q", "tick", "Task", if_exists="once")], now=T0 + 1)
    engine.put("q", "tick", "Task", if_exists="once", now=T0 + 2)
    assert get(engine, "tick").state == "complete"
    assert pop_jids(engine, "q", now=T0 + 3) == []


def make_app(engine: Engine, catch_up: str = "once") -> App:
    app = App(engine)

    @app.periodic(every=MINUTE, args=("hello",), catch_up=catch_up)  # type: ignore[arg-type]
    @app.task(queue="cron", name="tasks.beep")
    def beep(word: str) -> None: ...

    return app


@pytest.fixture
def app(engine: Engine) -> App:
    return make_app(engine)


def popped_over(engine: Engine, start: float, minutes: int) -> list[str]:
    """Pop (and complete) everything due, minute by minute."""
    done = []
    for minute in range(minutes + 1):
        now = start + minute * MINUTE + 1
        for job in engine.pop("cron", "w1", 100, now=now):
            engine.complete(job.jid, "w1", "cron", now=now)
            done.append(job.jid)
    return done


@held
@pytest.mark.driven_clock
def test_two_pools_registering_fire_each_tick_once(engine: Engine, app: App) -> None:
    other = make_app(engine)
    register(app, engine, START)
    register(other, engine, START + 1)
    done = popped_over(engine, START, 0)
    done += popped_over(engine, START + MINUTE, 0)
    register(other, engine, START + MINUTE + 2)  # a pool put the next tick again
    done += popped_over(engine, START + 2 * MINUTE, 0)
    assert done == ["periodic-tasks.beep@1800000060", "periodic-tasks.beep@1800000120"]
    job = get(engine, done[0], now=START + 200)
    assert job.klass == "tasks.beep"


@held
@pytest.mark.driven_clock
def test_missed_ticks_run_once_by_default(engine: Engine, app: App) -> None:
    register(app, engine, START)
    register(app, engine, START + 30 * MINUTE + 5)  # everything was down half an hour
    done = popped_over(engine, START + 30 * MINUTE, 0)
    assert len(done) == 1


@held
@pytest.mark.driven_clock
@pytest.mark.parametrize(("catch_up", "runs"), [("skip", 0), ("all", 11)])
def test_the_catch_up_policy_is_chosen_per_schedule(
    engine: Engine, catch_up: str, runs: int
) -> None:
    app = make_app(engine, catch_up)
    register(app, engine, START)
    popped_over(engine, START, 1)  # tick 60 ran; 120 was put, and is overdue
    register(app, engine, START + 12 * MINUTE + 30)  # missed: 120 to 720
    assert len(popped_over(engine, START + 12 * MINUTE, 0)) == runs


@held
@pytest.mark.driven_clock
def test_a_schedule_gone_from_the_code_is_removed_at_the_next_start(
    engine: Engine, app: App
) -> None:
    if Capability.CONFIG not in engine.capabilities:
        pytest.skip("the engine keeps no config")
    register(app, engine, START)
    assert set(stored(engine)) == {"tasks.beep"}
    register(App(engine), engine, START + 5)
    assert stored(engine) == {}
    assert popped_over(engine, START, 3) == []
    assert not any(key.startswith(CONFIG_PREFIX) for key in engine.config_all())


def test_an_engine_that_cannot_hold_schedules_says_so(engine_url: str) -> None:
    import lanner

    with lanner.open_engine(engine_url) as opened:
        if Capability.UNIQUE in opened.capabilities:
            pytest.skip("the engine holds schedules")
        with pytest.raises(Unsupported):
            register(make_app(opened), opened, START)
