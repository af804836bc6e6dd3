"""Which faults a backend can perform, derived from the protocols it implements (Jepsen: what a ``DB``
can do is which of ``Kill``, ``Pause``, ``LogFiles`` it satisfies); no backend lists its faults.

:data:`NEEDS` maps each fault spec of ``nemesis/catalog.py`` (``fault``, ``fault:target`` or
``fault:*``) to the optional protocols of ``backends/base.py`` it needs beyond the core: protocols of the
backend itself (:class:`NetworkFaults`), of the :class:`SparkApp` class its ``spark()`` returns
(:class:`DriverPause`, :class:`ExecutorFaults`, :class:`TaskKill`, :class:`Runtimes`), of the
:class:`FaultNetwork` class its ``network()`` returns (:class:`PacketLoss`) or of the :class:`Cluster` class
its ``cluster()`` returns (:class:`ClockFaults`, :class:`LogDirs`, :class:`DiskFaults`,
:class:`UnsyncedLoss`). A backend's capabilities are the specs whose needs it meets (:func:`derive`); a new
fault is one line here.
"""

from __future__ import annotations

import typing

from onceproof.backends.base import (
    BrokerVersions,
    CheckpointLoss,
    ClockFaults,
    DiskFaults,
    DriverClock,
    DriverPause,
    ExecutorFaults,
    LogDirs,
    NetworkFaults,
    PacketLoss,
    Runtimes,
    TaskKill,
    UnsyncedLoss,
)

BACKEND_PROTOCOLS = (NetworkFaults,)
"""Optional protocols a backend class implements; the others are its ``SparkApp``'s or its network's."""
NETWORK_PROTOCOLS = (PacketLoss,)
"""Optional protocols of the :class:`FaultNetwork` class a backend's ``network()`` returns."""
CLUSTER_PROTOCOLS = (ClockFaults, LogDirs, DiskFaults, UnsyncedLoss, BrokerVersions)
"""Optional protocols of the :class:`Cluster` class a backend's ``cluster()`` returns."""

NEEDS: dict[str, tuple[type, ...]] = {
    "kill-executor": (ExecutorFaults,),
    "kill-driver": (),  # SparkApp.kill_driver (core)
    "kill-driver-in-commit-window": (DriverPause,),  # frozen in the window, then killed
    "kill-broker:*": (),  # Cluster.kill/start (core)
    "pause-broker:*": (),  # Cluster.pause/resume (core)
    "commit-delay:*": (),  # the pipeline's hooks in the run's control directory (PipelineArgs.control)
    "partition:*": (NetworkFaults,),
    "slow-network:*": (NetworkFaults,),
    "lossy-link:reset-peer": (NetworkFaults,),  # toxiproxy toxics through FaultNetwork.slow
    "lossy-link:timeout": (NetworkFaults,),
    "lossy-link:limit-data": (NetworkFaults,),
    "lossy-link:drop": (NetworkFaults, PacketLoss),  # packets dropped at random (iptables on the local backend)
    "delay-txn-requests:*": (NetworkFaults,),  # a latency toxic upstream on one broker's client path
    "zombie-task:*": (ExecutorFaults, TaskKill),  # its executor killed, then the task that outlived it
    "restart-mid-txn": (),  # SparkApp.kill_driver (core) and the pipeline's hooks
    "upgrade:*": (Runtimes,),  # upgrade:pyspark restarts the driver on another PySpark
    "bounce-broker:*": (),  # Cluster.stop(clean=True)/start (core)
    "rolling-restart": (),  # Cluster.stop(clean=True)/start (core), one broker at a time
    "rolling-upgrade": (BrokerVersions,),  # each broker restarted on --kafka-upgrade-to's jars in turn
    "elect-leaders": (),  # the Admin API (ElectLeaders, KIP-460)
    "reassign-partitions:*": (),  # Kafka's reassignment tool against the bootstrap (KIP-455)
    "add-input-partitions": (),  # the Admin API (CreatePartitions, KIP-195)
    "clock-skew:*": (ClockFaults,),  # a broker's own clock offset (libfaketime on the local backend)
    "driver-clock-skew:*": (DriverClock,),  # the driver's own clock offset (libfaketime, the local backend)
    "corrupt-segment-tail:*": (LogDirs,),  # a stopped broker's segment garbled in its log directory
    "disk-full:*": (DiskFaults,),  # a broker's size-limited data filesystem filled (tmpfs on the local backend)
    "lose-unsynced-writes:*": (UnsyncedLoss,),  # a broker's unsynced writes dropped (a FUSE layer, local backend)
    "delete-input-records": (),  # the Admin API (DeleteRecords, KIP-107)
    "lose-checkpoint": (CheckpointLoss,),  # the driver's checkpoint directory moved aside while it is down
}


