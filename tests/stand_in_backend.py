"""A stand-in backend for unit tests: the protocols of ``backends/base.py`` over synthetic state.

Its capabilities are derived as every backend's are (``backends/capabilities.py``): :class:`StandInBackend`
implements every optional protocol; :class:`NoNetworkStandIn` has no ``network()`` and a pipeline that can
be killed but not frozen, with executor faults and no task or runtime faults.

No process, socket, broker or Spark exists here: a node is a row in a table (pid, status), a network path
a name in a set. It lets a test drive a fault and read its evidence as pure logic, and it proves that a
fault reaches the backend only through the protocols: every other attribute access fails loudly. It
says nothing about Kafka or Spark themselves.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from onceproof.backends.base import GONE, STOPPED, ClusterShape, Executor, NodeState, PipelineArgs
from onceproof.backends.capabilities import DERIVED
from onceproof.backends.common.logdir import LocalDir


class _OnlyTheProtocol:
    """Any attribute the class does not define is a fault reaching past the protocol: fail, naming it.
    (``__slots__`` everywhere: nothing can be set on an instance either, e.g. a pid by hand.)"""

    __slots__ = ()

    def __getattr__(self, name: str):
        raise AssertionError(f"{type(self).__name__}.{name} is not part of the backend protocol")


class StandInCluster(_OnlyTheProtocol):
    __slots__ = ("calls", "_procs", "_pids", "_dir")

    def __init__(self, nodes: int = 3, data_dir: Path = Path("stand-in")):
        self.calls: list[tuple] = []
        self._pids = itertools.count(1000)
        self._procs = {n: NodeState(next(self._pids), "sleeping") for n in range(1, nodes + 1)}
        self._dir = data_dir

    nodes = property(lambda self: sorted(self._procs))
    bootstrap = property(lambda self: ",".join(self.address(n) for n in self.nodes))
    version = property(lambda self: "0.0-stand-in")
    log_dir = property(lambda self: self._dir / "logs")
    state_file = property(lambda self: self._dir / "cluster.json")

    def up(self, timeout_s: float = 120.0) -> None:
        self.calls.append(("up",))

    def down(self, graceful: bool = False) -> list[tuple[int, int]]:
        self.calls.append(("down", graceful))
        self._procs = {n: NodeState(None, GONE) for n in self._procs}
        return []

    def clean(self) -> None:
        self.calls.append(("clean",))

    def healthy(self, timeout_s: float = 120.0) -> None:
        self.calls.append(("healthy",))

    def start(self, node: int) -> None:
        self.calls.append(("start", node))
        self._procs[node] = NodeState(next(self._pids), "sleeping")

    def stop(self, node: int, clean: bool = True, grace_s: float = 15.0) -> None:
        self.calls.append(("stop", node, clean))
        self._procs[node] = NodeState(None, GONE)

    def kill(self, node: int) -> NodeState:
        self.calls.append(("kill", node))
        pid = self._procs[node].pid
        self._procs[node] = NodeState(None, GONE)
        return NodeState(pid, GONE)

    def pause(self, node: int) -> None:
        self.calls.append(("pause", node))
        if self._procs[node].alive:
            self._procs[node] = NodeState(self._procs[node].pid, STOPPED)

    def resume(self, node: int) -> None:
        self.calls.append(("resume", node))
        if self._procs[node].alive:
            self._procs[node] = NodeState(self._procs[node].pid, "sleeping")

    def state(self, node: int) -> NodeState:
        return self._procs[node]

    def address(self, node: int) -> str:
        return f"stand-in-{node}:9092"

    def log_files(self) -> list[Path]:
        return []


class ClockStandInCluster(StandInCluster):
    """:class:`StandInCluster` with :class:`~onceproof.backends.base.ClockFaults`: an offset per node in a
    table (``no_clock``: why it has none, ``None`` = it has), a log file per node when ``logs`` names one."""

    __slots__ = ("offsets", "no_clock", "logs")

    def __init__(self, nodes: int = 3, data_dir: Path = Path("stand-in")):
        super().__init__(nodes, data_dir)
        self.offsets: dict[int, float] = {}
        self.no_clock: str | None = None
        self.logs: dict[int, Path] = {}

    def clock_unavailable(self) -> str | None:
        return self.no_clock

    def set_clock_offset(self, node: int, seconds: float) -> None:
        self.calls.append(("clock", node, seconds))
        self.offsets[node] = seconds

    def clock_offset(self, node: int) -> float:
        return self.offsets.get(node, 0.0)

    def log_files(self) -> list[Path]:
        return [p for p in self.logs.values() if p.exists()]


class DiskStandInCluster(ClockStandInCluster):
    """:class:`ClockStandInCluster` with :class:`~onceproof.backends.base.LogDirs` (``data_dir/node<i>/data``,
    real directories a test writes segments into) and :class:`~onceproof.backends.base.DiskFaults` (a fill per
    node in a table; ``no_disk``: why it has none, ``None`` = it has; ``halts``: a filled node's process
    exits, as Kafka's does when its only log directory fails) and :class:`~onceproof.backends.base.UnsyncedLoss`
    (a kill that drops nothing) and :class:`~onceproof.backends.base.BrokerVersions` (a release per node in a
    table). Its log files are :attr:`logs`' that exist (a test writes them)."""

    __slots__ = ("fills", "no_disk", "halts", "releases")

    def __init__(self, nodes: int = 3, data_dir: Path = Path("stand-in")):
        super().__init__(nodes, data_dir)
        self.releases: dict[int, str] = {}
        self.fills: dict[int, int] = {}
        self.no_disk: str | None = None
        self.halts = True

    def data_path(self, node: int) -> Path:
        """``node``'s log directory on this host (a test writes segments there)."""
        return self._dir / f"node{node}" / "data"

    def log_dir_of(self, node: int) -> LocalDir:
        return LocalDir(self.data_path(node))

    def start(self, node: int) -> None:
        """Start ``node``; its log (when :attr:`logs` has one) gets the line a KRaft node writes once up."""
        super().start(node)
        if node in self.logs:
            with open(self.logs[node], "a") as f:
                f.write(f"[2026-11-30 10:00:02,000] INFO [KafkaRaftServer nodeId={node}] Kafka Server started "
                        "(kafka.server.KafkaRaftServer)\n")

    def disk_unavailable(self) -> str | None:
        return self.no_disk

    def fill_disk(self, node: int) -> dict:
        self.calls.append(("fill", node))
        self.fills[node] = 1 << 20
        if self.halts:
            self._procs[node] = NodeState(None, GONE)
        return {"path": str(self.data_path(node) / "fill"), "size_bytes": 1 << 20, "free_before": 1 << 20,
                "filled_bytes": 1 << 20, "free_after": 0}

    def unfill_disk(self, node: int) -> int:
        self.calls.append(("unfill", node))
        return self.fills.pop(node, 0)

    # onceproof.backends.base.BrokerVersions
    def version_of(self, node: int) -> str:
        return self.releases.get(node, self.version)

    def set_version(self, node: int, version: str) -> None:
        self.calls.append(("set-version", node, version))
        self.releases[node] = version

    # onceproof.backends.base.UnsyncedLoss: nothing is ever unsynced here (a node's kill drops nothing)
    def unsynced_unavailable(self) -> str | None:
        return self.no_disk

    def unsynced(self, node: int) -> dict:
        return {"files": [], "unsynced_files": 0, "unsynced_bytes": 0}

    def lose_unsynced(self, node: int) -> dict:
        self.calls.append(("lose-unsynced", node))
        killed = self.kill(node)
        return {"killed": {"pid": killed.pid, "status_after": killed.status}, "files": {}, "dropped_files": 0,
                "dropped_bytes": 0, "cut_bytes": 0, "restored_bytes": 0, "open_handles": 0}


class StandInNetwork(_OnlyTheProtocol):
    __slots__ = ("calls", "_cut", "_slow", "_nodes", "loss", "no_loss")

    def __init__(self, nodes: list[int]):
        self.calls: list[tuple] = []
        self._cut: set[str] = set()
        self._slow: dict[str, list[str]] = {}
        self._nodes = nodes
        self.loss: dict = {}  # the packet loss in effect: {"node", "probability"}
        self.no_loss: str | None = None  # why this stand-in cannot drop packets (None: it can)

    def loss_unavailable(self) -> str | None:
        return self.no_loss

    def drop(self, node: int, probability: float) -> dict:
        self.calls.append(("drop", node, probability))
        self.loss = {"node": node, "probability": probability}
        return {"chain": "OP-standin", "ports": [node], "rules": []}

    def dropped(self) -> dict:
        # synthetic counters: 1000 packets seen, the drop probability's share dropped
        return {"seen": 1000, "dropped": int(1000 * self.loss["probability"])} if self.loss else {}

    def undrop(self) -> None:
        self.calls.append(("undrop",))
        self.loss = {}

    def start(self) -> None:
        self.calls.append(("start",))

    def stop(self) -> None:
        self.calls.append(("stop",))

    def kill(self) -> None:
        self.calls.append(("kill",))

    def describe(self) -> str:
        return "stand-in network"

    def client_paths(self, node: int) -> list[str]:
        return [f"client-{node}"]

    def isolation_paths(self, node: int) -> list[str]:
        return [f"client-{node}", f"internal-{node}"] + [f"ctrl-{node}-{j}" for j in self._nodes if j != node]

    def broker_paths(self, node: int) -> list[str]:
        return [f"client-{node}", f"internal-{node}"]

    def client_address(self, node: int) -> str:
        return f"stand-in-proxy-{node}:9092"

    def cut(self, paths: list[str]) -> None:
        self.calls.append(("cut", tuple(paths)))
        self._cut.update(paths)

    def restore(self, paths: list[str]) -> None:
        self.calls.append(("restore", tuple(paths)))
        self._cut.difference_update(paths)

    def cut_paths(self) -> list[str]:
        return sorted(self._cut)

    def slow(self, path: str, kind: str, attrs: dict, name: str, direction: str = "downstream",
             toxicity: float = 1.0) -> str:
        self.calls.append(("slow", path, kind, direction) + ((toxicity,) if toxicity != 1.0 else ()))
        self._slow.setdefault(path, []).append(name)
        return name

    def slowdowns(self, path: str) -> list[str]:
        return list(self._slow.get(path, []))

    def unslow(self, path: str, name: str) -> None:
        self.calls.append(("unslow", path, name))
        self._slow[path].remove(name)

    def heal(self) -> None:
        self.calls.append(("heal",))
        self._cut.clear()
        self._slow.clear()
        self.loss = {}


class CoreStandInSpark(_OnlyTheProtocol):
    """The core :class:`~onceproof.backends.base.SparkApp` only."""

    __slots__ = ("calls", "_driver", "_checkpoint", "_executors", "runtimes", "runtime", "cpu", "unread", "frozen")

    OWN, PREVIOUS = "4.3.0-stand-in", "4.2.1-stand-in"

    def __init__(self, checkpoint: Path, driver: int | None = 4242):
        self.calls: list[tuple] = []
        self._driver = driver
        self._checkpoint = checkpoint
        self._executors = [Executor("0", 5000), Executor("1", 5001)]
        self.runtimes: dict = {None: self.OWN, "previous": self.PREVIOUS}
        self.runtime = self.OWN  # what the next driver start would run
        self.cpu: dict = {}  # executor id -> callable giving its CPU seconds now; none = unreadable
        # executor id -> callable giving the bytes it has not read now (the stand-in's frozen ids passed in);
        # none = unreadable
        self.unread: dict = {}
        self.frozen: set[str] = set()  # executor ids frozen now

    checkpoint = property(lambda self: self._checkpoint)
    driver_pid = property(lambda self: self._driver)
    starts_before_cluster = property(lambda self: False)

    def start(self) -> None:
        self.calls.append(("start",))

    def ready(self) -> dict | None:
        return {"pid": self._driver}

    def stop(self) -> None:
        self.calls.append(("stop",))

    def kill_now(self) -> None:
        self.calls.append(("kill_now",))

    def kill_driver(self, pid: int) -> bool:
        self.calls.append(("kill_driver", pid))
        self._driver = None
        return True

    def next_driver(self, pid: int) -> None:
        """Not protocol: what the supervisor does for a test's stand-in pipeline (a new driver ``pid``)."""
        self._driver = pid

    def restarts(self) -> int:
        return 0

    def driver_log(self) -> Path | None:
        return None

    def log_files(self) -> list[Path]:
        return []


class ExecutorStandInSpark(CoreStandInSpark):
    """The core and :class:`~onceproof.backends.base.ExecutorFaults`."""

    __slots__ = ()

    def executors(self) -> list[Executor]:
        return list(self._executors)

    def executor_of(self, task_pid: int, host: str | None = None) -> Executor | None:
        return self._executors[0]

    def kill_executor(self, executor: Executor) -> str | None:
        self.calls.append(("kill_executor", executor.id))
        self._executors.remove(executor)
        self.frozen.discard(executor.id)
        return None

    def executor_cpu_s(self, executor: Executor) -> float | None:
        f = self.cpu.get(executor.id)
        return None if f is None else f()


class StandInSpark(ExecutorStandInSpark):
    """Every optional protocol of a ``SparkApp``. ``runtimes``: what :meth:`set_runtime` answers
    (``None`` = the own version, ``"previous"``); a value that is an exception is raised instead (a
    runtime that cannot be built)."""

    __slots__ = ()

    def set_runtime(self, version: str | None) -> str:
        self.calls.append(("set_runtime", version))
        got = self.runtimes[version]
        if isinstance(got, BaseException):
            raise got
        self.runtime = got
        return got

    def freeze_executor(self, executor: Executor) -> bool:
        self.calls.append(("freeze_executor", executor.id))
        if executor not in self._executors:
            return False
        self.frozen.add(executor.id)
        return True

    def thaw_executor(self, executor: Executor) -> None:
        self.calls.append(("thaw_executor", executor.id))
        self.frozen.discard(executor.id)

    def executor_unread_bytes(self, executor: Executor) -> int | None:
        f = self.unread.get(executor.id)
        return None if f is None or executor not in self._executors else f(self.frozen)

    def freeze_driver(self, pid: int) -> bool:
        self.calls.append(("freeze_driver", pid))
        return True

    def lose_checkpoint(self) -> str:
        self.calls.append(("lose_checkpoint",))
        return "checkpoint.lost-1"

    def thaw_driver(self, pid: int) -> None:
        self.calls.append(("thaw_driver", pid))

    def kill_task(self, task_pid: int) -> bool:
        return False

    def driver_clock_unavailable(self) -> str | None:
        return None

    def set_driver_clock_offset(self, seconds: float) -> None:
        self.calls.append(("set_driver_clock_offset", seconds))

    def driver_clock_offset(self) -> float:
        return next((a for c, a in reversed(self.calls) if c == "set_driver_clock_offset"), 0.0)


class _StandInCore:
    """The core :class:`~onceproof.backends.base.Backend`; records what it was asked to build."""

    name = "stand-in-core"
    user_pipelines = False
    file_sinks = False
    picks_kafka_version = False
    warm_clusters = False
    capabilities = DERIVED

    def __init__(self):
        self.built: list[str] = []

    def cluster(self, shape: ClusterShape) -> StandInCluster:
        self.built.append("cluster")
        return StandInCluster(shape.nodes, shape.data_dir)

    def attach(self, data_dir: Path) -> StandInCluster:
        self.built.append("attach")
        return StandInCluster(3, data_dir)

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> CoreStandInSpark:
        self.built.append("spark")
        return CoreStandInSpark(pipeline.checkpoint)

    def versions(self) -> dict[str, str]:
        return {"kafka": "0.0-stand-in"}


class StandInBackend(_StandInCore):
    """Every optional protocol, so every fault the local backend performs."""

    name = "stand-in"

    def cluster(self, shape: ClusterShape) -> DiskStandInCluster:
        self.built.append("cluster")
        return DiskStandInCluster(shape.nodes, shape.data_dir)

    def network(self, cluster: StandInCluster, log_dir: Path) -> StandInNetwork:
        self.built.append("network")
        return StandInNetwork(cluster.nodes)

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> StandInSpark:
        self.built.append("spark")
        return StandInSpark(pipeline.checkpoint)

    def prepare(self) -> list[str]:
        return ["nothing to fetch"]


class NoNetworkStandIn(_StandInCore):
    """The core protocols and executor faults: it signals brokers, kills the driver and executors; no
    fault network, no driver freeze, no task or runtime faults."""

    name = "no-network"

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> ExecutorStandInSpark:
        self.built.append("spark")
        return ExecutorStandInSpark(pipeline.checkpoint)
