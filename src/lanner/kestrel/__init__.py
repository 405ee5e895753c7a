"""Kestrel's side of lanner: its memcache text protocol served in front of any engine.

`protocol` parses requests and formats replies, `items` keeps memcache values as jobs,
`batcher` and `front` turn many clients' requests into few engine calls, and `server` runs
the connections (`lanner serve`, docs/kestrel.md).
"""

from lanner.kestrel.server import DEFAULT_PORT, KestrelServer, ServerThread, serve

__all__ = ["DEFAULT_PORT", "KestrelServer", "ServerThread", "serve"]
