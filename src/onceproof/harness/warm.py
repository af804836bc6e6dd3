"""A warm cluster: Kafka brokers kept up across runs (issue 42), the way Jepsen reuses its nodes across tests
and Kafka's ducktape keeps its services up for a test class.

An owner (``test-all``, a pytest session, or a user's ``onceproof cluster up``) starts the cluster
once with :func:`start`; each run is given its directory (``run --warm-cluster DIR``) and, instead of
starting brokers of its own, :meth:`WarmCluster.lease` hands it the cluster after the health gate:

1. every broker process is alive and not stopped (a paused broker is resumed, a dead one restarted);
2. every broker is registered and every partition of every topic has its whole replica set in its ISR
   (``list_topics`` metadata); a broker that stays out of an ISR, or a cluster that does not come back
   within :data:`GATE_S` seconds, is restarted, broker by broker, then as a whole;
3. the topics earlier runs left behind (prefix :data:`PREFIX`) are checked for a transaction still open
   (last stable offset below the high watermark: KIP-98's LSO) and deleted.

Each run gets topics, transactional ids, consumer groups and a checkpoint of its own: its topics are named
``<PREFIX><run>-input`` etc. (``topic_names.TopicNames``), its workload and sink ids are per run already.
A run whose shape differs from the warm cluster's (network faults behind toxiproxy, clocks under
libfaketime, size-limited disks, lazyfs, cgroups, another Kafka release or broker count) or that plans a
fault leaving state behind on the brokers (:data:`onceproof.nemesis.catalog.LEAVES_STATE`) starts a fresh
cluster of its own, and its record says why (:func:`refusal`).

Brokers restarted by a run's fault carry the owner's tag (``ONCEPROOF_RUN`` = the cluster's directory,
``KafkaCluster.owner``), so they outlive that run and are swept by the owner's reaper when the owner dies.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from onceproof.backends.base import Backend, Cluster, ClusterError, ClusterShape, FaultNetwork, SharedNetwork
from onceproof.backends.common import reaper
from onceproof.clients import topics
from onceproof.nemesis import catalog
from onceproof.topic_names import TopicNames

log = logging.getLogger("onceproof.warm")

PREFIX = "warm-"
"""The start of every topic a run on a warm cluster makes: ``warm-<run8>-input`` and so on."""
STATE = "warm.json"
"""In a warm cluster's directory, beside the cluster's own state: what runs need to attach the rest (the
toxiproxy API port of a cluster behind toxiproxy)."""
GATE_S = 60.0
"""Seconds the gate waits for every broker to be registered and in every ISR before it restarts brokers."""


def refusal(shape: ClusterShape, warm: ClusterShape, specs: list[str]) -> str | None:
    """Why a run of ``shape`` planning fault ``specs`` cannot run on the warm cluster of ``warm`` (its data
    and log directories aside), or ``None`` when it can. A warm cluster behind toxiproxy, or with its brokers
    in cgroups of their own, takes runs that need neither as well: their clients go through proxies that
    stay open."""
    for attr, what in (("proxied", "behind toxiproxy (its network faults)"),
                       ("own_groups", "in cgroups of their own (partition:isolate)")):
        if getattr(shape, attr) and not getattr(warm, attr):
            return f"its brokers must run {what}"
    for attr, what in (("clocks", "under libfaketime (a clock fault)"),
                       ("small_disks", "on size-limited disks (disk-full)"),
                       ("lazyfs", "on lazyfs layers (lose-unsynced-writes)")):
        if getattr(shape, attr) != getattr(warm, attr):
            return f"its brokers must {'' if getattr(shape, attr) else 'not '}run {what}"
    if shape.nodes != warm.nodes:
        return f"it needs {shape.nodes} brokers, the warm cluster has {warm.nodes}"
    if shape.kafka_version and shape.kafka_version != warm.kafka_version:
        return f"it needs Kafka {shape.kafka_version}, the warm cluster runs {warm.kafka_version}"
    stateful = sorted({s.partition(":")[0] for s in specs} & catalog.LEAVES_STATE)
    if stateful:
        return f"{', '.join(stateful)} leaves state behind on the brokers"
    return None


def job_refusal(pipeline_cmd: str, writes_topic: bool) -> str | None:
    """Why a ``--pipeline-cmd`` job cannot run on a warm cluster: it does not take its topics from the
    placeholders (``{input_topic}``, and ``{output_topic}`` when it writes a Kafka topic), so it would read and
    write the fixed names a fresh cluster's runs use (``input``, ``output``); ``None`` when it can (or for the
    bundled pipeline)."""
    if not pipeline_cmd:
        return None
    missing = [p for p in ("{input_topic}", *(("{output_topic}",) if writes_topic else ())) if p not in pipeline_cmd]
    if missing:
        return (f"the job's command names no {' or '.join(missing)}: on a warm cluster each run's topics have "
                "names of their own, so the job would miss them (pass them as the placeholders)")
    return None


@dataclass
class Gate:
    """What the health gate found and did before a run (seconds, problems as sentences, restarted node
    ids, the earlier runs' topics deleted)."""

    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    restarted: list[int] = field(default_factory=list)
    whole_restart: bool = False
    deleted_topics: int = 0

    def record(self) -> dict:
        """The gate as ``results.json`` holds it."""
        return asdict(self)


def replicas_out(metadata, nodes: list[int]) -> list[str]:
    """From ``list_topics`` metadata: the brokers not registered and the partitions whose ISR lacks one of
    their replicas, as sentences (empty: healthy). Pure, for the gate's decision."""
    out = []
    registered = sorted(metadata.brokers)
    if registered != sorted(nodes):
        out.append(f"brokers registered {registered}, expected {sorted(nodes)}")
    for name, t in sorted(metadata.topics.items()):
        if t.error is not None:
            out.append(f"topic {name}: {t.error}")
            continue
        for p, pm in sorted(t.partitions.items()):
            missing = sorted(set(pm.replicas) - set(pm.isrs))
            if missing or pm.leader < 0:
                out.append(f"{name}-{p}: replicas {sorted(pm.replicas)} ISR {sorted(pm.isrs)}"
                           + (" no leader" if pm.leader < 0 else ""))
    return out


def out_of_isr(metadata) -> list[int]:
    """From ``list_topics`` metadata: the broker ids missing from the ISR of some partition they replicate."""
    ids: set[int] = set()
    for t in metadata.topics.values():
        if t.error is None:
            for pm in t.partitions.values():
                ids |= set(pm.replicas) - set(pm.isrs)
    return sorted(ids)


class WarmCluster:
    """A running cluster that runs lease one after another (never two at once: each run's gate restarts what
    it finds broken). ``cluster``: the backend's handle, attached from ``data_dir``'s state file."""

    def __init__(self, backend: Backend, data_dir: Path):
        """Attach to the warm cluster in ``data_dir``. Raises ``ClusterError`` naming the fix when there is
        none, or when ``backend`` keeps no warm clusters."""
        if not getattr(backend, "warm_clusters", False):
            raise ClusterError(f"the {backend.name} backend keeps no warm cluster: leave --warm-cluster out")
        self.backend = backend
        self.data_dir = Path(data_dir).resolve()
        self.cluster: Cluster = backend.attach(self.data_dir)
        extra = self.data_dir / STATE
        state = json.loads(extra.read_text()) if extra.exists() else {}
        self.toxiproxy_port: int | None = state.get("toxiproxy_port")
        if not getattr(self.cluster, "owner", ""):
            raise ClusterError(f"the cluster in {self.data_dir} was started before warm clusters existed: "
                               f"`onceproof cluster down --dir {self.data_dir}`, then `cluster up` again")

    @property
    def shape(self) -> ClusterShape:
        """The shape runs must match (:func:`refusal`)."""
        return ClusterShape(self.data_dir, nodes=len(self.cluster.nodes), kafka_version=self.cluster.version,
                            proxied=self.toxiproxy_port is not None,
                            own_groups=bool(getattr(self.cluster, "own_groups", False)))

    def network(self, log_dir: Path) -> FaultNetwork:
        """The fault network of a warm cluster behind toxiproxy, attached to the owner's server (a run heals
        it, never stops it). Raises ``ClusterError`` for a cluster without one."""
        if self.toxiproxy_port is None:
            raise ClusterError(f"the warm cluster in {self.data_dir} is not behind toxiproxy")
        net = self.backend.network(self.cluster, log_dir)
        if not isinstance(net, SharedNetwork):
            raise ClusterError(f"the {self.backend.name} backend's fault network cannot be shared across runs")
        return net.attach(self.toxiproxy_port)

    def names(self) -> TopicNames:
        """A new run's topics: ``warm-<8 hex>-input``, ``-output``, ``-output-progress``."""
        return TopicNames(f"{PREFIX}{uuid.uuid4().hex[:8]}-")

    def gate(self, timeout_s: float = GATE_S) -> Gate:
        """Bring the cluster to health before a run (module docstring); returns what was found and done.

        Raises: ``ClusterError`` when the cluster is still unhealthy after a whole restart (its brokers' logs
        are under the cluster's log directory)."""
        t0 = time.monotonic()
        g = Gate()
        c = self.cluster
        for n in c.nodes:
            st = c.state(n)
            if st.paused:
                g.problems.append(f"broker {n} was paused")
                c.resume(n)
            elif not st.alive:
                g.problems.append(f"broker {n} was not running")
                c.start(n)
                g.restarted.append(n)
        if self.toxiproxy_port is not None:
            net = self.network(self.data_dir / "logs")
            if not net.server.running:
                raise ClusterError(f"the warm cluster's toxiproxy (127.0.0.1:{self.toxiproxy_port}) does not "
                                   f"answer: stop the cluster's owner, or leave --warm-cluster out")
            dirty = sorted(n for n, p in net.client.proxies().items() if not p.get("enabled", True) or p.get("toxics"))
            if dirty:
                g.problems.append(f"proxies left cut or slowed: {', '.join(dirty)} (reset)")
            net.heal()
        left, lagging = self._wait_healthy(timeout_s)
        if left:
            g.problems += left
            bad = lagging or list(c.nodes)
            for n in bad:
                c.stop(n)
                c.start(n)
            g.restarted += bad
            left, _ = self._wait_healthy(timeout_s)
        if left:
            g.whole_restart = True
            c.down(graceful=True)
            c.up()
            left, _ = self._wait_healthy(timeout_s)
            if left:
                raise ClusterError(f"the warm cluster in {self.data_dir} is still unhealthy after a restart: "
                                   f"{'; '.join(left[:3])} (logs: {c.log_dir}); `onceproof cluster down --dir "
                                   f"{self.data_dir}` and start it again")
        g.problems += self._drop_earlier_topics(g)
        g.seconds = round(time.monotonic() - t0, 1)
        return g

    def _wait_healthy(self, timeout_s: float) -> tuple[list[str], list[int]]:
        """Poll metadata until :func:`replicas_out` finds nothing or ``timeout_s`` s passed; returns its last
        findings and :func:`out_of_isr`'s brokers of the same metadata (``[]`` when it did not answer)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                md = topics.admin(self.cluster.bootstrap).list_topics(timeout=5)
                left, lagging = replicas_out(md, self.cluster.nodes), out_of_isr(md)
            except Exception as e:  # noqa: BLE001 - a restarting cluster does not answer yet
                left, lagging = [f"cluster not answering: {e}"], []
            if not left or time.monotonic() > deadline:
                return left, lagging
            time.sleep(0.5)

    def _offsets(self, topic: str, tries: int = 10) -> tuple[dict[int, int], dict[int, int]]:
        """``(last stable offsets, high watermarks)`` of ``topic``, retried for ``tries`` × 1 s while a just
        restarted broker's leader epochs settle (``FENCED_LEADER_EPOCH``). Raises the last error."""
        for i in range(tries):
            try:
                return (topics.end_offsets(self.cluster.bootstrap, topic, committed=True),
                        topics.end_offsets(self.cluster.bootstrap, topic, committed=False))
            except Exception:  # noqa: BLE001 - retried; the last one is raised
                if i == tries - 1:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def _drop_earlier_topics(self, g: Gate) -> list[str]:
        """Delete the topics earlier runs made (:data:`PREFIX`); returns the open transactions found on them."""
        found = []
        names = [t for t in topics.admin(self.cluster.bootstrap).list_topics(timeout=10).topics
                 if t.startswith(PREFIX)]
        for t in names:
            try:
                lso, hw = self._offsets(t)
            except Exception as e:  # noqa: BLE001 - deleted meanwhile, or a partition without a leader
                found.append(f"{t}: offsets unreadable ({e})")
                continue
            open_ = sorted(p for p in hw if lso.get(p, -1) < hw[p])
            if open_:
                found.append(f"{t}: a transaction left open on partitions {open_} (LSO below the high watermark)")
        if names:
            topics.delete_topics(self.cluster.bootstrap, names)
        g.deleted_topics = len(names)
        return found


@dataclass
class Owned:
    """A warm cluster this process started (:func:`start`): its directory, the backend, the reaper watching
    this process. ``bootstrap`` and ``nodes`` as the cluster's; :meth:`current` reads its state again (runs
    restart brokers and record their new pids in it)."""

    backend: Backend
    data_dir: Path
    watcher: object | None = None
    network: FaultNetwork | None = None

    def current(self) -> Cluster:
        """The cluster as its state file has it now. Raises ``ClusterError`` when there is none."""
        return self.backend.attach(self.data_dir)

    @property
    def bootstrap(self) -> str:
        return self.current().bootstrap

    def stop(self) -> None:
        """Stop every broker the state file names (those runs restarted too), remove the data, stop the
        reaper; safe to call twice."""
        try:
            c = self.current()
            c.down(graceful=False)
            c.clean()
        except ClusterError:
            pass
        finally:
            if self.network is not None:
                self.network.stop()
                self.network = None
            if self.watcher is not None:
                reaper.stop_watcher(self.watcher)
                self.watcher = None


def start(backend: Backend, data_dir: Path, nodes: int = 3, kafka_version: str = "", proxied: bool = False,
          own_groups: bool = False) -> Owned:
    """Start a warm cluster of ``nodes`` brokers in ``data_dir`` (its owner tag: that directory), tied to this
    process, with the reaper that sweeps every broker carrying the tag when this process dies (SIGKILL
    included, restarted brokers too), and wait for it. ``proxied``: behind toxiproxy (its API port in
    ``data_dir/warm.json``), so that runs with network faults can lease it; ``own_groups``: each broker in a
    cgroup of its own (``partition:isolate``; where cgroups are refused the brokers run on and the cluster
    says why). :meth:`Owned.stop` stops it all.

    Raises: ``ClusterError`` or toxiproxy's start errors (what was started is stopped again)."""
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    owned = Owned(backend, data_dir, reaper.start(str(data_dir)))
    c = backend.cluster(ClusterShape(data_dir, nodes=nodes, kafka_version=kafka_version, owner=str(data_dir),
                                     proxied=proxied, own_groups=own_groups))
    try:
        if proxied:
            owned.network = backend.network(c, c.log_dir)
            owned.network.start()
            (data_dir / STATE).write_text(json.dumps({"toxiproxy_port": owned.network.api_port}))
        c.up()
    except BaseException:
        c.down()
        owned.stop()
        raise
    return owned
