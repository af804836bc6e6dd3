"""A registry of named entries, each given as ``"module:attribute"`` and imported only when chosen.

Listing the names (for ``--help``, or validating a config) imports nothing of the entries, so a heavy or
optional dependency of one entry (pyspark, the docker SDK) costs nothing until it is used. The sinks,
workloads, backends and check engines each keep one, and a new entry is one module plus one line in it.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Mapping
from typing import Any


class Registry:
    """Entries by name, in registration order.

    Args:
        kind: what an entry is, for error messages ("sink", "workload", ...).
        entries: ``{name: "module:attribute"}``. An attribute that is a mapping holds several entries by
            name (e.g. the sink mutants, generated from one table).
        error: the exception class raised for an unknown name (``ValueError`` unless the caller's layer has
            its own, e.g. ``BackendError``).
    """

    def __init__(self, kind: str, entries: dict[str, str], error: type[Exception] = ValueError) -> None:
        self.kind = kind
        self.entries = entries
        self.error = error

    def names(self) -> list[str]:
        """The entries' names, in registration order (imports nothing)."""
        return list(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def get(self, name: str) -> Any:
        """The entry called ``name``, imported now.

        Raises: ``self.error`` naming the known entries when ``name`` is not one of them.
        """
        if name not in self.entries:
            raise self.error(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.entries)}")
        entry = pkgutil.resolve_name(self.entries[name])
        return entry[name] if isinstance(entry, Mapping) else entry
