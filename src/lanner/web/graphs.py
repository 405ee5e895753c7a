"""A workflow's graph drawn as inline SVG on the server, as the charts are (`charts.py`).

One row per level (`lanner.workflows.graph`: a job sits one below the deepest job it
waits for), one box per job, linked to its page, with its number, task and state written
in it (readable without colour; the state also colours it), and a line from each parent
to the job waiting for it. The job whose page this is is outlined. A level with more jobs
than are shown ends with a box counting the rest.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

from markupsafe import Markup, escape

from lanner.workflows.graph import Node, Picture

BOX_WIDTH: Final = 150
BOX_HEIGHT: Final = 36
GAP_X: Final = 16
GAP_Y: Final = 34
PAD: Final = 8
TASK_CHARS: Final = 20  # a task's last dotted part, cut to fit its box


def workflow(shown: Picture, focus: str | None = None) -> Markup:
    """The picture of a workflow as an SVG element."""
    columns = max(
        [node.column + 1 for node in shown.nodes]
        + [sum(1 for n in shown.nodes if n.level == level) + (hidden > 0)
           for level, hidden in enumerate(shown.hidden)]
    )  # fmt: skip
    width = 2 * PAD + columns * BOX_WIDTH + (columns - 1) * GAP_X
    height = 2 * PAD + len(shown.hidden) * (BOX_HEIGHT + GAP_Y) - GAP_Y
    where = {node.jid: _corner(node.level, node.column) for node in shown.nodes}
    parts = [
        f'<svg class="workflow" role="img" width="{width}" viewBox="0 0 {width} {height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>workflow {escape(shown.workflow_id)}'
        "</title>"
    ]
    for node in shown.nodes:  # lines first: boxes are drawn over their ends
        x, y = where[node.jid]
        for parent in node.after:
            if parent in where:
                px, py = where[parent]
                parts.append(
                    f'<line class="edge" x1="{px + BOX_WIDTH / 2}" y1="{py + BOX_HEIGHT}" '
                    f'x2="{x + BOX_WIDTH / 2}" y2="{y}"/>'
                )
    parts.extend(_box(node, where[node.jid], node.jid == focus) for node in shown.nodes)
    for level, hidden in enumerate(shown.hidden):
        if hidden:
            column = sum(1 for node in shown.nodes if node.level == level)
            x, y = _corner(level, column)
            parts.append(
                f'<g class="more"><rect x="{x}" y="{y}" width="{BOX_WIDTH}" '
                f'height="{BOX_HEIGHT}" rx="4"/><text x="{x + 8}" y="{y + 22}">'
                f"+{hidden} more</text></g>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 (every text in it went through escape)


def _corner(level: int, column: int) -> tuple[int, int]:
    return PAD + column * (BOX_WIDTH + GAP_X), PAD + level * (BOX_HEIGHT + GAP_Y)


def _box(node: Node, corner: tuple[int, int], focus: bool) -> str:
    x, y = corner
    state = "gone" if node.state is None else node.state.value
    task = node.task.rpartition(".")[2] or node.task
    if len(task) > TASK_CHARS:
        task = task[: TASK_CHARS - 1] + "…"
    outline = " focus" if focus else ""
    return (
        f'<a href="/job?jid={quote(node.jid)}"><g class="node {state}{outline}" '
        f'data-jid="{escape(node.jid)}"><title>{escape(node.jid)}: {escape(node.task)}, '
        f"{state}</title>"
        f'<rect x="{x}" y="{y}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="4"/>'
        f'<text x="{x + 8}" y="{y + 15}">#{node.number} {escape(task)}</text>'
        f'<text class="state" x="{x + 8}" y="{y + 29}">{state}</text></g></a>'
    )
