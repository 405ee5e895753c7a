"""FLOW at publish: rate strings, keys made from a run's arguments, and what each style sets."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from lanner import Capability, Debounce, Flow, RateLimit
from lanner.app import App
from lanner.errors import ConfigError, InvalidName
from lanner.flow import FlowOptions, flow_of, parse_rate, unheld
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.task import Task


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    url = f"sqlite:///{tmp_path}/jobs.db"
    made = App(url, settings=Settings(broker=url), queues=[QueueConfig("api", rate_limit="5/s")])
    yield made
    made.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100/m", (100, 60.0)), ("5/10s", (5, 10.0)), ("1/d", (1, 86400.0)), (" 3 / h ", (3, 3600.0))],
)
def test_a_rate_is_runs_per_period(text: str, expected: tuple[int, float]) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["100", "100/w", "0/m", "10/2d", "fast", 100])
def test_a_malformed_or_unbounded_rate_is_refused_in_one_line(text: object) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_rate(text)
    assert "\n" not in str(raised.value)


def test_the_decorator_makes_keys_from_the_runs_arguments(app: App) -> None:
    @app.task(rate_limit="10/m", rate_key=lambda user, **_: f"user-{user}",
              concurrency_key=lambda user, **_: user, max_concurrency=2)  # fmt: skip
    def sync(user: int, full: bool = False) -> None: ...

    made = flow_of(sync.task_class, None, "default", None, (7,), {"full": True})
    assert made == Flow("7", 2, (RateLimit("user-7", 10, 60.0),))


def test_without_a_key_the_task_is_its_own_key(app: App) -> None:
    @app.task(rate_limit="2/s", max_concurrency=1)
    def job() -> None: ...

    made = flow_of(job.task_class, None, "default", None, (), {})
    assert made == Flow(job.name, 1, (RateLimit(job.name, 2, 1.0),))


def test_kale_class_attributes_and_a_queues_limit(app: App) -> None:
    class Export(Task):
        queue = "api"
        rate_limit = "1/s"
        rate_key = "partner-api"

    made = flow_of(Export, None, "api", "5/s", (), {})
    assert made == Flow(None, 0, (RateLimit("partner-api", 1, 1.0), RateLimit("queue:api", 5, 1.0)))


def test_options_override_the_tasks_flow_per_publish(app: App) -> None:
    @app.task(max_concurrency=1)
    def work(n: int) -> None: ...

    bound = work.options(concurrency_key="tenant-9", max_concurrency=3)
    message = bound.message(1)
    assert flow_of(work.task_class, message.options.flow, "default", None, (1,), {}) == Flow(
        "tenant-9", 3, ()
    )


def test_a_task_without_flow_publishes_none(app: App) -> None:
    @app.task
    def plain() -> None: ...

    assert flow_of(plain.task_class, None, "default", None, (), {}) is None


def test_bad_declarations_are_refused_when_declared(app: App) -> None:
    with pytest.raises(ConfigError, match="needs max_concurrency"):
        app.task(concurrency_key="k")
    with pytest.raises(ConfigError, match="max_concurrency"):
        FlowOptions(max_concurrency=0).check()
    with pytest.raises(ConfigError, match="rate_limit"):
        QueueConfig("q", rate_limit="often")


def test_a_key_that_is_no_label_is_refused_at_publish(app: App) -> None:
    @app.task(concurrency_key=lambda text: text, max_concurrency=1)
    def echo(text: str) -> None: ...

    with pytest.raises(InvalidName):
        echo.delay("line\nbreak")


def test_published_jobs_are_held_by_the_store(app: App) -> None:
    @app.task(queue="api", concurrency_key=lambda user: user, max_concurrency=1)
    def per_user(user: str) -> None: ...

    first, _, third = per_user.delay("u1"), per_user.delay("u1"), per_user.delay("u2")
    # The queue's rate limit hands each out alone; the key holds the second back.
    popped = [job.jid for _ in range(3) for job in app.engine.pop("api", "w", 10)]
    assert sorted(popped) == sorted([first, third])


SQS = frozenset({Capability.DELAY, Capability.BLOCKING_POP, Capability.FAIRNESS})
CLUSTER = frozenset(Capability) - {Capability.FLOW, Capability.FAIRNESS}
PER_SECOND = (RateLimit("b", 1, 1.0),)


@pytest.mark.parametrize(
    ("have", "flow", "debounce", "refused"),
    [
        (frozenset(Capability), Flow("k", 1, PER_SECOND, "t"), Debounce(5), None),
        (SQS, Flow(fair_key="t"), None, None),
        (SQS, Flow(rates=PER_SECOND, fair_key="t"), None, "rate_limit"),
        (SQS, Flow("k", 2), None, "max_concurrency"),
        (SQS, None, Debounce(5), "debounce"),
        (CLUSTER, Flow(fair_key="t"), None, "fair_key"),
        (CLUSTER, None, Debounce(5), "debounce"),
    ],
)
def test_what_an_engine_cannot_hold_is_named(
    have: frozenset[Capability], flow: Flow | None, debounce: Debounce | None, refused: str | None
) -> None:
    found = unheld(have, "app.task", "q", flow, debounce)
    assert (found and found[0]) == refused
