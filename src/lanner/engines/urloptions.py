"""Engine options from a broker URL's query string: one parser for every engine's options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from lanner.errors import MalformedArgument

Options = TypeVar("Options")


def options_from_query(cls: type[Options], query: Mapping[str, str], engine: str) -> Options:
    """Build the options dataclass `cls` from URL query parameters, typed by its fields.

    Unknown names and numbers that do not parse are errors naming the option; the
    dataclass itself checks the values.
    """
    known = {field.name: field.type for field in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise MalformedArgument(
            f"unknown {engine} option(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    values: dict[str, Any] = {}
    for name, text in query.items():
        try:
            if known[name] == "int":
                values[name] = int(text)
            elif known[name] == "float":
                values[name] = float(text)
            else:
                values[name] = text
        except ValueError:
            raise MalformedArgument(f"{engine} option {name}={text!r} is not a number") from None
    return cls(**values)
