"""The ``ssh`` backend (Jepsen's model): Kafka brokers, a Spark standalone cluster with the supervised driver,
and the network faults, all on machines listed in ``nodes.toml`` and reached only over SSH.

=================  ==========================================================================
service            module
=================  ==========================================================================
nodes              :mod:`onceproof.backends.ssh.inventory` (``nodes.toml``)
connections        :mod:`onceproof.backends.ssh.transport` (asyncssh, known_hosts always checked)
processes          :mod:`onceproof.backends.ssh.node_helper`, :mod:`onceproof.backends.ssh.node`
what is shipped    :mod:`onceproof.backends.ssh.install` (content-addressed dists)
``Cluster``        :mod:`onceproof.backends.ssh.kafka`
``SparkApp``       :mod:`onceproof.backends.ssh.app`, :mod:`onceproof.backends.ssh.spark`,
                   :mod:`onceproof.backends.ssh.driver`, :mod:`onceproof.backends.ssh.relay`
``FaultNetwork``   :mod:`onceproof.backends.ssh.network` (iptables chains of the run's own, tc htb+tbf)
=================  ==========================================================================

The run's resources (:class:`~onceproof.backends.base.RunResources`): one SSH connection per node, and on
every node a watchdog fed by a lease the harness holds; :meth:`SshBackend.close` (the runner's last
teardown step) sweeps every node and releases the leases. A harness that dies without closing (SIGKILL)
leaves the watchdogs to sweep: 5 s after its connections close, or ``[run] lease_s`` after its last
heartbeat.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from pathlib import Path

from onceproof.backends.base import BackendError, ClusterError, ClusterShape, PipelineArgs
from onceproof.backends.capabilities import DERIVED
from onceproof.backends.ssh import install, inventory
from onceproof.backends.ssh.app import SshSpark
from onceproof.backends.ssh.inventory import Inventory
from onceproof.backends.ssh.kafka import SshKafkaCluster
from onceproof.backends.ssh.network import SshNetwork
from onceproof.backends.ssh.node import Lease, NodeHelper
from onceproof.backends.ssh.remote import RemoteError
from onceproof.backends.ssh.spark import SshSparkCluster
from onceproof.backends.ssh.transport import SshHub


class SshBackend:
    """Factory of the ssh services for the nodes of ``inv``. One run at a time per instance: :meth:`cluster`
    opens the run (a fresh run id, the connections, the leases), :meth:`close` ends it.

    Implements ``Backend``, ``NetworkFaults`` and ``RunResources``; with :class:`SshSpark`'s protocols and
    :class:`SshKafkaCluster`'s (``LiveLogs``, ``ClockFaults``, ``LogDirs``, ``DiskFaults``) it performs the
    broker and operator faults, the driver and executor faults, the commit window, partitions, packet loss and
    a bandwidth limit, the clock faults and the disk faults (``onceproof faults`` lists them)."""

    name = "ssh"
    user_pipelines = False  # the driver node runs onceproof.job only
    file_sinks = False  # the executors write on the worker nodes, not where the harness reads
    picks_kafka_version = True  # a release's jars are shipped as a dist of their own (install.kafka_dist)
    warm_clusters = False  # a run's watchdogs sweep its nodes
    capabilities = DERIVED

    @classmethod
    def from_options(cls, options) -> SshBackend:
        """The backend for ``options.nodes`` (``registry.BackendOptions``). Raises: ``BackendError``
        without ``--nodes``, with ``--cluster``, or naming the key of a broken ``nodes.toml``."""
        if options.cluster is not None:
            raise BackendError("--backend ssh takes --nodes, not --cluster (that is --backend external's)")
        if options.nodes is None:
            raise BackendError("--backend ssh needs --nodes nodes.toml: the machines to run on "
                               "(docs/backends.md, examples/nodes.toml)")
        try:
            return cls(inventory.load(options.nodes))
        except inventory.InventoryError as e:
            raise BackendError(str(e)) from None

    def __init__(self, inv: Inventory):
        self.inv = inv
        self.hub: SshHub | None = None
        self.run_id = ""
        self.helpers: dict[str, NodeHelper] = {}
        self.leases: list[Lease] = []
        self._cluster: SshKafkaCluster | None = None
        self.swept: dict[str, dict] = {}
        """What each node's sweep removed at :meth:`close` (``onceproof-node.py sweep``'s answer)."""

    # ------------------------------------------------------------------ the run's resources
    def _open(self) -> SshHub:
        """Connect to every node, ship the helper, arm each node's watchdog and hold its lease.
        Raises: ``BackendError`` naming the node (a refused host key names the fingerprint and the fix)."""
        if self.hub is not None:
            return self.hub
        self.run_id = uuid.uuid4().hex[:12]
        self.hub = SshHub(self.inv)
        try:
            self.hub.connect_all()
            become = self.inv.ssh.become == "sudo"
            self.helpers = {n.name: NodeHelper(self.hub.remote(n.name), self.inv.root, self.run_id,
                                               root_commands=become or n.user == "root") for n in self.inv.nodes}

            def arm(h: NodeHelper) -> Lease:
                h.install()
                h.arm_watchdog(self.inv.lease_s)
                return h.hold()
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.helpers)) as ex:
                self.leases = list(ex.map(arm, self.helpers.values()))
        except RemoteError as e:
            self.close()
            raise BackendError(f"preparing the nodes of {self.inv.path} failed: {e}") from None
        return self.hub

    def close(self) -> None:
        """Sweep every node (the run's processes, chains and qdiscs), release the leases, close the
        connections. Bounded: each step has its command deadline; safe twice."""
        hub, self.hub = self.hub, None
        if hub is None:
            return
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(self.helpers))) as ex:
                self.swept = dict(zip(self.helpers, ex.map(_sweep, self.helpers.values()), strict=True))
            for lease in self.leases:
                with contextlib.suppress(RemoteError):
                    lease.release()
        finally:
            self.leases = []
            hub.close()

    # ------------------------------------------------------------------ Backend
    def cluster(self, shape: ClusterShape) -> SshKafkaCluster:
        """The brokers of ``nodes.toml`` for a new run (the nodes prepared now); nothing started.

        Raises: ``ClusterError`` when ``shape.nodes`` is not the inventory's broker count or the shape asks
        for what the nodes do not offer (clocks, small disks, lazyfs); ``BackendError`` when a node cannot
        be prepared."""
        if shape.nodes != len(self.inv.brokers):
            raise ClusterError(f"{self.inv.path} lists {len(self.inv.brokers)} broker(s); run with --brokers "
                               f"{len(self.inv.brokers)}")
        hub = self._open()
        self._cluster = SshKafkaCluster(self.inv, hub, self.run_id, Path(shape.data_dir),
                                        log_dir=Path(shape.log_dir) if shape.log_dir else None, clocks=shape.clocks,
                                        small_disks=shape.small_disks, lazyfs=shape.lazyfs,
                                        release=shape.kafka_version)
        return self._cluster

    def attach(self, data_dir: Path) -> SshKafkaCluster:
        """Not offered: a detached cluster on nodes outlives no run (the watchdogs sweep it).
        Raises: ``ClusterError``."""
        raise ClusterError("the ssh backend does not detach clusters (`onceproof cluster up` is for local and "
                           "docker); every run installs and sweeps its own")

    def network(self, cluster: SshKafkaCluster, log_dir: Path) -> SshNetwork:
        """The run's iptables chains and qdiscs on the broker nodes (``log_dir`` unused: the kernel's
        counters are the evidence)."""
        return SshNetwork(self.inv, self._open(), self.run_id)

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> SshSpark:
        """The pipeline on the Spark nodes; the run directory is ``log_dir``'s parent (the runner's layout).

        Raises: ``ClusterError`` before :meth:`cluster`."""
        if self._cluster is None:
            raise ClusterError("the ssh backend runs the pipeline next to the brokers it started "
                               "(call cluster() first)")
        spark = SshSparkCluster(self.inv, self._open(), self.run_id, Path(log_dir).parent / "spark",
                                log_dir=Path(log_dir))
        return SshSpark(spark, pipeline, Path(log_dir).parent, Path(log_dir))

    def versions(self) -> dict[str, str]:
        """Kafka and the connector as shipped, PySpark as the site holds it, the nodes' file."""
        from onceproof.backends.docker import images
        out = {"nodes": str(self.inv.path)}
        with contextlib.suppress(Exception):
            out["kafka"] = install.kafka_dist().name.split("-", 1)[1]
        with contextlib.suppress(Exception):
            out["spark-sql-kafka"] = install.spark_kafka_dist().name.split("-", 3)[-1]
        with contextlib.suppress(Exception):
            out["pyspark"] = images.python_requirements()["pyspark"]
        return out


def _sweep(h: NodeHelper) -> dict:
    try:
        return h.sweep()
    except RemoteError as e:
        return {"error": str(e)}
