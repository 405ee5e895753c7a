"""Runs the task worker until SIGTERM or Ctrl-C (Kale's `example/worker.py`)."""

from lanner import worker

if __name__ == "__main__":
    print("Task worker is running ...", flush=True)
    worker.Worker().run()
