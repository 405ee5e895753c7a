"""Benchmarks of lanner on this machine: `lanner bench ...` and the helpers behind it."""
