"""The ledger: what the workload's tasks wrote, read as it grows.

Tasks append one line per event, `<what> <jid> <pid> <unix time>`, with one `os.write` on
a file opened with O_APPEND, so lines from many processes never interleave. The kinds:

    start, end        a normal job began and finished its work
    pstart, pend      a poison job began, and (if it gets that far) left its task
    forked            the fork poison's forked copy, in that copy (pid is the copy's)

`Ledger.update()` reads only what was appended since the last call (a partial last line
waits for the next call), so the harness can follow a run of 100,000 jobs cheaply.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Line:
    what: str
    jid: str
    pid: int
    when: float


@dataclass
class Ledger:
    path: Path
    lines: list[Line] = field(default_factory=list)
    starts: dict[str, list[Line]] = field(default_factory=lambda: defaultdict(list))
    ended: set[str] = field(default_factory=set)
    forked_pids: set[int] = field(default_factory=set)
    # pid -> (what, jid) of its last start-like line without the matching end line
    current: dict[int, tuple[str, str]] = field(default_factory=dict)
    last: dict[int, Line] = field(default_factory=dict)  # pid -> its latest line
    malformed: int = 0
    _offset: int = 0
    _rest: bytes = b""

    def update(self) -> int:
        """Read what was appended; return how many new lines."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return 0
        try:
            os.lseek(fd, self._offset, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = self._rest + b"".join(chunks)
        self._offset += sum(len(chunk) for chunk in chunks)
        complete, _, self._rest = data.rpartition(b"\n")
        if not complete:
            self._rest = data
            return 0
        count = 0
        for raw in complete.split(b"\n"):
            line = _parse(raw)
            if line is None:
                self.malformed += 1
                continue
            self._add(line)
            count += 1
        return count

    def _add(self, line: Line) -> None:
        self.lines.append(line)
        self.last[line.pid] = line
        match line.what:
            case "start":
                self.starts[line.jid].append(line)
                self.current[line.pid] = ("start", line.jid)
            case "end":
                self.ended.add(line.jid)
                self.current.pop(line.pid, None)
            case "pstart":
                self.current[line.pid] = ("pstart", line.jid)
            case "pend":
                self.current.pop(line.pid, None)
            case "forked":
                self.forked_pids.add(line.pid)

    def running_poison(self, pid: int) -> bool:
        """Whether the process's last line says it is inside a poison task."""
        return self.current.get(pid, ("", ""))[0] == "pstart"

    def running_job(self, pid: int) -> str | None:
        """The normal job the process was last seen inside (its start line, no end line)."""
        what, jid = self.current.get(pid, ("", ""))
        return jid if what == "start" else None

    def last_line(self, pid: int) -> Line | None:
        return self.last.get(pid)

    def starts_of(self, jid: str) -> list[Line]:
        return self.starts.get(jid, [])


def _parse(raw: bytes) -> Line | None:
    parts = raw.decode(errors="replace").split()
    if len(parts) != 4:
        return None
    what, jid, pid, when = parts
    try:
        return Line(what, jid, int(pid), float(when))
    except ValueError:
        return None
