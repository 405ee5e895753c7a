"""What the SQS engine's messages carry: a job's body, a dead letter's, and jobs made of them.

A job's message body is one JSON object, ASCII only (`ensure_ascii`: SQS refuses some
Unicode characters and counts bytes, so nothing is ever rewritten or refused), marked as
lanner's by its first key:

    {"lanner-job": 1, "jid": ..., "klass": ..., "queue": ..., "data": "<the JSON text>",
     "retries": 5, "remaining": 5, "put": <time>, "due": <time>, "released": 1,
     "fair": "<fair key>"}

`data` is the job's JSON text as a string, so that it comes back exactly as it was put.
`remaining` is the retry budget left when the message was sent; each earlier delivery of
the same message (SQS's ApproximateReceiveCount - 1: a lock that ran out, a worker that
died) has spent one more. `due` is there only for a delay longer than SQS's 900 s: a
message received before it is sent again, out of sight, until it is due. `released`
counts the times the job was given back unrun (Kale's deferrals). `fair` is the job's fair
key (FAIRNESS), there only if it has one: every message of the job is sent with the
MessageGroupId `group_id` makes of it, which makes the standard queue one of SQS's fair
queues (SQS delivers the messages of the keys with fewer in flight first); the body keeps
the key itself, so that a job sent again (released, retried, delayed) keeps its group.

A dead letter (in the dead-letter queue) is the job's body plus its failure,
`"failure": {"group", "message", "when", "worker"}`; a message that was not a lanner job
keeps its text as `"foreign"` instead of the job's fields. A failure's message is cut to
fit the queue's size limit, for which every job leaves FAILURE_ROOM bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Final

from lanner.job import Job, JobState

MARK: Final = "lanner-job"
VERSION: Final = 1

FAILURE_ROOM: Final = 4096
"""Bytes of a queue's message size limit a job's body leaves free, so that the dead letter
made of it (the body and its failure: group, worker and a message cut to fit) fits too."""

_CUT: Final = " ...[cut to fit SQS's message size]"

_GROUP_ID: Final = re.compile(r"[!-}][!-~]{0,127}")
"""SQS's rule for a MessageGroupId: 1 to 128 ASCII letters, digits and punctuation (no
space); '~' is left out of the first character, which marks a digest (`group_id`)."""


def group_id(fair_key: str) -> str:
    """The MessageGroupId of a fair key: the key itself where SQS's rule allows it, else
    '~' and the SHA-256 of its UTF-8 (a key with a space, a long one, one that is not
    ASCII). Only equality between groups matters to SQS, and two keys never share one."""
    if _GROUP_ID.fullmatch(fair_key):
        return fair_key
    return "~" + hashlib.sha256(fair_key.encode("utf-8", "surrogatepass")).hexdigest()


class NotAJob(ValueError):
    """A message whose body is not a lanner job's; says why."""


@dataclass(frozen=True, slots=True)
class Body:
    """A job as its message carries it."""

    jid: str
    klass: str
    queue: str
    data: str
    retries: int
    remaining: int
    put: float
    due: float | None = None
    released: int = 0
    fair: str | None = None  # FAIRNESS: the job's fair key

    def encoded(self) -> str:
        return _dumps(self._fields())

    def _fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            MARK: VERSION,
            "jid": self.jid,
            "klass": self.klass,
            "queue": self.queue,
            "data": self.data,
            "retries": self.retries,
            "remaining": self.remaining,
            "put": self.put,
        }
        if self.due is not None:
            fields["due"] = self.due
        if self.released:
            fields["released"] = self.released
        if self.fair is not None:
            fields["fair"] = self.fair
        return fields

    @property
    def group(self) -> str | None:
        """The MessageGroupId its messages are sent with (None: no fair key, no group)."""
        return None if self.fair is None else group_id(self.fair)

    def again(self, **changes: Any) -> Body:
        return replace(self, **changes)

    def job(self, worker: str, now: float, expires: float, remaining: int) -> Job:
        """The job, running for `worker` from `now`, as `pop` gives it."""
        history: list[dict[str, Any]] = [{"what": "put", "when": self.put, "q": self.queue}]
        history += [{"what": "released", "when": self.put}] * self.released
        history.append({"what": "popped", "when": now, "worker": worker})
        return Job(
            jid=self.jid,
            klass=self.klass,
            queue=self.queue,
            data=self.data,
            priority=0,
            tags=(),
            state=JobState.RUNNING,
            retries=self.retries,
            remaining=remaining,
            worker=worker,
            expires=expires,
            failure=None,
            dependencies=(),
            dependents=(),
            spawned_from_jid=None,
            tracked=False,
            history_json=json.dumps(history),
        )


