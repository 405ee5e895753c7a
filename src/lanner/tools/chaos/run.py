"""One chaos run from start to report: set up, publish, run the pool under faults, account.

    config = ChaosConfig(engine="sqlite", workload=WorkloadSpec(jobs=2000),
                         faults=FaultPlan(kill_every=2.0, stop_at=0.3))
    report = run_chaos(config)
    print(report.figure_line())

The run's folder holds the task module, queue file, ledger, store (the SQLite file, or
the private redis-server's AOF) and logs; it is kept when `folder` is given, else removed.
The pool is a real `lanner worker` subprocess; the harness watches it from outside, does
the faults, waits for the work to settle (with a deadline), stops the pool with SIGTERM,
then counts. Nothing waits on a fixed sleep for a state: the loop polls the ledger and
the store.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Final

import lanner
from lanner.tools.chaos import procs, workload
from lanner.tools.chaos.brokers import RedisServer, RestartableRedis, WriteLock, write_lock_free
from lanner.tools.chaos.config import REDIS_SCHEMES, ChaosConfig, FaultPlan
from lanner.tools.chaos.faults import Fault, Incident, Kill, KillEvery, Stop, StopChild, worker_name
from lanner.tools.chaos.ledger import Ledger
from lanner.tools.chaos.outages import (
    HoldWriteLock,
    KillSupervisor,
    RedisOutage,
    RestartRedis,
    TermSupervisor,
)
from lanner.tools.chaos.pool import StatusReader, Supervisor
from lanner.tools.chaos.report import (
    FAILURES_SHOWN,
    Report,
    duplicates,
    foreign_tracebacks,
    in_flight_at_kills,
    poison_hits,
    redeliveries,
    stop_redeliveries,
)
from lanner.tools.chaos.settle import Settler, account_poison

TICK: Final = 0.05
STORE_CHUNK: Final = 500
HARNESS_REDIS_OPTIONS: Final = "retries=2&backoff_cap=0.2&socket_timeout=5"
"""The harness's own Redis client gives up quickly: a store that is away means 'not yet'."""

Progress = Callable[[int, int, str], None]
"""Called as the run goes: (normal jobs ended, normal jobs, a line about what happens)."""


