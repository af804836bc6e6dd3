"""The ``docker`` backend: Kafka brokers, a Spark standalone cluster with the supervised driver, and the
fault network as containers of the locally built images (``docker/README.md``) on one user-defined
bridge network per run, in the engine that answers at ``DOCKER_HOST`` (``backends/docker/engine.py``
starts a niced ``dockerd`` when none does and it may).

=================  ==========================================================================
service            module
=================  ==========================================================================
``Cluster``        :mod:`onceproof.backends.docker.cluster` (3 KRaft nodes of ``onceproof/kafka``)
``SparkApp``       :mod:`onceproof.backends.docker.spark`, :mod:`onceproof.backends.docker.driver` (``onceproof/spark``)
``FaultNetwork``   :mod:`onceproof.backends.docker.network` (network disconnect + ``onceproof/toxiproxy``)
``Database``       :mod:`onceproof.backends.docker.database` (``onceproof/postgres``)
addresses          :mod:`onceproof.backends.docker.layout`
labels, cleanup    :mod:`onceproof.backends.docker.site`, :mod:`onceproof.backends.docker.reaper`
=================  ==========================================================================

Needs: a Docker engine and the images (``make docker-images``, or ``onceproof deps --backend docker``).
Host-side clients reach the brokers on 127.0.0.1 only; nothing is published elsewhere.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from onceproof.backends.base import BackendError, ClusterError, ClusterShape, PipelineArgs
from onceproof.backends.capabilities import DERIVED
from onceproof.backends.common import jars, toxiproxy
from onceproof.backends.common.ports import free_base_port
from onceproof.backends.docker import images
from onceproof.backends.docker.cluster import DockerKafkaCluster, read_state
from onceproof.backends.docker.database import DockerPostgres
from onceproof.backends.docker.layout import DockerLayout
from onceproof.backends.docker.network import DockerFaultNetwork
from onceproof.backends.docker.site import DockerSite, engine_client
from onceproof.backends.docker.spark import DockerSpark


def image_refs(kafka_version: str = "") -> dict[str, str]:
    """``{"kafka"|"spark"|"toxiproxy"|"postgres": "onceproof/<name>:<version>"}``: the moving tags
    ``backends/docker/images.py`` gives its builds (Kafka ``kafka_version``, else as ``deps/kafka/pom.xml``
    pins it; PySpark as ``pyproject.toml`` does, toxiproxy as the harness builds it).

    Raises: ``BackendError`` when this interpreter's PySpark is not the pinned one.
    """
    try:
        pyspark = images.python_requirements()["pyspark"]
    except images.ImageBuildError as e:
        raise BackendError(str(e)) from e
    return {"kafka": f"{images.NAMESPACE}/kafka:{jars.kafka_version(kafka_version)}",
            "spark": f"{images.NAMESPACE}/spark:{pyspark}",
            "toxiproxy": f"{images.NAMESPACE}/toxiproxy:{toxiproxy.TOXIPROXY_VERSION.lstrip('v')}",
            "postgres": f"{images.NAMESPACE}/postgres:{images.POSTGRES_MAJOR}"}


class DockerBackend:
    """Factory of the Docker services. One cluster at a time per process: :meth:`spark` runs the
    pipeline on the network of the cluster :meth:`cluster` built last.

    Implements ``Backend``, ``NetworkFaults`` and ``Prepare``; with :class:`DockerSpark`'s protocols it
    performs every general fault of ``nemesis/catalog.py``, every target (each verified by a run on this
    backend): processes are host pids (``pid_mode=host``) or containers the engine kills and pauses, and
    every path is a toxiproxy proxy or a network attachment."""

    name = "docker"
    user_pipelines = False  # the driver container runs onceproof.pipeline.job only (backends/docker/driver.py)
    file_sinks = False  # the worker containers do not mount the run directory
    picks_kafka_version = True  # one kafka image per release (images.build(kafka_version=...))
    warm_clusters = False  # its runs own their containers
    capabilities = DERIVED
    databases = frozenset({"postgres"})

    def __init__(self):
        self._client = None
        self._cluster: DockerKafkaCluster | None = None

    @property
    def client(self):
        """The engine's docker SDK client (first use: ping, start a niced dockerd when allowed)."""
        if self._client is None:
            self._client = engine_client()
        return self._client

    def cluster(self, shape: ClusterShape) -> DockerKafkaCluster:
        """A cluster with a fresh run id on the first free, leased port range; nothing started. Its
        brokers run ``shape.kafka_version`` (else the pin): a release without its image gets one built
        now (its jars resolved from Maven Central the first time; about 20 s, then cached by content).

        Raises: ``ClusterError`` when no port range is free; ``BackendError`` without an engine, or when
        the release's image cannot be built.
        """
        refs = image_refs(shape.kafka_version)
        if shape.kafka_version:  # the pin's image is prepare()'s; another release's is built here
            try:
                images.build(self.client, ["kafka"], kafka_version=shape.kafka_version, log=lambda line: None)
            except images.ImageBuildError as e:
                raise BackendError(f"the kafka image of Kafka {shape.kafka_version} could not be built: {e}") from e
        base = free_base_port(shape.nodes, proxied=shape.proxied)
        layout = DockerLayout(uuid.uuid4().hex[:10], shape.nodes, base, proxied=shape.proxied)
        site = DockerSite(self.client, layout, reap=not shape.detached)
        self._cluster = DockerKafkaCluster(site, shape.data_dir, shape.log_dir, image=refs["kafka"],
                                           version=refs["kafka"].rpartition(":")[2])
        return self._cluster

    def attach(self, data_dir: Path) -> DockerKafkaCluster:
        """The cluster whose ``cluster.json`` is in ``data_dir``; its containers are found by run label.

        Raises: ``ClusterError`` when there is none (or it is another backend's).
        """
        st = read_state(data_dir)
        layout = DockerLayout(st["run_id"], int(st["nodes"]), int(st["base_port"]), proxied=bool(st["proxied"]),
                              subnet=st["subnet"])
        return DockerKafkaCluster(DockerSite(self.client, layout), Path(data_dir), Path(st["log_dir"]),
                                  cluster_id=st["cluster_id"], image=st.get("image", ""),
                                  version=st.get("version", ""))

    def network(self, cluster: DockerKafkaCluster, log_dir: Path) -> DockerFaultNetwork:
        """Toxiproxy and the network attachments of ``cluster`` (built with ``proxied``); toxiproxy's log
        goes to ``log_dir/toxiproxy.log``."""
        if not cluster.layout.proxied:
            raise BackendError("the fault network needs a cluster built with ClusterShape(proxied=True)")
        return DockerFaultNetwork(cluster.site, image_refs()["toxiproxy"], log_dir / "toxiproxy.log")

    def database(self, kind: str, data_dir: Path, log_dir: Path) -> DockerPostgres:
        """A PostgreSQL container on the network of the cluster built last (``backends/docker/database.py``),
        its log in ``log_dir/postgres.log``; ``data_dir`` is unused (the data lives in the container).

        Raises: ``ValueError`` for a kind other than ``postgres``; ``ClusterError`` when this backend built
        no cluster yet."""
        if kind not in self.databases:
            raise ValueError(f"the docker backend starts {', '.join(sorted(self.databases))} servers, not {kind}")
        if self._cluster is None:
            raise ClusterError("the docker backend starts a database next to a cluster it built (call cluster() first)")
        return DockerPostgres(self._cluster.site, image_refs()["postgres"], log_dir / f"{kind}.log")

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> DockerSpark:
        """The pipeline on a standalone Spark cluster on the network of the cluster built last (whose
        host-side bootstrap ``pipeline.bootstrap`` must be).

        Raises: ``ClusterError`` when this backend built no such cluster.
        """
        c = self._cluster
        if c is None or c.bootstrap != pipeline.bootstrap:
            raise ClusterError(f"the docker backend runs the pipeline next to a cluster it built; "
                               f"{pipeline.bootstrap} is not one (call cluster() first)")
        run_env = {"ONCEPROOF_RUN": os.environ["ONCEPROOF_RUN"]} if os.environ.get("ONCEPROOF_RUN") else {}
        return DockerSpark(c.site, image_refs()["spark"], pipeline, c.network_bootstrap, log_dir, run_env)

    def versions(self) -> dict[str, str]:
        """Kafka, PySpark and the connector as the images' labels and build say, Java 17, the images."""
        refs = image_refs()
        out = {"kafka": refs["kafka"].rpartition(":")[2], "pyspark": refs["spark"].rpartition(":")[2],
               "java": "17 (onceproof/jre)"}
        try:
            out["spark-sql-kafka"] = jars.spark_kafka_classpath().version  # what the spark image was built with
        except jars.ResolveError as e:
            out["spark-sql-kafka"] = f"? ({e})"
        for name, ref in refs.items():
            try:
                out[f"image-{name}"] = self.client.images.get(ref).tags[0]
            except Exception:  # noqa: BLE001 - recorded as missing; the setup fails with the fix
                out[f"image-{name}"] = f"{ref} (missing: make docker-images)"
        return out

    def prepare(self) -> list[str]:
        """Build (or find by content hash) the kafka, spark, toxiproxy and postgres images (and their bases)."""
        try:
            built = images.build(self.client, ["kafka", "spark", "toxiproxy", "postgres"])
        except images.ImageBuildError as e:
            raise BackendError(str(e)) from e
        return [f"{b.name}: {b.tag} ({'built' if b.built else 'cached'}, {b.size_bytes / 1e6:.0f} MB)" for b in built]
