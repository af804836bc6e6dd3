"""The backends by name: what ``--backend`` chooses from.

Each entry names the class as ``module:attribute`` and is imported only when chosen, so listing the
names (``onceproof run --help``) or validating a config costs no backend's imports. A new backend is a
package under ``backends/`` and one line here.

A backend that needs a file to know its machines (``ssh``: ``--nodes nodes.toml``; ``external``:
``--cluster cluster.toml``) is made by its class's ``from_options(BackendOptions)``; the others take none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onceproof.backends.base import Backend, BackendError
from onceproof.registry import Registry

BACKENDS: dict[str, str] = {
    "local": "onceproof.backends.local.backend:LocalBackend",
    "docker": "onceproof.backends.docker.backend:DockerBackend",
    "ssh": "onceproof.backends.ssh.backend:SshBackend",
    "external": "onceproof.backends.external.backend:ExternalBackend",
}
DEFAULT = "local"

_REGISTRY = Registry("backend", BACKENDS, BackendError)
names = _REGISTRY.names
_made: dict[str, Backend] = {}


@dataclass(frozen=True)
class BackendOptions:
    """What a backend needs beyond its name.

    Attributes:
        nodes: ``--nodes``, the ssh backend's ``nodes.toml``.
        cluster: ``--cluster``, the external backend's ``cluster.toml``.
    """

    nodes: Path | None = None
    cluster: Path | None = None

    def given(self) -> list[str]:
        """The options set, as their flags (``["--nodes"]``)."""
        return [f"--{k}" for k in ("nodes", "cluster") if getattr(self, k) is not None]


NONE = BackendOptions()
_made_with: dict[tuple[str, BackendOptions], Backend] = {}


def backend_class(name: str) -> type:
    """The class of the backend called ``name``, imported now (for what it says of itself without being
    made: ``file_sinks``, ``user_pipelines``, ``databases``, its derived capabilities).

    Raises: ``BackendError`` naming the known backends when ``name`` is not one of them."""
    return _REGISTRY.get(name)


def get(name: str, options: BackendOptions = NONE) -> Backend:
    """The backend called ``name`` made with ``options`` (one instance per name and options per process).

    Raises: ``BackendError`` naming the known backends when ``name`` is not one of them, when the backend
    takes no options and some are given, or when its ``from_options`` refuses them (a missing or broken
    file, named with the fix).
    """
    cls = backend_class(name)
    make = getattr(cls, "from_options", None)
    if make is None:
        if options != NONE:
            raise BackendError(f"--backend {name} takes no {' or '.join(options.given())}; it starts its own "
                               "cluster")
        if name not in _made:
            _made[name] = cls()
        return _made[name]
    key = (name, options)
    if key not in _made_with:
        _made_with[key] = make(options)
    return _made_with[key]
