"""Publishing: the App, the decorator style and the Kale style share one machinery."""

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lanner
from lanner.app import App, default_app, set_default_app
from lanner.errors import ArgumentError
from lanner.exceptions import ChubbyTaskException, InvalidTimeLimitTaskException
from lanner.queues import QueueConfig
from lanner.settings import Settings
from lanner.task import Task, find_task


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    url = f"sqlite:///{tmp_path}/jobs.db"
    made = App(url, settings=Settings(broker=url))
    yield made
    made.close()


def data_of(app: App, jid: str) -> object:
    job = app.engine.get(jid)
    assert job is not None
    return json.loads(job.data)


def test_decorated_function_still_runs_directly(app: App) -> None:
    @app.task(queue="emails")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    assert add.name == f"{__name__}.test_decorated_function_still_runs_directly.<locals>.add"


def test_delay_puts_a_job_with_the_task_defaults(app: App) -> None:
    @app.task(queue="emails", max_retries=7, priority=3)
    def send(to: str) -> None: ...

    jid = send.delay("a@example.com")

    job = app.engine.get(jid)
    assert job is not None
    assert (job.queue, job.klass, job.priority, job.retries) == ("emails", send.name, 3, 7)
    assert data_of(app, jid) == {"v": 1, "args": ["a@example.com"]}


def test_a_delay_past_ten_years_is_refused_and_nothing_is_published(app: App) -> None:
    @app.task(queue="emails")
    def send(to: str) -> None: ...

    with pytest.raises(lanner.TimeOutOfRange, match="delay must be at most 315576000 seconds"):
        send.options(delay=1e12).delay("x")
    assert isinstance(lanner.TimeOutOfRange("x"), lanner.MalformedArgument)
    assert app.engine.queue_counts("emails").scheduled == 0


def test_options_override_per_publish(app: App) -> None:
    @app.task(queue="emails")
    def send(to: str) -> None: ...

    first = send.delay("x")
    jid = send.options(
        queue="urgent", delay=30, priority=9, tags=["welcome"], depends=[first], jid="fixed"
    ).delay(to="y")

    job = app.engine.get("fixed")
    assert jid == "fixed"
    assert job is not None
    assert (job.queue, job.priority, job.tags, job.state) == ("urgent", 9, ("welcome",), "depends")
    assert job.dependencies == (first,)


def test_publish_many_is_one_call_for_many_tasks(app: App) -> None:
    @app.task(queue="a")
    def one(n: int) -> None: ...

    @app.task(queue="b")
    def two(n: int) -> None: ...

    jids = app.publish_many([one.message(1), two.message(2), one.options(priority=5).message(3)])

    assert len(jids) == 3
    assert [app.engine.queue_counts(q).waiting for q in ("a", "b")] == [2, 1]


def test_non_json_argument_fails_at_publish_naming_it(app: App) -> None:
    @app.task
    def keep(thing: object) -> None: ...

    with pytest.raises(ArgumentError, match="argument 0 \\(object\\)"):
        keep.delay(object())
    assert app.engine.queues() == []


