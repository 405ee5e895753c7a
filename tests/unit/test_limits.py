"""Every size and time a user gives has an upper bound (lanner.limits), refused with a
one-line error before anything starts: settings, queue config, the pool, `lanner serve`,
the command line's options. The bound itself is taken."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from lanner import App, ConfigError, QueueConfig, Settings, limits, load_queue_config
from lanner.cli import main

TOO_MANY = 10**12


# -- settings -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "bound"),
    [
        ("retry_delay_multiple_sec", limits.MAX_DELAY_SEC),
        ("retry_delay_max_sec", limits.MAX_DELAY_SEC),
        ("die_on_resident_set_size_mb", limits.MAX_MEMORY_MB),
        ("max_tasks_per_child", limits.MAX_TASKS_PER_CHILD),
        ("shutdown_timeout_sec", limits.MAX_SHUTDOWN_TIMEOUT_SEC),
        ("time_limit_grace_sec", limits.MAX_TIME_LIMIT_GRACE_SEC),
    ],
)
def test_a_setting_above_its_bound_is_refused(field: str, bound: float) -> None:
    assert getattr(Settings(**{field: int(bound)}), field) == bound  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        Settings(**{field: int(bound) + 1})  # type: ignore[arg-type]
    assert str(caught.value) == f"{field} must be at most {bound:.0f}, not {int(bound) + 1}"


# -- queue config -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "bound"),
    [
        ("priority", limits.MAX_QUEUE_PRIORITY),
        ("batch_size", limits.MAX_BATCH_SIZE),
        ("num_iterations", limits.MAX_NUM_ITERATIONS),
        ("visibility_timeout_sec", limits.MAX_LEASE_SEC),
        ("long_poll_time_sec", limits.MAX_LONG_POLL_SEC),
        ("max_concurrency", limits.MAX_INTEGER),
        ("retries", limits.MAX_INTEGER),
        ("max_items", limits.MAX_INTEGER),
        ("max_size", limits.MAX_INTEGER),
        ("max_item_size", limits.MAX_INTEGER),
        ("max_age", limits.MAX_DELAY_SEC),
    ],
)
def test_a_queue_field_above_its_bound_is_refused(field: str, bound: float) -> None:
    assert getattr(QueueConfig("q", **{field: int(bound)}), field) == bound  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        QueueConfig("q", **{field: int(bound) + 1})  # type: ignore[arg-type]
    assert (
        str(caught.value) == f"queue 'q': {field} must be at most {bound:.0f}, not {int(bound) + 1}"
    )


def test_a_queue_config_file_above_a_bound_says_where(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text("high:\n  name: high\n  priority: 10\n  batch_size: 100000\n")
    with pytest.raises(ConfigError) as caught:
        load_queue_config(path)
    assert str(caught.value) == f"{path}: queue 'high': batch_size must be at most 1000, not 100000"


# -- the pool and the server, from Python -------------------------------------------------
@pytest.fixture
def app(tmp_path: Path) -> App:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    return App(url, settings=Settings(broker=url))


def test_a_pool_of_more_processes_than_the_bound_is_refused(app: App) -> None:
    from lanner import WorkerPool

    assert WorkerPool(app, concurrency=limits.MAX_PROCESSES).concurrency == limits.MAX_PROCESSES
    with pytest.raises(ConfigError, match="concurrency must be from 1 to 256 worker processes, "
                                          "not 10000"):  # fmt: skip
        WorkerPool(app, concurrency=10_000)
    with pytest.raises(ConfigError, match="concurrency must be from 1 to 256"):
        WorkerPool(app, concurrency=0)


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ("max_tasks_per_child", "max_tasks_per_child"),
        ("max_memory_per_child_mb", "die_on_resident_set_size_mb"),
        ("shutdown_timeout", "shutdown_timeout_sec"),
        ("time_limit_grace", "time_limit_grace_sec"),
    ],
)
def test_a_pool_takes_its_sizes_as_settings_do(app: App, option: str, field: str) -> None:
    from lanner import WorkerPool

    with pytest.raises(ConfigError, match=f"{field} must be at most"):
        WorkerPool(app, **{option: TOO_MANY})  # type: ignore[arg-type]


def test_a_server_holding_too_many_open_items_per_client_is_refused(app: App) -> None:
    from lanner.kestrel import KestrelServer

    assert KestrelServer(app.engine, max_open_transactions=limits.MAX_OPEN_TRANSACTIONS)
    with pytest.raises(ConfigError, match="max_open_transactions must be an int from 1 to 1000"):
        KestrelServer(app.engine, max_open_transactions=TOO_MANY)
    assert KestrelServer(app.engine, max_connections=limits.MAX_CONNECTIONS)
    with pytest.raises(ConfigError, match="max_connections must be an int from 1 to 100000"):
        KestrelServer(app.engine, max_connections=limits.MAX_CONNECTIONS + 1)


# -- the command line ---------------------------------------------------------------------
def parse(*args: str) -> click.Context:
    """Read a command line as `lanner` does, without running the command."""
    command: click.Command = main
    words = list(args)
    name = "lanner"
    while isinstance(command, click.Group):
        name = words.pop(0)
        found = command.get_command(click.Context(command), name)
        assert found is not None, name
        command = found
    return command.make_context(name, words)


@pytest.mark.parametrize(
    "args",
    [
        ("worker", "-c", "10000"),
        ("worker", "-c", "257"),
        ("worker", "--max-tasks-per-child", str(TOO_MANY)),
        ("worker", "--max-memory-per-child", str(TOO_MANY)),
        ("worker", "--shutdown-timeout", "1e9"),
        ("demo", "-c", "10000"),
        ("serve", "--max-open-transactions", str(TOO_MANY)),
        ("serve", "--max-connections", str(limits.MAX_CONNECTIONS + 1)),
        ("serve", "--processes", "257"),
        ("chaos", "-c", "10000"),
        ("chaos", "--batch-size", "100000"),
        ("chaos", "-n", str(TOO_MANY)),
        ("bench", "pool", "-c", "10000"),
        ("bench", "engine", "--batch", "100000"),
        ("bench", "kestrel", "-n", str(limits.MAX_CONNECTIONS + 1)),
        ("simulate", "--jobs", "10000"),
    ],
    ids=" ".join,
)
def test_an_option_above_its_bound_is_a_one_line_error_of_status_1(args: tuple[str, ...]) -> None:
    with pytest.raises(click.ClickException) as caught:
        parse(*args)
    error = caught.value
    assert not isinstance(error, click.UsageError), "a usage error prints the usage, status 2"
    assert error.exit_code == 1
    message = error.format_message()
    assert "\n" not in message
    assert "is not in the range" in message


def test_an_option_at_its_bound_is_taken() -> None:
    assert parse("worker", "-c", str(limits.MAX_PROCESSES)).params["concurrency"] == 256
    assert parse("serve", "--max-open-transactions", "1000").params["max_open_transactions"] == 1000
