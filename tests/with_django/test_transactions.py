"""Enqueueing inside `transaction.atomic()`: the job exists if and only if the transaction
commits. On SQLite the broker is the project's own database, and the job is written by
Django's connection in the transaction; on Redis it goes through the outbox (a row of
`lanner.contrib.django`'s model in the same transaction), relayed by `manage.py
lanner_worker`. A publisher killed right after its commit, before any relay, loses no job.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import PROJECT, Project, wait_for

OUTBOX = True  # the project fixture's backend: through the outbox where it cannot join


class Rollback(Exception):
    pass


def test_a_rolled_back_transaction_leaves_no_job(project: Project) -> None:
    from django.db import transaction
    from shop.models import Order
    from shop.tasks import add

    from lanner.contrib.django.compat import TaskResultDoesNotExist

    before = Order.objects.count()
    enqueued = []

    def order_then_fail() -> None:
        with transaction.atomic():
            Order.objects.create(item="tea")
            enqueued.append(add.enqueue(1, 2))
            raise Rollback

    with pytest.raises(Rollback):
        order_then_fail()
    (result,) = enqueued
    assert Order.objects.count() == before
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(result.id)


def test_a_committed_transaction_runs_its_job(project: Project) -> None:
    from django.db import transaction
    from shop.models import Order
    from shop.tasks import count_orders

    with transaction.atomic():
        Order.objects.create(item="cake")
        result = count_orders.enqueue()
    done = wait_for(
        lambda: (found := count_orders.get_result(result.id)).is_finished and found,
        "the committed job",
    )
    assert done.return_value == Order.objects.count()  # it saw the committed order


PUBLISHER = """
import os, signal, django
django.setup()
from django.db import transaction
from shop.models import Order
from shop.tasks import add
with transaction.atomic():
    Order.objects.create(item="killed")
    result = add.enqueue(20, 22)
print(result.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # after the commit, before anything relays it
"""


def test_a_publisher_killed_after_its_commit_loses_no_job(project: Project) -> None:
    from shop.tasks import add

    publisher = subprocess.run(
        [sys.executable, "-c", PUBLISHER],
        cwd=PROJECT,
        env={**project.environment(), "DJANGO_SETTINGS_MODULE": "djproject.settings"},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert publisher.returncode == -9, publisher.stderr.decode()
    jid = publisher.stdout.decode().split()[0]
    done = wait_for(
        lambda: (found := add.get_result(jid)).is_finished and found,
        "the killed publisher's job",
    )
    assert done.return_value == 42
