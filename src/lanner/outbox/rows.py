"""What an outbox row holds: a job to put, as JSON text, and when it was written.

A job's delay counts from the publish, not from the relay: the relay puts it with what is
left of it. The relay puts with `if_exists="keep"` where the broker can (not SQS): a row
put before (by a relay that died before it could delete the row) finds its job live and
leaves it alone.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from lanner.records import Flow, NewJob, RateLimit


class OutboxRow(NamedTuple):
    id: int
    job: NewJob
    written_at: float  # Unix time of the publish
    tries: int  # relays that took the row before and may have put its job


def encode(job: NewJob) -> str:
    return json.dumps(job._asdict(), separators=(",", ":"))


def decode(text: str) -> NewJob:
    fields: dict[str, Any] = json.loads(text)
    flow = fields.get("flow")
    if flow is not None:  # JSON made the Flow (a NamedTuple) a list: a Flow again
        key, cap, rates, fair = flow
        fields["flow"] = Flow(key, cap, tuple(RateLimit(*rate) for rate in rates), fair)
    return NewJob(**fields)


def due_job(row: OutboxRow, now: float, if_exists: str = "keep") -> NewJob:
    """The row's job as the relay puts it: its delay shortened by the time it waited."""
    left = max(0.0, row.written_at + row.job.delay - now)
    return row.job._replace(delay=left, if_exists=if_exists)
