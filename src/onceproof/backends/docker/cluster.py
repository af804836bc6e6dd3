"""A real Apache Kafka cluster (KRaft, combined broker+controller nodes) as containers of
``onceproof/kafka`` on the run's bridge network: the Docker backend's :class:`onceproof.backends.base.Cluster`.

Addresses, listeners and broker settings: :mod:`onceproof.backends.docker.layout` (the same settings as the local
backend: RF 3, min ISR 2, no unclean election, the transaction log's RF 3 / min ISR 2). Each node's
data directory is bind-mounted from ``<data_dir>/node<i>/data``, so ``--keep-data`` keeps it and a
restarted container finds it. Host ports are leased like the local backend's
(``backends/common/ports.py``), so a Docker cluster and a local one never take the same ports.

Faults on a node are the engine's: ``kill`` = ``docker kill`` (SIGKILL; the container stays, ``start``
restarts it on its data), ``pause`` / ``resume`` = ``docker pause`` / ``unpause`` (the cgroup freezer;
:class:`NodeState` status ``stopped`` while paused), ``stop(clean)`` = ``docker stop`` (SIGTERM, SIGKILL
after 15 s). A node's pid is the broker JVM's pid on the host (the container's main process).
Its log directory is that bind mount on the host (``LogDirs``, ``corrupt-segment-tail``); it has no
size-limited disk (no ``DiskFaults``: ``disk-full`` is refused on this backend).

Releases (``BrokerVersions``, ``rolling-upgrade``): each node also mounts ``<data_dir>/node<i>/release``
read-only at ``/opt/onceproof/release``; a node given another release (:meth:`DockerKafkaCluster.set_version`)
finds that release's jars in its ``libs/`` (hard links to the harness's Maven cache, else copies) and its
container, started again, runs them on its own data (``docker/kafka/onceproof/bin/kafka-run-class``): the
same container, so its ``docker logs`` go on.

A run's site starts a reaper (:mod:`onceproof.backends.docker.reaper`) that removes every container of the run
if the harness dies without tearing down; ``onceproof cluster up`` (``detached``) does not, and
``cluster status|down`` find the containers again by their run label (``cluster.json``).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

import psutil

import docker
from onceproof.backends.base import GONE, STOPPED, ClusterError, NodeState
from onceproof.backends.common import jars
from onceproof.backends.common.health import wait_healthy
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.common.logdir import LocalDir
from onceproof.backends.common.ports import claim_base_port, release_base_port
from onceproof.backends.docker.layout import CLIENT_PORT, DATA_DIR, DockerLayout
from onceproof.backends.docker.site import DockerSite, save_logs

log = logging.getLogger("onceproof.docker")

STATE_FILE = "cluster.json"
RELEASE_DIR = "/opt/onceproof/release"
"""Where a broker container finds another release's jars (``libs/``), bind-mounted from its node directory."""


def node_state(status: str | None, pid: int | None, proc_status: str | None = None) -> NodeState:
    """A container's state as a :class:`NodeState`: ``paused`` → ``stopped`` (frozen), ``running`` → the
    process's own status (psutil's name, ``running`` when unknown), anything else (``exited``,
    ``created``, ``dead``, no container) → ``gone``."""
    if status == "paused":
        return NodeState(pid or None, STOPPED)
    if status in ("running", "restarting") and pid:
        return NodeState(pid, proc_status or "running")
    return NodeState(None, GONE)


