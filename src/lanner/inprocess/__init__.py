"""Running tasks inside the calling process: eager mode, and the loop an async task's
coroutine runs on when no worker's loop is there."""