TOXICS: dict[str, str] = {
    "slow-network:latency": "latency",
    "slow-network:bandwidth": "bandwidth",
    "slow-network:slicer": "slicer",
    "lossy-link:reset-peer": "reset_peer",
    "lossy-link:timeout": "timeout",
    "lossy-link:limit-data": "limit_data",
    "delay-txn-requests:endtxn": "latency",
    "delay-txn-requests:produce": "latency",
    "delay-txn-requests:expired-produce": "latency",
}
"""The toxic each network fault's target asks :meth:`FaultNetwork.slow` for (toxiproxy's type names; the
nemeses' own tables are ``nemesis/network._TOXICS`` and ``nemesis/lossy.TOXICS``, a unit test keeps them
equal). A network class that declares ``kinds`` (the toxics it can make, e.g. the ssh backend's tc
``{"bandwidth"}``) performs only the targets whose toxic is among them; one without (toxiproxy) all."""


def network_kinds(backend: type) -> frozenset[str] | None:
    """The ``kinds`` of ``backend``'s :func:`network_class`, ``None`` when it declares none (every toxic)."""
    net = network_class(backend)
    kinds = getattr(net, "kinds", None) if net is not None else None
    return frozenset(kinds) if kinds is not None else None


def spark_class(backend: type) -> type:
    """The class ``backend.spark()`` returns, from its return annotation.

    Raises: ``TypeError`` when the backend's ``spark`` has no return annotation naming a class.
    """
    got = typing.get_type_hints(backend.spark).get("return")
    if not isinstance(got, type):
        raise TypeError(f"{backend.__name__}.spark() must be annotated with the SparkApp class it returns")
    return got


def network_class(backend: type) -> type | None:
    """The class ``backend.network()`` returns, from its return annotation; ``None`` without a ``network``."""
    if not hasattr(backend, "network"):
        return None
    got = typing.get_type_hints(backend.network).get("return")
    return got if isinstance(got, type) else None


def cluster_class(backend: type) -> type | None:
    """The class ``backend.cluster()`` returns, from its return annotation; ``None`` when not annotated."""
    got = typing.get_type_hints(backend.cluster).get("return")
    return got if isinstance(got, type) else None


def implements(backend: type, protocol: type) -> bool:
    """True when ``backend`` (a backend class) implements the optional ``protocol``: itself for
    :data:`BACKEND_PROTOCOLS`, its :func:`network_class` for :data:`NETWORK_PROTOCOLS`, its
    :func:`cluster_class` for :data:`CLUSTER_PROTOCOLS`, else through its :func:`spark_class`."""
    if protocol in CLUSTER_PROTOCOLS:
        cls = cluster_class(backend)
        return cls is not None and issubclass(cls, protocol)
    if protocol in NETWORK_PROTOCOLS:
        net = network_class(backend)
        return net is not None and issubclass(net, protocol)
    return issubclass(backend if protocol in BACKEND_PROTOCOLS else spark_class(backend), protocol)


def derive(backend: type) -> frozenset[str]:
    """The fault specs (:data:`NEEDS`' keys) whose protocols ``backend`` (a backend class) implements; when
    its network declares ``kinds``, a network fault's targets narrowed to the toxics among them
    (``slow-network:*`` becomes e.g. ``slow-network:bandwidth``; see :data:`TOXICS`)."""
    kinds = network_kinds(backend)
    out: set[str] = set()
    for spec, needs in NEEDS.items():
        if not all(implements(backend, p) for p in needs):
            continue
        if kinds is None:
            out.add(spec)
        elif spec.endswith(":*") and any(s.startswith(spec[:-1]) for s in TOXICS):
            out.update(s for s, toxic in TOXICS.items() if s.startswith(spec[:-1]) and toxic in kinds)
        elif spec not in TOXICS or TOXICS[spec] in kinds:
            out.add(spec)
    return frozenset(out)


def of_class(backend: type) -> frozenset[str]:
    """What the backend class ``backend`` can perform at most: :func:`derive`, narrowed by its
    ``capability_limit`` when it has one (a backend whose faults are the user's to map, ``external``: its
    instances narrow further, to the map they were given)."""
    limit = getattr(backend, "capability_limit", None)
    return derive(backend) & limit if limit is not None else derive(backend)


def _of(backend: object) -> frozenset[str]:
    return derive(type(backend))


DERIVED = property(_of, doc="A backend's ``capabilities``: :func:`derive` of its class.")
"""What a backend class assigns to ``capabilities`` (``capabilities = DERIVED``)."""
