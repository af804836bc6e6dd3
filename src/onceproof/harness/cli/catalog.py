"""``onceproof faults``: the fault catalogue (``nemesis/catalog.py``), one entry per fault."""

from __future__ import annotations

import sys

from onceproof.backends import registry
from onceproof.backends.base import can_perform
from onceproof.backends.common import netem
from onceproof.harness.cli.app import console
from onceproof.nemesis import catalog


def backends_of(name: str) -> list[str]:
    """The registered backends (``backends/registry.py``) that perform every target of fault ``name``
    (their derived ``capabilities``, ``backends/capabilities.py``)."""
    out = []
    for b in registry.names():
        caps = registry.get(b).capabilities
        if all(can_perform(caps, s) for s in catalog.expand(name)):
            out.append(b)
    return out


def faults() -> None:
    """List the faults, their targets, the backends that perform them and what each one does."""
    for name, cls in catalog.FAULTS.items():
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip()
        targets = ", ".join(getattr(cls, "target_choices", ())) or "-"
        backends = ", ".join(backends_of(name)) or "-"
        console.print(f"[bold]{name}[/]  targets: {targets}  backends: {backends}\n"
                      f"  {doc.splitlines()[0] if doc else ''}")
        if name in catalog.LOSSY:  # said here, detected now: netem's delay/reorder/duplicate are no target
            console.print(f"  netem delay/reorder/duplicate: not offered: {netem.unavailable()}", soft_wrap=True)
