"""Fixtures of the worker-loop tests (they live in world.py, with the test tasks)."""

from .world import clean_globals, world, worlds

__all__ = ["clean_globals", "world", "worlds"]
