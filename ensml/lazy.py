"""Names of a package imported on first access (PEP 562), so that importing it stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(
    namespace: dict[str, Any], table: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose ``table`` maps a name to its module.

    Use in the package's ``__init__``: ``__getattr__, __dir__ = lazy_names(globals(), {...})``.
    A name is imported once, then kept in the package's namespace.
    """

    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
