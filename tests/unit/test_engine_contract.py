"""`lanner.Engine` itself: what every engine gets from it before its hooks are called."""

from __future__ import annotations

from pathlib import Path

import pytest

import conformance.test_capabilities as capabilities_suite
import lanner
from lanner import Capability, NewJob, Unsupported
from lanner.engines.sqlite import SQLiteEngine


class CoreOnly(SQLiteEngine):
    """An engine that declares none of the optional capabilities."""

    capabilities = frozenset()


class Recorder(SQLiteEngine):
    """Remembers which hooks were called."""

    called: list[str]

    def _put(self, command: str, checked: object) -> list[str]:
        self.called.append(command)
        return super()._put(command, checked)  # type: ignore[arg-type]


def test_every_command_of_a_missing_capability_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    with CoreOnly(tmp_path / "jobs.db") as engine:
        capabilities_suite.test_every_missing_capability_raises_unsupported_and_changes_nothing(
            engine
        )


@pytest.mark.parametrize(
    ("option", "capability"),
    [
        ({"delay": 5}, Capability.DELAY),
        ({"priority": 1}, Capability.PRIORITY),
        ({"tags": ["t"]}, Capability.TAGS),
        ({"depends": ["a"]}, Capability.DEPENDENCIES),
    ],
)
def test_a_put_option_of_a_missing_capability_is_refused_in_put_many_too(
    tmp_path: Path, option: dict[str, object], capability: Capability
) -> None:
    with CoreOnly(tmp_path / "jobs.db") as engine:
        job = NewJob("q", "j", "Task", **option)  # type: ignore[arg-type]
        with pytest.raises(Unsupported, match=capability.value):
            engine.put_many([NewJob("q", "ok", "Task"), job], now=1.0)
        assert engine.queues(now=1.0) == []  # all or nothing


def test_an_empty_batch_is_answered_without_the_store(tmp_path: Path) -> None:
    with Recorder(tmp_path / "jobs.db") as engine:
        engine.called = []
        assert engine.put_many([]) == []
        assert engine.cancel([]) == []
        assert engine.complete_many([], "w", "q") == []
        assert engine.release([], "w", "q") == []
        assert engine.heartbeat_many([], "w") == {}
        assert engine.multiget([]) == []
        assert engine.jobs("waiting", "q", count=0) == []
        assert engine.called == []
        engine.put("q", "j", "Task")
        assert engine.called == ["put"]


def test_an_engine_must_implement_every_core_hook() -> None:
    class Half(lanner.Engine):
        name = "half"
        capabilities = frozenset()

    with pytest.raises(TypeError, match="abstract"):
        Half()  # type: ignore[abstract]