def test_oversized_payload_fails_at_publish(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/small.db?max_data_bytes=100"
    app = App(url, settings=Settings(broker=url))

    @app.task
    def take(blob: str) -> None: ...

    with pytest.raises(ChubbyTaskException, match="at most 100"):
        take.delay("x" * 200)
    assert app.engine.queues() == []


def test_time_limit_must_fit_the_queue_visibility_timeout(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    queue = QueueConfig("short", priority=1, visibility_timeout_sec=10)
    app = App(url, settings=Settings(broker=url), queues=[queue])

    @app.task(queue="short", time_limit=10)
    def slow() -> None: ...

    with pytest.raises(InvalidTimeLimitTaskException, match="visibility_timeout_sec"):
        slow.delay()


def test_decorator_tasks_have_no_time_limit_unless_asked_and_four_retries(
    tmp_path: Path,
) -> None:
    """docs/tasks.md's table of defaults; Kale-style classes keep Kale's."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    short = QueueConfig("short", priority=1, visibility_timeout_sec=30)
    app = App(url, settings=Settings(broker=url), queues=[short])

    @app.task(queue="short")
    def plain() -> None: ...

    @app.task(queue="short", time_limit=5, max_retries=0)
    def limited() -> None: ...

    runs = plain.task_class
    assert (runs.time_limit, runs.target_runtime, runs.max_retries) == (None, None, 4)
    runs = limited.task_class
    assert (runs.time_limit, runs.target_runtime, runs.max_retries) == (5, 5, 0)
    assert (Task.time_limit, Task.target_runtime, Task.max_retries) == (60, 50, 4)
    # No limit to fit under the queue's 30 s lock: it publishes.
    job = app.handle(plain.delay()).job()
    assert job is not None
    assert job.retries == 4
    app.close()


def test_queue_retries_are_the_default_of_tasks_without_their_own(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    app = App(url, settings=Settings(broker=url), queues=[QueueConfig("q", retries=9)])

    class Inherits(Task):
        queue = "q"

    Inherits.app = app

    class Own(Task):
        queue = "q"
        max_retries = 2

    Own.app = app

    jobs = app.engine.multiget([Inherits.publish(None), Own.publish(None)])
    assert [job.retries for job in jobs] == [9, 2]


class KaleStyle(Task):
    queue = "kale"
    max_retries = 3

    def run_task(self, n: int, *args: object, **kwargs: object) -> None: ...


def test_kale_publish_returns_the_jid_and_carries_app_data(app: App) -> None:
    set_default_app(app)
    try:
        jid = KaleStyle.publish({"env": "test"}, 10, delay_sec=5)
    finally:
        set_default_app(None)
    job = app.engine.get(jid)
    assert job is not None
    assert (job.klass, job.state, job.retries) == (f"{__name__}.KaleStyle", "scheduled", 3)
    # As in Kale, delay_sec also reaches run_task's kwargs.
    assert data_of(app, jid) == {
        "v": 1, "args": [10], "kwargs": {"delay_sec": 5}, "app_data": {"env": "test"}
    }  # fmt: skip


def test_tasks_are_found_by_dotted_name() -> None:
    assert find_task(f"{__name__}.KaleStyle") is KaleStyle
    assert find_task("os.system") is None
    assert find_task("no such thing") is None


def test_find_task_imports_the_module_of_a_dotted_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lanner_test_tasks_mod.py").write_text(
        "from lanner.task import Task\n\nclass Remote(Task):\n    queue = 'q'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = find_task("lanner_test_tasks_mod.Remote")
    assert found is not None
    assert found.__name__ == "Remote"
    sys.modules.pop("lanner_test_tasks_mod", None)


def test_publish_by_unknown_name_is_a_clear_error(app: App) -> None:
    with pytest.raises(lanner.MalformedArgument, match=r"unknown task 'nope\.Nothing'"):
        app.publish("nope.Nothing")


def test_default_app_comes_from_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANNER_BROKER", f"sqlite:///{tmp_path}/env.db")
    set_default_app(None)
    try:
        assert default_app().settings.broker == f"sqlite:///{tmp_path}/env.db"
        assert default_app() is default_app()
    finally:
        set_default_app(None)


def test_nothing_connects_before_first_use(tmp_path: Path) -> None:
    App(f"sqlite:///{tmp_path}/lazy.db")
    assert not (tmp_path / "lazy.db").exists()


def test_an_app_with_the_signed_pickle_codec_also_reads_its_payloads(tmp_path: Path) -> None:
    key = b"0123456789abcdef-key"
    codec = lanner.SignedPickleCodec(key)
    signed = App("sqlite:///" + str(tmp_path / "jobs.db"), codec=codec)
    assert signed.codec is codec
    assert signed.pickle_codec is codec
    from_settings = App(settings=Settings(pickle_hmac_key=key))
    assert from_settings.codec.name == "json"  # publishing stays JSON
    assert from_settings.pickle_codec is not None  # workers may read pickle
    assert App(settings=Settings()).pickle_codec is None


def test_a_kale_class_publishes_through_the_app_its_module_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lanner_test_module_app.py").write_text(
        "from lanner import App, Task\n\n"
        f"app = App('sqlite:///{tmp_path}/module.db')\n\n"
        "class Report(Task):\n    queue = 'reports'\n\n    def run_task(self): ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    set_default_app(None)
    try:
        import importlib

        module: Any = importlib.import_module("lanner_test_module_app")

        jid = module.Report.publish(None)
        assert module.app.engine.get(jid) is not None
        assert not (tmp_path / "lanner.db").exists()
        assert module.app.served_queues() == (QueueConfig("default"), QueueConfig("reports"))
    finally:
        module.app.close()
        sys.modules.pop("lanner_test_module_app", None)


def test_served_queues_are_the_configured_ones_then_those_of_the_apps_tasks(
    tmp_path: Path,
) -> None:
    configured = QueueConfig("emails", priority=9)
    app = App(f"sqlite:///{tmp_path}/a.db", queues=[configured])
    other = App(f"sqlite:///{tmp_path}/b.db")

    @app.task(queue="emails")
    def send() -> None: ...

    @app.task(queue="thumbnails")
    def resize() -> None: ...

    @other.task(queue="elsewhere")
    def not_mine() -> None: ...

    assert app.served_queues() == (configured, QueueConfig("thumbnails"))


def test_use_broker_moves_the_app_and_its_tasks_to_another_store(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path}/a.db")

    @app.task(queue="thumbnails")
    def resize() -> None: ...

    first = resize.delay()
    old_engine = app.engine
    app.use_broker(f"sqlite:///{tmp_path}/b.db")
    try:
        assert app.settings.broker == f"sqlite:///{tmp_path}/b.db"
        assert app.served_queues() == (QueueConfig("default"), QueueConfig("thumbnails"))
        second = resize.delay()
        assert app.engine is not old_engine
        assert app.engine.get(second) is not None
        assert app.engine.get(first) is None  # that one is in a.db
    finally:
        app.close()


def test_publish_returns_a_handle_that_is_the_jid(app: App) -> None:
    @app.task
    def noop() -> None: ...

    handle = noop.options(jid="fixed-id").delay()
    assert isinstance(handle, lanner.JobHandle)
    assert handle == "fixed-id"
    assert json.dumps({"jid": handle}) == '{"jid": "fixed-id"}'
    assert handle.state() == lanner.JobState.WAITING
    assert app.handle("fixed-id").job() == handle.job()
    assert handle.cancel() is True
    assert handle.state() is None
    assert handle.cancel() is False
    with pytest.raises(lanner.JobNotFound):
        handle.result(timeout=0)


def test_a_handle_pickles_as_the_plain_jid(app: App) -> None:
    import pickle

    @app.task
    def noop() -> None: ...

    handle = noop.delay()
    copy = pickle.loads(pickle.dumps(handle))
    assert copy == handle
    assert type(copy) is str


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf")])
def test_a_result_wait_needs_a_sane_timeout(app: App, timeout: float) -> None:
    @app.task
    def noop() -> None: ...

    with pytest.raises(ValueError, match="timeout"):
        noop.delay().result(timeout=timeout)


def test_unique_publish_keeps_a_waiting_job_and_plain_publish_moves_it(app: App) -> None:
    @app.task
    def report(day: str) -> None: ...

    first = report.options(jid="daily", delay=60).delay("monday")
    report.options(jid="daily", unique=True).delay("tuesday")
    assert data_of(app, first) == {"v": 1, "args": ["monday"]}
    report.options(jid="daily").delay("wednesday")
    job = app.engine.get("daily")
    assert job is not None
    assert job.state == lanner.JobState.WAITING
    assert data_of(app, first) == {"v": 1, "args": ["wednesday"]}
