"""The backends by name: what ``--backend`` chooses from.

Each entry names the class as ``module:attribute`` and is imported only when chosen, so listing the
names (``onceproof run --help``) or validating a config costs no backend's imports. A new backend is a
package under ``backends/`` and one line here.
"""

from __future__ import annotations

from onceproof.backends.base import Backend, BackendError
from onceproof.registry import Registry

BACKENDS: dict[str, str] = {
    "local": "onceproof.backends.local.backend:LocalBackend",
    "docker": "onceproof.backends.docker.backend:DockerBackend",
}
DEFAULT = "local"

_REGISTRY = Registry("backend", BACKENDS, BackendError)
names = _REGISTRY.names
_made: dict[str, Backend] = {}


def get(name: str) -> Backend:
    """The backend called ``name`` (one instance per process).

    Raises: ``BackendError`` naming the known backends when ``name`` is not one of them.
    """
    if name not in _made:
        _made[name] = _REGISTRY.get(name)()  # the class, imported now
    return _made[name]
