"""``onceproof faults``: the fault catalogue (``nemesis/catalog.py``), one entry per fault."""

from __future__ import annotations

import sys

from onceproof.backends.common import netem
from onceproof.harness.cli.app import console
from onceproof.nemesis import catalog


def faults() -> None:
    """List the faults, their targets and what each one does."""
    for name, cls in catalog.FAULTS.items():
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip()
        targets = ", ".join(getattr(cls, "target_choices", ())) or "-"
        console.print(f"[bold]{name}[/]  targets: {targets}\n  {doc.splitlines()[0] if doc else ''}")
        if name in catalog.LOSSY:  # said here, detected now: netem's delay/reorder/duplicate are no target
            console.print(f"  netem delay/reorder/duplicate: not offered: {netem.unavailable()}", soft_wrap=True)
