"""The onceproof cache: ``$ONCEPROOF_CACHE``, default ``~/.cache/onceproof`` (jars, the toxiproxy binary,
port leases, the ``cluster up`` directory), the same whatever the working directory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of the onceproof cache."""
    return Path(os.environ.get("ONCEPROOF_CACHE", Path.home() / ".cache" / "onceproof"))
