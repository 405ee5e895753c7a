"""Prometheus metrics (`pip install 'lanner[metrics]'`); docs/metrics.md names every one.

    engine   `EngineCollector`: a store's queues, failure groups, workers and today's
             wait/run statistics, read from the engine at scrape time; `render(engine)`,
             the body and content type of one scrape (the web dashboard's `/metrics`)
    pool     `PoolMetrics`: a worker pool's own counters and histograms, kept by its
             supervisor from its children's reports, and `MetricsServer`, the HTTP server
             of `lanner worker --metrics-port`, which never runs while the supervisor forks

`import lanner` does not import this package: prometheus_client is optional.
"""

from lanner.metrics.engine import EngineCollector, render
from lanner.metrics.pool import MetricsServer, PoolMetrics

__all__ = ["EngineCollector", "MetricsServer", "PoolMetrics", "render"]