class DockerKafkaCluster:
    """Start, inspect and stop the containerized KRaft cluster of ``layout`` in ``data_dir``.

    ``site`` (its run id and layout) says which containers are this cluster's; a site built with
    ``reap=False`` outlives this process (``onceproof cluster up``).
    """

    def __init__(self, site: DockerSite, data_dir: Path, log_dir: Path | None = None, *,
                 cluster_id: str | None = None, image: str = "", version: str = ""):
        self.site = site
        self.data_dir = Path(data_dir).resolve()
        self._log_dir = Path(log_dir) if log_dir else self.data_dir / "logs"
        self.cluster_id = cluster_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.image = image
        self.version = version
        self.node_versions: dict[int, str] = {}
        """Nodes moved to another release than the image's (:meth:`set_version`)."""

    @property
    def layout(self) -> DockerLayout:
        return self.site.layout

    # ------------------------------------------------------------------ properties of the protocol
    @property
    def nodes(self) -> list[int]:
        return list(range(1, self.layout.nodes + 1))

    @property
    def bootstrap(self) -> str:
        """Host-side clients' ``127.0.0.1:<port>,...`` (toxiproxy's ports when proxied)."""
        return self.layout.bootstrap

    @property
    def network_bootstrap(self) -> str:
        """Bootstrap for clients inside the network (the pipeline's driver and executors)."""
        return self.layout.network_bootstrap

    @property
    def log_dir(self) -> Path:
        return self._log_dir

    @property
    def state_file(self) -> Path:
        return self.data_dir / STATE_FILE

    def address(self, node: int) -> str:
        """``127.0.0.1:<port>`` where node ``node``'s CLIENT listener is published (no proxy)."""
        return f"127.0.0.1:{self.layout.client_host_port(node)}"

    # ------------------------------------------------------------------ lifecycle
    def _container(self, node: int):
        c = self.site.get(self.layout.broker_host(node))
        if c is None:
            raise ClusterError(f"node {node} of run {self.site.run_id} has no container; "
                               "start the cluster (`up`) first")
        return c

    def up(self, timeout_s: float = 120.0) -> None:
        """Create the network (if the fault network did not) and one container per node, then wait until
        :meth:`healthy`. Raises ``ClusterError`` (with the failing node's log tail)."""
        self.site.ensure_network()
        self.save_state()
        for n in self.nodes:
            data = self.data_dir / f"node{n}" / "data"
            shutil.rmtree(data.parent, ignore_errors=True)  # a new cluster id: storage formatted afresh
            data.mkdir(parents=True)
            (data.parent / "release").mkdir()
            host = self.layout.broker_host(n)
            try:
                self.site.run(host, self.image, ip=self.layout.broker_ip(n), aliases=[host],
                              env={**self.layout.broker_env(n, self.cluster_id), **_run_env()},
                              ports={f"{CLIENT_PORT}/tcp": ("127.0.0.1", self.layout.client_host_port(n))},
                              volumes={str(data): {"bind": DATA_DIR, "mode": "rw"},
                                       str(data.parent / "release"): {"bind": RELEASE_DIR, "mode": "ro"}},
                              log_path=self._log_path(n))
            except docker.errors.APIError as e:
                raise ClusterError(f"starting node {n} ({self.image}) failed: {e}") from e
        self.healthy(timeout_s)
        self.save_state()

    def healthy(self, timeout_s: float = 120.0) -> None:
        """Block until the metadata lists every node as a broker and each broker process listens on all
        its ports (CLIENT, INTERNAL, APP, CONTROLLER inside its container: Kafka binds its data-plane
        listeners only after registering). Raises ``ClusterError`` on timeout or when a container exits."""
        def exited() -> str | None:
            dead = [n for n in self.nodes if not self.state(n).alive]
            return f"broker(s) {dead} exited ({self._tail(dead[0])})" if dead else None

        wait_healthy(self.bootstrap, len(self.nodes), exited=exited, not_listening=self._not_listening,
                     timeout_s=timeout_s, where=f"see {self.log_dir}/ (`onceproof cluster status --backend docker`)")

    def _not_listening(self) -> list[int]:
        """Nodes whose container does not listen on every port of :meth:`DockerLayout.listen_ports` (its
        network namespace holds only the broker)."""
        want = self.layout.listen_ports()
        return [n for n in self.nodes if not want <= listening_ports(self.state(n).pid)]

    def _tail(self, node: int, nbytes: int = 1500) -> str:
        try:
            return self._container(node).logs(tail=30).decode(errors="replace")[-nbytes:]
        except (docker.errors.APIError, ClusterError) as e:
            return f"(no logs: {e})"

    def down(self, graceful: bool = False) -> list[tuple[int, int]]:
        """Remove every container of the run (brokers, and whatever the Spark app and the fault network
        left) and its network, saving their logs; release the ports and stop the reaper. ``graceful``:
        each broker gets ``docker stop`` (SIGTERM, 15 s) first. Safe to call twice. Returns ``[]``
        (a container found by the run's label is always this run's)."""
        if graceful:
            for n in self.nodes:
                c = self.site.get(self.layout.broker_host(n))
                if c is not None:
                    self.site.remove(c, grace_s=15)
        left = self.site.sweep()
        if left:
            log.warning("docker resources left behind: %s", left)
        try:
            release_base_port(self.layout.base_port, self.data_dir)
        except OSError as e:
            log.warning("could not release the port lease of %d: %s", self.layout.base_port, e)
        if left:
            raise ClusterError(f"could not remove: {'; '.join(left)}; remove them with "
                               f"`docker rm -f $(docker ps -aq --filter label=org.onceproof.run={self.site.run_id})`")
        return []

    def clean(self) -> None:
        """Delete the nodes' data (after :meth:`down`)."""
        for n in self.nodes:
            shutil.rmtree(self.data_dir / f"node{n}", ignore_errors=True)

    def log_dir_of(self, node: int) -> LocalDir:
        """``node``'s ``log.dirs`` on the host: the directory bind-mounted as its container's data directory
        (``<data_dir>/node<i>/data``; :class:`onceproof.backends.base.LogDirs`). Its files belong to the
        container's user: a harness that may not write them gets ``PermissionError``."""
        return LocalDir(self.data_dir / f"node{node}" / "data")

    # ------------------------------------------------------------------ one node
    def start(self, node: int) -> None:
        """Start node ``node``'s container again (its data is kept; storage is already formatted)."""
        self._container(node).start()
        self.save_state()

    def version_of(self, node: int) -> str:
        """The Kafka release node ``node`` runs, or will run at its next start (``X.Y.Z``)."""
        return self.node_versions.get(node, self.version)

    def set_version(self, node: int, version: str) -> None:
        """Node ``node`` runs ``version`` from its next :meth:`start`, on its own data (a rolling upgrade's
        step): the release's jars (resolved from Maven Central the first time) linked into its release
        directory, which its container mounts.

        Raises: ``ClusterError`` for an unknown node or a release that cannot be resolved."""
        if node not in self.nodes:
            raise ClusterError(f"no broker {node} in this cluster (nodes {self.nodes})")
        try:
            cp = jars.kafka_classpath(version)
        except jars.ResolveError as e:
            raise ClusterError(str(e)) from None
        libs = self.data_dir / f"node{node}" / "release" / "libs"
        shutil.rmtree(libs, ignore_errors=True)
        libs.mkdir(parents=True)
        for j in cp.jars:
            try:
                os.link(j, libs / j.name)
            except OSError:  # another file system than the cache's
                shutil.copy2(j, libs / j.name)
        self.node_versions[node] = version
        self.save_state()

    def stop(self, node: int, clean: bool = True, grace_s: float = 15.0) -> None:
        """``clean``: ``docker stop`` (SIGTERM, SIGKILL after ``grace_s`` s); else :meth:`kill`."""
        if not clean:
            self.kill(node)
            return
        c = self._container(node)
        self._unpause(c)
        c.stop(timeout=int(grace_s))

    def kill(self, node: int) -> NodeState:
        """``docker kill`` (SIGKILL) node ``node`` and wait for its container to exit (≤ 5 s). Returns the
        killed pid and its state afterwards (``gone`` once the container exited)."""
        c = self._container(node)
        pid = self._pid(c)
        self._unpause(c)
        try:
            c.kill()
        except docker.errors.APIError as e:  # not running: already gone
            log.info("kill node %d: %s", node, e)
        deadline = time.monotonic() + 5
        st = self.state(node)
        while st.alive and time.monotonic() < deadline:
            time.sleep(0.1)
            st = self.state(node)
        return NodeState(pid, st.status)

    def pause(self, node: int) -> None:
        """``docker pause`` (cgroup freezer); no-op unless the container is running."""
        c = self._container(node)
        if c.status == "running":
            c.pause()

    def resume(self, node: int) -> None:
        """``docker unpause``; no-op unless the container is paused."""
        self._unpause(self._container(node))

    @staticmethod
    def _unpause(c) -> None:
        c.reload()
        if c.status == "paused":
            c.unpause()
            c.reload()

    @staticmethod
    def _pid(c) -> int | None:
        return (c.attrs.get("State") or {}).get("Pid") or None

    def state(self, node: int) -> NodeState:
        """Node ``node``'s container now (asked of the engine)."""
        c = self.site.get(self.layout.broker_host(node))
        if c is None:
            return NodeState(None, GONE)
        pid = self._pid(c)
        proc = None
        if c.status == "running" and pid:
            try:
                proc = psutil.Process(pid).status()
            except psutil.Error:
                proc = None
        return node_state(c.status, pid, proc)

    def _log_path(self, node: int) -> Path:
        return self.log_dir / f"broker-{node}.log"

    def log_files(self) -> list[Path]:
        """Each node's ``docker logs`` (every incarnation of its container) written to
        ``<log_dir>/broker-<i>.log``."""
        out = []
        for n in self.nodes:
            c = self.site.get(self.layout.broker_host(n))
            p = save_logs(c) if c is not None else None
            if p is not None:
                out.append(p)
            elif self._log_path(n).exists():
                out.append(self._log_path(n))
        return out

    # ------------------------------------------------------------------ state for attach
    def save_state(self) -> None:
        """``<data_dir>/cluster.json``: the run id and layout, for ``onceproof cluster status|down``; and
        the broker pids in the port lease (a detached cluster's lease outlives ``cluster up``)."""
        lay = self.layout
        st = {"backend": "docker", "run_id": lay.run_id, "nodes": lay.nodes, "base_port": lay.base_port,
              "proxied": lay.proxied, "subnet": lay.subnet, "cluster_id": self.cluster_id,
              "log_dir": str(self.log_dir), "image": self.image, "version": self.version,
              "node_versions": self.node_versions,
              "bootstrap": self.bootstrap, "network_bootstrap": self.network_bootstrap}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(st, indent=2))
        tmp.replace(self.state_file)
        pids = [s.pid for s in (self.state(n) for n in self.nodes) if s.pid]
        if pids:
            try:
                claim_base_port(ClusterSpec(self.data_dir, lay.nodes, lay.base_port, proxied=lay.proxied), pids)
            except OSError as e:
                log.warning("could not record the port lease of %d: %s", lay.base_port, e)


