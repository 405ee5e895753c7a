"""The outbox's rows in Django's database: jobs enqueued inside `transaction.atomic()` for
a broker that cannot share the transaction (Redis, SQS), until the relay puts them
(`lanner.outbox.rows` says what a row holds; the table is the one `lanner.outbox.sqlite`
makes in a plain SQLite database)."""

from __future__ import annotations

from django.db import models


class OutboxEntry(models.Model):  # type: ignore[misc]
    jid = models.CharField(max_length=255)
    job = models.TextField()
    written_at = models.FloatField()
    tries = models.IntegerField(default=0)

    class Meta:
        db_table = "lanner_outbox"
        ordering = ("id",)
