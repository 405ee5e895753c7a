"""Tests of `lanner.settings`: defaults, Kale settings modules, the environment, overrides."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lanner.errors import ConfigError
from lanner.queues import DEFAULT_QUEUES
from lanner.settings import Settings, load_settings

QUEUE_YAML = """\
high_priority: {name: high_priority, priority: 100, batch_size: 10,
                visibility_timeout_sec: 60, long_poll_time_sec: 1, num_iterations: 10}
low_priority: {name: low_priority, priority: 5, batch_size: 10,
               visibility_timeout_sec: 60, long_poll_time_sec: 5, num_iterations: 5}
"""

KEY = "0123456789abcdef0123"

WriteModule = Callable[[str], str]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Write a uniquely named, importable settings module into tmp_path/pkg; return its name."""
    package = tmp_path / "pkg"
    package.mkdir()
    monkeypatch.syspath_prepend(str(package))
    written: list[str] = []

    def write(source: str) -> str:
        name = f"settings_{uuid.uuid4().hex}"
        (package / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


# -- Settings ---------------------------------------------------------------------------------


def test_defaults() -> None:
    settings = Settings()
    assert settings.broker == "sqlite:///lanner.db"
    assert settings.queue_config is None
    assert settings.queue_selector == "reduced-lottery"
    assert settings.retry_delay_multiple_sec == 60
    assert settings.retry_delay_max_sec == 900
    assert settings.die_on_resident_set_size_mb is None
    assert settings.max_tasks_per_child is None
    assert settings.shutdown_timeout_sec == 30
    assert settings.time_limit_grace_sec == 5
    assert settings.pickle_hmac_key is None
    assert settings.imports == ()
    assert settings.on_worker_startup is None
    assert settings.on_worker_shutdown is None
    assert settings.queues() == DEFAULT_QUEUES


def test_load_settings_with_nothing_configured_gives_the_defaults() -> None:
    assert load_settings(environ={}) == Settings()


def test_settings_are_frozen_and_replace_revalidates() -> None:
    settings = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.broker = "x"  # type: ignore[misc]
    assert dataclasses.replace(settings, broker="redis://h").broker == "redis://h"
    with pytest.raises(ConfigError, match="broker must be a non-empty str"):
        dataclasses.replace(settings, broker="")


def test_retry_delay_follows_kales_schedule() -> None:
    settings = Settings()
    assert [settings.retry_delay(n) for n in range(7)] == [60, 120, 240, 480, 900, 900, 900]
    assert settings.retry_delay(5000) == 900


def test_retry_delay_with_other_settings() -> None:
    settings = Settings(retry_delay_multiple_sec=1.5, retry_delay_max_sec=10)
    assert [settings.retry_delay(n) for n in range(5)] == [1.5, 3, 6, 10, 10]
    assert Settings(retry_delay_multiple_sec=0).retry_delay(5000) == 0


@pytest.mark.parametrize("retry_number", [-1, True, 1.0])
def test_retry_delay_rejects_bad_retry_numbers(retry_number: int) -> None:
    with pytest.raises(ConfigError, match="retry_number must be an int >= 0"):
        Settings().retry_delay(retry_number)


def test_values_are_normalised() -> None:
    settings = Settings(
        retry_delay_multiple_sec=2,
        pickle_hmac_key=KEY,  # type: ignore[arg-type]
        imports=["app.tasks", "app.more_tasks"],  # type: ignore[arg-type]
        queue_selector="kale.queue_selector.HighestPriorityFirst",
        queue_config=Path("q.yaml"),  # type: ignore[arg-type]
    )
    assert type(settings.retry_delay_multiple_sec) is float
    assert settings.pickle_hmac_key == KEY.encode()
    assert settings.imports == ("app.tasks", "app.more_tasks")
    assert settings.queue_selector == "highest-priority-first"
    assert settings.queue_config == "q.yaml"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("broker", 5, "broker must be a non-empty str, not 5"),
        ("queue_config", "", "queue_config must be a non-empty str, not ''"),
        ("queue_selector", None, "queue_selector must be a non-empty str, not None"),
        ("retry_delay_multiple_sec", -1, "retry_delay_multiple_sec must be a finite number >= 0"),
        ("retry_delay_max_sec", float("inf"), "retry_delay_max_sec must be a finite number >= 0"),
        ("shutdown_timeout_sec", "30", "shutdown_timeout_sec must be a finite number >= 0"),
        ("time_limit_grace_sec", True, "time_limit_grace_sec must be a finite number >= 0"),
        ("die_on_resident_set_size_mb", 0, "die_on_resident_set_size_mb must be an int >= 1"),
        ("max_tasks_per_child", 2.5, "max_tasks_per_child must be an int >= 1 or None, not 2.5"),
        ("pickle_hmac_key", "short", "pickle_hmac_key must be at least 16 bytes long, not 5"),
        ("pickle_hmac_key", 12345, "pickle_hmac_key must be a str or bytes, not int"),
        ("imports", "app.tasks", "imports must be a list of module names, not str"),
        ("imports", ["app tasks"], "imports must hold dotted module names, not 'app tasks'"),
        ("on_worker_startup", "setup", "on_worker_startup must be a callable or None, not str"),
    ],
)
def test_invalid_values(field: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(**{field: value})  # type: ignore[arg-type]
    assert str(caught.value).startswith(expected)
    assert caught.value.field == field


def test_queues_reads_the_queue_config(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUE_YAML, encoding="utf-8")
    queues = Settings(queue_config=str(path)).queues()
    assert [(q.name, q.priority) for q in queues] == [("high_priority", 100), ("low_priority", 5)]


# -- a Kale settings module -------------------------------------------------------------------


def test_kale_settings_module_loads_and_kale_only_names_are_ignored(
    write_module: WriteModule, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "pkg" / "queue_config.yaml").write_text(QUEUE_YAML, encoding="utf-8")
    name = write_module(
        """
        import os

        QUEUE_CONFIG = 'queue_config.yaml'
        QUEUE_SELECTOR = 'kale.queue_selector.ReducedLottery'
        RETRY_DELAY_MULTIPLE_SEC = 30
        DIE_ON_RESIDENT_SET_SIZE_MB = 256
        AWS_REGION = 'us-east-1'
        AWS_ACCESS_KEY_ID = ''
        MESSAGE_QUEUE_ENDPOINT_URL = 'http://localhost:9324'
        SQS_TASK_SIZE_LIMIT = 256000
        COMPRESSOR = None
        ON_WORKER_STARTUP = lambda: None
        _HELPER_CONSTANT = 3
        lowercase_helper = 'ignored'
        """
    )
    with caplog.at_level(logging.WARNING, logger="lanner.settings"):
        settings = load_settings(module=name, environ={})
    assert settings.queue_config == str(tmp_path / "pkg" / "queue_config.yaml")
    assert settings.queue_selector == "reduced-lottery"
    assert settings.retry_delay_multiple_sec == 30
    assert settings.die_on_resident_set_size_mb == 256
    assert callable(settings.on_worker_startup)
    assert [settings.retry_delay(n) for n in range(6)] == [30, 60, 120, 240, 480, 900]
    assert [q.name for q in settings.queues()] == ["high_priority", "low_priority"]
    warnings = [r for r in caplog.records if r.name == "lanner.settings"]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert warnings[0].getMessage() == (
        f"{name}: ignoring Kale settings that lanner does not use: AWS_ACCESS_KEY_ID, "
        "AWS_REGION, COMPRESSOR, MESSAGE_QUEUE_ENDPOINT_URL, SQS_TASK_SIZE_LIMIT"
    )


def test_module_with_only_lanner_names_logs_nothing(
    write_module: WriteModule, caplog: pytest.LogCaptureFixture
) -> None:
    name = write_module("BROKER_URL = 'sqlite:///x.db'\nMAX_TASKS_PER_CHILD = 100\n")
    with caplog.at_level(logging.DEBUG, logger="lanner.settings"):
        settings = load_settings(module=name, environ={})
    assert (settings.broker, settings.max_tasks_per_child) == ("sqlite:///x.db", 100)
    assert not caplog.records


def test_all_module_names(write_module: WriteModule) -> None:
    def startup() -> None:
        pass

    name = write_module(
        f"""
        from pathlib import Path

        BROKER_URL = 'redis://localhost/0'
        QUEUE_CONFIG = Path('/etc/lanner/queues.yaml')
        QUEUE_SELECTOR = 'lottery'
        RETRY_DELAY_MULTIPLE_SEC = 1.5
        RETRY_DELAY_MAX_SEC = 100
        DIE_ON_RESIDENT_SET_SIZE_MB = 512
        MAX_TASKS_PER_CHILD = 1000
        SHUTDOWN_TIMEOUT_SEC = 10
        TIME_LIMIT_GRACE_SEC = 2
        PICKLE_HMAC_KEY = b'{KEY}'
        IMPORTS = ['app.tasks']
        ON_WORKER_STARTUP = print
        ON_WORKER_SHUTDOWN = None
        """
    )
    assert load_settings(module=name, environ={}) == Settings(
        broker="redis://localhost/0",
        queue_config="/etc/lanner/queues.yaml",
        queue_selector="lottery",
        retry_delay_multiple_sec=1.5,
        retry_delay_max_sec=100,
        die_on_resident_set_size_mb=512,
        max_tasks_per_child=1000,
        shutdown_timeout_sec=10,
        time_limit_grace_sec=2,
        pickle_hmac_key=KEY.encode(),
        imports=("app.tasks",),
        on_worker_startup=print,
        on_worker_shutdown=None,
    )


def test_kale_max_task_delay_is_an_alias(write_module: WriteModule) -> None:
    name = write_module("SQS_MAX_TASK_DELAY_SEC = 300\n")
    assert load_settings(module=name, environ={}).retry_delay_max_sec == 300
    both = write_module("SQS_MAX_TASK_DELAY_SEC = 300\nRETRY_DELAY_MAX_SEC = 300\n")
    with pytest.raises(ConfigError, match="not both"):
        load_settings(module=both, environ={})


def test_module_named_by_the_environment(
    write_module: WriteModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = write_module("BROKER_URL = 'sqlite:///from-module.db'\n")
    environ = {"LANNER_SETTINGS_MODULE": name}
    assert load_settings(environ=environ).broker == "sqlite:///from-module.db"
    monkeypatch.setenv("LANNER_SETTINGS_MODULE", name)
    monkeypatch.delenv("LANNER_BROKER", raising=False)
    assert load_settings().broker == "sqlite:///from-module.db"


def test_module_argument_wins_over_the_environment_variable(write_module: WriteModule) -> None:
    chosen = write_module("BROKER_URL = 'sqlite:///chosen.db'\n")
    environ = {"LANNER_SETTINGS_MODULE": "does_not_exist_anywhere"}
    assert load_settings(module=chosen, environ=environ).broker == "sqlite:///chosen.db"


def test_relative_queue_config_is_next_to_the_module(
    write_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    name = write_module("QUEUE_CONFIG = 'conf/queues.yaml'\n")
    settings = load_settings(module=name, environ={})
    assert settings.queue_config == str(tmp_path / "pkg" / "conf" / "queues.yaml")


def test_relative_queue_config_from_environment_or_override_is_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    from_env = load_settings(environ={"LANNER_QUEUE_CONFIG": "q.yaml"})
    assert from_env.queue_config == str(tmp_path / "q.yaml")
    assert load_settings(environ={}, queue_config="o.yaml").queue_config == str(tmp_path / "o.yaml")
    assert load_settings(environ={}, queue_config=None).queue_config is None


def test_kale_settings_module_is_read_when_lanner_names_none(
    write_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kale_style = write_module("BROKER_URL = 'sqlite:///kale.db'\nQUEUE_CONFIG = 'conf/q.yaml'\n")
    lanner_style = write_module("BROKER_URL = 'sqlite:///lanner.db'\n")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={"KALE_SETTINGS_MODULE": kale_style})
    assert settings.broker == "sqlite:///kale.db"
    # Kale opens QUEUE_CONFIG as given: relative to the working directory, not the module.
    assert settings.queue_config == str(tmp_path / "conf" / "q.yaml")
    both = {"KALE_SETTINGS_MODULE": kale_style, "LANNER_SETTINGS_MODULE": lanner_style}
    assert load_settings(environ=both).broker == "sqlite:///lanner.db"
    empty_lanner = {"KALE_SETTINGS_MODULE": kale_style, "LANNER_SETTINGS_MODULE": ""}
    assert load_settings(environ=empty_lanner).broker == "sqlite:///kale.db"
    # The module argument is lanner's: its relative QUEUE_CONFIG stays next to the module.
    chosen = load_settings(module=kale_style, environ={"KALE_SETTINGS_MODULE": lanner_style})
    assert chosen.queue_config == str(tmp_path / "pkg" / "conf" / "q.yaml")


def test_a_kale_settings_module_without_queue_config_has_kales_default_file(
    write_module: WriteModule, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = write_module("AWS_REGION = 'us-east-1'\n")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={"KALE_SETTINGS_MODULE": name})
    assert settings.queue_config == str(tmp_path / "queue_config.yaml")
    with pytest.raises(ConfigError, match=r"queue_config\.yaml: no such file"):
        settings.queues()
    (tmp_path / "queue_config.yaml").write_text(QUEUE_YAML, encoding="utf-8")
    assert [queue.name for queue in settings.queues()] == ["high_priority", "low_priority"]
    # LANNER_QUEUE_CONFIG still wins over the module's (default) file.
    overridden = load_settings(
        environ={"KALE_SETTINGS_MODULE": name, "LANNER_QUEUE_CONFIG": "other.yaml"}
    )
    assert overridden.queue_config == str(tmp_path / "other.yaml")


# -- layering ---------------------------------------------------------------------------------


def test_layers_module_then_environment_then_overrides(write_module: WriteModule) -> None:
    name = write_module(
        """
        BROKER_URL = 'sqlite:///module.db'
        QUEUE_SELECTOR = 'lottery'
        QUEUE_CONFIG = '/module/queues.yaml'
        SHUTDOWN_TIMEOUT_SEC = 11
        PICKLE_HMAC_KEY = 'module-key-0123456789'
        """
    )
    environ = {
        "LANNER_SETTINGS_MODULE": name,
        "LANNER_BROKER": "sqlite:///env.db",
        "LANNER_QUEUE_SELECTOR": "random",
        "LANNER_PICKLE_HMAC_KEY": "env-key-0123456789",
        "LANNER_QUEUE_CONFIG": "",  # empty: unset
    }
    settings = load_settings(environ=environ, broker="sqlite:///override.db")
    assert settings.broker == "sqlite:///override.db"  # override > environment > module
    assert settings.queue_selector == "random"  # environment > module
    assert settings.pickle_hmac_key == b"env-key-0123456789"
    assert settings.queue_config == "/module/queues.yaml"  # only the module set it
    assert settings.shutdown_timeout_sec == 11
    assert settings.time_limit_grace_sec == 5  # nobody set it: the default


def test_environment_over_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("LANNER_SETTINGS_MODULE", "LANNER_QUEUE_CONFIG", "LANNER_QUEUE_SELECTOR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LANNER_BROKER", "redis://env/1")
    monkeypatch.setenv("LANNER_PICKLE_HMAC_KEY", KEY)
    settings = load_settings()
    assert settings.broker == "redis://env/1"
    assert settings.pickle_hmac_key == KEY.encode()


def test_environment_values_are_checked() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"LANNER_PICKLE_HMAC_KEY": "tiny"})
    assert str(caught.value) == (
        "environment: LANNER_PICKLE_HMAC_KEY must be at least 16 bytes long, not 4"
    )
    assert "tiny" not in str(caught.value)


def test_override_names_and_values_are_checked() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={}, queue_selectr="random")
    assert str(caught.value) == (
        "load_settings(): unknown setting queue_selectr (did you mean queue_selector?)"
    )
    with pytest.raises(ConfigError, match=r"^load_settings\(\): max_tasks_per_child must be"):
        load_settings(environ={}, max_tasks_per_child=0)


