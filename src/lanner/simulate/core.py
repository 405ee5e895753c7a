"""The discrete-event core: simulated worker processes running Kale's loop over simulated queues.

Each worker follows `lanner.worker.loop.WorkerLoop._round`, with a real selector object:

    select a queue (the selector sees which queues have work, as cached by the worker for
    `ready_cache_sec`, and, if it asks, how long each one's next task has waited);
    block = the chosen queue had no work in that view
    up to num_iterations times: pop up to batch_size tasks; if none, the round ends (a
    blocking pop first waits up to long_poll_time_sec for an arrival); run the batch

The static baseline is the same loop with each worker given a single queue.

Speed comes from never making an event per task. A queue is a sorted list of arrival
times and the index of the first task not yet popped, so "what is waiting at time t" is a
bisection; events are only batch ends, poll deadlines, wake-ups of blocked workers at an
arrival, and depth samples. A batch's run time is the sum of its tasks' (one draw each, in
the queue's order, so a task runs as long under every policy).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Final

from lanner.queues import QueueConfig
from lanner.selectors import AgeAwareSelector, QueueSelector, resolve_selector
from lanner.simulate.arrivals import GRID_SEC, ArrivalStream
from lanner.simulate.distributions import RunTime
from lanner.simulate.results import DepthSeries, QueueResult, RunResult, WaitSummary
from lanner.simulate.scenario import STATIC, Scenario, SimQueue

__all__ = ["Progress", "simulate"]

Progress = Callable[[int, int], None]
"""Called now and then with (tasks popped so far, tasks expected in the whole run)."""

# Who an event is for: a worker's index, or one of these. Queue i's events have ids
# -2 - 2i (tasks arrived while workers wait on it) and -3 - 2i (a wait runs out).
_SAMPLER: Final = -1
_CHUNK_SEC: Final = GRID_SEC  # arrivals are drawn this far ahead of the clock
_DEPTH_SAMPLES: Final = 720
_PROGRESS_EVERY: Final = 1 << 14
_COMPACT_AT: Final = 1 << 16


class _Queue:
    __slots__ = (
        "arrivals",
        "batch",
        "busy",
        "config",
        "empty_polls",
        "expiry_pending",
        "generated_until",
        "head",
        "index",
        "iterations",
        "last_pop",
        "long_poll",
        "name",
        "rng",
        "run_time",
        "served",
        "starvation",
        "stream",
        "waiters",
        "waits",
        "wake_pending",
    )

    def __init__(self, index: int, spec: SimQueue, stream: ArrivalStream, rng: random.Random):
        config = spec.config
        self.index, self.config, self.name = index, config, config.name
        self.batch, self.iterations = config.batch_size, config.num_iterations
        self.long_poll = config.long_poll_time_sec
        self.run_time: RunTime = spec.run_time
        self.stream, self.rng = stream, rng
        self.arrivals: list[float] = []
        self.head = 0  # arrivals[head:] have not been popped
        self.generated_until = 0.0
        # Workers in a long poll on this queue with their deadlines, in the order they came
        # (so also by deadline); an arrival wakes the first, a deadline drops the first.
        self.waiters: deque[tuple[_Worker, float]] = deque()
        self.wake_pending = False
        self.expiry_pending = False
        self.last_pop = -math.inf
        self.starvation = 0.0
        self.waits: array[float] = array("d")
        self.served = 0
        self.busy = 0.0
        self.empty_polls = 0

    def has_work(self, now: float) -> bool:
        return self.head < len(self.arrivals) and self.arrivals[self.head] <= now

    def depth(self, now: float) -> int:
        return bisect.bisect_right(self.arrivals, now, self.head) - self.head


class _Worker:
    __slots__ = (
        "by_age",
        "cache_sec",
        "configs",
        "index",
        "iterations_left",
        "now",
        "queue",
        "queues",
        "ready_at",
        "ready_names",
        "selector",
    )

    def __init__(
        self, index: int, queues: tuple[_Queue, ...], selector: QueueSelector, cache_sec: float
    ) -> None:
        self.index, self.queues, self.selector, self.cache_sec = index, queues, selector, cache_sec
        # The selector again, if it wants the queues' ages (WorkerLoop asks the same way).
        self.by_age: AgeAwareSelector | None = (
            selector if isinstance(selector, AgeAwareSelector) else None
        )
        self.configs: tuple[QueueConfig, ...] = tuple(q.config for q in queues)
        self.now = 0.0
        self.ready_at = -math.inf
        self.ready_names: frozenset[str] = frozenset()
        self.queue = queues[0]
        self.iterations_left = 0

    def ready(self) -> frozenset[str]:
        """The queues with work, as WorkerLoop.ready_queues sees them (cached a moment)."""
        now = self.now
        if now - self.ready_at > self.cache_sec:
            names = []
            for queue in self.queues:
                arrivals, head = queue.arrivals, queue.head
                if head < len(arrivals) and arrivals[head] <= now:
                    names.append(queue.name)
            self.ready_names = frozenset(names)
            self.ready_at = now
        return self.ready_names

    def ages(self) -> dict[str, float]:
        """Per queue in the worker's view of those with work, how long its next task has been
        ready now, as WorkerLoop.queue_ages peeks it (a queue found empty is left out)."""
        now, names, ages = self.now, self.ready(), {}
        for queue in self.queues:
            if queue.name in names:
                arrivals, head = queue.arrivals, queue.head
                if head < len(arrivals) and arrivals[head] <= now:
                    ages[queue.name] = now - arrivals[head]
        return ages


def simulate(scenario: Scenario, policy: str, progress: Progress | None = None) -> RunResult:
    """Run `scenario` with `policy` (a selector's name, or "static") and return the results."""
    return _Simulation(scenario, policy, progress).run()


class _Simulation:
    def __init__(self, scenario: Scenario, policy: str, progress: Progress | None) -> None:
        self.scenario, self.policy, self.progress = scenario, policy, progress
        seed = scenario.seed
        self.queues = tuple(
            _Queue(
                index,
                spec,
                ArrivalStream(spec.arrivals, _rng(seed, "arrivals", spec.name), scenario.duration),
                _rng(seed, "run", spec.name),
            )
            for index, spec in enumerate(scenario.queues)
        )
        self.by_name = {q.name: q for q in self.queues}
        self.assignment = scenario.static_workers() if policy == STATIC else None
        self.workers = self._workers()
        window = scenario.measured
        self.window_start, self.window_end = window.start, window.end
        costs = scenario.costs
        self.pop_sec, self.task_sec, self.wake_sec = costs.pop_sec, costs.task_sec, costs.wake_sec
        # (time, who): ties go by who, so the order is reproducible. A worker has one event
        # pending, or none while it waits in a long poll.
        self.heap: list[tuple[float, int]] = []
        self.horizon = 0.0
        self.generated = self.pending = self.popped = 0
        self.all_generated = False
        self.stopped = False
        self.last_pop = 0.0
        self.cut_at: float | None = None  # when the drain limit stopped the run
        self.expected = round(
            sum(q.arrivals.expected(0, scenario.duration) for q in scenario.queues)
        )
        self.sample_step = max(scenario.duration / _DEPTH_SAMPLES, 1e-3)
        self.sample_times: list[float] = []
        self.samples: list[list[int]] = [[] for _ in self.queues]

    def _workers(self) -> list[_Worker]:
        scenario, seed = self.scenario, self.scenario.seed
        if self.assignment is None:
            specs = [(self.queues, self.policy)] * scenario.workers
        else:
            specs = [
                ((self.by_name[name],), "ordered")
                for name, count in self.assignment.items()
                for _ in range(count)
            ]
        return [
            _Worker(
                i,
                queues,
                resolve_selector(name, rng=_rng(seed, "worker", i)),
                scenario.ready_cache_sec,
            )
            for i, (queues, name) in enumerate(specs)
        ]

    # -- the event loop ---------------------------------------------------------------------
    def run(self) -> RunResult:
        started = time.perf_counter()
        for worker in self.workers:
            self._push(0.0, worker)
        heapq.heappush(self.heap, (0.0, _SAMPLER))
        limit = self.scenario.duration + self.scenario.drain_limit
        heap, pop, workers, queues = self.heap, heapq.heappop, self.workers, self.queues
        events = 0
        while heap and not self.stopped:
            now, who = pop(heap)
            if now > limit:
                self.cut_at = limit
                break
            if now >= self.horizon:
                self._generate(now)
                if self.stopped:
                    break
            if who >= 0:
                self._advance(workers[who], now)
            elif who == _SAMPLER:
                self._sample(now)
            else:
                index, expiry = divmod(-2 - who, 2)
                if expiry:
                    self._expire(queues[index], now)
                else:
                    self._wake(queues[index], now)
            events += 1
            if not events % _PROGRESS_EVERY and self.progress is not None:
                self.progress(self.popped, self.expected)
        if self.progress is not None:
            self.progress(self.popped, self.popped)
        return self._result(time.perf_counter() - started)

    def _push(self, when: float, worker: _Worker) -> None:
        heapq.heappush(self.heap, (when, worker.index))

    def _generate(self, now: float) -> None:
        """Draw every queue's arrivals up to a chunk past `now`."""
        until = now + _CHUNK_SEC
        for queue in self.queues:
            self._generate_queue(queue, until)
        self.horizon = min(q.generated_until for q in self.queues)
        if self.horizon == math.inf:
            self.all_generated = True
            if self.pending == 0:
                self.stopped = True

    def _generate_queue(self, queue: _Queue, until: float) -> None:
        if until <= queue.generated_until:
            return
        drawn = queue.stream.window(until)
        if drawn:
            if queue.head >= _COMPACT_AT and 2 * queue.head >= len(queue.arrivals):
                del queue.arrivals[: queue.head]
                queue.head = 0
            queue.arrivals.extend(drawn)
            self.pending += len(drawn)
            self.generated += len(drawn)
        queue.generated_until = math.inf if queue.stream.done else queue.stream.reached

    # -- one worker -------------------------------------------------------------------------
    def _advance(self, worker: _Worker, now: float) -> None:
        """The worker is free at `now`: pop the next batch of its round, or select a queue."""
        if worker.iterations_left > 0:
            queue = worker.queue
            taken = self._take(queue, now) if queue.has_work(now) else 0
            if taken:
                self._run_batch(worker, queue, now, taken)
                return
            self._empty_pop(worker, now)  # ran dry mid-round: back to the selector
            return
        worker.now = now
        if worker.by_age is not None:
            chosen = worker.by_age.select_by_age(worker.configs, worker.ready, worker.ages)
        else:
            chosen = worker.selector.select(worker.configs, worker.ready)
        queue = self.by_name[chosen.name]
        block = queue.name not in worker.ready()
        worker.queue, worker.iterations_left = queue, queue.iterations
        taken = self._take(queue, now) if queue.has_work(now) else 0
        if taken:
            self._run_batch(worker, queue, now, taken)
        elif not block or queue.long_poll <= 0:
            self._empty_pop(worker, now)
        else:
            self._block(worker, queue, now)

    def _empty_pop(self, worker: _Worker, now: float) -> None:
        worker.ready_at = -math.inf  # WorkerLoop forgets its view of the queues after one
        worker.iterations_left = 0
        self._push(now + self.pop_sec, worker)

    def _block(self, worker: _Worker, queue: _Queue, now: float) -> None:
        queue.waiters.append((worker, now + queue.long_poll))
        if not queue.expiry_pending:
            self._arm_expiry(queue)
        self._arm(queue)

    def _run_batch(self, worker: _Worker, queue: _Queue, now: float, taken: int) -> None:
        run = queue.run_time.total(queue.rng, taken)
        start = now + self.pop_sec
        overlap = min(start + run, self.window_end) - max(start, self.window_start)
        if overlap > 0:
            queue.busy += overlap
        end = start + run + taken * self.task_sec
        worker.iterations_left -= 1
        if worker.iterations_left > 0:
            # Arrivals are drawn ahead: if none comes before the batch ends, the next pop is
            # sure to come back empty, so skip to the selection after it (one event fewer).
            if end >= queue.generated_until:
                self._generate_queue(queue, end + _CHUNK_SEC)
            if not queue.has_work(end):
                worker.iterations_left = 0
                worker.ready_at = -math.inf
                end += self.pop_sec
        self._push(end, worker)

    # -- queues -----------------------------------------------------------------------------
    def _take(self, queue: _Queue, now: float) -> int:
        """Pop up to a batch of the tasks waiting at `now`; record their waits."""
        arrivals, head = queue.arrivals, queue.head
        end = bisect.bisect_right(arrivals, now, head, min(len(arrivals), head + queue.batch))
        taken = end - head
        if not taken:
            return 0
        oldest = arrivals[head]
        start, stop = self.window_start, self.window_end
        # The queue has had work, and no pop, since its oldest task came or its last pop.
        unserved_since = oldest if oldest > queue.last_pop else queue.last_pop
        spell = now - unserved_since
        if spell > queue.starvation and now >= start and unserved_since < stop:
            queue.starvation = spell
        queue.last_pop = now
        if start <= oldest and arrivals[end - 1] < stop:
            low, high = head, end
        else:
            low = bisect.bisect_left(arrivals, start, head, end)
            high = bisect.bisect_left(arrivals, stop, low, end)
        if high > low:
            queue.waits.extend([now - arrival for arrival in arrivals[low:high]])
        if start <= now < stop:
            queue.served += taken
        queue.head = end
        self.popped += taken
        self.pending -= taken
        self.last_pop = now
        if not self.pending and self.all_generated:
            self.stopped = True
        return taken

    def _arm(self, queue: _Queue) -> None:
        """Make sure a blocked worker is woken at the queue's next arrival, if it comes in time."""
        if queue.wake_pending or not queue.waiters:
            return
        latest = queue.waiters[-1][1]
        self._generate_queue(queue, latest + 1e-9)
        if queue.head < len(queue.arrivals) and queue.arrivals[queue.head] <= latest:
            queue.wake_pending = True
            when = queue.arrivals[queue.head] + self.wake_sec
            heapq.heappush(self.heap, (when, -2 - 2 * queue.index))

    def _arm_expiry(self, queue: _Queue) -> None:
        queue.expiry_pending = True
        heapq.heappush(self.heap, (queue.waiters[0][1], -3 - 2 * queue.index))

    def _expire(self, queue: _Queue, now: float) -> None:
        """Long polls on the queue ran out empty: those workers choose again after the pop."""
        queue.expiry_pending = False
        waiters = queue.waiters
        while waiters and waiters[0][1] <= now:
            worker = waiters.popleft()[0]
            queue.empty_polls += 1
            self._empty_pop(worker, now)
        if waiters:
            self._arm_expiry(queue)

    def _wake(self, queue: _Queue, now: float) -> None:
        """Tasks arrived in a queue with blocked workers: the first in line pop them."""
        queue.wake_pending = False
        waiters = queue.waiters
        while waiters:
            taken = self._take(queue, now)
            if not taken:
                break
            self._run_batch(waiters.popleft()[0], queue, now, taken)
        self._arm(queue)

    def _sample(self, now: float) -> None:
        if now > self.scenario.duration and not self.pending:
            return
        self.sample_times.append(now)
        for queue, samples in zip(self.queues, self.samples, strict=True):
            samples.append(queue.depth(now))
        heapq.heappush(self.heap, (now + self.sample_step, _SAMPLER))

    # -- results ----------------------------------------------------------------------------
    def _result(self, elapsed: float) -> RunResult:
        scenario = self.scenario
        end = self.last_pop if self.cut_at is None else self.cut_at
        span = scenario.measured
        results = []
        for queue in self.queues:
            arrivals, head = queue.arrivals, queue.head
            waiting = arrivals[head : bisect.bisect_right(arrivals, end, head)]
            censored = [end - a for a in waiting if span.start <= a < min(span.end, end)]
            if waiting:
                unserved_since = max(queue.last_pop, waiting[0])
                queue.starvation = max(queue.starvation, end - unserved_since)
            results.append(
                QueueResult(
                    name=queue.name,
                    priority=queue.config.priority,
                    workers=None if self.assignment is None else self.assignment[queue.name],
                    wait=WaitSummary.of(list(queue.waits) + censored),
                    throughput=queue.served / span.length,
                    starvation=queue.starvation,
                    busy_share=queue.busy / (span.length * len(self.workers)),
                    empty_polls=queue.empty_polls,
                    unserved=len(waiting),
                )
            )
        return RunResult(
            scenario=scenario.name,
            policy=self.policy,
            workers=len(self.workers),
            seed=scenario.seed,
            window=span,
            offered_load=scenario.utilisation_offered(span),
            queues=tuple(results),
            utilisation=sum(q.busy for q in self.queues) / (span.length * len(self.workers)),
            tasks=self.popped,
            simulated=end,
            elapsed=elapsed,
            depth=DepthSeries(
                tuple(self.sample_times),
                {q.name: tuple(s) for q, s in zip(self.queues, self.samples, strict=True)},
            ),
        )


def _rng(seed: int, purpose: str, key: object) -> random.Random:
    """An independent, reproducible random stream per purpose (str seeds hash with SHA-512,
    unaffected by PYTHONHASHSEED)."""
    return random.Random(f"lanner-simulate:{seed}:{purpose}:{key}")
