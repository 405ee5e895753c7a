"""The messages this process holds: what settles a popped job on SQS.

SQS settles a received message (delete it, change its visibility) only by the receipt
handle its receive gave, and tells nobody else which messages are out. So the engine keeps,
per process, each popped job's receipt: its queue, its handle, its body, who popped it and
until when. heartbeat, heartbeat_many, complete, release, retry and fail of that job work
from this process only; from any other (a pool's supervisor acting for a dead child) the
job is not held (`LockLost`), and its message comes back by itself when its lock
(visibility timeout) runs out. A forked copy of the process starts holding nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lanner.engines.sqs.messages import Body
from lanner.errors import LockLost


@dataclass(slots=True)
class Receipt:
    """A popped job's message."""

    queue: str
    url: str
    handle: str
    body: Body  # as it runs: `remaining` already counts earlier deliveries
    worker: str
    expires: float
    lease: int

    def renewed(self, now: float) -> float:
        """Its lock was extended at `now` by one lease (SQS's clock runs it); the new expiry."""
        self.expires = now + self.lease
        return self.expires


class Receipts:
    """Receipts by jid, for this process only (safe to share between its threads)."""

    def __init__(self) -> None:
        self._held: dict[str, Receipt] = {}
        self._pid = os.getpid()

    def hold(self, receipt: Receipt) -> None:
        self._current()[receipt.body.jid] = receipt

    def held(self, jid: str, worker: str, command: str, queue: str | None = None) -> Receipt:
        """The receipt of `jid` if `worker` holds it here (in `queue`, if given); else LockLost."""
        receipt = self._current().get(jid)
        if receipt is None:
            raise LockLost(
                f"{command}(): job {jid!r} is not held by this process: the sqs engine "
                "settles a job only from the process that popped it (or its lock ran out, or "
                "it was settled already)"
            )
        if receipt.worker != worker:
            raise LockLost(
                f"{command}(): job {jid!r} is running for {receipt.worker}, not {worker}"
            )
        if queue is not None and receipt.queue != queue:
            raise LockLost(f"{command}(): job {jid!r} is running in {receipt.queue}, not {queue}")
        return receipt

    def held_of(self, jids: list[str], worker: str, queue: str | None = None) -> list[Receipt]:
        """The receipts `worker` holds here among `jids` (in `queue`, if given; the others
        are skipped)."""
        held = self._current()
        found = [held.get(jid) for jid in jids]
        return [
            r
            for r in found
            if r is not None and r.worker == worker and (queue is None or r.queue == queue)
        ]

    def drop(self, jid: str, receipt: Receipt) -> None:
        """Forget a settled job (unless a newer delivery of it is held meanwhile)."""
        held = self._current()
        if held.get(jid) is receipt:
            del held[jid]

    def __len__(self) -> int:
        return len(self._current())

    def _current(self) -> dict[str, Receipt]:
        if self._pid != os.getpid():  # a forked copy holds nothing of its parent's
            self._held = {}
            self._pid = os.getpid()
        return self._held
