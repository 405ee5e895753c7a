"""The docs are a contract: every Python block of README.md and docs/ runs, as written.

The blocks of one page run in order in one namespace (a page's examples build on each
other), in a fresh folder, so relative `sqlite:///jobs.db` URLs make a temporary database.
A page that names a Redis URL on the default port runs against the test session's
redis-server instead (its database emptied first); one that names an sqs:// URL runs
against the session's SQS server (moto's), on a queue prefix of its own. Examples use
only the public API: `import lanner` / `from lanner import ...` (and Kale's `lanner.task`,
`lanner.exceptions`, `lanner.worker`, `lanner.test_utils`, the simulator's
`lanner.simulate`, the Kestrel server's `lanner.kestrel`, the dashboard's `lanner.web`,
the Prometheus metrics' `lanner.metrics`, the test helpers' `lanner.testing`, and the
integrations' `lanner.contrib.otel` and `lanner.contrib.sentry`).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lanner
from stores import fresh_redis

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```$", re.DOTALL | re.MULTILINE)
_DEFAULT_REDIS = re.compile(r"redis://(?:localhost|127\.0\.0\.1)(?::6379)?(?:/\d+)?")
_SQS = re.compile(r"sqs://[a-z0-9-]*(?:\?[^\s\"']*)?")
# Public modules besides `lanner` itself: Kale's paths, the simulator's, the Kestrel server's,
# the test helpers', the dashboard's, the metrics' and the integrations'.
_PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+lanner\."
    r"(?!task\b|exceptions\b|worker(?![\w.])|test_utils\b|simulate\b|kestrel(?![\w.])|testing\b"
    r"|web(?![\w.])|metrics(?![\w.])|contrib\.(?:otel|sentry)(?![\w.]))"
    r"[\w.]+",
    re.M,
)
_ENVIRONMENT = (
    "LANNER_BROKER",
    "LANNER_SETTINGS_MODULE",
    "LANNER_QUEUE_CONFIG",
    "KALE_SETTINGS_MODULE",
)


def blocks(page: Path) -> list[tuple[int, str]]:
    """The page's Python blocks (list items' too), each with the line its code starts on."""
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start(2)) + 1, textwrap.dedent(m.group(2)))
        for m in _BLOCK.finditer(text)
    ]


PAGES_WITH_CODE = [page for page in PAGES if blocks(page)]


def test_the_docs_have_examples_to_run() -> None:
    names = {page.relative_to(ROOT).as_posix() for page in PAGES_WITH_CODE}
    assert {
        "README.md",
        "docs/configuration.md",
        "docs/engines/redis.md",
        "docs/engines/sqs.md",
        "docs/events.md",
        "docs/integrations.md",
        "docs/kestrel.md",
        "docs/protocol.md",
        "docs/tasks.md",
        "docs/testing.md",
        "docs/worker.md",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_examples_use_only_the_public_api(page: Path) -> None:
    for line, code in blocks(page):
        found = _PRIVATE_IMPORT.search(code)
        assert found is None, f"{page.name}:{line}: {found[0].strip() if found else ''}"


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh working folder and no lanner configuration from the environment."""
    monkeypatch.chdir(tmp_path)
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    lanner.set_default_app(None)


@pytest.mark.parametrize(
    "page", PAGES_WITH_CODE, ids=lambda page: page.relative_to(ROOT).as_posix()
)
def test_every_example_runs(page: Path, scratch: Path, request: pytest.FixtureRequest) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_" + re.sub(r"\W", "_", page.stem.lower())}
    redis_url = sqs_url = None
    try:
        for line, code in blocks(page):
            if _DEFAULT_REDIS.search(code):
                redis_url = redis_url or fresh_redis(request)
                code = _DEFAULT_REDIS.sub(redis_url, code)
            if _SQS.search(code):
                sqs_url = sqs_url or str(request.getfixturevalue("sqs_fresh_url"))
                code = _SQS.sub(sqs_url, code)
            # Line numbers of the page, so that a failure points into the Markdown file.
            exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)
    finally:
        _close(namespace)


def _close(namespace: dict[str, Any]) -> None:
    """Close what the examples opened (apps and engines), as a program would at exit."""
    for value in namespace.values():
        if isinstance(value, lanner.App) or hasattr(value, "capabilities"):
            value.close()


def test_a_private_import_is_noticed() -> None:
    assert _PRIVATE_IMPORT.search("from lanner.worker.pool import WorkerPool")
    assert _PRIVATE_IMPORT.search("import lanner.engines.sqlite")
    assert not _PRIVATE_IMPORT.search("from lanner import task\nfrom lanner.simulate import x")
    assert not _PRIVATE_IMPORT.search("from lanner.worker import Worker")
    assert not _PRIVATE_IMPORT.search("from lanner.test_utils import MockTask")
    assert not _PRIVATE_IMPORT.search("from lanner.metrics import render")
    assert _PRIVATE_IMPORT.search("from lanner.metrics.pool import PoolMetrics")
    assert not _PRIVATE_IMPORT.search("import lanner.contrib.otel")
    assert _PRIVATE_IMPORT.search("from lanner.contrib.otel.x import y")
