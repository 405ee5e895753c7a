"""Publishes a FibonacciTask, or a FlakyFibonacciTask with --flaky (Kale's example/publisher.py)."""

import argparse

# Found from the working directory, as in Kale's example (mypy, run from the root, cannot).
from taskworker import tasks  # type: ignore[import-not-found]

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int, help="The input of the fibonacci task.")
    parser.add_argument("--flaky", action="store_true", help="Fail the first run.")
    args = parser.parse_args()

    task = tasks.FlakyFibonacciTask if args.flaky else tasks.FibonacciTask
    task_id = task.publish(None, args.n)
    print(f"A {task.__name__} is scheduled to run with input {args.n}: {task_id}")
