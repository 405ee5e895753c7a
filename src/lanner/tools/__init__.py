"""Tools shipped with lanner but outside its core: `lanner bench` and `lanner chaos`.

Only the CLI (loaded lazily) and the tests import them (tests/unit/test_cli_tools.py).
"""
