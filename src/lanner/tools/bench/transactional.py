"""`lanner bench transactional`: jobs published inside the application's transactions,
half of them rolled back, the publisher killed (SIGKILL) at random points; a real pool
runs what was committed. The account: exactly the committed jobs ran, each once.

The application is an SQLite database of its own (`orders`, one row per committed
transaction `n`); transaction `n` inserts its row and publishes `txn_task(n)` within its
transaction, then commits if `n` is odd and rolls back if it is even. A publisher process
runs the transactions from the one after the last committed `n`; the harness kills it
after a random time (up to `kill_ms` ms from its first transaction) again and again,
starting a new one each time, until one gets through to the end. On SQLite the broker is
the application's database itself (`?shared=1`: the jobs join the transaction); on Redis
or SQS the jobs go through the application's outbox, which the pool relays
(`lanner worker --outbox`).
"""

from __future__ import annotations

import importlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lanner.app import App
from lanner.tools.bench.common import BenchError

QUEUE = "txn"
OUT_ENV = "LANNER_TXN_OUT"

app = App(results=False)


@app.task(queue=QUEUE, max_retries=0)
def txn_task(n: int) -> None:
    """What each committed transaction publishes: records that it ran, and where."""
    line = f"{n} {os.getpid()}\n".encode()
    fd = os.open(os.environ[OUT_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: never torn
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class TransactionalResult:
    broker: str
    transactions: int
    committed: int
    rolled_back: int
    publishers_killed: int
    ran: int
    missing: list[int]  # committed, never ran
    unexpected: list[int]  # ran, never committed
    duplicated: list[int]  # ran more than once
    seconds: float

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.duplicated)

    def to_json(self) -> dict[str, object]:
        return {
            "broker": self.broker,
            "transactions": self.transactions,
            "committed": self.committed,
            "rolled_back": self.rolled_back,
            "publishers_killed": self.publishers_killed,
            "ran": self.ran,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "duplicated": self.duplicated,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def publish(database: str, broker: str, transactions: int) -> None:
    """The publisher (run in its own process): the transactions after the last committed
    one, each publishing its job within it."""
    app.use_broker(broker)
    conn = sqlite3.connect(database, timeout=60)
    conn.execute("PRAGMA journal_mode = WAL")  # as most applications on SQLite have it
    conn.execute("CREATE TABLE IF NOT EXISTS orders (n INTEGER PRIMARY KEY)")
    conn.commit()
    (last,) = conn.execute("SELECT coalesce(max(n), 0) FROM orders").fetchone()
    # Everything a first transaction would load or open, before the harness is told: its
    # kills then land among the transactions, not in the start-up.
    _ = app.engine, app.queues
    importlib.import_module("lanner.engines.sqlite.within")
    importlib.import_module("lanner.outbox.sqlite")
    print("ready", flush=True)
    for n in range(int(last) + 1, transactions + 1):
        conn.execute("BEGIN IMMEDIATE")
        if n % 2:
            conn.execute("INSERT INTO orders (n) VALUES (?)", (n,))
        app.publish_many([txn_task.message(n)], within=conn)
        if n % 2:
            conn.commit()
        else:
            conn.rollback()


def run_transactional(
    broker: str | None,
    transactions: int,
    *,
    kill_ms: float = 100.0,
    concurrency: int = 2,
    seed: int | None = None,
    directory: str | None = None,
    deadline: float = 600.0,
) -> TransactionalResult:
    """One run (see the module docstring); `broker` None: SQLite, the application's file."""
    chooser = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="lanner-txn-", dir=directory) as scratch:
        work = Path(scratch)
        database = str(work / "app.db")
        out = work / "ran.txt"
        url = broker or f"sqlite:///{database}?shared=1"
        started = time.monotonic()
        environment = {**os.environ, OUT_ENV: str(out)}
        pool = _start_pool(url, database, concurrency, environment, work / "pool.log")
        try:
            killed = _publish_with_kills(database, url, transactions, kill_ms, chooser, work)
            committed = _committed(database)
            ran = _wait_for_runs(out, len(committed), pool, deadline, work / "pool.log")
            time.sleep(1.0)  # a duplicate would come after the last first run: give it time
            ran = _read_runs(out)
        finally:
            _stop(pool)
        counts = Counter(ran)
        return TransactionalResult(
            broker=url,
            transactions=transactions,
            committed=len(committed),
            rolled_back=transactions - len(committed),
            publishers_killed=killed,
            ran=len(ran),
            missing=sorted(committed - set(counts)),
            unexpected=sorted(set(counts) - committed),
            duplicated=sorted(n for n, count in counts.items() if count > 1),
            seconds=time.monotonic() - started,
        )


def _start_pool(
    url: str, database: str, concurrency: int, environment: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "lanner", "worker", "-A", f"{__name__}:app", "--broker", url,
        "-Q", QUEUE, "-c", str(concurrency), "--log-level", "WARNING",
    ]  # fmt: skip
    if not url.startswith("sqlite:"):
        command += ["--outbox", f"sqlite:///{database}"]
    with open(log, "wb") as output:
        return subprocess.Popen(
            command, env=environment, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def _publish_with_kills(
    database: str, url: str, transactions: int, kill_ms: float, chooser: random.Random, work: Path
) -> int:
    """Run publishers, killing each after a random time, until one finishes; return the
    number killed."""
    killed = 0
    code = f"from {__name__} import publish; publish({database!r}, {url!r}, {transactions})"
    progress = -1
    while True:
        if killed % 10 == 0:
            # A machine so busy that ten publishers in a row were killed before their
            # first commit: kill later from now on, so that the run still ends.
            done = _last_committed(database)
            kill_ms = kill_ms * 2 if done == progress else kill_ms
            progress = done
        with open(work / "publisher.log", "ab") as output:
            publisher = subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=output
            )
        assert publisher.stdout is not None
        publisher.stdout.readline()  # "ready" (or nothing: it failed, see below)
        publisher.stdout.close()
        try:
            publisher.wait(timeout=chooser.uniform(0, kill_ms) / 1000)
        except subprocess.TimeoutExpired:
            publisher.send_signal(signal.SIGKILL)
            publisher.wait()
            killed += 1
            continue
        if publisher.returncode != 0:
            log = (work / "publisher.log").read_text(errors="replace")[-2000:]
            raise BenchError(f"the publisher failed (exit {publisher.returncode}):\n{log}")
        return killed


def _last_committed(database: str) -> int:
    return max(_committed(database), default=0) if os.path.exists(database) else 0


def _committed(database: str) -> set[int]:
    conn = sqlite3.connect(database, timeout=60)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'orders'").fetchone():
            return set()
        return {n for (n,) in conn.execute("SELECT n FROM orders")}
    finally:
        conn.close()


def _read_runs(out: Path) -> list[int]:
    if not out.exists():
        return []
    return [int(line.split()[0]) for line in out.read_text().splitlines() if line.strip()]


def _wait_for_runs(
    out: Path, expected: int, pool: subprocess.Popen[bytes], deadline: float, log: Path
) -> list[int]:
    end = time.monotonic() + deadline
    while True:
        ran = _read_runs(out)
        if len(set(ran)) >= expected:
            return ran
        if pool.poll() is not None:
            text = log.read_text(errors="replace")[-2000:]
            raise BenchError(f"the pool exited ({pool.returncode}):\n{text}")
        if time.monotonic() > end:
            raise BenchError(f"{len(set(ran))} of {expected} committed jobs ran in {deadline} s")
        time.sleep(0.05)


def _stop(pool: subprocess.Popen[bytes]) -> None:
    if pool.poll() is None:
        pool.send_signal(signal.SIGTERM)
        try:
            pool.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(pool.pid, signal.SIGKILL)
            pool.wait()
