"""Child processes for the engine benchmark: spawned together, started together, and
reporting back on one queue (`ChildGroup`); `ChildContext` is a child's side of it.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue as ProcessQueue
from multiprocessing.synchronize import Event as ProcessEvent
from queue import Empty
from types import TracebackType
from typing import Any, Concatenate, NamedTuple, ParamSpec

from lanner.tools.bench.common import BenchError

_P = ParamSpec("_P")


class ChildMessage(NamedTuple):
    """What a child reports: `ready`, `progress` (amount), `sample` (value), `finished`
    (value), or `error` (text: the traceback)."""

    kind: str
    child: int
    amount: int = 0
    value: float = 0.0
    text: str = ""


@dataclass(frozen=True)
class ChildContext:
    """A child's side of a `ChildGroup`: its index, the report queue and the start signal."""

    index: int
    messages: ProcessQueue[ChildMessage]
    start: ProcessEvent

    def send(self, kind: str, *, amount: int = 0, value: float = 0.0, text: str = "") -> None:
        self.messages.put(ChildMessage(kind, self.index, amount, value, text))

    def wait_for_start(self) -> None:
        """Block until the parent calls `ChildGroup.go`; exit if the parent dies first."""
        while not self.start.wait(0.5):
            if not parent_alive():
                raise SystemExit(1)


def parent_alive() -> bool:
    """Whether the process that spawned this one still runs (always true in the parent)."""
    parent = multiprocessing.parent_process()
    return parent is None or parent.is_alive()


def _child_main(
    target: Callable[..., None],
    context: ChildContext,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    try:
        target(context, *args, **kwargs)
    except KeyboardInterrupt:
        # Ctrl-C reaches the whole process group; the parent reports it, once.
        raise SystemExit(130) from None
    except Exception:
        context.send("error", text=traceback.format_exc())
        raise SystemExit(1) from None
    finally:
        if not parent_alive():
            # Nobody reads the queue any more: flushing it at exit would block forever.
            context.messages.cancel_join_thread()


class ChildGroup:
    """Child processes that report on one queue and can be started together.

    Children are started with `spawn`, so they inherit nothing (no engine connection, no
    lock): each opens what it needs itself, like a real worker on another host would.
    Leaving the `with` block joins them, and terminates any that the block's failure left
    running or that do not exit in time, so no child outlives the benchmark.
    """

    def __init__(self, *, join_timeout: float = 10.0) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._messages: ProcessQueue[ChildMessage] = self._context.Queue()
        self._start = self._context.Event()
        self._processes: list[BaseProcess] = []
        self._join_timeout = join_timeout

    def __enter__(self) -> ChildGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._shutdown(graceful=exc_type is None)

    def spawn(
        self,
        target: Callable[Concatenate[ChildContext, _P], None],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> int:
        """Start `target(context, *args, **kwargs)` in a new process; return its index.

        `target` must be a module-level function and its arguments picklable.
        """
        index = len(self._processes)
        context = ChildContext(index, self._messages, self._start)
        process = self._context.Process(
            target=_child_main,
            args=(target, context, args, kwargs),
            name=f"lanner-bench-{index}",
            daemon=True,
        )
        process.start()
        self._processes.append(process)
        return index

    def receive(self, timeout: float) -> ChildMessage:
        """The next message from any child, within `timeout` seconds.

        Raises `BenchError` if a child reported an error or died, or if nothing came in time.
        """
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError(f"no word from the benchmark's child processes in {timeout:g}s")
            try:
                message = self._messages.get(timeout=min(remaining, 0.1))
            except Empty:
                self._check_alive()
                continue
            if message.kind == "error":
                raise BenchError(f"benchmark child process {message.child} failed:\n{message.text}")
            return message

    def expect(self, kind: str, timeout: float) -> ChildMessage:
        message = self.receive(timeout)
        if message.kind != kind:
            raise BenchError(f"expected {kind!r} from a child process, got {message!r}")
        return message

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every child has sent `ready`."""
        ready: set[int] = set()
        while len(ready) < len(self._processes):
            ready.add(self.expect("ready", timeout).child)

    def go(self) -> float:
        """Start every child waiting in `wait_for_start`; return the start time (`time.time()`)."""
        started = time.time()
        self._start.set()
        return started

    def join(self) -> None:
        """Wait for every child to exit; raise `BenchError` unless all exit cleanly in time."""
        deadline = time.monotonic() + self._join_timeout
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        failed = [
            f"{index} ({'still running' if process.exitcode is None else process.exitcode})"
            for index, process in enumerate(self._processes)
            if process.exitcode != 0
        ]
        if failed:
            raise BenchError(
                f"benchmark child process(es) did not exit cleanly: {', '.join(failed)}"
            )

    def _check_alive(self) -> None:
        for index, process in enumerate(self._processes):
            if process.exitcode not in (None, 0):
                # Its last words may still be in the pipe: prefer them to a bare exit code.
                try:
                    while (message := self._messages.get(timeout=0.5)).kind != "error":
                        pass
                except Empty:
                    pass
                else:
                    raise BenchError(
                        f"benchmark child process {message.child} failed:\n{message.text}"
                    )
                raise BenchError(
                    f"benchmark child process {index} exited with code {process.exitcode}"
                )

    def _shutdown(self, *, graceful: bool) -> None:
        if graceful:
            deadline = time.monotonic() + self._join_timeout
            for process in self._processes:
                process.join(max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.exitcode is None:
                process.terminate()
        for process in self._processes:
            process.join(2.0)
            if process.exitcode is None:
                process.kill()
                process.join()
            process.close()
        self._messages.close()
        self._messages.join_thread()
