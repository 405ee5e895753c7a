"""Logging for worker processes: one stream, each line with the process and the job id."""

from __future__ import annotations

import logging
import sys
from typing import Final

from lanner.context import current_job

FORMAT: Final = (
    "%(asctime)s %(processName)s[%(process)d] %(levelname)s jid=%(jid)s %(name)s: %(message)s"
)


class JobIdFilter(logging.Filter):
    """Adds `jid`, the job being run in this process (or '-'), to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = current_job()
        record.jid = job.jid if job is not None else "-"
        return True


def configure(level: int | str = logging.INFO) -> None:
    """Send lanner's logs to stderr with process and job ids (children inherit it)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(JobIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
