"""How the store commands print: rich tables in one style, bare JSON, UTC times.

With `--json` a command prints one JSON document and nothing else on stdout
(`print_json`); times there are Unix seconds, in tables UTC (`utc`). Table cells and
messages are plain text, never rich markup, so names and messages print as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from rich import box
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text


def print_json(document: object) -> None:
    """One JSON document on stdout: not wrapped, not highlighted, nothing else."""
    Console().out(json.dumps(document, ensure_ascii=False), highlight=False)


def say(message: str) -> None:
    """A line of text, printed as is (no rich markup in names or messages)."""
    Console().print(Text(message))


def utc(when: float, suffix: str = "") -> str:
    """A Unix time as a UTC date and time (then `suffix`); one no date can show (past year
    9999: a store written before due dates were bounded may hold one) as it is."""
    try:
        return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S") + suffix
    except (OverflowError, ValueError, OSError):
        return repr(when)


def number(header: str) -> Column:
    return Column(header, justify="right", no_wrap=True)


def text(header: str, *, no_wrap: bool = False) -> Column:
    """A text column; `no_wrap` ones (jids, times) are never broken, so they stay copyable."""
    return Column(header, no_wrap=no_wrap, overflow="ellipsis" if no_wrap else "fold")


def table(
    columns: Sequence[Column],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    total: Sequence[object] | None = None,
    show_lines: bool = False,
) -> Table:
    """A table in the store commands' one style; cells are plain text, never markup."""
    result = Table(
        *columns,
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        header_style="bold",
        pad_edge=False,
        collapse_padding=True,
        show_lines=show_lines,
    )
    for row in rows:
        result.add_row(*cells(row))
    if total is not None:
        result.add_section()
        result.add_row(*cells(total), style="bold")
    return result


def cells(row: Sequence[object]) -> list[Text]:
    return [cell if isinstance(cell, Text) else Text(str(cell)) for cell in row]


def key_values(pairs: Iterable[tuple[str, object]]) -> Table:
    """Field names and values, two columns without a header."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in pairs:
        grid.add_row(key, Text(str(value)))
    return grid


def groups_table(groups: Mapping[str, int]) -> Table:
    """The failure groups and their job counts, by name, with a total: `status` and `failed`."""
    return table(
        [text("failure group"), number("jobs")],
        sorted(groups.items()),
        title="failed",
        total=["total", sum(groups.values())],
    )
