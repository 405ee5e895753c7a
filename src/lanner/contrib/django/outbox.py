"""The outbox in Django's database: written by an enqueue in `transaction.atomic()`, read
by the relay of `manage.py lanner_worker` (`lanner.outbox.relay`).

The relay's side opens Django's connection for one step at a time and closes it after
(`lanner.outbox.forks`: the relay runs beside a pool that forks). Its `take` locks the
rows it reads where the database can (`select_for_update(skip_locked=True)`), so that two
relays on PostgreSQL or MySQL share the rows; on SQLite, one writer at a time does that.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from lanner.outbox.forks import FORK_LOCK
from lanner.outbox.rows import OutboxRow, decode, encode
from lanner.records import NewJob


def write(database: str, jobs: Sequence[NewJob]) -> None:
    """Add `jobs` to the outbox, in the transaction open on `database`."""
    from lanner.contrib.django.models import OutboxEntry

    now = time.time()
    OutboxEntry.objects.using(database).bulk_create(
        [OutboxEntry(jid=job.jid, job=encode(job), written_at=now) for job in jobs]
    )


def find(database: str, jid: str) -> tuple[NewJob, float] | None:
    """The job of `jid` still in the outbox, and when it was written; None if none is."""
    from lanner.contrib.django.models import OutboxEntry

    entry = OutboxEntry.objects.using(database).filter(jid=jid).order_by("id").first()
    return None if entry is None else (decode(entry.job), float(entry.written_at))


class DjangoOutbox:
    """The relay's view of the outbox of the Django database `database`."""

    def __init__(self, database: str = "default") -> None:
        self.database = database

    def __repr__(self) -> str:
        return f"DjangoOutbox({self.database!r})"

    def take(self, limit: int) -> list[OutboxRow]:
        from django.db import models, transaction

        from lanner.contrib.django.models import OutboxEntry

        with self._connected(), transaction.atomic(using=self.database):
            entries = list(
                OutboxEntry.objects.using(self.database)
                .select_for_update(skip_locked=True)
                .order_by("id")[:limit]
            )
            OutboxEntry.objects.using(self.database).filter(
                id__in=[entry.id for entry in entries]
            ).update(tries=models.F("tries") + 1)
        return [
            OutboxRow(entry.id, decode(entry.job), entry.written_at, entry.tries)
            for entry in entries
        ]

    def delete(self, ids: list[int]) -> None:
        from lanner.contrib.django.models import OutboxEntry

        with self._connected():
            OutboxEntry.objects.using(self.database).filter(id__in=ids).delete()

    def count(self) -> int:
        from lanner.contrib.django.models import OutboxEntry

        with self._connected():
            return int(OutboxEntry.objects.using(self.database).count())

    @contextmanager
    def _connected(self) -> Iterator[None]:
        from django.db import connections

        with FORK_LOCK:
            try:
                yield
            finally:
                connections[self.database].close()
