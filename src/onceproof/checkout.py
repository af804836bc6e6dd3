"""Where onceproof's own files are: the import root, the package data, and the source checkout if any.

An installed wheel has the package (``site-packages/onceproof``) and its data (the Maven poms) but no
checkout: the Docker backend's image recipes (``docker/``) and ``pyproject.toml`` live only in a git
checkout, so :func:`repository` returns ``None`` there and callers that need it say so.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""``.../onceproof``: the package directory."""

IMPORT_ROOT = PACKAGE.parent
"""The directory to put on ``PYTHONPATH`` so that ``import onceproof`` finds this copy (``src/`` in a
checkout, ``site-packages`` when installed)."""

DEPS = PACKAGE / "deps"
"""The Maven poms that pin Kafka and Spark's Kafka connector (package data)."""


def repository() -> Path | None:
    """The git checkout this package was imported from (the directory holding ``pyproject.toml`` and
    ``docker/``), or ``None`` for an installed wheel."""
    root = IMPORT_ROOT.parent
    return root if (root / "pyproject.toml").is_file() and (root / "src" / "onceproof").is_dir() else None
