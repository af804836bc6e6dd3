"""A broker's log directory on this host as a :class:`onceproof.backends.base.LogDir`: the local and docker
backends' (the docker backend's is the bind mount of the container's data directory). Paths are relative to
the directory, ``/``-separated (``output-3/00000000000000000000.log``)."""

from __future__ import annotations

import os
from pathlib import Path


class LocalDir:
    """The directory ``path`` on this host."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def listdir(self, rel: str = "") -> list[str]:
        """Names in ``rel`` (``""``: the directory itself), sorted; ``[]`` when it does not exist."""
        try:
            return sorted(os.listdir(self.path / rel))
        except OSError:
            return []

    def read(self, rel: str) -> bytes:
        """The file's bytes. Raises ``OSError``."""
        return (self.path / rel).read_bytes()

    def write_at(self, rel: str, pos: int, data: bytes) -> None:
        """Write ``data`` over the file's bytes from ``pos`` in place and fsync it. Raises ``OSError``."""
        with open(self.path / rel, "r+b") as f:
            f.seek(pos)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def size(self, rel: str) -> int | None:
        """The file's length (bytes), ``None`` when it does not exist."""
        try:
            return (self.path / rel).stat().st_size
        except OSError:
            return None

    def where(self, rel: str = "") -> str:
        """Where ``rel`` is, for the evidence (a path on this host)."""
        return str(self.path / rel) if rel else str(self.path)
