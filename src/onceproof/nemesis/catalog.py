"""Every fault by its CLI name. A spec is ``name`` or ``name:target`` (e.g. ``kill-broker:txn-coordinator``,
``commit-delay:txn-timeout``); without a target, each invocation draws one from the seeded RNG."""

from __future__ import annotations

import inspect

from onceproof.nemesis.broker import KillBroker, PauseBroker
from onceproof.nemesis.clock import ClockSkew
from onceproof.nemesis.commit_delay import CommitDelay
from onceproof.nemesis.commit_window import KillDriverInCommitWindow
from onceproof.nemesis.delete_records import DeleteInputRecords
from onceproof.nemesis.disk import CorruptSegmentTail, DiskFull
from onceproof.nemesis.driver_clock import DriverClockSkew
from onceproof.nemesis.fault import Fault
from onceproof.nemesis.grow import AddInputPartitions
from onceproof.nemesis.kill_driver import KillDriver
from onceproof.nemesis.kill_executor import KillExecutor
from onceproof.nemesis.lazyfs_fault import LoseUnsyncedWrites
from onceproof.nemesis.lose_checkpoint import LoseCheckpoint
from onceproof.nemesis.lossy import LossyLink
from onceproof.nemesis.network import Partition, SlowNetwork
from onceproof.nemesis.operator import BounceBroker, ElectLeaders, RollingRestart
from onceproof.nemesis.reassign import ReassignPartitions
from onceproof.nemesis.restart_mid_txn import RestartMidTxn
from onceproof.nemesis.rolling_upgrade import RollingUpgrade
from onceproof.nemesis.stale_request import DelayTxnRequests
from onceproof.nemesis.upgrade import Upgrade
from onceproof.nemesis.zombie import ZombieTask

FAULTS = {
    KillExecutor.name: KillExecutor,
    KillDriver.name: KillDriver,
    KillDriverInCommitWindow.name: KillDriverInCommitWindow,
    KillBroker.name: KillBroker,
    PauseBroker.name: PauseBroker,
    CommitDelay.name: CommitDelay,
    Partition.name: Partition,
    SlowNetwork.name: SlowNetwork,
    LossyLink.name: LossyLink,
    ZombieTask.name: ZombieTask,
    Upgrade.name: Upgrade,
    RestartMidTxn.name: RestartMidTxn,
    BounceBroker.name: BounceBroker,
    RollingRestart.name: RollingRestart,
    RollingUpgrade.name: RollingUpgrade,
    ElectLeaders.name: ElectLeaders,
    ReassignPartitions.name: ReassignPartitions,
    AddInputPartitions.name: AddInputPartitions,
    ClockSkew.name: ClockSkew,
    DriverClockSkew.name: DriverClockSkew,
    CorruptSegmentTail.name: CorruptSegmentTail,
    DiskFull.name: DiskFull,
    LoseUnsyncedWrites.name: LoseUnsyncedWrites,
    DelayTxnRequests.name: DelayTxnRequests,
    DeleteInputRecords.name: DeleteInputRecords,
    LoseCheckpoint.name: LoseCheckpoint,
}

NETWORK = {Partition.name, SlowNetwork.name, LossyLink.name, DelayTxnRequests.name}  # need the cluster behind toxiproxy
# Targeted faults: each aims at one protocol flaw (a zombie attempt, a restart into a changed split) and
# costs a parked task plus an executor or driver restart per turn. They run when named, or in their
# test-all package (nemesis/packages.py); ``all`` stays the general faults, so that its runs keep their
# length (and make test its budget).
TARGETED = {ZombieTask.name, Upgrade.name, RestartMidTxn.name, DelayTxnRequests.name}
# Operators' restarts (nemesis/operator.py): run when named or in the ``operator`` package, not in ``all``
# (whose runs and make test's budget they would lengthen by a minute or more per turn).
OPERATOR = {BounceBroker.name, RollingRestart.name, RollingUpgrade.name, ElectLeaders.name, ReassignPartitions.name,
            AddInputPartitions.name}
