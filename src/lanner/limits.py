"""The upper bounds of every size and time a user gives lanner: values only, in one place.

The checks that apply them stay with what they check (the command line's options,
`settings`, `queues`, the engine contract's `values` and `checks`, `WorkerPool`); each reads
its bound here, so a bound is changed once and said the same way everywhere. A bound is
there to refuse a typo or a unit mistake (`-c 10000`, a delay in milliseconds) with a
one-line error before it forks a thousand processes or stores a date no one can show,
never to limit a sane deployment.
"""

from __future__ import annotations

from typing import Final

# -- processes ----------------------------------------------------------------------------
MAX_PROCESSES: Final = 256
"""Worker processes of one pool (`lanner worker -c`), and any other count of processes a
command starts. The supervisor holds three file descriptors per process (its report pipe,
and multiprocessing's two pipe ends that tell each side the other exited): 256 processes
take 768 of the 1024 a process may open by default, leaving room for the store's
connections and the metrics server, where 1000 processes run out of descriptors mid-start.
Each process is a Python interpreter with the app imported (tens of MB), and runs one task
at a time (or `-t` at once): past the machine's cores only tasks that wait on I/O gain,
and those gain more from `-t` than from processes; more than this is more than one
machine's worth (docs/worker.md)."""

MAX_TASKS_PER_PROCESS: Final = 10_000
"""Jobs one worker process runs at once (`lanner worker -t`). An async job in flight costs
a few KB and one slot of its event loop; past thousands per process the loop spends its
time scheduling, and the store's pops and heartbeats carry that many jobs each."""

MAX_THREADS: Final = 1_000
"""Threads one worker process runs sync tasks in (`lanner worker --threads`): each holds
its stack (8 MB of address space) and contends for the GIL."""

MAX_TASKS_PER_CHILD: Final = 10_000_000
"""`max_tasks_per_child`: more is "never" (leave it unset)."""

MAX_MEMORY_MB: Final = 1_048_576
"""`max_memory_per_child_mb` / `DIE_ON_RESIDENT_SET_SIZE_MB`: 1 TiB."""

MAX_SHUTDOWN_TIMEOUT_SEC: Final = 86_400.0
"""`shutdown_timeout_sec`: a day."""

MAX_TIME_LIMIT_GRACE_SEC: Final = 3_600.0
"""`time_limit_grace_sec`: an hour past a task's time limit before its process is killed."""

# -- queues -------------------------------------------------------------------------------
MAX_QUEUE_PRIORITY: Final = 10_000
"""A queue's `priority` (lottery tickets; Kale suggests 1 to 100)."""

MAX_BATCH_SIZE: Final = 1_000
"""`batch_size`: jobs per pop (SQS gives at most 10; a batch is one process's to run)."""

MAX_NUM_ITERATIONS: Final = 10_000
"""`num_iterations`: batches a worker takes from a queue before it selects again."""

MAX_LONG_POLL_SEC: Final = 600.0
"""`long_poll_time_sec`: ten minutes on one empty queue without looking at the others."""

MAX_LEASE_SEC: Final = 43_200.0
"""`visibility_timeout_sec`, the lock a batch gets: 12 hours, SQS's longest visibility
timeout (the engine's own `heartbeat` settings are bounded as delays are)."""

MAX_OPEN_TRANSACTIONS: Final = 1_000
"""`lanner serve --max-open-transactions`: items one client holds open per queue."""

MAX_CONNECTIONS: Final = 100_000
"""`lanner serve --max-connections`, per process, and the connections of `lanner bench
kestrel`. Each connection holds a file descriptor and a few KB; past this one process spends
its time in its event loop's bookkeeping, and more processes (`--processes`) serve more."""

# -- times and numbers the engines store --------------------------------------------------
MAX_DELAY_SEC: Final = 315_576_000.0
"""A delay until a job is due (publish, release, retry, retry backoffs, a recurring job's
interval and first offset, a queue's `max_age`), and the engine's leases (`heartbeat`,
`<queue>-heartbeat`, `grace-period`): ten years of 365.25 days."""

MAX_TIMESTAMP: Final = 253_402_300_799.0
"""The latest Unix time lanner takes (`now`, `expires_at`): 9999-12-31 23:59:59 UTC, the
last second a date can be shown."""

MAX_INTEGER: Final = 10**14 - 1
"""The largest integer every engine keeps exactly: 14 digits, what Redis's Lua JSON
encoder writes of a number (a Lua number is a double, exact to 2**53)."""

# -- flow control (docs/flow-control.md) ---------------------------------------------------
MAX_RATE_LIMIT: Final = 100_000
"""Runs a rate limit lets start per period (`rate_limit="100/m"`): the store keeps the start
time of each run of the last period, so a bound on runs is one on that memory."""

MAX_RATE_PERIOD_SEC: Final = 86_400.0
"""A rate limit's period: a day ("/d"); a longer one is a quota, not a rate."""

MAX_CONCURRENCY_PER_KEY: Final = 100_000
"""`max_concurrency`: jobs of one key running at once (a pop counts them)."""

MAX_RATE_LIMITS_PER_JOB: Final = 8
"""Rate limits one job is held by (its task's, its key's, its queue's...)."""

# -- benchmarks and tools -----------------------------------------------------------------
MAX_RUN_JOBS: Final = 10_000_000
"""Jobs, items or samples one run of `lanner bench`, `chaos` or `simulate` makes."""
