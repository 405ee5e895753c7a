"""The Django app `lanner.contrib.django`: its `lanner_worker` command and the outbox model."""

from __future__ import annotations

from django.apps import AppConfig


class LannerConfig(AppConfig):  # type: ignore[misc]
    name = "lanner.contrib.django"
    label = "lanner"
    verbose_name = "lanner"
    default_auto_field = "django.db.models.BigAutoField"