def decode(text: str) -> Body:
    """The job a message body carries (`NotAJob` saying why if it carries none)."""
    try:
        fields = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise NotAJob(f"its body is not JSON ({error})") from None
    if not isinstance(fields, dict) or MARK not in fields:
        raise NotAJob(f"its body is not a lanner job (no {MARK!r} mark)")
    if fields[MARK] != VERSION:
        raise NotAJob(f"its body is a lanner job of format {fields[MARK]!r}, not {VERSION}")
    try:
        body = Body(
            jid=_text(fields, "jid"),
            klass=_text(fields, "klass"),
            queue=_text(fields, "queue"),
            data=_text(fields, "data"),
            retries=_count(fields, "retries"),
            remaining=_integer(fields, "remaining"),
            put=_number(fields, "put"),
            due=None if fields.get("due") is None else _number(fields, "due"),
            released=_count(fields, "released") if "released" in fields else 0,
            fair=_text(fields, "fair") if "fair" in fields else None,
        )
    except (KeyError, TypeError) as error:
        raise NotAJob(f"its lanner job body is damaged: {error}") from None
    return body


def dead_letter(body: Body, failure: dict[str, Any], limit: int) -> str:
    """The dead letter of a job that failed, cut to `limit` bytes."""
    fields = body._fields()
    return _fitted(fields, failure, limit)


def foreign_letter(text: str, failure: dict[str, Any], limit: int) -> str:
    """The dead letter of a message that was no lanner job: its text kept (cut to fit)."""
    fields: dict[str, Any] = {MARK: VERSION, "foreign": text}
    encoded = _fitted(fields, failure, limit)
    if len(encoded) > limit:  # the text itself does not fit beside a failure message
        fields["foreign"] = ""
        room = limit - len(_fitted(fields, failure, limit))
        fields["foreign"] = _cut(text, room)
        encoded = _fitted(fields, failure, limit)
    return encoded


def _fitted(fields: dict[str, Any], failure: dict[str, Any], limit: int) -> str:
    """`fields` with `failure`, its message cut so that the whole fits in `limit` bytes."""
    message = str(failure.get("message", ""))
    encoded = _dumps({**fields, "failure": {**failure, "message": message}})
    if len(encoded) <= limit:
        return encoded
    room = limit - len(_dumps({**fields, "failure": {**failure, "message": ""}}))
    return _dumps({**fields, "failure": {**failure, "message": _cut(message, room)}})


def _cut(text: str, room: int) -> str:
    """The longest start of `text` that, marked as cut, takes at most `room` bytes escaped."""
    room -= len(_CUT)  # plain ASCII: escaped as it is
    used = 0
    for end, char in enumerate(text):
        used += len(json.dumps(char)) - 2  # 1 for most ASCII, 6 or 12 for an escape
        if used > room:
            return text[:end] + _CUT if end else ""
    return text


def _dumps(fields: dict[str, Any]) -> str:
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields[name]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, not {value!r:.80}")
    return value


def _integer(fields: dict[str, Any], name: str) -> int:
    value = fields[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r:.80}")
    return value


def _count(fields: dict[str, Any], name: str) -> int:
    value = _integer(fields, name)
    if value < 0:
        raise TypeError(f"{name} must be >= 0, not {value}")
    return value


def _number(fields: dict[str, Any], name: str) -> float:
    value = fields[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {value!r:.80}")
    return float(value)
