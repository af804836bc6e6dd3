"""The backends by name: what ``--backend`` chooses from.

Each entry names the class as ``module:attribute`` and is imported only when chosen, so listing the
names (``onceproof run --help``) or validating a config costs no backend's imports. A new backend is a
package under ``backends/`` and one line here.
"""

from __future__ import annotations

import pkgutil

from onceproof.backends.base import Backend, BackendError

BACKENDS: dict[str, str] = {
    "local": "onceproof.backends.local.backend:LocalBackend",
    "docker": "onceproof.backends.docker.backend:DockerBackend",
}
DEFAULT = "local"

_made: dict[str, Backend] = {}


def names() -> list[str]:
    """The backends' names, in registration order."""
    return list(BACKENDS)


def get(name: str) -> Backend:
    """The backend called ``name`` (one instance per process).

    Raises: ``BackendError`` naming the known backends when ``name`` is not one of them.
    """
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name not in _made:
        _made[name] = pkgutil.resolve_name(BACKENDS[name])()  # "module:class", imported now
    return _made[name]
