"""A real Apache Kafka cluster (KRaft, combined broker+controller nodes) as local JVM processes.

:class:`KafkaCluster` is the local backend's :class:`onceproof.backends.base.Cluster`. Ports and directories:
``backends/common/layout.py``; the advertised addresses are kept separate from the bound ones so that a
fault proxy can sit in front of any path. Ports are leased (``backends/common/ports.py``) so that two
clusters on one machine never collide.

Configuration facts follow the Kafka 4.x broker docs (https://kafka.apache.org/documentation/#brokerconfigs):
``min.insync.replicas=2`` with RF 3 lets one broker fail without losing acknowledged (``acks=all``) writes;
``transaction.state.log.*`` gives the transaction coordinator the same durability.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from onceproof.backends.base import FOREIGN, GONE, BackendError, ClusterError, NodeState
from onceproof.backends.common import cds, cgroups, faketime, jars, lazyfs, processes, tmpfs
from onceproof.backends.common.broker_config import LOG4J2, server_properties
from onceproof.backends.common.health import wait_healthy
from onceproof.backends.common.layout import ClusterSpec, NodeSpec
from onceproof.backends.common.logdir import LocalDir
from onceproof.backends.common.ports import claim_base_port, free_base_port, release_base_port
from onceproof.backends.common.unsynced import LayerLoss

log = logging.getLogger("onceproof.kafka")


_BIND_FAILED = re.compile(r"failed to bind to [^\s:]*:(\d+)|(?:Address already in use|BindException)()")




@dataclass
class BrokerProcess:
    """One running node: its spec, config file, log file and pid (``None`` when stopped)."""

    spec: NodeSpec
    config: Path
    log: Path
    pid: int | None = None


@dataclass
class KafkaCluster(LayerLoss):
    """Start, inspect and stop the local KRaft cluster described by ``spec``.

    ``tie_to_parent`` (default) makes every broker die with the harness process; ``onceproof cluster up``
    sets it false and relies on :meth:`down` (via the state file) instead.

    ``clocks``: every broker starts under libfaketime with its offset file ``node<i>/clock-offset`` at ``+0``
    (``backends/common/faketime.py``), so that :meth:`set_clock_offset` moves its clock at run time
    (:class:`onceproof.backends.base.ClockFaults`); without it nothing is preloaded.

    ``lazyfs``: each node's ``log.dirs`` (``node<i>/data``) is the mount of a lazyfs layer over the real
    directory ``node<i>/disk`` (``backends/common/lazyfs.py``), started before the node is formatted and
    stopped (unmounted) in :meth:`down`, so that :meth:`lose_unsynced` can drop what the broker had not
    fsynced (:class:`onceproof.backends.base.UnsyncedLoss`). The formatted state is made durable
    (``checkpoint``) before the broker starts. Not for detached clusters: a layer lives with its harness.
    ``small_disks``: every node's data directory ``node<i>/data`` is a tmpfs of its own of
    ``tmpfs.size_mb()`` MiB, mounted at :meth:`format` and unmounted by :meth:`down` (its data go with it:
    ``--keep-data`` keeps nothing of such a run's brokers), so that :meth:`fill_disk` can fill it
    (:class:`onceproof.backends.base.DiskFaults`); when the mount is refused the nodes start on the host's
    filesystem and :meth:`disk_unavailable` says why. Every node's log directory is
    :meth:`log_dir_of` (:class:`onceproof.backends.base.LogDirs`).

    ``own_groups``: every broker is moved into a cgroup v2 of its own (:meth:`group_of`,
    ``backends/common/cgroups.py``) right after it is spawned, so that the fault network can cut its own
    outbound connections (``partition:isolate``); when that is refused the brokers run where the harness
    does and :attr:`group_error` says why. The groups are removed by :meth:`down`.
    """

    spec: ClusterSpec
    tie_to_parent: bool = True
    clocks: bool = False
    lazyfs: bool = False
    layers: dict[int, lazyfs.Layer] = field(default_factory=dict)
    _sockets: Path | None = None
    small_disks: bool = False
    own_groups: bool = False
    group_error: str | None = None
    cluster_id: str = field(default_factory=lambda: base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
    brokers: dict[int, BrokerProcess] = field(default_factory=dict)
    version: str = ""
    """The Kafka release the nodes run: asked for (``""``: ``jars.kafka_version()``), then, once formatted,
    the one resolved."""
    node_versions: dict[int, str] = field(default_factory=dict)
    """Nodes that run another release than :attr:`version` from their next start (``rolling-upgrade``,
    :meth:`set_version`): node id → release."""
    owner: str = ""
    """A warm cluster's owner tag (``harness/warm.py``): every broker starts with ``ONCEPROOF_RUN`` set to it,
    whichever run restarts it, so a run's reaper and leftover checks never count a warm broker as the run's and
    the owner's reaper sweeps them all. ``""``: the brokers inherit the harness's ``ONCEPROOF_RUN``."""
    cds_dumps: dict[str, Path] = field(default_factory=dict)
    """Training only (:func:`train_archives`): JVM kind (``kafka-tool`` for ``StorageTool format``,
    ``kafka`` for a broker) → where its JVMs dump a class-data sharing archive at exit, instead of mapping
    one (``backends/common/cds.py``)."""

    @property
    def nodes(self) -> list[int]:
        """Node ids 1..n, ascending."""
        return [n.node_id for n in self.spec.node_specs]

    @property
    def bootstrap(self) -> str:
        return self.spec.bootstrap

    @property
    def log_dir(self) -> Path:
        return self.spec.logs

    @property
    def state_file(self) -> Path:
        return self.spec.data_dir / "cluster.json"

    def _java(self) -> str:
        try:
            return jars.java_binary()
        except jars.ResolveError as e:
            raise ClusterError(str(e)) from None

    def _jvm(self, cp: jars.Classpath, log4j: Path, heap_mb: int, kind: str) -> list[str]:
        """A JVM of ``kind`` (``kafka`` or ``kafka-tool``) on ``cp``: with its class-data sharing archive
        when there is one (``backends/common/cds.py``), or dumping one when this cluster trains."""
        java, path = self._java(), cp.as_java()
        share = ([f"-XX:ArchiveClassesAtExit={self.cds_dumps[kind]}"] if kind in self.cds_dumps
                 else cds.options(kind, java, _cds_key(path)))
        return [java, f"-Xms{min(256, heap_mb)}m", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true", *share,
                f"-Dlog4j2.configurationFile={log4j}", "-cp", path]

    def format(self) -> None:
        """Write configs and format each node's storage (``kafka.tools.StorageTool format``), the nodes'
        format JVMs side by side.

        Raises: ``ClusterError`` when formatting fails (its output is included).
        """
        try:
            cp = jars.kafka_classpath(self.version)
        except jars.ResolveError as e:
            raise ClusterError(str(e)) from None
        self.version = cp.version
        root = self.spec.data_dir
        self.stop_layers()  # a retried up(): never rmtree through a mount
        formats: list[tuple[NodeSpec, Path, Path, subprocess.Popen]] = []
        try:
            for n in self.spec.node_specs:
                ndir = root / f"node{n.node_id}"
                for d in ("data", "disk"):  # an earlier attempt's (up() retries on a taken port)
                    tmpfs.unmount(ndir / d)
                shutil.rmtree(ndir, ignore_errors=True)
                (ndir / "data").mkdir(parents=True)
                if self.small_disks:
                    self._disk_dir(n.node_id).mkdir(parents=True, exist_ok=True)
                    self._mount_disk(self._disk_dir(n.node_id))
                if self.lazyfs:
                    self._start_layer(n.node_id)
                cfg = ndir / "server.properties"
                cfg.write_text(server_properties(self.spec, n, ndir / "data"))
                log = self.spec.logs / f"broker-{n.node_id}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                (ndir / "log4j2.properties").write_text(LOG4J2.format(log=log))
                fmt_log4j = ndir / "log4j2-format.properties"
                fmt_log4j.write_text(LOG4J2.format(log=self.spec.logs / f"format-{n.node_id}.log"))
                cmd = self._jvm(cp, fmt_log4j, 256, "kafka-tool") + [
                    "kafka.tools.StorageTool", "format",
                    f"--cluster-id={self.cluster_id}", "-c", str(cfg)]  # "=" form: a base64 id may start with "-"
                formats.append((n, cfg, log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                              text=True)))
            for n, cfg, log, proc in formats:
                try:
                    out, err = proc.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    raise ClusterError(f"formatting node {n.node_id} took over 120 s") from None
                if proc.returncode != 0:
                    raise ClusterError(f"formatting node {n.node_id} failed:\n{out}\n{err}")
                if n.node_id in self.layers:  # a formatted disk is a synced one (as after `sync`)
                    self.layers[n.node_id].checkpoint()
                self.brokers[n.node_id] = BrokerProcess(n, cfg, log)
                if self.clocks:
                    faketime.write_offset(self.clock_file(n.node_id), 0)
                    faketime.note(self.clock_file(n.node_id))
        finally:
            for *_, proc in formats:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def start_node(self, node_id: int) -> int:
        """Start (or restart) node ``node_id``; returns its pid. The node keeps its data (and its clock
        offset, :meth:`set_clock_offset`)."""
        b = self.brokers[node_id]
        cp = jars.kafka_classpath(self.version_of(node_id))
        cmd = self._jvm(cp, b.config.parent / "log4j2.properties", self.spec.heap_mb, "kafka") + [
            "kafka.Kafka", str(b.config)]
        proc = processes.spawn(cmd, log_path=b.log.with_suffix(".out"), env=self.node_env(node_id),
                               tie_to_parent=self.tie_to_parent)
        if self.own_groups and self.group_error is None:
            why = cgroups.unavailable()
            try:
                if why:
                    raise OSError(why)
                cgroups.place(proc.pid, self.group_of(node_id))
            except OSError as e:  # the broker runs on, in the harness's group: isolate then cannot cut its fetches
                self.group_error = f"broker {node_id} could not be put in a cgroup of its own: {e}"
                log.warning("%s", self.group_error)
        b.pid = proc.pid
        self.save_state()
        return proc.pid

    def version_of(self, node_id: int) -> str:
        """The Kafka release node ``node_id`` runs (from its last start on) or will run at its next start."""
        return self.node_versions.get(node_id, self.version)

    def set_version(self, node_id: int, version: str) -> None:
        """Node ``node_id`` runs ``version`` from its next start (:meth:`start_node`), on its own data: a
        rolling upgrade's step (:class:`onceproof.backends.base.BrokerVersions`). Its jars are resolved here
        (about 12 s the first time per release).

        Raises: ``ClusterError`` when the release cannot be resolved, or for an unknown node."""
        if node_id not in self.brokers:
            raise ClusterError(f"no broker {node_id} in this cluster (nodes {self.nodes})")
        try:
            jars.kafka_classpath(version)
        except jars.ResolveError as e:
            raise ClusterError(str(e)) from None
        self.node_versions[node_id] = version
        self.save_state()

    def up(self, timeout_s: float = 120.0, attempts: int = 3) -> None:
        """Format, start every node and wait until all brokers are registered and a controller is elected.

        When a broker exits because its port was taken meanwhile (another program bound it after the
        port test), an unproxied cluster moves to a newly reserved base port and starts again, at most
        ``attempts`` times in all (a proxied cluster cannot move: its proxies already listen).

        Raises: ``ClusterError`` on timeout or when the ports stay taken (node logs are under
        ``data_dir/logs``).
        """
        for attempt in range(1, attempts + 1):
            marks = self._log_marks()
            self.format()
            for n in self.spec.node_specs:
                self.start_node(n.node_id)
            try:
                self.healthy(timeout_s)
                return
            except ClusterError as e:
                port = self._bind_failure(marks)
                if port is None:
                    raise
                if self.spec.proxied or attempt == attempts:
                    raise ClusterError(f"port {port} was taken by another program while the brokers started "
                                       f"(attempt {attempt} of {attempts}); stop it or retry") from e
                old = self.spec.base_port
                self.down()
                self.spec.base_port = free_base_port(self.spec.nodes, start=old + 500, proxied=False)
                log.warning("port %s was taken while the brokers started; retrying on base port %d",
                            port, self.spec.base_port)

    def _log_marks(self) -> dict[Path, int]:
        out = {}
        for n in self.spec.node_specs:
            for p in (self.spec.logs / f"broker-{n.node_id}.log", self.spec.logs / f"broker-{n.node_id}.out"):
                out[p] = p.stat().st_size if p.exists() else 0
        return out

    def _bind_failure(self, marks: dict[Path, int]) -> int | str | None:
        """The port a broker failed to bind in this attempt (from the log lines written since ``marks``),
        ``"?"`` when the log says so without a port, ``None`` when no bind failure is logged."""
        for p, off in marks.items():
            try:
                with open(p, "rb") as f:
                    f.seek(off)
                    text = f.read().decode(errors="replace")
            except OSError:
                continue
            m = _BIND_FAILED.search(text)
            if m:
                return int(m.group(1)) if m.group(1) else "?"
        return None

    def healthy(self, timeout_s: float = 120.0) -> None:
        """Block until the metadata lists every node as a broker and each broker process listens on its
        ports. Raises ``ClusterError`` on timeout or when a broker exits."""
        def exited() -> str | None:
            dead = [i for i, b in self.brokers.items() if b.pid is None or not processes.alive(b.pid)]
            return f"broker(s) {dead} exited" if dead else None

        wait_healthy(self.bootstrap, self.spec.nodes, exited=exited, not_listening=self._not_listening,
                     timeout_s=timeout_s, where=f"see {self.spec.logs}/")

    def _not_listening(self) -> list[int]:
        """Nodes whose own process does not (yet) listen on its client and inter-broker ports."""
        out = []
        for i, b in sorted(self.brokers.items()):
            want = {b.spec.client_port, b.spec.internal_port}
            try:
                conns = psutil.Process(b.pid).net_connections(kind="tcp")
            except (psutil.Error, TypeError):
                out.append(i)
                continue
            have = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
            if not want <= have:
                out.append(i)
        return out

    def owns(self, b: BrokerProcess) -> bool:
        """True when ``b.pid`` is alive and its command line proves it is this cluster's broker (``kafka.Kafka``
        with this node's config file), so a stale pid in a state file never gets another process killed."""
        if b.pid is None:
            return False
        try:
            proc = psutil.Process(b.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return False
            args = proc.cmdline()
        except psutil.Error:
            return False
        cfgs = {str(b.config), str(Path(b.config).resolve())}
        return "kafka.Kafka" in args and any(c in args for c in cfgs)

    def stop_node(self, node_id: int, grace_s: float = 15.0) -> None:
        """Stop node ``node_id`` (SIGTERM, then SIGKILL after ``grace_s``); a pid that is not this node's
        broker (see :meth:`owns`) is left alone."""
        b = self.brokers[node_id]
        if b.pid is not None:
            if self.owns(b):
                processes.stop_group(b.pid, grace_s=grace_s)
            b.pid = None
            self.save_state()
            if self.clocks:
                faketime.remove_stale_shm()

    # ------------------------------------------------------------------ onceproof.backends.base.Cluster, per node

    def start(self, node: int) -> None:
        """Start (or restart) ``node`` on its data."""
        self.start_node(node)

    def stop(self, node: int, clean: bool = True, grace_s: float = 15.0) -> None:
        """``clean``: SIGTERM, SIGKILL after ``grace_s`` s (:meth:`stop_node`); else :meth:`kill`."""
        if clean:
            self.stop_node(node, grace_s=grace_s)
        else:
            self.kill(node)

    def kill(self, node: int) -> NodeState:
        """SIGKILL ``node``'s process group and wait for it (≤ 5 s); returns the killed pid and its status
        afterwards (``gone`` once reaped). The node is then recorded as stopped."""
        b = self.brokers[node]
        pid = b.pid
        if pid is not None:
            processes.kill_group(pid)
        b.pid = None
        if self.clocks:
            faketime.remove_stale_shm()
        return NodeState(pid, processes.status(pid))

    def pause(self, node: int) -> None:
        """SIGSTOP ``node``'s process group (no-op without a process)."""
        self._signal(node, "SIGSTOP")

    def resume(self, node: int) -> None:
        """SIGCONT ``node``'s process group (no-op without a process)."""
        self._signal(node, "SIGCONT")

    def _signal(self, node: int, sig: str) -> None:
        b = self.brokers.get(node)
        if b is not None and b.pid is not None:
            processes.signal_group(b.pid, sig)

    def state(self, node: int) -> NodeState:
        """``node``'s process: its pid and psutil status; ``foreign`` when the recorded pid is alive but not
        this node's broker (:meth:`owns`), ``gone`` when there is none."""
        b = self.brokers.get(node)
        if b is None or b.pid is None:
            return NodeState(None, GONE)
        if self.owns(b):
            return NodeState(b.pid, processes.status(b.pid))
        return NodeState(b.pid, FOREIGN if processes.alive(b.pid) else GONE)

    def address(self, node: int) -> str:
        """``127.0.0.1:<client port>`` of ``node`` (the port it binds, not its proxy)."""
        return f"127.0.0.1:{self.spec.node(node).client_port}"

    def log_files(self) -> list[Path]:
        """Each node's ``broker-<i>.log`` (log4j), ``broker-<i>.out`` (stdout/stderr) and ``format-<i>.log``,
        where written."""
        names = [f"{kind}-{i}.{ext}" for i in self.nodes for kind, ext in (("broker", "log"), ("broker", "out"),
                                                                            ("format", "log"))]
        return [p for p in (self.spec.logs / n for n in names) if p.exists()]

    def clean(self) -> None:
        """Delete every node's data directory (``data_dir/node<i>/data``, and ``disk`` under a lazyfs layer);
        configs and logs stay."""
        self.stop_layers()
        for n in self.spec.node_specs:
            for d in ("data", "disk"):
                shutil.rmtree(self.spec.data_dir / f"node{n.node_id}" / d, ignore_errors=True)

    def group_of(self, node: int) -> str:
        """``node``'s cgroup (relative to the cgroup2 root) when the cluster has :attr:`own_groups`."""
        return cgroups.group_of(str(self.spec.data_dir), node)

    def outbound_group(self, node: int) -> str | None:
        """``node``'s cgroup when its broker was put in one (the fault network's handle on its outbound
        connections), else ``None``."""
        return self.group_of(node) if self.own_groups and self.group_error is None else None

    # ------------------------------------------------------------------ onceproof.backends.base.ClockFaults

    def clock_file(self, node: int) -> Path:
        """``node``'s libfaketime offset file (``data_dir/node<i>/clock-offset``)."""
        return self.spec.data_dir / f"node{node}" / "clock-offset"

    def node_env(self, node: int) -> dict[str, str] | None:
        """The environment ``node`` starts with: libfaketime's (``faketime.env``) when the cluster has
        :attr:`clocks` and libfaketime is installed, else ``None`` (the harness's, nothing preloaded; a clock
        fault is then skipped with :meth:`clock_unavailable`'s reason); either with ``ONCEPROOF_RUN`` set to
        :attr:`owner` when the cluster has one."""
        base = {**os.environ, "ONCEPROOF_RUN": self.owner} if self.owner else None
        if not self.clocks or faketime.unavailable():
            return base
        return faketime.env(self.clock_file(node), base)

    def clock_unavailable(self) -> str | None:
        if not self.clocks:
            return "the brokers were started without libfaketime (the run planned no clock fault)"
        return faketime.unavailable()

    def set_clock_offset(self, node: int, seconds: float) -> None:
        """Rewrite ``node``'s offset file (``faketime.write_offset``); the broker's JVM reads it within
        ``faketime.CACHE_S`` s."""
        why = self.clock_unavailable()
        if why:
            raise BackendError(f"cannot offset broker {node}'s clock: {why}")
        faketime.write_offset(self.clock_file(node), seconds)

    def clock_offset(self, node: int) -> float:
        return faketime.read_offset(self.clock_file(node)) if self.clocks else 0.0

    def reset_clocks(self) -> list[int]:
        """Put every node's offset back to ``+0``; returns the nodes that were offset. Never raises."""
        out = []
        for n in (self.nodes if self.clocks else []):
            try:
                if faketime.read_offset(self.clock_file(n)) != 0:
                    faketime.write_offset(self.clock_file(n), 0)
                    out.append(n)
            except (OSError, ValueError) as e:
                log.warning("could not reset broker %d's clock offset: %s", n, e)
        return out

    # ------------------------------------------------------------------ onceproof.backends.base.UnsyncedLoss

    def _start_layer(self, node: int) -> None:
        """Mount node ``node``'s lazyfs layer at ``node<i>/data`` over ``node<i>/disk``. Its control socket
        lives in a short scratch directory (a Unix socket path has at most 107 bytes; a run directory can be
        longer), noted for the reaper. Raises ``ClusterError`` naming the fix or quoting the layer's log."""
        if self._sockets is None:
            from onceproof.backends.common import reaper
            self._sockets = Path(tempfile.mkdtemp(prefix="onceproof-lazyfs-"))
            reaper.note_scratch(self._sockets)
        ndir = self.spec.data_dir / f"node{node}"
        layer = lazyfs.Layer(ndir / "disk", ndir / "data", self._sockets / f"node{node}.sock",
                             self.spec.logs / f"lazyfs-{node}.log")
        try:
            layer.start()
        except RuntimeError as e:
            raise ClusterError(str(e)) from None
        self.layers[node] = layer

    def stop_layers(self) -> list[int]:
        """Stop (unmount) every lazyfs layer; returns the nodes whose mount could not be detached. Never
        raises; safe twice."""
        left = [n for n, layer in sorted(self.layers.items()) if not layer.stop()]
        for n in left:
            log.warning("the lazyfs layer of broker %d is still mounted at %s", n, self.layers[n].mount)
        self.layers.clear()
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
            self._sockets = None
        return left

    def unsynced_unavailable(self) -> str | None:
        if not self.lazyfs:
            return "the brokers' log.dirs are not on a lazyfs layer (the run planned no lose-unsynced-writes)"
        return lazyfs.unavailable()

    # ------------------------------------------------------------------ onceproof.backends.base.LogDirs, DiskFaults

    def log_dir_of(self, node: int) -> LocalDir:
        """``node``'s ``log.dirs`` (``data_dir/node<i>/data``)."""
        return LocalDir(self.spec.data_dir / f"node{node}" / "data")

    def _disk_dir(self, node: int) -> Path:
        """Where ``node``'s size-limited filesystem is mounted: its ``log.dirs``, or under a lazyfs layer the
        layer's backing directory ``node<i>/disk`` (the layer itself is mounted at ``log.dirs``)."""
        return self.spec.data_dir / f"node{node}" / ("disk" if self.lazyfs else "data")

    def _mount_disk(self, data: Path) -> None:
        """A tmpfs on ``data`` (noted for the reaper); a refusal is logged and the node uses the host's disk."""
        try:
            tmpfs.note(data)
            tmpfs.mount(data, tmpfs.size_mb())
        except (BackendError, ValueError, OSError) as e:
            log.warning("broker data %s stays on the host's filesystem: %s", data, e)

    def disk_unavailable(self) -> str | None:
        if not self.small_disks:
            return "the brokers' data directories are on the host's filesystem (the run planned no disk-full)"
        plain = [n for n in self.nodes if not tmpfs.is_ours(self._disk_dir(n))]
        if plain:
            why = tmpfs.unavailable() or "the mount was refused (see the run's log)"
            return f"broker(s) {plain} have no size-limited disk: {why}"
        return None

    def fill_disk(self, node: int) -> dict:
        """Fill ``node``'s tmpfs (``tmpfs.fill``). Raises ``BackendError`` when it has none."""
        why = self.disk_unavailable()
        if why:
            raise BackendError(f"cannot fill broker {node}'s disk: {why}")
        return tmpfs.fill(self._disk_dir(node))

    def unfill_disk(self, node: int) -> int:
        return tmpfs.unfill(self._disk_dir(node)) if self.small_disks else 0

    def unmount_disks(self) -> list[int]:
        """Unmount every node's tmpfs (after its broker stopped); returns the nodes unmounted. Never raises."""
        return [n for n in self.nodes if self.small_disks and tmpfs.unmount(self._disk_dir(n))]

    # ------------------------------------------------------------------ whole cluster

    def down(self, graceful: bool = False) -> list[tuple[int, int]]:
        """Stop every node at once and release the cluster's port lease; safe to call twice and after a
        partial start.

        ``graceful`` sends SIGTERM to all nodes together and waits up to 10 s before SIGKILL (a lone last
        node cannot finish a controlled shutdown without its quorum); otherwise SIGKILL at once, which is
        what a throwaway test cluster needs. Only processes that are this cluster's brokers
        (:meth:`owns`) are signalled.

        Returns: ``(node id, pid)`` of recorded pids that were left alone: alive but not this cluster's
        broker (a stale state file).
        """
        stale = [(i, b.pid) for i, b in self.brokers.items()
                 if b.pid is not None and processes.alive(b.pid) and not self.owns(b)]
        pids = [b.pid for b in self.brokers.values() if b.pid is not None and self.owns(b)]
        for i, pid in stale:
            log.warning("pid %d recorded for broker %d is not this cluster's broker: left alone", pid, i)
        if graceful:
            for pid in pids:
                processes.signal_group(pid, "SIGTERM")
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and any(processes.group_members(p) for p in pids):
                time.sleep(0.2)
        for pid in pids:
            processes.kill_group(pid)
        for b in self.brokers.values():
            b.pid = None
        if self.clocks:
            self.reset_clocks()
            faketime.remove_stale_shm()  # the SIGKILLed JVMs' libfaketime shared memory
        self.stop_layers()  # after the brokers: their files are closed, the layers unmount
        self.unmount_disks()
        if self.own_groups:
            for n in self.nodes:
                cgroups.remove(self.group_of(n))
        self.save_state()
        try:
            release_base_port(self.spec.base_port, self.spec.data_dir)
        except OSError as e:  # an unwritable cache: the lease dies with its processes anyway
            log.warning("could not release the port lease of %d: %s", self.spec.base_port, e)
        return stale

    def save_state(self) -> None:
        """Persist ports and pids to ``data_dir/cluster.json`` for ``onceproof cluster status|down``."""
        state = {"bootstrap": self.bootstrap, "cluster_id": self.cluster_id, "version": self.version,
                 "owner": self.owner, "own_groups": self.own_groups, "group_error": self.group_error,
                 "node_versions": {str(n): v for n, v in self.node_versions.items()},
                 "spec": {"nodes": self.spec.nodes, "base_port": self.spec.base_port,
                          "heap_mb": self.spec.heap_mb, "log_dir": str(self.spec.logs),
                          "proxied": self.spec.proxied},
                 "brokers": {str(i): {"pid": b.pid, "client_port": b.spec.client_port}
                             for i, b in self.brokers.items()}}
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(state, indent=2))
        live = [b.pid for b in self.brokers.values() if b.pid is not None]
        if live:
            try:
                claim_base_port(self.spec, live)
            except OSError as e:  # an unwritable cache must not stop a cluster
                log.warning("could not record the port lease of %d: %s", self.spec.base_port, e)

    @classmethod
    def from_state(cls, data_dir: Path) -> KafkaCluster:
        """Rebuild a handle on a cluster started by another command.

        Raises: ``ClusterError`` when ``data_dir`` holds no state file (no cluster was started there).
        """
        data_dir = Path(data_dir).resolve()
        path = data_dir / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster state in {data_dir}: start one with `onceproof cluster up`")
        try:
            st = json.loads(path.read_text())
            sp = dict(st["spec"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ClusterError(f"{path} is damaged ({e}); stop its brokers by hand and delete it") from e
        sp["log_dir"] = Path(sp["log_dir"]) if sp.get("log_dir") else None
        spec = ClusterSpec(data_dir, **sp)
        c = cls(spec, tie_to_parent=False, cluster_id=st["cluster_id"], version=st.get("version", ""),
                owner=st.get("owner", ""), own_groups=bool(st.get("own_groups")), group_error=st.get("group_error"),
                node_versions={int(n): v for n, v in (st.get("node_versions") or {}).items()})
        for i, b in st["brokers"].items():
            ns = spec.node(int(i))
            ndir = data_dir / f"node{i}"
            c.brokers[int(i)] = BrokerProcess(ns, ndir / "server.properties",
                                              spec.logs / f"broker-{i}.log", b["pid"])
        return c


def train_archives(version: str = "") -> list[str]:
    """Make the class-data sharing archives of the broker JVMs (``backends/common/cds.py``) of Kafka
    ``version`` (``""``: the pin) that are missing: a one-node cluster of that release in a temporary
    directory is formatted and started with each JVM dumping its loaded classes at exit, stopped with
    SIGTERM (a normal exit, ≤ 10 s) and the archives checked and kept (about 10 s). Returns a line per
    archive (what was kept or why not), ``[]`` when there is nothing to make. Raises ``ClusterError`` when
    the broker does not start, ``jars.ResolveError`` when the release's jars cannot be had."""
    if not cds.enabled():
        return []
    java, path = jars.java_binary(), jars.kafka_classpath(version).as_java()
    key = _cds_key(path)
    kinds = [k for k in ("kafka-tool", "kafka") if cds.missing(k, java, key)]
    if not kinds:
        return []
    with tempfile.TemporaryDirectory(prefix="onceproof-cds-") as d:
        spec = ClusterSpec(Path(d), nodes=1, base_port=free_base_port(1))
        c = KafkaCluster(spec, cds_dumps={k: cds.dump_target(k, java, key) for k in kinds}, version=version)
        try:
            c.up()
            c.down(graceful=True)
        finally:
            c.down()
            lines = [cds.promote(t, k, java, key, path) for k, t in c.cds_dumps.items()]
    return lines


def _cds_key(classpath: str) -> str:
    """The class-data sharing key of broker JVMs on ``classpath``: the path and its jars' stamp
    (:func:`cds.stamp`)."""
    return f"{classpath}\0{cds.stamp(classpath.split(os.pathsep))}"
