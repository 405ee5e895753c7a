"""lanner for Django: the task backend of Django's task framework, and its worker.

    INSTALLED_APPS = [..., "lanner.contrib.django"]
    TASKS = {"default": {"BACKEND": "lanner.contrib.django.LannerBackend",
                         "QUEUES": ["default"], "OPTIONS": {"broker": "sqlite:///db.sqlite3"}}}

    python manage.py lanner_worker -c 4

| module | owns |
|---|---|
| `compat.py` | Django's task API from `django.tasks` (Django 6) or the `django_tasks` backport |
| `backend.py` | `LannerBackend`: enqueue, results, the capability flags, joining transactions |
| `tasks.py` | the lanner task behind each Django task, and how a worker runs it |
| `results.py` | a job as Django's `TaskResult` |
| `outbox.py`, `models.py` | the outbox in Django's database (Redis, SQS), and its relay's side |
| `management/commands/lanner_worker.py` | `manage.py lanner_worker`: the pool, Django set up |

docs/integrations.md tells how to use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lanner.contrib.django.backend import LannerBackend

__all__ = ["LannerBackend"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: INSTALLED_APPS imports this package before Django is ready.
    if name == "LannerBackend":
        from lanner.contrib.django.backend import LannerBackend

        return LannerBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
