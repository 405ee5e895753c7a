"""The example's tasks, as a Kale user writes them (only the import differs from Kale's)."""

import logging
import os
from typing import Any

from lanner import task

logger = logging.getLogger(__name__)


class FibonacciTask(task.Task):
    # How many times the worker retries it after a failure; None: never.
    max_retries = 3

    # The hard limit of its running time, shorter than its queue's visibility timeout.
    time_limit = 5  # seconds

    queue = "default"

    @staticmethod
    def fibonacci(n: int) -> int:
        return n if n < 2 else FibonacciTask.fibonacci(n - 1) + FibonacciTask.fibonacci(n - 2)

    def run_task(self, n: int, *args: Any, **kwargs: Any) -> None:
        print(f"fibonacci({n}) = {self.fibonacci(n)}", flush=True)


class FlakyFibonacciTask(FibonacciTask):
    """Fails its first run; Kale's retry hooks, overridden, retry it at once."""

    queue = "high_priority"

    @classmethod
    def _get_delay_sec_for_retry(cls, current_retry_num: int) -> float:
        return 0

    def run_task(self, n: int, *args: Any, **kwargs: Any) -> None:
        marker = f"failed-once-{self.task_id}"
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError(f"the first run of {self.task_id} fails")
        super().run_task(n, *args, **kwargs)
