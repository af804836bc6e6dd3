"""The ``external`` backend: a running Kafka and Spark cluster that onceproof must not install or own,
described by ``cluster.toml`` (issue 28, design §1.2).

=================  ==========================================================================
service            module
=================  ==========================================================================
the file           :mod:`onceproof.backends.external.cluster_file` (``cluster.toml``)
faults             :mod:`onceproof.backends.external.fault_map`, :mod:`~onceproof.backends.external.commands`,
                   :mod:`~onceproof.backends.external.ledger` (pending heals)
``Cluster``        :mod:`onceproof.backends.external.kafka` (checks, never starts; state from the wire)
``SparkApp``       :mod:`onceproof.backends.external.spark`, :mod:`onceproof.backends.external.driver`
``--dry-run``      :mod:`onceproof.backends.external.dry_run`
=================  ==========================================================================

Its capabilities are the faults its protocols allow *and* the fault map holds: onceproof runs only the
faults the user mapped. No fault network: partitions on a user's cluster are the map's to make (later).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from onceproof import kafka_config
from onceproof.backends.base import BackendError, ClusterError, ClusterShape, PipelineArgs
from onceproof.backends.capabilities import derive
from onceproof.backends.external import cluster_file
from onceproof.backends.external.cluster_file import ClusterFile
from onceproof.backends.external.commands import CommandRunner
from onceproof.backends.external.fault_map import COMMIT_WINDOW, SPEC_OF
from onceproof.backends.external.kafka import ExternalCluster
from onceproof.backends.external.spark import ExternalSpark
from onceproof.kafka_config import KafkaSecurity
from onceproof.topic_names import TopicNames


class ExternalBackend:
    """Factory of the external services for the cluster of ``cf``. One run at a time per instance."""

    name = "external"
    user_pipelines = False  # the submit template runs onceproof.job
    file_sinks = False
    picks_kafka_version = False  # the cluster is the user's, on their release
    warm_clusters = False  # the cluster is the user's
    capability_limit = frozenset(SPEC_OF.values()) | {COMMIT_WINDOW}
    """What any fault map can make possible (``capabilities.of_class``)."""

    @classmethod
    def from_options(cls, options) -> ExternalBackend:
        """The backend for ``options.cluster`` (``registry.BackendOptions``). Raises: ``BackendError``
        without ``--cluster``, with ``--nodes``, or naming the key of a broken ``cluster.toml``."""
        if options.nodes is not None:
            raise BackendError("--backend external takes --cluster, not --nodes (that is --backend ssh's)")
        if options.cluster is None:
            raise BackendError("--backend external needs --cluster cluster.toml: the running cluster and its "
                               "fault map (docs/backends.md, examples/cluster.toml)")
        try:
            return cls(cluster_file.load(options.cluster))
        except cluster_file.ClusterFileError as e:
            raise BackendError(str(e)) from None

    def __init__(self, cf: ClusterFile):
        self.cf = cf
        self.run_id = ""
        self.runner = CommandRunner(secrets=cf.kafka.security.secrets())
        self._cluster: ExternalCluster | None = None

    @property
    def capabilities(self) -> frozenset[str]:
        """What this backend's protocols allow, narrowed to the specs the fault map can run."""
        return derive(type(self)) & self.cf.faults.specs()

    def cluster(self, shape: ClusterShape) -> ExternalCluster:
        """The cluster of ``cluster.toml`` for a new run (its ledger in ``shape.data_dir``); nothing
        started. Raises: ``ClusterError`` for a shape the cluster cannot take (clocks, disks, lazyfs:
        onceproof does not start its brokers)."""
        extra = [n for n in ("clocks", "small_disks", "lazyfs", "proxied") if getattr(shape, n)]
        if extra:
            raise ClusterError(f"the external backend does not start the brokers, so it cannot give them "
                               f"{', '.join(extra)}; drop the clock, disk and network faults from --nemesis")
        self.run_id = uuid.uuid4().hex[:12]
        Path(shape.data_dir).mkdir(parents=True, exist_ok=True)
        self._cluster = ExternalCluster(self.cf, Path(shape.data_dir), self.runner, self.run_id)
        return self._cluster

    def security(self) -> KafkaSecurity:
        """``[kafka.security]`` (the harness's clients use it)."""
        return self.cf.kafka.security

    def topic_names(self) -> TopicNames:
        """``<topic_prefix><run8>-input`` etc. for the run :meth:`cluster` opened. Raises: ``ClusterError``
        before it."""
        if not self.run_id:
            raise ClusterError("the external backend names a run's topics once cluster() opened the run")
        return self.cf.topic_names(self.run_id)

    def attach(self, data_dir: Path) -> ExternalCluster:
        """Not offered: the cluster is already running. Raises: ``ClusterError``."""
        raise ClusterError("the external backend has nothing to attach to: the cluster is the user's")

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> ExternalSpark:
        """The pipeline through ``[spark] submit``. Raises: ``ClusterError`` before :meth:`cluster`."""
        if self._cluster is None:
            raise ClusterError("the external backend runs the pipeline for a run it opened (call cluster() first)")
        env = kafka_config.to_environment(self.cf.kafka.security)  # the submit command passes it on (-e ...)
        return ExternalSpark(self.cf, pipeline, log_dir, self.runner, self._cluster.ledger, self.run_id, env)

    def dry_run(self, specs: list[str]) -> list[str]:
        """``run --dry-run``: the topics, the driver's submit command and each fault's rendered commands for
        a run of ``specs`` (``backends/external/dry_run.describe``, with a placeholder run id). Raises:
        ``BackendError`` naming a spec the map cannot run."""
        from onceproof.backends.external.dry_run import describe
        from onceproof.backends.external.fault_map import FaultMapError

        try:
            return describe(self.cf, specs, "0123456789ab")
        except FaultMapError as e:
            raise BackendError(str(e)) from None

    def versions(self) -> dict[str, str]:
        """What onceproof knows of a cluster it does not own: the file and the security protocol."""
        return {"cluster": str(self.cf.path), "kafka": "external", "security": self.cf.kafka.security.protocol}
