# mypy: disable-error-code="untyped-decorator"
# (Django ships no type hints: its @task decorator is untyped here.)
"""The tasks of Django's task documentation (django.tasks, or the django-tasks backport),
and a few more the tests need."""

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

try:
    from django.tasks import task
except ImportError:  # Django 5.2
    from django_tasks import task

from shop.models import Order

logger = logging.getLogger(__name__)


# From Django's documentation: "Defining tasks".
@task
def email_users(emails: list[str], subject: str, message: str) -> int:
    return int(send_mail(subject=subject, message=message, from_email=None, recipient_list=emails))


@task(priority=2, queue_name="emails")
def email_users_later(emails: list[str], subject: str, message: str) -> int:
    return int(send_mail(subject=subject, message=message, from_email=None, recipient_list=emails))


# "Task context"
@task(takes_context=True)
def email_users_with_context(
    context: Any, emails: list[str], subject: str, message: str
) -> dict[str, Any]:
    logger.debug(
        f"Attempt {context.attempt} to send user email. Task result id: {context.task_result.id}."
    )
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task(queue_name="ordered")
def record(label: str) -> str:
    with open(settings.LANNER_DJANGO_LOG, "a") as log:
        log.write(f"{label} {os.getpid()}\n")
    return label


@task
def count_orders() -> int:
    """The ORM in a worker process: Django is set up there."""
    return int(Order.objects.count())


@task(backend="retrying")
def flaky(key: str) -> int:
    """Fails its first two runs, then succeeds (its runs counted in a file of its own)."""
    runs = Path(settings.LANNER_DJANGO_LOG).with_name(f"flaky-{key}")
    run = int(runs.read_text()) + 1 if runs.exists() else 1
    runs.write_text(str(run))
    if run < 3:
        raise ConnectionError(f"run {run}: the mail server is away")
    return run
