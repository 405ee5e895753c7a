"""The outbox table (`models.OutboxEntry`)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.CreateModel(
            name="OutboxEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("jid", models.CharField(max_length=255)),
                ("job", models.TextField()),
                ("written_at", models.FloatField()),
                ("tries", models.IntegerField(default=0)),
            ],
            options={"db_table": "lanner_outbox", "ordering": ("id",)},
        ),
    ]