# -- errors from settings modules -------------------------------------------------------------


def test_unknown_names_are_errors_with_suggestions(write_module: WriteModule) -> None:
    name = write_module("QUEUE_SELECTR = 'lottery'\nBASE_DIR = '/srv'\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(module=name, environ={})
    assert str(caught.value) == (
        f"{name}: unknown settings BASE_DIR, QUEUE_SELECTR (did you mean QUEUE_SELECTOR?): "
        "not a lanner or Kale setting (prefix helper names with '_' to keep them out of "
        "the settings)"
    )
    assert caught.value.source == name


def test_one_unknown_name(write_module: WriteModule) -> None:
    name = write_module("RETRY_DELAY_MULTIPLE = 3\n")
    with pytest.raises(
        ConfigError, match=r"unknown setting RETRY_DELAY_MULTIPLE \(did you mean RETRY_DELAY_"
    ) as caught:
        load_settings(module=name, environ={})
    assert caught.value.field == "RETRY_DELAY_MULTIPLE"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "RETRY_DELAY_MULTIPLE_SEC = '60'",
            "RETRY_DELAY_MULTIPLE_SEC must be a finite number >= 0",
        ),
        ("SQS_MAX_TASK_DELAY_SEC = -5", "SQS_MAX_TASK_DELAY_SEC must be a finite number >= 0"),
        ("DIE_ON_RESIDENT_SET_SIZE_MB = '256'", "DIE_ON_RESIDENT_SET_SIZE_MB must be an int >= 1"),
        ("QUEUE_CONFIG = 5", "QUEUE_CONFIG must be a non-empty str, not 5"),
        ("IMPORTS = 'app.tasks'", "IMPORTS must be a list of module names, not str"),
        ("ON_WORKER_SHUTDOWN = 'cleanup'", "ON_WORKER_SHUTDOWN must be a callable or None"),
    ],
)
def test_type_errors_name_the_setting_and_the_module(
    write_module: WriteModule, line: str, expected: str
) -> None:
    name = write_module(line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(module=name, environ={})
    assert str(caught.value).startswith(f"{name}: {expected}")
    assert caught.value.source == name


def test_missing_module_is_a_config_error_with_the_cause() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(module="no_such_settings_module_anywhere", environ={})
    assert str(caught.value).startswith(
        "no_such_settings_module_anywhere: cannot import the settings module: ModuleNotFoundError: "
    )
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_module_that_raises_on_import(write_module: WriteModule) -> None:
    name = write_module("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="cannot import the settings module: RuntimeError: boom"):
        load_settings(module=name, environ={})


def test_bad_queue_config_surfaces_from_queues(write_module: WriteModule, tmp_path: Path) -> None:
    (tmp_path / "pkg" / "bad.yaml").write_text("- {name: q, priority: 0}\n", encoding="utf-8")
    name = write_module("QUEUE_CONFIG = 'bad.yaml'\n")
    settings = load_settings(module=name, environ={})
    with pytest.raises(ConfigError, match=r"bad\.yaml: queue 'q': priority must be an int >= 1"):
        settings.queues()


def test_importing_lanner_does_not_import_the_settings_module() -> None:
    env = {**os.environ, "LANNER_SETTINGS_MODULE": "no_such_settings_module_anywhere"}
    code = "import lanner, lanner.settings, lanner.queues"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_settings_module_name_given_to_load_settings_suggests_the_field_name() -> None:
    with pytest.raises(ConfigError, match=r"did you mean retry_delay_multiple_sec\?"):
        load_settings(RETRY_DELAY_MULTIPLE_SEC=3)