def listening_ports(pid: int | None) -> set[int]:
    """TCP ports in state LISTEN in the network namespace of process ``pid`` (``/proc/<pid>/net/tcp``
    and ``tcp6``: one hex ``local_address`` column, state ``0A``). psutil cannot say: it reads the
    *caller's* ``/proc/net/tcp``. Empty when ``pid`` is ``None`` or gone."""
    out: set[int] = set()
    if not pid:
        return out
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        out |= listening_in(lines)
    return out


def listening_in(lines: list[str]) -> set[int]:
    """Ports in state LISTEN (``0A``) among ``/proc/net/tcp`` rows (``sl local_address rem_address st
    ...``, the address as hex ``IP:PORT``)."""
    out = set()
    for line in lines:
        f = line.split()
        if len(f) > 3 and f[3] == "0A":
            out.add(int(f[1].rpartition(":")[2], 16))
    return out


def _run_env() -> dict[str, str]:
    """``ONCEPROOF_RUN`` for every container's processes, so leftovers can be traced to their run."""
    run = os.environ.get("ONCEPROOF_RUN")
    return {"ONCEPROOF_RUN": run} if run else {}


def read_state(data_dir: Path) -> dict:
    """The ``cluster.json`` a docker cluster wrote in ``data_dir``.

    Raises: ``ClusterError`` when there is none, it is damaged, or it is another backend's.
    """
    path = Path(data_dir).resolve() / STATE_FILE
    if not path.exists():
        raise ClusterError(f"no cluster state in {path.parent}: start one with "
                           "`onceproof cluster up --backend docker`")
    try:
        st = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ClusterError(f"{path} is damaged ({e}); remove its containers with "
                           "`docker rm -f $(docker ps -aq --filter label=org.onceproof.backend=docker)`") from e
    if st.get("backend") != "docker":
        raise ClusterError(f"{path} describes a cluster of another backend; use `--backend local` for it")
    return st
