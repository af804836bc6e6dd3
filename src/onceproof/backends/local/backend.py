"""The ``local`` backend: Kafka brokers, the Spark driver with its ``local-cluster`` executors and
toxiproxy as processes on this machine, all on 127.0.0.1 (``backends/local/``).

Needs Java 17+, Maven (the jars, once), for network faults Go 1.23+ (toxiproxy, once) and for clock faults
libfaketime (`make clock-prereqs`).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from onceproof.backends.base import ClusterShape, PipelineArgs
from onceproof.backends.capabilities import DERIVED
from onceproof.backends.common import jars
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.common.ports import free_base_port
from onceproof.backends.common.postgres import PostgresServer
from onceproof.backends.local import spark_cds
from onceproof.backends.local.faultproxy import ProxyNetwork
from onceproof.backends.local.kafka import KafkaCluster, train_archives
from onceproof.backends.local.spark import LocalSpark

log = logging.getLogger("onceproof.backends.local")


def java_version() -> str:
    """``java -version``'s first line (e.g. ``openjdk version "17.0.13" 2024-10-15``) and the binary's
    path, or ``?`` when there is no ``java`` on PATH."""
    java = shutil.which("java")
    if not java:
        return "?"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
        first = (out.stderr or out.stdout).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return java
    return f"{first} ({java})"


class LocalBackend:
    """Factory of the local services (:class:`KafkaCluster`, :class:`LocalSpark`, :class:`ProxyNetwork`).
    Implements ``Backend``, ``NetworkFaults``, ``Databases`` (PostgreSQL) and ``Prepare``; with
    :class:`KafkaCluster`'s ``ClockFaults`` (libfaketime), ``LogDirs`` and ``DiskFaults`` (tmpfs) and
    :class:`LocalSpark`'s protocols it performs
    every fault of ``nemesis/catalog.py``, every target
    (processes are signalled one by one and every path runs through its own toxiproxy proxy)."""

    name = "local"
    user_pipelines = True
    file_sinks = True
    picks_kafka_version = True
    warm_clusters = True
    capabilities = DERIVED
    databases = frozenset({"postgres"})

    def cluster(self, shape: ClusterShape) -> KafkaCluster:
        """A cluster on the first free, leased port range (``backends/common/ports.py``); with
        ``shape.clocks``, its brokers start under libfaketime (``backends/common/faketime.py``); with
        ``shape.lazyfs`` (not for a detached cluster), each broker's ``log.dirs`` is a lazyfs layer
        (``backends/common/lazyfs.py``).
        ``shape.small_disks``, each broker's data directory is a tmpfs of its own (``backends/common/tmpfs.py``);
        the brokers run ``shape.kafka_version`` (its jars resolved from Maven Central the first time).

        Raises: ``ClusterError`` when no port range is free.
        """
        if shape.kafka_version:  # the pin's archives are onceproof deps's; another release's are made here
            _train_brokers(shape.kafka_version)
        base = free_base_port(shape.nodes, proxied=shape.proxied)
        spec = ClusterSpec(shape.data_dir, nodes=shape.nodes, base_port=base, log_dir=shape.log_dir,
                           proxied=shape.proxied)
        return KafkaCluster(spec, tie_to_parent=not shape.detached, clocks=shape.clocks,
                            lazyfs=shape.lazyfs and not shape.detached, small_disks=shape.small_disks,
                            own_groups=shape.own_groups and not shape.detached, version=shape.kafka_version,
                            owner=shape.owner)

    def attach(self, data_dir: Path) -> KafkaCluster:
        return KafkaCluster.from_state(data_dir)

    def network(self, cluster: KafkaCluster, log_dir: Path) -> ProxyNetwork:
        """One toxiproxy proxy per path of ``cluster`` (a proxied :class:`KafkaCluster`); the server logs to
        ``log_dir/toxiproxy.log``."""
        return ProxyNetwork(cluster.spec, log_dir / "toxiproxy.log", outbound=cluster.outbound_group)

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> LocalSpark:
        """Resolves the Spark Kafka connector's jars (Maven, once). Raises ``jars.ResolveError``."""
        return LocalSpark(pipeline, log_dir)

    def database(self, kind: str, data_dir: Path, log_dir: Path) -> PostgresServer:
        """A PostgreSQL server process on 127.0.0.1 (``backends/common/postgres.py``), its log in
        ``log_dir/postgres.log``. Raises ``ValueError`` for a kind other than ``postgres``."""
        if kind not in self.databases:
            raise ValueError(f"the local backend starts {', '.join(sorted(self.databases))} servers, not {kind}")
        return PostgresServer(data_dir, log_dir / f"{kind}.log")

    def versions(self) -> dict[str, str]:
        """Pinned Kafka and connector versions (``deps/``), this interpreter's PySpark, the ``java`` used."""
        import pyspark  # lazy: pyspark is heavy and only this call needs its version

        return {"kafka": jars.kafka_version(), "pyspark": pyspark.__version__,
                "spark-sql-kafka": jars.spark_kafka_classpath().version, "java": java_version()}

    def prepare(self) -> list[str]:
        """Resolve and cache the Kafka broker and Spark connector jars (Maven Central), then make the
        missing class-data sharing archives of the brokers' and the Spark driver's and executors' JVMs
        (``backends/common/cds.py``: about 10 s and 55 s on 2 cores, once). A training run that fails
        is reported in its line and nothing else: runs start without that archive, only slower.
        Raises ``jars.ResolveError``."""
        k = jars.kafka_classpath()
        s = jars.spark_kafka_classpath()
        lines = [f"kafka {k.version}: {len(k.jars)} jars in {k.jars[0].parent}",
                 f"spark-sql-kafka {s.version}: {len(s.jars)} jars in {s.jars[0].parent if s.jars else '-'}"]
        for what, train in (("the brokers'", train_archives), ("Spark's", spark_cds.train_archives)):
            try:
                lines += train()
            except Exception as e:  # noqa: BLE001 - an archive only speeds runs up; they start without it
                lines.append(f"{what} class-data sharing archives not made ({e}); runs start without them")
        return lines


def _train_brokers(version: str) -> None:
    """Make Kafka ``version``'s broker archives when they are missing (:func:`train_archives`: about 10 s,
    once per release and machine), so that its brokers start as fast as the pin's (on 2 cores a 4.4.0
    cluster took 15.7 s to start without them, against 8.5 s for the pin with). A failure is logged and
    the cluster starts without them."""
    try:
        for line in train_archives(version):
            log.info("kafka %s: %s", version, line)
    except Exception as e:  # noqa: BLE001 - an archive only speeds a start up
        log.warning("kafka %s: class-data sharing archives not made (%s); its brokers start without them", version, e)
