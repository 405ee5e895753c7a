"""The docs' map cannot go stale: every file or folder of this repository that README.md
or docs/ names (in backquotes) exists, so does every path from the repository's top that
their prose names (`tests/unit`, in backquotes or not), and every relative link of theirs
leads to a file.

A name matches when it is the end of a tracked path (`engines/sqlite/put.py`,
`put.py`, `tests/chaos/`), so the tables of docs/layout.md may name modules relative to
their section's folder. Paths in other projects' repositories are listed below with the
repository they belong to, and files of the reader's own project that a walkthrough has
them make.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_PATH = re.compile(
    r"`([A-Za-z0-9_.][A-Za-z0-9_./-]*(?:\.(?:py|lua|md|yaml|yml|sql|toml|cfg|ini|sh)|/))`"
)
# A path from the top of the repository, in prose: its first folder, and up to its last
# letter (a sentence's full stop is not part of it).
_FROM_TOP = re.compile(r"(?<![\w/.-])((?:src|tests|docs|scripts|examples)/[\w./-]*[\w/])")
_LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")  # [text](path#anchor); URLs have a ':'
# Named by the docs as another project's files, with the project they are in.
OTHER_PROJECTS = {
    "test/": "seomoz/qless-core",
    "kale/tests/test_task.py": "Nextdoor/ndkale",
    "example/": "Nextdoor/ndkale",
    "shop_site/settings.py": "the Django project docs/integrations.md starts",
}


def _tracked_paths() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    paths = {"/" + name for name in listed}
    for name in listed:
        for folder in PurePosixPath(name).parents:
            if str(folder) != ".":
                paths.add(f"/{folder}/")
    return paths


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_path_the_page_names_exists(page: Path) -> None:
    tracked = _tracked_paths()
    missing = [
        name
        for name in _PATH.findall(page.read_text())
        if name not in OTHER_PROJECTS
        and not any(path.endswith("/" + name.removeprefix("./")) for path in tracked)
    ]
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_path_from_the_top_exists(page: Path) -> None:
    tracked = _tracked_paths()
    missing = [
        name
        for name in _FROM_TOP.findall(page.read_text())
        if f"/{name}" not in tracked and f"/{name.rstrip('/')}/" not in tracked
    ]
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_of_the_page_leads_to_a_file(page: Path) -> None:
    broken = [link for link in _LINK.findall(page.read_text()) if not (page.parent / link).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to files that do not exist: {broken}"


def test_a_deleted_module_is_caught() -> None:
    tracked = _tracked_paths()
    assert not any(path.endswith("/worker/timelimit.py") for path in tracked)
    assert any(path.endswith("/worker/loop.py") for path in tracked)
    assert _FROM_TOP.findall("see tests/unit. and `docs/a.md`, not lanner/docs/x") == [
        "tests/unit",
        "docs/a.md",
    ]
    assert _LINK.findall("[a](docs/web.md) [b](tasks.md#hooks) [c](https://x.org/)") == [
        "docs/web.md",
        "tasks.md",
    ]