class Run:
    """A run in progress; faults see it as their `Harness`."""

    def __init__(self, config: ChaosConfig, folder: Path, progress: Progress | None) -> None:
        config.check()
        self.config = config
        self.spec = config.workload
        self.folder = folder
        self.seed = config.seed if config.seed is not None else random.randrange(2**32)
        self.rng = random.Random(self.seed)
        self.kills: list[Kill] = []
        self.stops: list[Stop] = []
        self.incidents: list[Incident] = []
        self.pool_exits: list[str] = []
        self.sessions: set[int] = set()
        self.faults: list[Fault] = []
        self._progress = progress
        self._supervisor: Supervisor | None = None
        self._retired: list[Supervisor] = []
        self._own_redis: RedisServer | None = None
        self._redis: RestartableRedis | None = config.redis
        self._engine: lanner.Engine | None = None
        self._work: workload.Workload | None = None
        self._seen_children: set[int] = set()
        self._last_note = ""
        self.url = self.store_url = ""
        self.ledger = Ledger(folder / "ledger.txt")

    # -- set-up ---------------------------------------------------------------------------
    def set_up(self) -> None:
        """Open the store and configure it, write the workload, make the faults."""
        self.url, self.store_url = self._open_store()
        total = self.spec.jobs + len(self.spec.poisons) * self.spec.poison_copies
        with self.store() as engine:
            engine.config_set("jobs-history-count", max(50_000, 2 * total))
            if self.config.grace is not None:
                engine.config_set("grace-period", self.config.grace)
        if self.spec.time_limit_grace is None:
            self.spec = replace(self.spec, time_limit_grace=self._time_limit_grace())
        self._work = workload.write(self.folder, self.url, self.spec, self.seed)
        self.ledger = Ledger(self._work.ledger)
        self.faults = self._faults(self.config.faults)

    @property
    def work(self) -> workload.Workload:
        assert self._work is not None, "set_up() first"
        return self._work

    @contextlib.contextmanager
    def store(self) -> Iterator[lanner.Engine]:
        """The harness's own engine on the store, for one look.

        On SQLite it is opened for each look and closed after it: a connection the harness
        kept open would hold SQLite's shared-memory lock all along and so hide what the
        pool's own processes do to the file (fault 1 of issue 10 needs a moment when no
        other process has it open). On Redis one client is kept.
        """
        if self.config.engine_name == "redis":
            if self._engine is None:
                self._engine = lanner.open_engine(self.store_url)
            yield self._engine
            return
        engine = lanner.open_engine(self.store_url)
        try:
            yield engine
        finally:
            engine.close()

    def _open_store(self) -> tuple[str, str]:
        """(the pool's URL, with its options; the harness's own URL)."""
        config = self.config
        if config.broker is not None:
            base = config.broker
        elif config.engine == "sqlite":
            base = "sqlite:///" + str(self.folder / "jobs.db")
        else:
            if self._redis is None:
                self._own_redis = RedisServer(self.folder / "redis")
                self._own_redis.start()
                self._redis = self._own_redis
            base = self._redis.url
        url = _with_options(base, config.url_options) if config.url_options else base
        harness = base
        if base.startswith(REDIS_SCHEMES):
            harness = _with_options(base, HARNESS_REDIS_OPTIONS)
        return url, harness

    def _faults(self, plan: FaultPlan) -> list[Fault]:
        faults: list[Fault] = []
        if plan.kill_every is not None:
            faults.append(KillEvery(plan.kill_every, plan.kill_first, plan.kill_idle))
        if plan.stop_at is not None:
            faults.append(StopChild(plan.stop_at, plan.stop_for, self.spec.tasks_per_process > 1))
        if plan.supervisor_kill_at is not None:
            faults.append(KillSupervisor(plan.supervisor_kill_at))
        if plan.supervisor_term_at is not None:
            faults.append(TermSupervisor(plan.supervisor_term_at))
        if self.config.engine_name == "sqlite":
            # On SQLite an outage is the write lock held that long by another process.
            holds = [(plan.lock_at, plan.lock_for), (plan.outage_at, plan.outage_for)]
            kill_after = 0.3 if plan.kill_in_lock else None
            path = self.sqlite_path()
            faults.extend(
                HoldWriteLock(at, WriteLock(path, seconds), kill_after)
                for at, seconds in holds
                if at is not None
            )
        elif self._redis is not None:
            if plan.restart_at is not None:
                faults.append(RestartRedis(plan.restart_at, self._redis))
            if plan.outage_at is not None:
                faults.append(RedisOutage(plan.outage_at, self._redis, plan.outage_for))
        return faults

    def _time_limit_grace(self) -> float:
        """TIME_LIMIT_GRACE_SEC when not given: 1 s, or, when a worker is to be stopped, 5 s
        more than the stop, so that the supervisor's hard time limit does not end the stop
        (a worker stopped just after a job ended still counts as running that job until it
        says so, and would be killed at time_limit + grace, before its lease ran out)."""
        plan = self.config.faults
        if plan.stop_at is None:
            return 1.0
        stop = plan.stop_for or self.spec.lease + self.grace() + 2.0
        return stop + 5.0

    def sqlite_path(self) -> Path:
        """The SQLite file of the store (`sqlite:///path`, without the query)."""
        path = urllib.parse.urlsplit(self.url).path  # "/relative" or "//absolute"
        return Path(path[1:])

    # -- Harness --------------------------------------------------------------------------
    @property
    def supervisor(self) -> Supervisor | None:
        return self._supervisor

    def progress(self) -> float:
        return len(self.ledger.ended) / max(1, len(self.work.normal))

    def start_supervisor(self) -> None:
        self._supervisor = Supervisor(self.work, self.spec, self.folder / "worker.log")
        self.sessions.add(self._supervisor.pid)

    def take_down_supervisor(self) -> Supervisor | None:
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.expected_exit = True
            self._retired.append(supervisor)
        return supervisor

    def held_by(self, pids: list[int]) -> list[str]:
        held: list[str] = []
        with self.store() as engine:
            for pid in pids:
                jobs = engine.worker_jobs(worker_name(pid))
                held.extend([*jobs.jobs, *jobs.stalled])
        return held

    def store_free(self) -> bool:
        """Whether no process holds the store in a transaction (SQLite's write lock)."""
        if self.config.engine_name == "redis":
            return True  # a client's commands are run whole by the server
        return write_lock_free(self.sqlite_path())

    def incomplete(self, jids: set[str]) -> set[str]:
        return set(jids) - self.complete(sorted(jids))

    def complete(self, jids: list[str]) -> set[str]:
        return {job.jid for job in self.jobs(jids) if job.state == lanner.JobState.COMPLETE}

    def jobs(self, jids: list[str]) -> list[lanner.Job]:
        """The jobs among `jids` that the store has."""
        found: list[lanner.Job] = []
        with self.store() as engine:
            for start in range(0, len(jids), STORE_CHUNK):
                found.extend(engine.multiget(jids[start : start + STORE_CHUNK]))
        return found

    def grace(self) -> float:
        with self.store() as engine:
            value = engine.config_get("grace-period")
        return float(value) if isinstance(value, int | float) else 10.0

    def lease(self) -> float:
        return self.spec.lease

    def reader(self) -> StatusReader:
        return StatusReader(self.store_url, self.folder, self.folder / "reader.log")

    def note(self, text: str) -> None:
        self._tell(text)

    def _tell(self, text: str = "") -> None:
        """Report progress: jobs ended, and the kills, stops and latest fault so far."""
        if text:
            self._last_note = text
        if self._progress is not None:
            line = f"kills {len(self.kills)}  stops {len(self.stops)}  {self._last_note}"
            self._progress(len(self.ledger.ended), len(self.work.normal), line)

    # -- the run --------------------------------------------------------------------------
    def execute(self) -> Report:
        self.set_up()
        spec = self.spec
        report = Report(self.config.engine_name, len(self.work.normal), folder=str(self.folder),
                        tasks_per_process=spec.tasks_per_process, threads=spec.threads,
                        kind="async" if spec.runs_async else "sync")  # fmt: skip
        total = len(self.work.normal) + len(self.work.poison)
        report.grace, report.lease = self.grace(), self.spec.lease
        began = time.monotonic()
        self._tell(f"publishing {total} jobs")
        workload.publish(self.work, self.spec, self.seed)
        report.publish_seconds = time.monotonic() - began
        started = time.monotonic()
        self.start_supervisor()
        self._tell("pool started")
        report.timed_out = not self._run_faults_until_settled()
        report.elapsed = time.monotonic() - started
        for fault in self.faults:
            fault.end(self)  # a run cut short: continue the stopped, restart the store
        report.leaked_after_settle = Settler(self, self.work).leaked_after_settle(self.work.marker)
        self._tell("stopping the pool")
        self._stop_pool(report)
        self._account(report)
        self._tell("done")
        return report

    def _run_faults_until_settled(self) -> bool:
        """Tick the faults until the work settles (True), the pool dies or time runs out."""
        settler = Settler(self, self.work)
        one_shots = [fault for fault in self.faults if not isinstance(fault, KillEvery)]
        deadline: float | None = None
        while True:
            now = time.time()
            self.ledger.update()
            if self._pool_died():
                return True  # not a time-out: reported as the pool's exit
            self._watch_children(now)
            for fault in self.faults:
                if not fault.done:
                    fault.tick(self, now)
            faults_done = all(fault.done for fault in one_shots)
            if deadline is None and (faults_done or self.progress() >= 1):
                # From the last fault's end; or, should a fault never find its moment,
                # from the end of the work (the fault is then reported as not done).
                deadline = time.monotonic() + self.config.drain_timeout
            if faults_done and settler.settled():
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            self._tell()
            time.sleep(TICK)

    def _pool_died(self) -> bool:
        supervisor = self._supervisor
        if supervisor is None:
            return False
        code = supervisor.poll()
        if code is None or supervisor.expected_exit:
            return False
        self.pool_exits.append(f"lanner worker exited with status {code}")
        self.take_down_supervisor()
        return True

    def _watch_children(self, now: float) -> None:
        """Note new worker processes: the first after a kill times the supervisor's respawn."""
        if self._supervisor is None:
            return
        fresh = [pid for pid in self._supervisor.children() if pid not in self._seen_children]
        for pid in fresh:
            self._seen_children.add(pid)
            for kill in self.kills:
                if kill.respawned is None and kill.cause != "supervisor":
                    kill.respawned = now
                    break

    def _stop_pool(self, report: Report) -> None:
        supervisor = self.take_down_supervisor()
        if supervisor is not None:
            report.final_exit = supervisor.terminate(self.spec.shutdown_timeout + 15)
        leaked = procs.with_argument(self.work.marker)
        report.leaked = len(leaked)
        report.stray = len(self._pool_processes() - set(leaked))

    def _pool_processes(self) -> set[int]:
        """Live processes of the run's pools: in a supervisor's session, or carrying the
        run's own module name on their command line (workers that left the session)."""
        found = set(procs.in_sessions(self.sessions))
        if self._work is not None:
            found.update(procs.with_argument(self._work.module_name))
        return found

    def _account(self, report: Report) -> None:
        self.ledger.update()
        normal = self.work.normal
        ended = self.ledger.ended
        try:
            jobs = self.jobs(normal)
        except Exception as error:  # reported: every job not seen complete counts as lost
            report.store_error = f"{type(error).__name__}: {error}"
            jobs = []
        complete = {job.jid for job in jobs if job.state == lanner.JobState.COMPLETE}
        failed = sorted((job for job in jobs if job.state == lanner.JobState.FAILED),
                        key=lambda job: job.jid)  # fmt: skip
        failed_jids = {job.jid for job in failed}
        report.unended = sum(1 for jid in normal if jid not in ended)
        report.incomplete = len(normal) - len(complete)
        report.lost = sum(
            1
            for jid in normal
            if jid not in failed_jids and (jid not in ended or jid not in complete)
        )
        report.innocent_failed = len(failed)
        report.innocent_failures = [_failure(job) for job in failed[:FAILURES_SHOWN]]
        report.dup, report.dup_jobs = duplicates(self.ledger, normal)
        report.kills, report.stops = len(self.kills), len(self.stops)
        report.poison_hits = poison_hits(self.ledger, self.work.poison)
        in_flight = in_flight_at_kills(self.ledger, self.kills)
        report.in_flight_at_kills = [len(jids) for _, jids in in_flight]
        report.redelivery = redeliveries(self.ledger, in_flight)
        report.respawn = [k.respawned - k.when for k in self.kills if k.respawned is not None]
        report.stop_redelivery = stop_redeliveries(self.ledger, self.stops, set(normal))
        report.stop_blocked = any(stop.blocked for stop in self.stops)
        report.pool_exits = list(self.pool_exits)
        report.poison = account_poison(self, self.work)
        forked = self.ledger.forked_pids
        report.rogue_starts = sum(
            1 for line in self.ledger.lines if line.what == "start" and line.pid in forked
        )
        report.rogue_ends = sum(
            1 for line in self.ledger.lines if line.what == "end" and line.pid in forked
        )
        logs = [self.folder / "worker.log", self.folder / "reader.log"]
        text = "\n".join(path.read_text(errors="replace") for path in logs if path.exists())
        report.log_lines = text.count("\n")
        report.tracebacks, report.first_traceback = foreign_tracebacks(
            text, [str(self.work.module_file)]
        )
        report.corrupt = "database disk image is malformed" in text
        report.incidents = list(self.incidents)
        report.faults_not_done = [f.name for f in self.faults if not f.done and f.name != "kill"]

    def close(self) -> None:
        """Stop whatever the run started, whatever state it is in."""
        for supervisor in [*self._retired, *filter(None, [self._supervisor])]:
            supervisor.close()
        procs.kill_all(sorted(self._pool_processes()))
        if self._work is not None:
            procs.kill_all(procs.with_argument(self._work.marker))
        for fault in self.faults:
            if isinstance(fault, HoldWriteLock):
                fault.lock.stop()
            if isinstance(fault, KillSupervisor) and fault.reader is not None:
                with contextlib.suppress(RuntimeError):
                    fault.reader.stop()
        if self._engine is not None:
            with contextlib.suppress(Exception):
                self._engine.close()
        if self._work is not None:
            workload.forget_module(self._work)
        if self._own_redis is not None:
            self._own_redis.kill()


def _failure(job: lanner.Job) -> str:
    """`<jid> <group>: <the last line of its message>`, for the report."""
    failure = job.failure
    if failure is None:
        return f"{job.jid} (no failure recorded)"
    lines = [line.strip() for line in failure.message.splitlines() if line.strip()]
    return f"{job.jid} {failure.group}: {lines[-1][:200] if lines else ''}"


def _with_options(url: str, options: str) -> str:
    """`url` with query `options` added (urlunsplit would drop a slash of sqlite:////abs)."""
    return url + ("&" if "?" in url else "?") + options.lstrip("?&")


def run_chaos(config: ChaosConfig, progress: Progress | None = None) -> Report:
    """Run the workload under the faults of `config` and account for every job."""
    config.check()
    folder = config.folder or Path(tempfile.mkdtemp(prefix="lanner-chaos-"))
    folder.mkdir(parents=True, exist_ok=True)
    run = Run(config, folder, progress)
    try:
        return run.execute()
    finally:
        run.close()
        if config.folder is None:
            shutil.rmtree(folder, ignore_errors=True)


__all__ = ["ChaosConfig", "FaultPlan", "Run", "run_chaos"]
