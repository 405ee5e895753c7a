"""The check of a put's FLOW option: a concurrency key with its cap, and rate limits.

Keys and buckets are labels (`names.label`: 1 to 256 characters, no control character),
so engines may put them in their keys; counts and periods are bounded by `lanner.limits`.
"""

from __future__ import annotations

import math

from lanner.checks.names import label
from lanner.errors import MalformedArgument
from lanner.limits import (
    MAX_CONCURRENCY_PER_KEY,
    MAX_RATE_LIMIT,
    MAX_RATE_LIMITS_PER_JOB,
    MAX_RATE_PERIOD_SEC,
)
from lanner.records import Flow, RateLimit


def flow(value: object) -> Flow | None:
    """`value` checked, or None for a flow that holds nothing back."""
    if value is None:
        return None
    if not isinstance(value, Flow):
        raise MalformedArgument(f"flow must be a lanner.Flow, not {type(value).__name__}")
    key = None if value.concurrency_key is None else label(value.concurrency_key, "concurrency_key")
    cap = value.max_concurrency
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= MAX_CONCURRENCY_PER_KEY:
        raise MalformedArgument(
            f"max_concurrency must be an int from 0 to {MAX_CONCURRENCY_PER_KEY}, not {cap!r}"
        )
    if (key is None) != (cap == 0):
        raise MalformedArgument("concurrency_key and max_concurrency go together")
    if len(value.rates) > MAX_RATE_LIMITS_PER_JOB:
        raise MalformedArgument(f"a job takes at most {MAX_RATE_LIMITS_PER_JOB} rate limits")
    rates = tuple(rate_limit(rate) for rate in value.rates)
    fair = None if value.fair_key is None else label(value.fair_key, "fair_key")
    if key is None and not rates and fair is None:
        return None
    return Flow(key, cap, rates, fair)


def rate_limit(value: object) -> RateLimit:
    if not isinstance(value, RateLimit):
        raise MalformedArgument(f"rates must hold lanner.RateLimit values, not {value!r}")
    limit, period = value.limit, value.period
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RATE_LIMIT:
        raise MalformedArgument(f"a rate limit is 1 to {MAX_RATE_LIMIT} runs, not {limit!r}")
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or not math.isfinite(period)
        or not 0 < period <= MAX_RATE_PERIOD_SEC
    ):
        raise MalformedArgument(
            f"a rate limit's period is over 0 and at most {MAX_RATE_PERIOD_SEC:g} s, not {period!r}"
        )
    return RateLimit(label(value.bucket, "rate bucket"), limit, float(period))