# Lossy links (nemesis/lossy.py): run when named or in the ``lossy`` package, not in ``all``: four more turns
# would lengthen every ``all`` run (and make test's budget) by about a minute, and ``drop`` needs root.
LOSSY = {LossyLink.name}
# Clock faults (nemesis/clock.py): run when named or in the ``clock`` package, not in ``all``: a run that plans
# one starts its brokers under libfaketime (needs_clock), which ``all`` runs should not depend on.
CLOCK = {ClockSkew.name, DriverClockSkew.name}
# Disk faults (nemesis/disk.py): run when named or in the ``disk`` package, not in ``all``: a run that plans
# disk-full gives every broker a tmpfs of its own (needs_small_disks, root), and a garbled segment costs a broker
# restart and a refetch per turn; lose-unsynced-writes puts every broker's log.dirs on a FUSE layer (needs_lazyfs).
DISK = {CorruptSegmentTail.name, DiskFull.name, LoseUnsyncedWrites.name}


# Faults that leave state behind on the brokers past their heal: a rolled release and finalized
# metadata.version, a garbled segment the broker truncated. A run that plans one never leases a warm cluster
# (harness/warm.py); the clock, disk-full, lazyfs and isolation faults need brokers of another shape anyway.
LEAVES_STATE = {RollingUpgrade.name, CorruptSegmentTail.name, DiskFull.name, LoseUnsyncedWrites.name,
                ClockSkew.name}


# Traps (nemesis/delete_records.py, nemesis/lose_checkpoint.py): what no pipeline survives unharmed, an input
# deleted before it was read or a checkpoint lost; they show how a job fails (lost or duplicate, a stopped
# query), so they run when named or in the ``traps`` package, whose cells expect invalid, never in ``all``.
TRAPS = {DeleteInputRecords.name, LoseCheckpoint.name}


def needs_proxy(specs: list[str]) -> bool:
    """True when any fault in ``specs`` works through toxiproxy."""
    return any(s.partition(":")[0] in NETWORK for s in specs)


def needs_clock(specs: list[str]) -> bool:
    """True when any fault in ``specs`` offsets a broker's clock: the run then starts its brokers with
    clocks that can be offset (``ClusterShape.clocks``)."""
    return any(s.partition(":")[0] == ClockSkew.name for s in specs)


def needs_driver_clock(specs: list[str]) -> bool:
    """True when any fault in ``specs`` offsets the driver's clock: the run then starts its driver with a clock
    that can be offset (``PipelineArgs.clock_file``)."""
    return any(s.partition(":")[0] == DriverClockSkew.name for s in specs)


def needs_small_disks(specs: list[str]) -> bool:
    """True when any fault in ``specs`` fills a broker's disk: the run then starts its brokers on size-limited
    filesystems (``ClusterShape.small_disks``)."""
    return any(s.partition(":")[0] == DiskFull.name for s in specs)


def needs_own_groups(specs: list[str]) -> bool:
    """True when any fault in ``specs`` may isolate a broker (``partition`` bare or ``partition:isolate``):
    the run then puts every broker in a cgroup of its own (``ClusterShape.own_groups``), so that the
    isolation cuts its outbound replica fetches too."""
    return any(s in ("partition", "partition:isolate") for s in specs)


def needs_lazyfs(specs: list[str]) -> bool:
    """True when any fault in ``specs`` drops a broker's unsynced writes: the run then puts every broker's
    ``log.dirs`` on a lazyfs layer (``ClusterShape.lazyfs``)."""
    return any(s.partition(":")[0] == LoseUnsyncedWrites.name for s in specs)


def _targets(name: str) -> tuple[str, ...]:
    return tuple(getattr(FAULTS[name], "target_choices", ()))


def target_choices(capabilities: frozenset[str] | None = None) -> dict[str, tuple[str, ...]]:
    """``{fault name: its targets}`` for faults that take one (for ``schedule.plan``); with a sink's
    ``capabilities``, only the targets that sink can take (:func:`for_sink`'s rule: ``kill-broker``
    against at-least-once never draws ``txn-coordinator``)."""
    out = {n: _targets(n) for n in FAULTS if _targets(n)}
    if capabilities is not None:
        out = {n: tuple(t for t in ts if not sink_needs(f"{n}:{t}") - capabilities) for n, ts in out.items()}
    return out


