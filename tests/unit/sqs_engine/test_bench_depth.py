"""`lanner bench depth` on SQS: it runs, and counts the requests each step sends."""

from __future__ import annotations

from lanner.tools.bench.depth import run_depth_bench


def test_bench_depth_counts_sqs_requests_per_step(sqs_fresh_url: str) -> None:
    result = run_depth_bench(sqs_fresh_url, [10, 30], queues=1, samples=3)
    later = result.points[1]
    assert later.bytes_per_job is None  # SQS has no size to ask
    assert later.requests is not None
    # The queue exists by then: a fill of 20 is two SendMessageBatch calls. (status's count
    # depends on how long its cached counts last, so on the machine's speed: not pinned.)
    assert later.requests["fill_per_job"] == 0.1
    assert later.requests["pop_complete"] == 2.0  # ReceiveMessage, DeleteMessageBatch
    assert later.requests["put"] == 1.0
