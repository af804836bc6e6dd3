"""Every fault by its CLI name. A spec is ``name`` or ``name:target`` (e.g. ``kill-broker:txn-coordinator``,
``commit-delay:txn-timeout``); without a target, each invocation draws one from the seeded RNG."""

from __future__ import annotations

from nemesis.broker import KillBroker, PauseBroker
from nemesis.commit_delay import CommitDelay
from nemesis.commit_window import KillDriverInCommitWindow
from nemesis.fault import Fault
from nemesis.kill_driver import KillDriver
from nemesis.kill_executor import KillExecutor
from nemesis.network import Partition, SlowNetwork

FAULTS = {
    KillExecutor.name: KillExecutor,
    KillDriver.name: KillDriver,
    KillDriverInCommitWindow.name: KillDriverInCommitWindow,
    KillBroker.name: KillBroker,
    PauseBroker.name: PauseBroker,
    CommitDelay.name: CommitDelay,
    Partition.name: Partition,
    SlowNetwork.name: SlowNetwork,
}

NETWORK = {Partition.name, SlowNetwork.name}  # need the cluster behind toxiproxy


def needs_proxy(specs: list[str]) -> bool:
    """True when any fault in ``specs`` works through toxiproxy."""
    return any(s.partition(":")[0] in NETWORK for s in specs)


def _targets(name: str) -> tuple[str, ...]:
    return tuple(getattr(FAULTS[name], "target_choices", ()))


def target_choices() -> dict[str, tuple[str, ...]]:
    """``{fault name: its targets}`` for faults that take one (for ``schedule.plan``)."""
    return {n: _targets(n) for n in FAULTS if _targets(n)}


def parse(spec: str) -> list[str]:
    """``"a,b:t"`` / ``"all"`` / ``"none"`` → fault specs.

    Raises: ``ValueError`` naming the unknown fault or target and listing the known ones.
    """
    spec = (spec or "none").strip()
    if spec in ("", "none"):
        return []
    if spec == "all":
        return list(FAULTS)
    out = []
    for s in (x.strip() for x in spec.split(",")):
        if not s:
            continue
        name, _, target = s.partition(":")
        if name not in FAULTS:
            raise ValueError(f"unknown nemesis {name}; choose from: {', '.join(FAULTS)}, all, none")
        if target and target not in _targets(name):
            known = ", ".join(_targets(name)) or "(none: this fault takes no target)"
            raise ValueError(f"unknown target {target!r} for {name}; choose from: {known}")
        out.append(s)
    return list(dict.fromkeys(out))


def build(specs: list[str], **options) -> dict[str, Fault]:
    """Instantiate the faults; ``options`` (e.g. ``txn_timeout_ms``) go to the classes that take them."""
    import inspect

    out: dict[str, Fault] = {}
    for s in specs:
        name, _, target = s.partition(":")
        cls = FAULTS[name]
        params = inspect.signature(cls).parameters
        kw = {k: v for k, v in options.items() if k in params}
        if "target" in params:
            kw["target"] = target or None
        out[s] = cls(**kw)
    return out