def all_specs() -> list[str]:
    """What ``--nemesis all`` means: every general fault family and every target, each its own spec
    (``kill-broker:one``, ``kill-broker:leader``, ..., ``kill-executor``); not the :data:`TARGETED`
    faults, nor the :data:`OPERATOR`, :data:`LOSSY`, :data:`CLOCK`, :data:`DISK` or :data:`TRAPS` ones."""
    return [s for n in FAULTS if n not in TARGETED | OPERATOR | LOSSY | CLOCK | DISK | TRAPS for s in expand(n)]


def expand(spec: str) -> list[str]:
    """The concrete specs ``spec`` may run as: ``kill-broker`` (a target drawn at every turn) is every
    ``kill-broker:<target>``; a spec with a target, or a fault without targets, is itself."""
    name, _, target = spec.partition(":")
    return [spec] if target or not _targets(name) else [f"{name}:{t}" for t in _targets(name)]


def sink_needs(spec: str) -> frozenset[str]:
    """The sink capabilities (``sinks/base.py``) one turn of ``spec`` needs; for a fault given without
    a target, what any of its targets needs (it may draw any). An unknown name needs nothing."""
    needs = getattr(FAULTS.get(spec.partition(":")[0]), "sink_needs", None)
    if needs is None:
        return frozenset()
    return frozenset().union(*(needs(s.partition(":")[2]) for s in expand(spec)))


def for_sink(specs: list[str], capabilities: frozenset[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split ``specs`` into those a sink with ``capabilities`` can take and ``{spec: missing capabilities}``
    for the rest, order kept."""
    keep, out = [], {}
    for s in specs:
        missing = sorted(sink_needs(s) - capabilities)
        if missing:
            out[s] = missing
        else:
            keep.append(s)
    return keep, out


def is_all(specs: list[str]) -> bool:
    """True when ``specs`` is what ``all`` expands to (in any order)."""
    return bool(specs) and sorted(specs) == sorted(all_specs())


def expected_s(spec: str, *, hold_s: float = 6.0, txn_timeout_ms: int = 30000) -> float:
    """How long one turn of ``spec`` takes, seconds, including what the pipeline needs to settle before
    the next fault can be judged (a driver restart, a broker rejoining): each fault class's own
    ``expected_s(target, hold_s, txn_timeout_ms)``, estimates measured on the local backend (2 cores).
    An unknown name is ``hold_s``."""
    name, _, target = spec.partition(":")
    cls = FAULTS.get(name)
    return cls.expected_s(target, hold_s, txn_timeout_ms) if cls is not None else hold_s


def parse(spec: str) -> list[str]:
    """``"a,b:t"`` / ``"all"`` / ``"none"`` → fault specs. ``all`` is every fault *and every target*
    (:func:`all_specs`).

    Raises: ``ValueError`` naming the unknown fault or target and listing the known ones.
    """
    spec = (spec or "none").strip()
    if spec in ("", "none"):
        return []
    if spec == "all":
        return all_specs()
    out = []
    for s in (x.strip() for x in spec.split(",")):
        if not s:
            continue
        name, _, target = s.partition(":")
        if name not in FAULTS:
            raise ValueError(f"unknown nemesis {name}; choose from: {', '.join(FAULTS)}, all, none")
        named = _targets(name) + tuple(getattr(FAULTS[name], "named_targets", ()))
        if target and target not in named:
            known = ", ".join(named) or "(none: this fault takes no target)"
            raise ValueError(f"unknown target {target!r} for {name}; choose from: {known}")
        out.append(s)
    return list(dict.fromkeys(out))


def build(specs: list[str], **options) -> dict[str, Fault]:
    """Instantiate the faults; ``options`` (e.g. ``txn_timeout_ms``) go to the classes that take them."""

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
