"""The ledger: what the workload's tasks wrote, read as it grows.

Tasks append one line per event, `<what> <jid> <pid> <unix time>`, with one `os.write` on
a file opened with O_APPEND, so lines from many processes never interleave. The kinds:

    start, end        a normal job began and finished its work
    pstart, pend      a poison job began, and (if it gets that far) left its task
    forked            the fork poison's forked copy, in that copy (pid is the copy's)

A process may run many jobs at once (`lanner worker -t N`): `Running` keeps, for each
process, every job it is inside: started there and not ended, nor started since elsewhere
(a task stopped by its time limit or a lost lock writes no end line; its job runs again).

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
class Running:
    """The jobs each process is inside, as the lines added so far say."""

    by_pid: dict[int, dict[str, str]] = field(default_factory=dict)  # {jid: start or pstart}
    holder: dict[str, int] = field(default_factory=dict)  # jid -> the pid inside it

    def add(self, line: Line) -> None:
        if line.what in ("start", "pstart"):
            self._leave(line.jid)
            self.by_pid.setdefault(line.pid, {})[line.jid] = line.what
            self.holder[line.jid] = line.pid
        elif line.what in ("end", "pend") and self.holder.get(line.jid) == line.pid:
            self._leave(line.jid)

    def _leave(self, jid: str) -> None:
        pid = self.holder.pop(jid, None)
        if pid is None:
            return
        jobs = self.by_pid[pid]
        jobs.pop(jid, None)
        if not jobs:
            del self.by_pid[pid]

    def jobs(self, pid: int) -> list[str]:
        """The normal jobs the process is inside, in the order they started."""
        return [jid for jid, what in self.by_pid.get(pid, {}).items() if what == "start"]

    def poison(self, pid: int) -> bool:
        return "pstart" in self.by_pid.get(pid, {}).values()

    def inside(self, pid: int) -> bool:
        return pid in self.by_pid


@dataclass
class Ledger:
    path: Path
    lines: list[Line] = field(default_factory=list)
    starts: dict[str, list[Line]] = field(default_factory=lambda: defaultdict(list))
    ended: set[str] = field(default_factory=set)
    forked_pids: set[int] = field(default_factory=set)
    running: Running = field(default_factory=Running)
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
        self.running.add(line)
        match line.what:
            case "start":
                self.starts[line.jid].append(line)
            case "end":
                self.ended.add(line.jid)
            case "forked":
                self.forked_pids.add(line.pid)

    def running_poison(self, pid: int) -> bool:
        """Whether the process is inside a poison task (beside other jobs, maybe)."""
        return self.running.poison(pid)

    def running_jobs(self, pid: int) -> list[str]:
        """The normal jobs the process is inside."""
        return self.running.jobs(pid)

    def inside(self, pid: int) -> bool:
        """Whether the process is inside any task."""
        return self.running.inside(pid)

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
