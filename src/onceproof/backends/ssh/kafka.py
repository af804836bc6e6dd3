"""A KRaft cluster on the broker nodes of ``nodes.toml``, installed and supervised over SSH: the ssh
backend's :class:`onceproof.backends.base.Cluster`.

Each broker node gets the broker jars once (:func:`onceproof.backends.ssh.install.kafka_dist`), and per
run, under ``<root>/runs/<run>/kafka/``: ``server.properties`` (the one source of the broker settings,
``backends/common/broker_config.py``: RF 3, min ISR 2, no unclean election, ..., with its listeners on all
interfaces and advertised at the node's ``address``), ``log4j2.properties`` and ``data/``, formatted by
Kafka's ``StorageTool``. The broker runs through ``onceproof-node.py start`` (its own process group,
``ONCEPROOF_RUN`` in its environment, pid file with start ticks): kill, pause, resume and a clean stop are
signals to that group, checked against the start ticks, so a reused pid is never signalled.

Logs: :meth:`SshKafkaCluster.collect_logs` copies every node's broker and format logs into
``<local_dir>/logs/<node>/`` (``down`` does it); while the run goes on, the faults read a broker's log on its
node (:meth:`SshKafkaCluster.broker_log`, ``LiveLogs``).

Log directories (``LogDirs``, for ``corrupt-segment-tail``): a stopped broker's ``data/`` read and written on
its node (``backends/ssh/remote_dir.py``).

Size-limited disks (``ClusterShape(small_disks=True)``, planned by ``disk-full``: ``DiskFaults``): each broker's
``data/`` is a tmpfs of ``tmpfs.size_mb()`` MiB mounted by the node helper (``disk``; root and, in a
container, ``CAP_SYS_ADMIN``) before the storage is formatted, filled and emptied by it, unmounted by
:meth:`SshKafkaCluster.down` and by every sweep. Without the privilege the brokers run on the node's own disk
and :meth:`SshKafkaCluster.disk_unavailable` says why.

Unsynced writes (``ClusterShape(lazyfs=True)``, planned by ``lose-unsynced-writes``: ``UnsyncedLoss``): each
broker's ``data/`` is the mount of the lazyfs layer over ``disk/`` on its node (``backends/ssh/lazyfs_layer.py``),
started before the storage is formatted (as root: the mount is root's alone); with small disks as well, the
tmpfs is ``disk/``. A layer that cannot start leaves the broker on the plain directory and
:meth:`SshKafkaCluster.unsynced_unavailable` says why.

Releases (``BrokerVersions``, for ``rolling-upgrade``): a broker given another release
(:meth:`SshKafkaCluster.set_version`) gets that release's jars shipped to its node as a dist of their own and
runs on them, on its own data, from its next start.

Clocks (``ClusterShape(clocks=True)``, planned by ``clock-skew``): each broker starts under the node's
libfaketime with its offset file ``clock-offset`` at ``+0`` in its run directory
(``backends/ssh/clock.py``); :meth:`SshKafkaCluster.set_clock_offset` rewrites that file over SSH.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import socket
import tempfile
import time
import uuid
from pathlib import Path, PurePosixPath

from onceproof.backends.base import GONE, BackendError, ClusterError, NodeState
from onceproof.backends.common import jars, tmpfs
from onceproof.backends.common.broker_config import LOG4J2, server_properties
from onceproof.backends.common.health import wait_healthy
from onceproof.backends.common.layout import ClusterSpec
from onceproof.backends.common.unsynced import LayerLoss
from onceproof.backends.ssh import clock, install
from onceproof.backends.ssh.inventory import Inventory, Node
from onceproof.backends.ssh.lazyfs_layer import LayerError, RemoteLayer
from onceproof.backends.ssh.node import NodeHelper, NodeHelperError
from onceproof.backends.ssh.remote import RemoteError
from onceproof.backends.ssh.remote_dir import RemoteDir
from onceproof.backends.ssh.remote_log import RemoteLog
from onceproof.backends.ssh.transport import SshHub


def broker_properties(inv: Inventory, i: int, data_dir: PurePosixPath) -> dict[str, str]:
    """``server.properties`` of broker ``i`` (1-based, ``inv.brokers[i - 1]``): the shared broker settings
    with listeners bound on all interfaces at ``[kafka] ports`` and advertised at each node's ``address``,
    and the KRaft quorum of every broker node. Pure."""
    brokers = inv.brokers
    k = inv.kafka
    spec = ClusterSpec(Path("."), nodes=len(brokers))
    text = server_properties(spec, spec.node(i), Path(str(data_dir)))
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    me = brokers[i - 1]
    props.update({
        "node.id": str(i),
        "controller.quorum.voters": ",".join(f"{j}@{n.address}:{k.controller}" for j, n in enumerate(brokers, 1)),
        "listeners": f"CLIENT://0.0.0.0:{k.client},INTERNAL://0.0.0.0:{k.internal},"
                     f"CONTROLLER://0.0.0.0:{k.controller}",
        "advertised.listeners": f"CLIENT://{me.address}:{k.client},INTERNAL://{me.address}:{k.internal}",
        "log.dirs": str(data_dir),
    })
    return props


class SshKafkaCluster(LayerLoss):
    """The brokers of ``inv`` for run ``run_id``, through ``hub``.

    Args:
        inv: the nodes (``inv.brokers`` in order are brokers 1..n).
        hub: the run's SSH connections.
        run_id: the run's id; its data is ``<root>/runs/<run_id>/kafka`` on each broker node.
        local_dir: where the harness keeps this cluster's state file (and its collected logs, unless
            ``log_dir`` names another directory: the run's ``logs/``).
        clocks: start every broker under the node's libfaketime (``ClockFaults``; module docstring).
        small_disks: each broker's data on a size-limited tmpfs of its own (``DiskFaults``; module docstring).
        lazyfs: each broker's ``log.dirs`` on a lazyfs layer (``UnsyncedLoss``; module docstring).
        release: the Kafka release the brokers run (``--kafka-version``), ``""`` for the pin; its jars are
            shipped once per node as a dist of their own.

    Implements ``Cluster``, ``LiveLogs``, ``ClockFaults``, ``LogDirs``, ``DiskFaults``, ``UnsyncedLoss`` and
    ``BrokerVersions``.
    """

    def __init__(self, inv: Inventory, hub: SshHub, run_id: str, local_dir: Path, log_dir: Path | None = None,
                 clocks: bool = False, small_disks: bool = False, lazyfs: bool = False, release: str = ""):
        self.inv, self.hub, self.run_id, self.local_dir = inv, hub, run_id, local_dir
        self.release = release
        """The Kafka release to install (``--kafka-version``), ``""`` for the pin."""
        self._log_dir = log_dir
        self.clocks = clocks
        self._faketime: dict[int, str | None] = {}
        """Each broker node's libfaketime (found at :meth:`install` when ``clocks``), ``None`` when missing."""
        self._offsets: dict[int, float] = {}
        self.small_disks = small_disks
        self._disk_errors: dict[int, str] = {}
        """Why a broker's size-limited disk could not be mounted (it runs on the node's own disk then)."""
        self.lazyfs = lazyfs
        self.layers: dict[int, RemoteLayer] = {}
        self._layer_errors: dict[int, str] = {}
        become = inv.ssh.become == "sudo"
        self.helpers = {i: NodeHelper(hub.remote(n.name), inv.root, run_id, root_commands=become or n.user == "root")
                        for i, n in enumerate(inv.brokers, 1)}
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._version = ""
        self._dist: PurePosixPath | None = None
        self._node_dists: dict[int, tuple[str, PurePosixPath]] = {}
        """``node → (release, its dist on the node)`` for a broker moved off the cluster's release."""
        self._dists: dict[str, install.Dist] = {}
        """Each release's dist (``""``: the cluster's), made once: its jars are resolved and hashed."""
        self.pids: dict[int, int] = {}

    # ---------------------------------------------------------------------------- facts
    @property
    def nodes(self) -> list[int]:
        return sorted(self.helpers)

    def node(self, i: int) -> Node:
        """Broker ``i``'s node."""
        return self.inv.brokers[i - 1]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.nodes)

    @property
    def version(self) -> str:
        return self._version

    @property
    def log_dir(self) -> Path:
        return self._log_dir or self.local_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.local_dir / "cluster.json"

    def address(self, node: int) -> str:
        return f"{self.node(node).address}:{self.inv.kafka.client}"

    def _kdir(self, i: int) -> PurePosixPath:
        return self.helpers[i].run_dir / "kafka"

    def _log(self, i: int) -> PurePosixPath:
        return self._kdir(i) / f"broker-{i}.log"

    def _java(self, i: int, main: list[str], heap_mb: int, log4j: PurePosixPath) -> list[str]:
        dist = self._node_dists[i][1] if i in self._node_dists else self._dist
        assert dist is not None
        return ["java", f"-Xms{min(256, heap_mb)}m", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}",
                "-cp", f"{dist}/libs/*", *main]

    # ---------------------------------------------------------------------------- lifecycle
    def _parallel(self, fn, items) -> list:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(items))) as ex:
            return list(ex.map(fn, items))

    def install(self) -> dict[int, bool]:
        """Ship the helper and the broker jars to every broker node (in parallel); ``{node: uploaded now}``.
        Raises: ``ClusterError``."""
        dist = self._dist_of(self.release)
        self._version = dist.name.split("-", 1)[1]

        def one(i: int) -> bool:
            h = self.helpers[i]
            h.install()
            path, uploaded = install.ensure(h.remote, self.inv.root, dist)
            self._dist = path
            if self.clocks:
                self._faketime[i] = clock.find_library(h.remote)
            return uploaded
        try:
            return dict(zip(self.nodes, self._parallel(one, self.nodes), strict=True))
        except RemoteError as e:
            raise ClusterError(f"installing Kafka on the broker nodes failed: {e}") from None

    def format(self) -> None:
        """Write each broker's configs and format its storage (``kafka.tools.StorageTool format``).
        Raises: ``ClusterError`` with the tool's output."""
        def one(i: int) -> None:
            h = self.helpers[i]
            kdir = self._kdir(i)
            props = broker_properties(self.inv, i, kdir / "data")
            if self.small_disks:
                with contextlib.suppress(RemoteError):
                    h.disk("umount", self._disk_path(i))
            h.remote.run(["rm", "-rf", str(kdir)], timeout_s=60, root=h.root_commands).check()
            h.remote.run(["mkdir", "-p", str(kdir)], timeout_s=30).check()
            if self._faketime.get(i):
                clock.write_offset(h.remote, self._clock_file(i), 0)
            if self.small_disks:
                try:
                    h.disk("mount", self._disk_path(i), tmpfs.size_mb())
                except NodeHelperError as e:
                    self._disk_errors[i] = str(e)
            as_root = False
            if self.lazyfs:
                layer = RemoteLayer(h, kdir, i)
                try:
                    layer.ship()
                    layer.start()
                    self.layers[i] = layer
                    as_root = h.root_commands  # the layer's mount is root's alone (no allow_other)
                except LayerError as e:
                    self._layer_errors[i] = str(e)
                    layer.stop()
            with tempfile.TemporaryDirectory() as tmp:
                for name, text in (("server.properties", "".join(f"{k}={v}\n" for k, v in props.items())),
                                   ("log4j2.properties", LOG4J2.format(log=self._log(i))),
                                   ("log4j2-format.properties", LOG4J2.format(log=kdir / f"format-{i}.log"))):
                    (Path(tmp) / name).write_text(text)
                    h.remote.put(Path(tmp) / name, kdir / name)
            cmd = self._java(i, ["kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                                 "-c", str(kdir / "server.properties")], 256, kdir / "log4j2-format.properties")
            done = h.remote.run(cmd, timeout_s=120, root=as_root)
            if done.returncode != 0:
                raise ClusterError(f"formatting broker {i} on {h.remote.name} failed: {done.stdout}{done.stderr}")
            if i in self.layers:  # a formatted disk is a synced one (as after `sync`): else a crash empties
                try:              # bootstrap.checkpoint and meta.properties, and the broker never starts again
                    self.layers[i].request("checkpoint")
                except LayerError as e:
                    raise ClusterError(f"broker {i}'s lazyfs layer could not make its storage durable: {e}") \
                        from None
        try:
            self._parallel(one, self.nodes)
        except RemoteError as e:
            raise ClusterError(f"formatting the brokers failed: {e}") from None

    def up(self, timeout_s: float = 120.0) -> None:
        """Install, format, start every broker and wait until :meth:`healthy`. Raises ``ClusterError``."""
        self.local_dir.mkdir(parents=True, exist_ok=True)
        self.install()
        self.format()
        for i in self.nodes:
            self.start(i)
        self.save_state()
        self.healthy(timeout_s)

    def start(self, node: int) -> None:
        h = self.helpers[node]
        kdir = self._kdir(node)
        cmd = self._java(node, ["kafka.Kafka", str(kdir / "server.properties")], self.inv.kafka.heap_mb,
                         kdir / "log4j2.properties")
        lib = self._faketime.get(node)
        env = clock.preload(lib, self._clock_file(node)) if self.clocks and lib else None
        try:
            self.pids[node] = h.start(f"broker-{node}", cmd, log=kdir / f"broker-{node}.out", env=env)
        except RemoteError as e:
            raise ClusterError(f"starting broker {node} failed: {e}") from None

    def _dist_of(self, release: str) -> install.Dist:
        """Kafka ``release``'s dist (:func:`install.kafka_dist`), made once per cluster. Raises
        ``jars.ResolveError``."""
        if release not in self._dists:
            self._dists[release] = install.kafka_dist(release)
        return self._dists[release]

    def version_of(self, node: int) -> str:
        """The Kafka release broker ``node`` runs, or will run at its next start (``X.Y.Z``)."""
        return self._node_dists[node][0] if node in self._node_dists else self._version

    def set_version(self, node: int, version: str) -> None:
        """Broker ``node`` runs ``version`` from its next start, on its own data (a rolling upgrade's step):
        the release's jars are resolved here (Maven Central, the first time) and shipped to its node once.

        Raises: ``ClusterError`` for an unknown node, a release that cannot be resolved or a failed upload."""
        if node not in self.helpers:
            raise ClusterError(f"no broker {node} in this cluster (nodes {self.nodes})")
        try:
            path, _ = install.ensure(self.helpers[node].remote, self.inv.root, self._dist_of(version))
        except jars.ResolveError as e:
            raise ClusterError(str(e)) from None
        except RemoteError as e:
            raise ClusterError(f"shipping Kafka {version} to broker {node} failed: {e}") from None
        self._node_dists[node] = (version, path)

    def healthy(self, timeout_s: float = 120.0) -> None:
        def exited() -> str | None:
            dead = [i for i in self.nodes if not self.state(i).alive]
            return f"broker(s) {dead} exited" if dead else None
        wait_healthy(self.bootstrap, len(self.nodes), exited=exited, not_listening=self._not_listening,
                     timeout_s=timeout_s, where="see the brokers' logs (collected into "
                     f"{self.log_dir}/<node>/ at the end)")

    def _not_listening(self) -> list[int]:
        out = []
        for i in self.nodes:
            for port in (self.inv.kafka.client, self.inv.kafka.internal):
                try:
                    with socket.create_connection((self.node(i).address, port), timeout=2):
                        pass
                except OSError:
                    out.append(i)
                    break
        return out

    def _wait_gone(self, node: int, within_s: float) -> NodeState:
        """``node``'s state once its process is gone, or after ``within_s`` s. A zombie is waited out: the
        node helper's monitor reaps the broker a moment after it dies, and only then is it ``gone``."""
        deadline = time.monotonic() + within_s
        while True:
            st = self.state(node)
            if st.status == GONE or time.monotonic() > deadline:
                return st
            time.sleep(0.2)

    def stop(self, node: int, clean: bool = True, grace_s: float = 15.0) -> None:
        if not clean:
            self.kill(node)
            return
        self.helpers[node].signal(f"broker-{node}", "TERM")
        if self._wait_gone(node, grace_s).alive:
            self.kill(node)

    def kill(self, node: int) -> NodeState:
        pid = self.pids.get(node)
        with contextlib.suppress(RemoteError):
            self.helpers[node].signal(f"broker-{node}", "KILL")
        st = self._wait_gone(node, 5.0)
        return NodeState(pid, st.status)

    def pause(self, node: int) -> None:
        self.helpers[node].signal(f"broker-{node}", "STOP")

    def resume(self, node: int) -> None:
        self.helpers[node].signal(f"broker-{node}", "CONT")

    def state(self, node: int) -> NodeState:
        try:
            st = self.helpers[node].status(f"broker-{node}")
        except RemoteError:
            return NodeState(self.pids.get(node), GONE)
        return NodeState(st.get("pid"), st.get("state", GONE))

    def down(self, graceful: bool = False) -> list[tuple[int, int]]:
        """Stop every broker (SIGTERM then SIGKILL when ``graceful``, else SIGKILL), collect their logs.
        Never raises for a node that cannot be reached (it is named in the log collection's note)."""
        def one(i: int) -> None:
            with contextlib.suppress(RemoteError):
                if graceful:
                    self.stop(i, clean=True, grace_s=20)
                else:
                    self.kill(i)
        self._parallel(one, self.nodes)
        self.collect_logs()
        for layer in self.layers.values():
            layer.stop()  # it unmounts itself; the sweep detaches what is left
        self.layers.clear()
        if self.small_disks:
            for i in self.nodes:
                with contextlib.suppress(RemoteError):
                    self.helpers[i].disk("umount", self._disk_path(i))
        return []

    def clean(self) -> None:
        """Delete the run's Kafka directories on every broker node."""
        for i in self.nodes:
            h = self.helpers[i]
            with contextlib.suppress(RemoteError):
                h.remote.run(["rm", "-rf", str(self._kdir(i))], timeout_s=60, root=h.root_commands)

    def collect_logs(self) -> list[Path]:
        """Copy every node's broker and format logs into ``log_dir/<node>/``; the local paths."""
        out = []
        for i in self.nodes:
            h = self.helpers[i]
            dest = self.log_dir / h.remote.name
            dest.mkdir(parents=True, exist_ok=True)
            for name in (f"broker-{i}.log", f"broker-{i}.out", f"format-{i}.log"):
                with contextlib.suppress(RemoteError):
                    h.remote.get(self._kdir(i) / name, dest / name)
                    out.append(dest / name)
        return out

    def log_files(self) -> list[Path]:
        return sorted(p for p in self.log_dir.glob("*/*") if p.is_file())

    # ---------------------------------------------------------------------------- LiveLogs
    def broker_log(self, node: int) -> RemoteLog:
        """``broker-<node>.log`` on its node (log4j's; its ``[%d]`` is the broker's own clock)."""
        h = self.helpers[node]
        return RemoteLog(h.remote, self._log(node), root=h.root_commands)

    # ---------------------------------------------------------------------------- LogDirs
    def log_dir_of(self, node: int) -> RemoteDir:
        """``node``'s ``log.dirs`` on its node (``<run>/kafka/data``), through commands there."""
        h = self.helpers[node]
        return RemoteDir(h.remote, self._kdir(node) / "data", root=h.root_commands)

    # ---------------------------------------------------------------------------- UnsyncedLoss
    def unsynced_unavailable(self) -> str | None:
        if not self.lazyfs:
            return "the brokers' log.dirs are not on a lazyfs layer (the run planned no lose-unsynced-writes)"
        if self._layer_errors:
            return "; ".join(f"broker {i}: {e}" for i, e in sorted(self._layer_errors.items()))
        return None

    # ---------------------------------------------------------------------------- DiskFaults
    def _disk_path(self, node: int) -> PurePosixPath:
        """Where ``node``'s tmpfs goes: ``data/``, or under a lazyfs layer its backing ``disk/``."""
        return self._kdir(node) / ("disk" if self.lazyfs else "data")

    def disk_unavailable(self) -> str | None:
        if not self.small_disks:
            return "the brokers' data are not on size-limited disks (the run planned no disk-full)"
        if self._disk_errors:
            return "; ".join(f"broker {i}: {e}" for i, e in sorted(self._disk_errors.items()))
        return None

    def fill_disk(self, node: int) -> dict:
        """Fill ``node``'s tmpfs on its node (the helper's ``disk --op fill``). Raises ``BackendError``."""
        why = self.disk_unavailable()
        if why:
            raise BackendError(f"cannot fill broker {node}'s disk: {why}")
        try:
            return self.helpers[node].disk("fill", self._disk_path(node))
        except RemoteError as e:
            raise BackendError(f"cannot fill broker {node}'s disk: {e}") from None

    def unfill_disk(self, node: int) -> int:
        if not self.small_disks:
            return 0
        try:
            return int(self.helpers[node].disk("unfill", self._disk_path(node)).get("freed", 0))
        except RemoteError:
            return 0

    # ---------------------------------------------------------------------------- ClockFaults
    def _clock_file(self, node: int) -> PurePosixPath:
        return self._kdir(node) / "clock-offset"

    def clock_unavailable(self) -> str | None:
        if not self.clocks:
            return "the brokers were started without libfaketime (the run planned no clock fault)"
        for i in self.nodes:
            why = clock.missing(self.helpers[i].remote, self._faketime.get(i))
            if why:
                return why
        return None

    def set_clock_offset(self, node: int, seconds: float) -> None:
        """Rewrite ``node``'s offset file on its node; the broker's JVM reads it within
        ``faketime.CACHE_S`` s. Raises ``BackendError`` naming the fix, ``ValueError`` (a fractional offset)."""
        why = self.clock_unavailable()
        if why:
            raise BackendError(f"cannot offset broker {node}'s clock: {why}")
        try:
            clock.write_offset(self.helpers[node].remote, self._clock_file(node), seconds)
        except RemoteError as e:
            raise BackendError(f"cannot offset broker {node}'s clock: {e}") from None
        self._offsets[node] = float(seconds)

    def clock_offset(self, node: int) -> float:
        """The offset last written (s); the harness is the file's only writer."""
        return self._offsets.get(node, 0.0)

    def save_state(self) -> None:
        """What :meth:`down` needs after a restart of the harness: the run id, the nodes file and the pids."""
        self.state_file.write_text(json.dumps({"backend": "ssh", "run_id": self.run_id, "nodes": str(self.inv.path),
                                               "pids": self.pids, "cluster_id": self.cluster_id}))
