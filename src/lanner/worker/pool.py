"""The worker pool: a supervisor process and N child processes, each running a WorkerLoop.

The supervisor
- starts N children (forked, each leading its own process group; child.py) and replaces
  any that exits or dies, pausing longer each time one dies young (a crash loop);
- recycles a child after `max_tasks_per_child` tasks or `max_memory_per_child_mb` of RSS
  (the child finishes its task, gives back its batch and exits; a new one starts);
- kills a child (its whole process group) whose task runs `time_limit_grace` seconds past
  its time limit (stuck in C code, or ignoring TimeLimitExceeded), or past the moment it
  was told to stop because its job was cancelled or its lock lost (JobCancelled);
- gives back a dead child's jobs at once instead of waiting for locks to expire
  (recovery.py), and completes the finished jobs of a child that stopped answering;
- on SIGTERM or SIGINT shuts down warm: children finish their running task within
  `shutdown_timeout` and give back the rest at once; on a second signal, or when the
  timeout passes, shuts down cold: children are killed and their jobs given back. A signal
  is honoured at any moment, while the children are still being forked too: the forking
  stops, and every child forked is told (each is registered before the signal can run).

No child outlives it: a child whose supervisor is gone (killed) stops after its running
task, told by Linux at once (PR_SET_PDEATHSIG) or seeing its new parent at its next round.

An observer (observer.py; the metrics of `lanner worker --metrics-port`) is told of each
job's end, of children, recycles, kills and engine errors, and asked before each fork
whether it may fork: nothing of its thread or socket may cross into a child.

It never waits on the store: what it owes the engine (the queues' settings, recoveries) is
done as chores (chores.py), between supervision rounds, and retried while the store is
away. Neither the supervisor nor a child exits because the store is unreachable; but a
store that refuses the configuration (a wrong password, a file that is not lanner's:
`StoreMisconfigured`), which waiting cannot fix, stops the pool, and `run` raises it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import multiprocessing
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from lanner import schedules
from lanner.engines import shown_url
from lanner.errors import ConfigError, StoreMisconfigured
from lanner.limits import MAX_PROCESSES
from lanner.queues import QueueConfig
from lanner.selectors import resolve_selector
from lanner.worker.child import (
    STOP_SIGNALS,
    child_main,
)
from lanner.worker.children import Child, ChildCare
from lanner.worker.chores import Chores
from lanner.worker.loop import Limits, configure_worker_queues
from lanner.worker.observer import NoObserver, PoolObserver
from lanner.worker.outage import Backoff
from lanner.worker.processes import process_alive
from lanner.worker.recovery import orphans_of_host

if TYPE_CHECKING:
    from lanner.app import App
    from lanner.engine import Engine

logger = logging.getLogger("lanner.pool")

HOUSEKEEPING_SEC: Final = 0.02
"""While reports keep waking the supervisor, it reaps, replaces and enforces time limits
at most this often (a child's exit wakes it, and is seen at once)."""

CHORE_LAST_TRY_SEC: Final = 1.0
"""At shutdown, chores get at least this long after the children are gone."""


@dataclass(frozen=True, slots=True)
class PoolCounts:
    queued: int  # jobs waiting or scheduled in the pool's queues
    running: int  # jobs the children are running now
    processed: int  # jobs the children finished (succeeded or failed) since start
    children: int  # live child processes


class WorkerPool(ChildCare):
    """Supervise `concurrency` worker processes for `app` (usable from Python and the CLI)."""

    def __init__(
        self,
        app: App,
        *,
        concurrency: int = 2,
        tasks_per_process: int | None = None,
        threads: int | None = None,
        queues: Sequence[QueueConfig] | None = None,
        selector: str | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child_mb: int | None = None,
        shutdown_timeout: float | None = None,
        time_limit_grace: float | None = None,
        observer: PoolObserver | None = None,
    ) -> None:
        """`concurrency` processes, each running up to `tasks_per_process` jobs at once
        (async tasks on its event loop; sync ones in up to `threads` threads, 1 unless
        asked: docs/worker.md). `observer` is told what the pool does
        (lanner.metrics.pool.PoolMetrics).

        Sizes out of bounds (`concurrency` above `lanner.limits.MAX_PROCESSES`, the others
        as settings take them) raise `ConfigError` before anything starts."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise ConfigError(f"concurrency must be an int, not {concurrency!r}")
        if not 1 <= concurrency <= MAX_PROCESSES:
            raise ConfigError(
                f"concurrency must be from 1 to {MAX_PROCESSES} worker processes, "
                f"not {concurrency} (docs/worker.md says why)"
            )
        given: dict[str, Any] = {
            "max_tasks_per_child": max_tasks_per_child or None,
            "tasks_per_process": tasks_per_process,
            "threads": threads,
            "die_on_resident_set_size_mb": max_memory_per_child_mb or None,
            "shutdown_timeout_sec": shutdown_timeout,
            "time_limit_grace_sec": time_limit_grace,
        }
        # The settings' own checks (and bounds) apply to what is given here.
        settings = dataclasses.replace(
            app.settings, **{name: value for name, value in given.items() if value is not None}
        )
        self.app = app
        self.concurrency = concurrency
        self.tasks_per_process = settings.tasks_per_process or 1
        self.threads = settings.threads or 1
        self.queues = tuple(queues or app.queues)
        self.selector = selector or settings.queue_selector
        resolve_selector(self.selector)  # a bad name fails here, not in every child
        self.limits = Limits(
            max_tasks=settings.max_tasks_per_child,
            max_memory_mb=settings.die_on_resident_set_size_mb,
        )
        self.shutdown_timeout = settings.shutdown_timeout_sec
        self.time_limit_grace = settings.time_limit_grace_sec
        self.processed = 0
        self._children: dict[int, Child] = {}
        # The children's report pipes and exit sentinels, waited on each round (one
        # poll object kept up to date, rather than a selector built per round).
        self._ready = select.poll()
        self._context = multiprocessing.get_context("fork")
        self._observer: PoolObserver = observer or NoObserver()
        self._chores = Chores(
            app,
            on_unavailable=lambda: self._observer.engine_error("supervisor"),
            on_refused=self._store_refused,
        )
        self.refused: StoreMisconfigured | None = None  # why the pool stopped, if it did
        self._stopping_since: float | None = None
        self._cold = False
        self._spawns_due: list[float] = []  # when children are to be started (monotonic)
        self._respawn = Backoff(first=0.5)
        self._schedules_due = 0.0  # when to put the schedules' next ticks (monotonic)
        self._housekeeping_due = 0.0  # when a round woken by reports looks at the rest
        # The pids this pool forked, until the orphans of an earlier pool are settled: a
        # chore put off by an outage must not take this pool's own dead children (which
        # it settles itself, knowing what each had done) for those orphans.
        self._forked: set[int] | None = set()

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        """Import the task modules, store the queues' settings, start the children."""
        for module in self.app.settings.imports:
            importlib.import_module(module)  # before forking, so every child has the tasks
        self._chores.add(
            "storing the queues' settings",
            lambda engine: configure_worker_queues(engine, self.queues),
        )
        self._chores.add(
            "settling the jobs of this host's workers that died with their supervisor",
            self._settle_orphans,
        )
        if self.app.schedules:
            self._chores.add(
                "registering the schedules",
                lambda engine: schedules.register(self.app, engine, time.time()),
            )
            self._schedules_due = time.monotonic() + schedules.TICK_HORIZON_SEC / 2
        self._chores.run()  # now if the store answers: children then pop with the right lock
        if self._stopping_since is not None:
            return  # stopped meanwhile (a signal during the imports or the chores)
        self._spawns_due = [time.monotonic()] * self.concurrency
        self._spawn_due()
        logger.info(
            "pool started: %d process%s on %s, queues %s, selector %s", self.concurrency,
            "" if self.concurrency == 1 else "es", shown_url(self.app.settings.broker),
            ", ".join(q.name for q in self.queues), self.selector,
        )  # fmt: skip

    def run(self) -> None:
        """Start, then supervise until SIGTERM/SIGINT (call from the main thread). The
        signals' handlers before it are put back when it returns: a program (or a test)
        that runs a pool and goes on keeps its own."""
        before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
        for number in before:
            signal.signal(number, self._on_signal)
        try:
            self.start()
            while self._children or self._stopping_since is None:
                self.supervise(timeout=0.1)
            self._finish_chores()
            self._observer.close()
        finally:
            for number, handler in before.items():
                signal.signal(number, handler)
        logger.info("pool stopped: %d jobs processed", self.processed)
        if self.refused is not None:
            raise self.refused

    def supervise(self, timeout: float = 0.1) -> None:
        """One round: read children's reports, reap and replace, enforce time limits, and
        do what is owed to the engine as far as the store allows."""
        ready = {fd for fd, _ in self._ready.poll(timeout * 1000)}
        exited = False
        for child in list(self._children.values()):
            if child.conn.fileno() in ready:
                self._read(child)
            exited = exited or child.process.sentinel in ready
        # A round woken by reports alone (two or three a job) reads them and does the
        # chores; the rest waits for a death, a quiet round or HOUSEKEEPING_SEC.
        now = time.monotonic()
        if exited or not ready or now >= self._housekeeping_due:
            self._housekeeping_due = now + HOUSEKEEPING_SEC
            self._housekeeping()
        self._chores.run()
        stopping = self._stopping_since is not None and not self._cold
        if stopping and time.monotonic() - (self._stopping_since or 0) >= self.shutdown_timeout:
            logger.warning("shutdown timeout of %g s passed: killing children",
                           self.shutdown_timeout)  # fmt: skip
            self._kill_all()

    def _housekeeping(self) -> None:
        """Reap and replace, enforce time limits, settle for stalled children, schedules."""
        for pid, child in list(self._children.items()):
            if not child.process.is_alive():
                self._reap(pid, child)
        self._enforce_time_limits()
        self._settle_for_stalled_children()
        self._spawn_due()
        if self.app.schedules and time.monotonic() >= self._schedules_due:
            self._schedules_due = time.monotonic() + schedules.TICK_HORIZON_SEC / 2
            self._chores.add(
                "putting the schedules' next ticks",
                lambda engine: schedules.put_upcoming(self.app, engine, time.time()),
            )

    def counts(self) -> PoolCounts:
        queued = 0
        for queue in self.queues:
            counts = self.app.engine.queue_counts(queue.name)
            queued += counts.waiting + counts.scheduled
        running = sum(len(child.running) for child in self._children.values())
        return PoolCounts(queued, running, self.processed, len(self._children))

    def stop(self) -> None:
        """Warm shutdown: children finish their running task, give back the rest, exit."""
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
            self._spawns_due.clear()
            logger.info("warm shutdown: waiting up to %g s for running tasks",
                        self.shutdown_timeout)  # fmt: skip
            for child in self._children.values():
                _signal(child.process, signal.SIGTERM)

    def terminate(self, timeout: float | None = None) -> None:
        """Stop warm, wait up to `timeout` (default: shutdown_timeout), then kill what is left."""
        if timeout is not None:
            self.shutdown_timeout = timeout
        self.stop()
        while self._children:
            self.supervise(timeout=0.05)
        self._finish_chores()
        self._observer.close()

    @property
    def children(self) -> list[int]:
        return sorted(self._children)

    # -- children -------------------------------------------------------------------------
    def _spawn_due(self) -> None:
        if self._stopping_since is not None:
            self._spawns_due.clear()  # e.g. refused by the store at start: none may start
            return
        now = time.monotonic()
        due = [at for at in self._spawns_due if at <= now]
        if not due or not self._observer.ready_to_fork():
            return  # an observer not ready (stopping its thread) is asked again next round
        self._spawns_due = [at for at in self._spawns_due if at > now]
        try:
            for started, _ in enumerate(due):
                if self._stopping_since is not None:
                    return  # a stop interrupts the forking; those forked were told to stop
                try:
                    self._spawn()
                except OSError as error:  # out of processes or file descriptors
                    pause = self._respawn.pause
                    self._respawn.grow()
                    logger.error("cannot start a worker process (%s): trying again in %g s",
                                 error, pause)  # fmt: skip
                    self._spawns_due += [time.monotonic() + pause] * (len(due) - started)
                    return
        finally:
            self._observer.forked()
            self._observer.children(len(self._children))

    def _settle_orphans(self, engine: Engine) -> None:
        forked = self._forked or set()
        orphans_of_host(
            socket.gethostname(),
            lambda pid: pid in forked or process_alive(pid),
            self.app.settings.retry_delay,
        )(engine)
        self._forked = None

    def _spawn(self) -> None:
        receive, send = self._context.Pipe(duplex=False)
        # PR_SET_PDEATHSIG follows the forking thread: only a main thread's fork may use it.
        main_thread = threading.current_thread() is threading.main_thread()
        process = self._context.Process(
            target=child_main,
            args=(self.app, self.queues, self.selector, self.limits, send, os.getpid(),
                  main_thread, self.tasks_per_process, self.threads),
            name=f"lanner-worker-{len(self._children) + 1}",
            daemon=False,
        )  # fmt: skip
        # A child starts with the supervisor's signal handlers; a SIGTERM before it has
        # its own would run the supervisor's. Blocked here, such a signal waits for the
        # child's handler (the child unblocks once it is installed). The supervisor's own
        # stop signals wait too, until the child is registered: a stop then tells it.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            # A stop signal that came just before the block has had its handler run by now
            # (pthread_sigmask runs pending handlers): a child forked after it is never told.
            if self._stopping_since is not None:
                receive.close()
                send.close()
                return
            try:
                process.start()
            except BaseException:
                receive.close()
                raise
            finally:
                send.close()
            assert process.pid is not None
            # The child makes itself a group leader too; whichever runs first, the group
            # exists from here on, so a kill of the group never misses a child just started.
            with contextlib.suppress(OSError):
                os.setpgid(process.pid, process.pid)
            self._children[process.pid] = Child(
                process, receive, f"{socket.gethostname()}-{process.pid}"
            )
            if self._forked is not None:
                self._forked.add(process.pid)
            self._ready.register(receive.fileno(), select.POLLIN)
            self._ready.register(process.sentinel, select.POLLIN)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def _finish_chores(self) -> None:
        """At shutdown, do what is owed while the store answers, until the shutdown timeout
        (counted from the stop: a shutdown never takes twice its timeout), and at least one
        short try."""
        since = self._stopping_since if self._stopping_since is not None else time.monotonic()
        deadline = max(since + self.shutdown_timeout, time.monotonic() + CHORE_LAST_TRY_SEC)
        while len(self._chores) and time.monotonic() < deadline:
            self._chores.run()
            time.sleep(0.05)
        if len(self._chores):
            logger.warning("%d chore(s) left undone: the store is away; their jobs come back "
                           "when their locks run out", len(self._chores))  # fmt: skip
        self._chores.close()

    def _store_refused(self, error: StoreMisconfigured) -> None:
        """Waiting cannot fix the store's refusal: stop (warm), for `run` to raise it."""
        if self.refused is None:
            self.refused = error
            logger.error("the store refuses the pool's configuration: stopping")
        self.stop()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping_since is None:
            logger.info("received %s", signal.Signals(signum).name)
            self.stop()
        elif not self._cold:
            logger.warning("second signal: cold shutdown, killing children")
            self._kill_all()


def _signal(process: BaseProcess, signum: int) -> None:
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)
