"""``onceproof faults``: the fault catalogue (``nemesis/catalog.py``), one entry per fault."""

from __future__ import annotations

import sys

from onceproof.backends import capabilities, registry
from onceproof.backends.base import can_perform
from onceproof.backends.common import netem, tmpfs
from onceproof.harness.cli.app import console
from onceproof.nemesis import catalog


def backends_of(name: str) -> list[str]:
    """The backends (``backends/registry.py``) that can perform fault ``name``: all of its targets, or
    ``name (targets...)`` for some of them. The backend classes are imported, none is started."""
    out = []
    for b in registry.names():
        caps = capabilities.of_class(registry.backend_class(b))
        specs = catalog.expand(name)
        able = [s for s in specs if can_perform(caps, s)]
        if len(able) == len(specs):
            out.append(b)
        elif able:
            out.append(f"{b} ({', '.join(s.partition(':')[2] for s in able)})")
    return out


def faults() -> None:
    """List the faults, their targets, the backends that can perform them and what each one does."""
    for name, cls in catalog.FAULTS.items():
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip()
        targets = ", ".join(getattr(cls, "target_choices", ())) or "-"
        where = ", ".join(backends_of(name)) or "none"
        console.print(f"[bold]{name}[/]  targets: {targets}  backends: {where}\n  {doc.splitlines()[0] if doc else ''}")
        if name in catalog.LOSSY:  # said here, detected now: netem's delay/reorder/duplicate are no target
            console.print(f"  netem delay/reorder/duplicate: not offered: {netem.unavailable()}", soft_wrap=True)
        if catalog.needs_small_disks([name]):  # said here, probed now: the brokers' tmpfs needs mount privileges
            why = tmpfs.unavailable()
            console.print(f"  size-limited broker disks (tmpfs): {'available here' if why is None else why}",
                          soft_wrap=True)
