"""The Redis engine: a qless-compatible Lua script (see script.py and lua/layout.lua)."""
