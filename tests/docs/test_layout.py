"""docs/layout.md and src/lanner/ agree: every module a table row names exists, and every
module of the package is named by a row. And the house rules the map relies on: each
module opens with a docstring saying what it owns, and none is over 600 lines.

A row names modules relative to its section's folder (the folder in backquotes in the
sentence before the table, as in "`engines/sqlite/` mirrors the nouns", else
src/lanner/). Its first cell names modules (`app.py`) and folders (`web/`); its other
cells may name a folder's modules by their ends without `.py` (`address`,
`management/commands/lanner_worker`). A folder whose row says "its `__init__` maps the
modules" hands its modules to that `__init__`'s docstring, which must name each.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "lanner"
LAYOUT = ROOT / "docs" / "layout.md"
_QUOTED = re.compile(r"`([^`]+)`")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./]*")
_MAPS = "its `__init__` maps the modules"
# Modules no reader looks for in the map, with why.
UNLISTED = {
    "__main__.py": "`python -m lanner`, the command line's other door",
    "_version.py": "the version string, read by the build backend",
    "contrib/django/migrations/": "Django's migrations, named by Django's own rule",
}


@dataclass
class Row:
    folder: str  # the section's folder, relative to src/lanner/ ("" for the package)
    first: list[str]  # the first cell's names
    others: list[str] = field(default_factory=list)  # the other cells' names
    maps: bool = False  # "its `__init__` maps the modules"


def _rows() -> list[Row]:
    rows, folder = [], ""
    for line in LAYOUT.read_text().splitlines():
        if line.startswith("#"):
            folder = ""
        elif not line.startswith("|"):
            folders = [name for name in _QUOTED.findall(line) if name.endswith("/")]
            if folders:
                folder = folders[0]
        elif not line.startswith("|---"):
            first, *others = line.strip("|").split("|")
            names = [name.removeprefix("lanner/") for name in _QUOTED.findall(first)]
            rest = [n for cell in others for n in _QUOTED.findall(cell) if _NAME.fullmatch(n)]
            rows.append(Row(folder, names, rest, _MAPS in line))
    return rows


@functools.cache
def _modules() -> tuple[str, ...]:
    return tuple(sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")))


@functools.cache
def _docstring_names(init: Path) -> set[str]:
    return set(re.findall(r"\w+", ast.get_docstring(ast.parse(init.read_text())) or ""))


def _listed(module: str, rows: list[Row]) -> bool:
    if any(module == name or module.startswith(name) for name in UNLISTED):
        return True
    if module.endswith("__init__.py"):  # a package's map: listed with its package
        folder = module.removesuffix("__init__.py")
        return any(
            _listed(other, rows)
            for other in _modules()
            if other.startswith(folder) and other != module
        )
    stem = module.removesuffix(".py")
    for row in rows:
        if module in {row.folder + name for name in (*row.first, *row.others)}:
            return True
        for name in row.first:
            path = row.folder + name
            if not name.endswith("/") or not module.startswith(path):
                continue
            inner = stem.removeprefix(path)
            ends = {n.removesuffix(".py").removeprefix(name) for n in row.others}
            if any(inner == end or inner.endswith("/" + end) for end in ends):
                return True
            if row.maps and inner.split("/")[0] in _docstring_names(PACKAGE / path / "__init__.py"):
                return True
    return False


def test_every_module_a_row_names_exists() -> None:
    modules = set(_modules())
    missing = [
        row.folder + name
        for row in _rows()
        for name in row.first
        if (row.folder + name).endswith(".py")
        and row.folder + name not in modules
        and not (ROOT / name).exists()  # outside the package: scripts/, examples/, tests/
    ]
    assert not missing, f"docs/layout.md names modules that do not exist: {missing}"


def test_every_module_is_named_by_a_row() -> None:
    rows = _rows()
    missing = [module for module in _modules() if not _listed(module, rows)]
    assert not missing, f"docs/layout.md has no row naming: {missing}"


MAX_MODULE_LINES = 600  # the hard bound; docs/layout.md: "none is much over 500 lines"


def test_every_module_says_what_it_owns_and_stays_short() -> None:
    unsaid, long = [], []
    for module in _modules():
        text = (PACKAGE / module).read_text()
        if text.strip() and ast.get_docstring(ast.parse(text)) is None:
            unsaid.append(module)  # an empty __init__.py says nothing and needs not
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long.append(module)
    assert not unsaid, f"modules without a docstring: {unsaid}"
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_an_unlisted_module_is_caught() -> None:
    rows = _rows()
    assert _listed("engines/sqlite/put.py", rows)  # a section's folder, the first cell
    assert _listed("engines/redis/cluster/address.py", rows)  # a folder's row, another cell
    assert _listed("tools/bench/pickup.py", rows)  # named by tools/bench/__init__.py's docstring
    assert not _listed("engines/sqlite/nowhere.py", rows)
    assert not _listed(str(PurePosixPath("web", "nowhere.py")), rows)
