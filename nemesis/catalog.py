"""Every fault by its CLI name."""

from __future__ import annotations

from nemesis.commit_window import KillDriverInCommitWindow
from nemesis.fault import Fault
from nemesis.kill_executor import KillExecutor

FAULTS = {
    KillExecutor.name: KillExecutor,
    KillDriverInCommitWindow.name: KillDriverInCommitWindow,
}


def parse(spec: str) -> list[str]:
    """``"a,b"`` / ``"all"`` / ``"none"`` → fault names.

    Raises: ``ValueError`` naming the unknown fault and listing the known ones.
    """
    spec = (spec or "none").strip()
    if spec in ("", "none"):
        return []
    if spec == "all":
        return list(FAULTS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in FAULTS]
    if bad:
        raise ValueError(f"unknown nemesis {', '.join(bad)}; choose from: {', '.join(FAULTS)}, all, none")
    return list(dict.fromkeys(names))


def build(names: list[str]) -> dict[str, Fault]:
    """Instantiate the named faults."""
    return {n: FAULTS[n]() for n in names}
