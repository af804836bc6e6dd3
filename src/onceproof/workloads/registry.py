"""The workloads by name: what ``--workload`` chooses from (``workloads/base.py`` says what one is).

Each entry names the workload object as ``module:attribute``, imported only when chosen (listing the
names for ``--help`` costs no import). A new workload is one module and one line here.
"""

from __future__ import annotations

from onceproof.registry import Registry
from onceproof.workloads.base import Workload

WORKLOADS: dict[str, str] = {
    "keyed": "onceproof.workloads.keyed:WORKLOAD",
    "counter": "onceproof.workloads.counter:WORKLOAD",
}
DEFAULT = "keyed"
_REGISTRY = Registry("workload", WORKLOADS)
names = _REGISTRY.names


def get(name: str) -> Workload:
    """The workload called ``name``.

    Raises: ``ValueError`` naming the known workloads when ``name`` is not one of them.
    """
    return _REGISTRY.get(name)
