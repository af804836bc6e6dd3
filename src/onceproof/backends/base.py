"""The seams a backend fills: where the Kafka cluster, the Spark pipeline and the fault network run.

A small core every backend implements, in the manner of Jepsen's ``DB`` (``setup!``/``teardown!``)
and of ducktape's ``Service`` (``start_node``, ``stop_node(clean_shutdown)``, ``signal_node``, ``pids``,
the log files it names):

* :class:`Backend` – a name and the factory of the services below;
* :class:`Cluster` – the Kafka nodes: up/down, start, stop (clean or not), kill, pause, resume, and
  what their processes look like (:class:`NodeState`), for the nemeses' evidence;
* :class:`SparkApp` – the pipeline's driver under supervision: start/stop, kill, its checkpoint, logs.

and optional protocols for what only some backends can do, as Jepsen's ``Kill``, ``Pause`` and
``LogFiles`` are optional to a ``DB``:

* on the backend: :class:`NetworkFaults` (a :class:`FaultNetwork`, every path cut or slowed one at a
  time), :class:`Prepare` (fetch jars, build images ahead of time);
* on its :class:`FaultNetwork`: :class:`PacketLoss` (drop packets at random);
* on its :class:`Cluster`: :class:`LiveLogs` (each broker's own log as it grows, where
  :meth:`Cluster.log_files` holds them only at the end), :class:`ClockFaults` (offset one node's clock, not
  the host's),
  :class:`UnsyncedLoss` (a node loses what its broker wrote and did not fsync, as in a power cut),
  :class:`LogDirs` (a node's log directory, to corrupt a stopped node's segments), :class:`DiskFaults`
  (fill a node's size-limited data filesystem);
* on its :class:`SparkApp`: :class:`DriverPause` (freeze and thaw the driver), :class:`ExecutorFaults`
  (find and kill executors), :class:`ExecutorPause` (freeze and thaw one executor, see what it has not
  read), :class:`TaskKill` (kill a task process that outlived its executor),
  :class:`Runtimes` (another PySpark for the next driver start).

The runner and ``nemesis/`` use nothing else of a backend: no pid set by hand, no port read from a
backend's own layout, no process table walked. Facts a fault records as evidence (a pid, a process
status) come back from these methods.

The faults a backend can perform (``fault:target`` specs) follow from the optional protocols it
implements (``backends/capabilities.py``); ``TestConfig.validate`` refuses any other fault before
anything starts (:func:`can_perform`).

Units: node ids are Kafka's ``node.id`` (1..n); times are seconds unless named ``_ms``; addresses are
``host:port``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from onceproof.kafka_config import KafkaSecurity
from onceproof.topic_names import TopicNames

# Process statuses: psutil's names (psutil.STATUS_*), plus two of ours. A backend without OS processes
# maps its states onto these (a paused container is STOPPED).
GONE = "gone"  # no process: never started, killed, stopped
STOPPED = "stopped"  # paused (SIGSTOP); psutil.STATUS_STOPPED
ZOMBIE = "zombie"  # dead, not yet reaped; psutil.STATUS_ZOMBIE
FOREIGN = "foreign"  # the recorded pid is alive but is not this node's process (a stale state file)


class BackendError(RuntimeError):
    """A backend could not do what was asked (its message says what to do next)."""


class ClusterError(BackendError):
    """The cluster could not be formatted, started, or did not become healthy in time."""


@dataclass(frozen=True)
class NodeState:
    """One node's process as the backend sees it.

    ``pid``: the process (group) id on the local backend, ``None`` when none is recorded. ``status``:
    psutil's status names (``"running"``, ``"sleeping"``, ``"disk-sleep"``, ``"stopped"`` = paused,
    ``"zombie"``) or :data:`GONE` / :data:`FOREIGN`.
    """

    pid: int | None
    status: str

    @property
    def alive(self) -> bool:
        """The node's process exists (running or paused)."""
        return self.status not in (GONE, ZOMBIE, FOREIGN)

    @property
    def paused(self) -> bool:
        return self.status == STOPPED


@dataclass(frozen=True)
class Executor:
    """One Spark executor: Spark's executor id (``"0"``, ``"1"``, ...; ``"?"`` when unreadable), its
    process id, the process's start time (epoch s; 0 = unknown) so that a reused pid is never
    signalled, and the machine it runs on (a node's name where the backend has several, ``""`` on a
    backend whose executors are the harness host's processes)."""

    id: str
    pid: int
    started: float = 0.0
    host: str = ""


@dataclass(frozen=True)
class ClusterShape:
    """What cluster to build: ``nodes`` combined KRaft broker+controller nodes, their data and state in
    ``data_dir``, logs in ``log_dir`` (default ``data_dir/logs``), behind a fault network when
    ``proxied``. ``detached`` nodes outlive the process that started them (``onceproof cluster up``);
    otherwise they die with it."""

    data_dir: Path
    nodes: int = 3
    log_dir: Path | None = None
    proxied: bool = False
    detached: bool = False
    clocks: bool = False
    """Start every node with a clock that :class:`ClockFaults` can offset (a run that plans ``clock-skew``);
    otherwise the nodes run on the host's clock with nothing preloaded."""
    lazyfs: bool = False
    """Put every node's ``log.dirs`` on a layer that can forget unsynced writes (:class:`UnsyncedLoss`; a run
    that plans ``lose-unsynced-writes``); otherwise the brokers write to their directories directly."""
    small_disks: bool = False
    """Give every node's data directory a size-limited filesystem of its own that :class:`DiskFaults` can fill
    (a run that plans ``disk-full``); otherwise the data directories are on the host's filesystem."""
    own_groups: bool = False
    """Put every node's process in a cgroup of its own, so that the fault network can cut one node's outbound
    connections (a run that may draw ``partition:isolate``; the local backend's, ``backends/common/cgroups.py``)."""
    kafka_version: str = ""
    """The Apache Kafka release the nodes run (``--kafka-version``, ``X.Y.Z``); ``""``: ``$ONCEPROOF_KAFKA_VERSION``
    or the pin (``backends/common/jars.kafka_version``). Only a backend whose ``picks_kafka_version`` is true
    is given one."""
    owner: str = ""
    """A warm cluster's owner tag (``harness/warm.py``): the nodes' processes carry it as ``ONCEPROOF_RUN``
    whoever starts them, so they outlive the runs that use them and die with their owner. Only a backend
    whose ``warm_clusters`` is true is given one."""


@dataclass(frozen=True)
class PipelineArgs:
    """The pipeline's own options (``python -m onceproof.job --help``), whatever runs it. Paths are the
    run's: a backend that runs the driver elsewhere makes them visible there under the same names.

    ``trigger_ms``: micro-batch interval, ms; ``max_offsets``: records per batch; ``txn_timeout_ms``:
    the sink's ``transaction.timeout.ms``; ``pool_size``: transactional ids to clean up on start.

    ``workload``: the transform between source and sink (``workloads/registry.py``). ``file_sink``: the
    output directory of ``--sink file``. ``database_dsn``: the libpq
    connection string of the run's database, for a sink that writes one (``Sink.database``), else "".
    ``input_contiguous``: every input offset holds a record (no
    transactional writes), so the eos sink's completeness guard can run (``pipeline/completeness.py``).
    ``command``: a user's pipeline instead of the bundled one (``onceproof run --pipeline-cmd``, a
    template of ``backends/user_pipeline.py``), run in ``cwd``; "" = the bundled ``onceproof.job``, which
    alone takes the options above that the template has no placeholder for (sink, trigger, ...).
    ``python``: the interpreter of a user's pipeline (``--pipeline-python``: its ``{python}``, its Python
    workers' and the PySpark whose connector jars ``{jars}`` names); "" = this interpreter. ``runtime``:
    the PySpark version the bundled pipeline's sink needs (``Sink.spark_runtime``, a cached runtime the
    backend builds), "" = the harness's own. ``jars``: classpaths of ``deps/`` the sink needs beyond the
    Kafka connector (``Sink.jars``: ``"delta"``). ``output_values``: ``(placeholder, value)`` pairs a
    user's ``--output`` gives its command (``Sink.job_values``: ``{output_path}``, ``{postgres_dsn}``,
    ``{output_table}``, ``{iceberg_conf}``).
    """

    bootstrap: str
    sink: str
    checkpoint: Path
    control: Path
    sink_log: Path
    input_topic: str
    output_topic: str
    progress_topic: str
    sink_id: str
    trigger_ms: int
    max_offsets: int
    txn_timeout_ms: int
    pool_size: int
    master: str
    command: str = ""
    cwd: Path | None = None
    workload: str = "keyed"
    file_sink: Path | None = None
    clock_file: Path | None = None
    """libfaketime's offset file the driver's clock follows (``driver-clock-skew``); ``None``: the real clock."""
    input_contiguous: bool = True
    database_dsn: str = ""
    python: str = ""
    runtime: str = ""
    jars: tuple[str, ...] = ()
    output_values: tuple[tuple[str, str], ...] = ()

    def argv(self) -> list[str]:
        """The options as ``onceproof.job`` arguments (a backend adds where the connector jars are)."""
        return ["--bootstrap", self.bootstrap, "--sink", self.sink, "--checkpoint", str(self.checkpoint),
                "--control-dir", str(self.control), "--sink-log", str(self.sink_log),
                "--input-topic", self.input_topic, "--output-topic", self.output_topic,
                "--progress-topic", self.progress_topic, "--sink-id", self.sink_id,
                "--trigger-ms", str(self.trigger_ms), "--max-offsets", str(self.max_offsets),
                "--txn-timeout-ms", str(self.txn_timeout_ms), "--pool-size", str(self.pool_size),
                "--master", self.master, "--workload", self.workload,
                *(["--file-sink-path", str(self.file_sink)] if self.file_sink else []),
                *(["--database-dsn", self.database_dsn] if self.database_dsn else []),
                *([] if self.input_contiguous else ["--no-input-contiguous"])]


class Cluster(Protocol):
    """The Kafka nodes (Jepsen ``DB`` with ``Kill``/``Pause``/``LogFiles``; ducktape ``KafkaService``).

    Which broker leads a partition or coordinates a transaction is Kafka's to say: ask the admin API at
    :attr:`bootstrap` (``nemesis/targets.py``).
    """

    @property
    def nodes(self) -> list[int]:
        """Node ids, ascending."""

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` clients connect to (through the fault network when there is one)."""

    @property
    def version(self) -> str:
        """The Kafka version the nodes run ("" before :meth:`up`)."""

    @property
    def log_dir(self) -> Path:
        """Where the nodes' logs go."""

    @property
    def state_file(self) -> Path:
        """Where a detached cluster keeps what :meth:`Backend.attach` needs."""

    def up(self, timeout_s: float = 120.0) -> None:
        """Create and start every node and wait until :meth:`healthy`. Raises ``ClusterError``."""

    def down(self, graceful: bool = False) -> list[tuple[int, int]]:
        """Stop every node at once (SIGKILL unless ``graceful``) and release what the cluster holds;
        safe to call twice and after a partial start. Returns ``(node, pid)`` of recorded processes left
        alone because they are not this cluster's (:data:`FOREIGN`)."""

    def clean(self) -> None:
        """Delete the nodes' data (after :meth:`down`); ducktape's ``clean_node``."""

    def healthy(self, timeout_s: float = 120.0) -> None:
        """Block until every node is registered in the metadata and serving. Raises ``ClusterError`` on
        timeout or when a node's process exits."""

    def start(self, node: int) -> None:
        """Start (or restart) ``node`` on its data."""

    def stop(self, node: int, clean: bool = True, grace_s: float = 15.0) -> None:
        """Stop ``node``: ``clean`` = SIGTERM, then SIGKILL after ``grace_s`` seconds; else as :meth:`kill`."""

    def kill(self, node: int) -> NodeState:
        """SIGKILL ``node`` and everything it started. Returns the killed process: its pid and its status
        once the kill returned (:data:`GONE` when it is gone)."""

    def pause(self, node: int) -> None:
        """SIGSTOP ``node`` (no-op when it has no process)."""

    def resume(self, node: int) -> None:
        """SIGCONT ``node`` (no-op when it has no process)."""

    def state(self, node: int) -> NodeState:
        """``node``'s process now."""

    def address(self, node: int) -> str:
        """``host:port`` of ``node``'s own client listener (not through the fault network)."""

    def log_files(self) -> list[Path]:
        """The log files the nodes have written so far."""


class SparkApp(Protocol):
    """The pipeline's driver under supervision: restarted from :attr:`checkpoint` when it dies, as a
    cluster manager's supervise mode would (ducktape service; Jepsen ``DB`` for the system under test).
    The core every backend's pipeline implements; what only some can do is in :class:`DriverPause`,
    :class:`ExecutorFaults`, :class:`TaskKill` and :class:`Runtimes`."""

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoint directory (offset and commit logs, ``store/checkpoint.py``)."""

    @property
    def driver_pid(self) -> int | None:
        """The current driver's pid, ``None`` between incarnations."""

    @property
    def starts_before_cluster(self) -> bool:
        """Whether :meth:`start` may be called before the Kafka cluster is up, so the driver's start-up
        (JVMs, executors, its warm-up job) overlaps the brokers' (the runner then starts both at once).
        True only for a driver that waits for its input topic (``onceproof.job.wait_for_input``) on a
        backend whose Spark needs nothing the cluster's start creates."""

    def start(self) -> None:
        """Start supervising (the first driver starts at once); returns without waiting for the query."""

    def ready(self) -> dict | None:
        """The current driver's ``driver.ready`` announcement (pid, query id), or for a user's pipeline
        (no announcement) its checkpoint's ``metadata`` with the driver's pid; ``None`` before the
        query runs."""

    def stop(self) -> None:
        """Stop supervising and stop the driver with everything it started; keep the executors' logs."""

    def kill_now(self) -> None:
        """SIGKILL the driver and everything it started without waiting (a teardown's last resort)."""

    def kill_driver(self, pid: int) -> bool:
        """SIGKILL the driver ``pid`` (as :attr:`driver_pid` or the pipeline's own announcement gave it)
        with everything it started; True when it is gone. The supervisor restarts it."""

    def restarts(self) -> int:
        """How many times the driver died and was restarted."""

    def driver_log(self) -> Path | None:
        """The newest driver incarnation's log (Spark's driver log lines), ``None`` before the first."""

    def log_files(self) -> list[Path]:
        """Every driver and executor log written so far."""


@runtime_checkable
class DriverPause(Protocol):
    """Optional to a :class:`SparkApp`: the driver frozen where it is, then thawed (Jepsen ``Pause``)."""

    def freeze_driver(self, pid: int) -> bool:
        """SIGSTOP the driver ``pid`` with everything it started (it stays exactly where it is until
        :meth:`thaw_driver` or a kill); False when it is gone."""

    def thaw_driver(self, pid: int) -> None:
        """SIGCONT what :meth:`freeze_driver` stopped."""


@runtime_checkable
class ExecutorFaults(Protocol):
    """Optional to a :class:`SparkApp`: its executors found one by one and killed alone."""

    def executors(self) -> list[Executor]:
        """The current driver's live executors."""

    def executor_of(self, task_pid: int, host: str | None = None) -> Executor | None:
        """The executor running the Python task process ``task_pid`` (a sink task announces its pid and
        its machine's hostname, ``host``; a backend whose executors are host processes ignores ``host``)."""

    def kill_executor(self, executor: Executor) -> str | None:
        """SIGKILL ``executor`` and wait (≤ 10 s). Returns why it failed, ``None`` when it is gone."""

    def executor_cpu_s(self, executor: Executor) -> float | None:
        """User + system CPU time (s) ``executor``'s JVM has used so far; ``None`` when it cannot be read
        (gone, its pid reused, or a process this backend cannot see). Sampled twice, its growth tells a
        busy executor (running a task) from an idle one (heartbeats only)."""


@runtime_checkable
class ExecutorPause(Protocol):
    """Optional to a :class:`SparkApp` with :class:`ExecutorFaults`: an executor frozen where it is and
    thawed (Jepsen ``Pause``, one executor at a time), and what its driver sent it that it has not read.
    ``kill-executor`` uses it to hold a micro-batch's tasks in flight (``nemesis/kill_executor.py``): the
    driver's launch of a task on a frozen executor is a message the executor cannot read, so the task
    stays launched there until the executor is thawed or killed."""

    def freeze_executor(self, executor: Executor) -> bool:
        """SIGSTOP ``executor``'s JVM alone (not its worker, not its Python workers); False when it is gone
        or its pid now belongs to another process."""

    def thaw_executor(self, executor: Executor) -> None:
        """SIGCONT what :meth:`freeze_executor` stopped (no-op when it is gone or was never frozen)."""

    def executor_unread_bytes(self, executor: Executor) -> int | None:
        """Bytes the driver sent ``executor`` over its scheduler connection that the executor has not read
        yet (the kernel's receive queue of its sockets to the driver's RPC port); ``None`` when they cannot
        be read (gone, pid reused, no socket table visible). On a frozen executor a task launch shows as a
        few KB (the serialized task description); heartbeat replies are tens of bytes."""


@runtime_checkable
class TaskKill(Protocol):
    """Optional to a :class:`SparkApp`: a Python task process that outlives its executor's kill can be
    killed on its own (a zombie task, ``nemesis/zombie.py``)."""

    def kill_task(self, task_pid: int) -> bool:
        """SIGKILL the Python task process ``task_pid`` (one a sink task announced, e.g. a zombie that
        outlived its executor) if it is still a PySpark worker; True when it was killed."""


@runtime_checkable
class Runtimes(Protocol):
    """Optional to a :class:`SparkApp`: a second PySpark for the next driver start (``upgrade:pyspark``)."""

    def set_runtime(self, version: str | None) -> str:
        """Choose the PySpark the *next* driver start runs (the running driver is left alone; it changes
        when the driver next dies or stops): ``"previous"`` = the previous minor release, in an
        environment the backend builds once and caches (``backends/local/runtimes.py``; the first call
        can take a minute), ``None`` = the harness's own. Returns that version (e.g. ``"4.2.1"``).

        Raises: ``BackendError`` naming the fix when the runtime cannot be built."""


@runtime_checkable
class CheckpointLoss(Protocol):
    """Optional to a :class:`SparkApp`: the query's checkpoint directory lost, as an operator's mistake or a
    storage loss would lose it (``lose-checkpoint``)."""

    def lose_checkpoint(self) -> str:
        """Move the driver's checkpoint directory (``PipelineArgs.checkpoint``) aside, to a new name beside it,
        so that the next driver start finds none; returns that name. Call it while the driver is down.

        Raises: ``OSError`` when the directory cannot be moved."""


class FaultNetwork(Protocol):
    """The cluster's network, one path at a time (Jepsen ``net``): every path into a node can be cut or
    slowed. Path names are the backend's (``client-1``, ``internal-1``, ``ctrl-1-2`` on toxiproxy) and
    go into the evidence as they are. Started before the cluster, whose nodes advertise its paths."""

    def start(self) -> None:
        """Create every path. Raises ``BackendError`` (or the network tool's own error) with the fix."""

    def stop(self) -> None:
        """Remove the network (every path heals with it)."""

    def kill(self) -> None:
        """Stop it at once (a teardown's last resort)."""

    def describe(self) -> str:
        """One line for the console: what runs the network and where."""

    def client_paths(self, node: int) -> list[str]:
        """Clients → ``node``."""

    def isolation_paths(self, node: int) -> list[str]:
        """Every path into ``node`` and every quorum link out of it."""

    def broker_paths(self, node: int) -> list[str]:
        """The data paths into ``node`` (client and inter-broker): the ones a slow network slows."""

    def client_address(self, node: int) -> str:
        """``host:port`` a client reaches ``node`` through, over :meth:`client_paths` (a probe's way)."""

    def cut(self, paths: list[str]) -> None:
        """Cut ``paths``: open connections close, new ones are refused."""

    def restore(self, paths: list[str]) -> None:
        """Undo :meth:`cut` for ``paths``."""

    def cut_paths(self) -> list[str]:
        """The paths cut now, sorted."""

    def slow(self, path: str, kind: str, attrs: dict, name: str, direction: str = "downstream",
             toxicity: float = 1.0) -> str:
        """Slow or break ``path`` with a toxic ``kind`` (toxiproxy README, "Toxics": ``latency``: ``latency`` ±
        ``jitter`` ms; ``bandwidth``: ``rate`` KB/s; ``slicer``: ``average_size`` ± ``size_variation`` bytes,
        ``delay`` µs apart; ``reset_peer``: TCP RST ``timeout`` ms after data; ``timeout``: data stops, the
        connection closes after ``timeout`` ms; ``limit_data``: the connection closes after ``bytes`` bytes)
        in ``direction`` (``downstream`` = towards the client, ``upstream`` = towards the node), on each
        connection with probability ``toxicity`` (0..1). Returns the slowdown's name."""

    def slowdowns(self, path: str) -> list[str]:
        """Names of the slowdowns on ``path`` now."""

    def unslow(self, path: str, name: str) -> None:
        """Remove slowdown ``name`` from ``path``."""

    def heal(self) -> None:
        """Restore every path and remove every slowdown."""


@runtime_checkable
class SharedNetwork(Protocol):
    """Optional to a :class:`FaultNetwork`: one process starts it, others use it (a warm cluster's owner and
    the runs that lease the cluster, ``harness/warm.py``)."""

    def attach(self, api_port: int) -> SharedNetwork:
        """Use the network another process started (API on ``api_port``) instead of starting one: ``stop`` and
        ``kill`` then leave it running. Returns ``self``."""


@runtime_checkable
class OutboundCuts(Protocol):
    """Optional to a :class:`FaultNetwork` whose :meth:`FaultNetwork.isolation_paths` may hold ``out-<i>``:
    node ``i``'s own outbound connections to its peers cut (the local backend: iptables' ``cgroup`` match on
    the broker's cgroup, ``backends/local/faultproxy.py``)."""

    def outbound_dropped(self, node: int) -> dict:
        """``{"seen", "dropped"}`` packets of ``node``'s outbound cut in effect; ``{}`` when none."""


@runtime_checkable
class PacketLoss(Protocol):
    """Optional to a :class:`FaultNetwork`: random loss of the packets to one node's data paths
    (``lossy-link:drop``; on the local backend iptables' ``statistic`` match, ``backends/common/iptables.py``).
    One loss at a time."""

    def loss_unavailable(self) -> str | None:
        """``None`` when this host can drop packets now, else why not (no binary, not root, the kernel)."""

    def drop(self, node: int, probability: float) -> dict:
        """Drop each packet to ``node``'s client and inter-broker listeners with ``probability`` (0 < p < 1)
        until :meth:`undrop`. Returns ``{"chain", "ports", "rules"}`` (what was installed). Raises
        ``BackendError`` naming the failed command; ``ValueError`` for a probability outside (0, 1)."""

    def dropped(self) -> dict:
        """``{"seen", "dropped"}`` packets of the loss in effect (its rules' counters); ``{}`` when none."""

    def undrop(self) -> None:
        """Remove the loss (safe when there is none)."""


@runtime_checkable
class DriverClock(Protocol):
    """Optional to a :class:`SparkApp`: the driver's own wall clock, offset from the host's while the host's
    stays untouched (``driver-clock-skew``; on the local backend libfaketime's control file,
    ``backends/common/faketime.py``, preloaded into the driver process only when
    :attr:`PipelineArgs.clock_file` is set; its executors keep the real clock). Monotonic clocks are never
    offset."""

    def driver_clock_unavailable(self) -> str | None:
        """``None`` when :meth:`set_driver_clock_offset` works now, else why not and the fix."""

    def set_driver_clock_offset(self, seconds: float) -> None:
        """Offset the driver's wall clock by ``seconds`` (whole seconds; 0 = the real time) within about a
        second, every incarnation's alike. Raises ``BackendError`` naming the fix (:meth:`driver_clock_unavailable`)."""

    def driver_clock_offset(self) -> float:
        """The offset (s) in effect, 0 when none."""


@runtime_checkable
class ClockFaults(Protocol):
    """Optional to a :class:`Cluster`: each node's own clock (its wall clock: what ``System.currentTimeMillis``
    returns in its JVM), offset from the host's while the host's stays untouched (``clock-skew``; on the local
    backend libfaketime's control file, ``backends/common/faketime.py``). Only a cluster built with
    ``ClusterShape(clocks=True)`` has clocks to offset. Monotonic clocks are never offset."""

    def clock_unavailable(self) -> str | None:
        """``None`` when :meth:`set_clock_offset` works on this cluster now, else why not and the fix."""

    def set_clock_offset(self, node: int, seconds: float) -> None:
        """Offset ``node``'s clock by ``seconds`` (whole seconds, negative = behind the host) from now on,
        until set again; ``0`` is the real time. Reaches the running process within a second or so (and a
        restarted one at its start). Raises ``BackendError`` naming the fix when the cluster has no such
        clocks (:meth:`clock_unavailable`), ``ValueError`` for a fractional offset."""

    def clock_offset(self, node: int) -> float:
        """The offset (s) in effect for ``node`` (``0`` = real time)."""


@runtime_checkable
class BrokerVersions(Protocol):
    """Optional to a :class:`Cluster`: each broker's own Kafka release, changed between its stop and its
    next start (``rolling-upgrade``: Kafka's upgrade docs, "Upgrading the brokers one at a time: shut down
    the broker, update the code, and restart it")."""

    def version_of(self, node: int) -> str:
        """The release ``node`` runs, or will run at its next start (``X.Y.Z``)."""

    def set_version(self, node: int, version: str) -> None:
        """``node`` runs ``version`` from its next start, on its own data. Raises ``ClusterError`` naming
        the fix when the release cannot be had."""


@runtime_checkable
class LogSource(Protocol):
    """One log file that grows while a node runs, readable from a byte position (``nemesis/broker_log.py``'s
    ``FileLog`` for a file on this host; the ssh backend's ``RemoteLog`` for one on a node)."""

    def size(self) -> int:
        """Its length now (bytes; 0 when it does not exist yet)."""

    def read_from(self, pos: int) -> bytes:
        """Its bytes from ``pos`` to the current end (``b""`` when unreadable or nothing new)."""


@runtime_checkable
class LiveLogs(Protocol):
    """Optional to a :class:`Cluster` whose :meth:`Cluster.log_files` are copied here only at the end (the ssh
    backend's): each broker's own log (log4j's, whose ``[%d]`` is its own clock) read where it is written,
    while the run goes on. A cluster without it is read through the ``broker-<node>.log`` of its
    :meth:`Cluster.log_files`."""

    def broker_log(self, node: int) -> LogSource:
        """``node``'s broker log, read where it is written."""


@runtime_checkable
class UnsyncedLoss(Protocol):
    """Optional to a :class:`Cluster`: one node loses power, as far as its disk can tell: its broker is
    SIGKILLed and every byte it wrote to its ``log.dirs`` since that file's last ``fsync`` is dropped
    (``lose-unsynced-writes``; on the local backend a FUSE layer under each node's ``log.dirs``,
    ``backends/common/lazyfs.py``, after Jepsen's LazyFS). File names created or renamed stay (LazyFS's
    semantics). Only a cluster built with ``ClusterShape(lazyfs=True)`` has such disks."""

    def unsynced_unavailable(self) -> str | None:
        """``None`` when :meth:`lose_unsynced` works on this cluster now, else why not and the fix."""

    def unsynced(self, node: int) -> dict:
        """What ``node`` would lose now, without losing it: ``{"files": [{"path", "size", "synced_size",
        "written", ...}], "unsynced_files", "unsynced_bytes", ...}`` (bytes; paths relative to its ``log.dirs``).
        Raises ``BackendError`` naming the fix (:meth:`unsynced_unavailable`)."""

    def lose_unsynced(self, node: int) -> dict:
        """SIGKILL ``node``'s broker (waited for) and drop what it had not fsynced; the node stays down
        (restart it with :meth:`Cluster.start`: it recovers its log from what is left, as after a power cut).
        Returns the evidence: ``{"killed": {"pid", "status_after"}, "files": {path: {"written", "cut_bytes",
        "synced_size", ...}}, "dropped_files", "dropped_bytes", "cut_bytes", "restored_bytes",
        "open_handles"}`` (bytes). Raises ``BackendError`` naming the fix when the cluster has no such disks,
        or the layer's own error."""


class LogDir(Protocol):
    """One node's Kafka log directory as files the harness reads and writes, wherever it is (paths relative to
    it, ``/``-separated): ``backends/common/logdir.py``'s ``LocalDir`` on this host, ``backends/ssh/
    remote_dir.py``'s ``RemoteDir`` on a node. Partition ``<topic>-<p>`` lives in ``<topic>-<p>/``, its
    segments ``<20-digit base offset>.log`` (Kafka's ``LogFileUtils``)."""

    def listdir(self, rel: str = "") -> list[str]:
        """Names in ``rel`` (``""``: the log directory), sorted; ``[]`` when it does not exist."""

    def read(self, rel: str) -> bytes:
        """The file ``rel``'s bytes. Raises ``OSError``."""

    def write_at(self, rel: str, pos: int, data: bytes) -> None:
        """Write ``data`` over ``rel``'s bytes from ``pos`` in place, fsynced. Raises ``OSError``."""

    def size(self, rel: str) -> int | None:
        """``rel``'s length (bytes); ``None`` when it does not exist."""

    def where(self, rel: str = "") -> str:
        """Where ``rel`` is, for the evidence (a path, or ``<node>:<path>``)."""


@runtime_checkable
class LogDirs(Protocol):
    """Optional to a :class:`Cluster`: each node's Kafka log directory (its ``log.dirs``, one directory),
    readable and writable by the harness while the node is stopped (``corrupt-segment-tail``)."""

    def log_dir_of(self, node: int) -> LogDir:
        """``node``'s log directory (it exists once the cluster was formatted)."""


@runtime_checkable
class DiskFaults(Protocol):
    """Optional to a :class:`Cluster`: each node's data directory on a size-limited filesystem of its own,
    which can be filled to the last byte and emptied again (``disk-full``; on the local backend a tmpfs
    mount per node, ``backends/common/tmpfs.py``). Only a cluster built with ``ClusterShape(small_disks=True)``
    has such filesystems. Filling never touches Kafka's own files."""

    def disk_unavailable(self) -> str | None:
        """``None`` when :meth:`fill_disk` works on this cluster now, else why not and the fix."""

    def fill_disk(self, node: int) -> dict:
        """Fill ``node``'s data filesystem: one file of the harness takes every free byte, so the node's next
        write fails (``ENOSPC``). Returns ``{"path", "size_bytes", "free_before", "filled_bytes",
        "free_after"}`` (bytes). Raises ``BackendError`` naming the fix when the cluster has no such
        filesystem (:meth:`disk_unavailable`)."""

    def unfill_disk(self, node: int) -> int:
        """Remove what :meth:`fill_disk` wrote on ``node`` (safe at any time, repeatedly); returns the bytes
        freed (0 when nothing was filled)."""


class Backend(Protocol):
    """Where a test runs: a name and the factory of its services (the core every backend implements).
    :attr:`capabilities` is derived (``backends/capabilities.py``), never listed by hand."""

    name: str
    user_pipelines: bool
    """Runs a user's ``--pipeline-cmd`` (:attr:`PipelineArgs.command`), not only the bundled pipeline."""
    file_sinks: bool
    """Runs ``--sink file`` (:attr:`PipelineArgs.file_sink`: executors write where the harness reads)."""
    picks_kafka_version: bool
    """Starts its brokers on the Kafka release a run names (:attr:`ClusterShape.kafka_version`,
    ``--kafka-version``), any of ``jars.SUPPORTED_KAFKA``."""
    warm_clusters: bool
    """Keeps a cluster up across runs (``run --warm-cluster``, ``test-all``; ``harness/warm.py``): its nodes
    take :attr:`ClusterShape.owner` and :meth:`attach` hands the cluster to each run."""
    capabilities: frozenset[str]
    """``fault:target`` specs (``kill-broker:leader``), ``fault:*`` for every target of a fault, or a
    bare name for a fault without targets (``kill-driver``): what the protocols this backend and its
    :class:`SparkApp` implement allow (``backends/capabilities.py``)."""

    def cluster(self, shape: ClusterShape) -> Cluster:
        """A cluster of ``shape``, not started (it may reserve ports). Raises ``ClusterError``."""

    def attach(self, data_dir: Path) -> Cluster:
        """The detached cluster started earlier in ``data_dir``. Raises ``ClusterError`` when there is
        none."""

    def spark(self, pipeline: PipelineArgs, log_dir: Path) -> SparkApp:
        """The supervised pipeline, not started; driver and executor logs go to ``log_dir``. Its return
        annotation names the class whose optional protocols the capabilities are derived from."""

    def versions(self) -> dict[str, str]:
        """Versions of what this backend runs (Kafka, PySpark, the connector, Java), for ``test.json``."""


@runtime_checkable
class NetworkFaults(Protocol):
    """Optional to a :class:`Backend`: a fault network in front of the cluster (``partition``,
    ``slow-network``)."""

    def network(self, cluster: Cluster, log_dir: Path) -> FaultNetwork:
        """The fault network of ``cluster`` (built by this backend, with ``shape.proxied``), not started;
        its logs go to ``log_dir``."""


class Database(Protocol):
    """A database server a run starts for a sink that writes a table (``Sink.database``)."""

    @property
    def dsn(self) -> str:
        """The libpq connection string of its database for the harness's own clients, on this host
        (valid once started)."""

    @property
    def job_dsn(self) -> str:
        """The connection string the pipeline's processes use: :attr:`dsn` where they run on this host,
        an address on the backend's network where they do not (valid once started)."""

    def start(self) -> None:
        """Initialise and start it; returns when it accepts connections. Raises ``RuntimeError`` naming
        the fix or the log."""

    def stop(self) -> None:
        """Stop it and everything it started, bounded in time; safe twice or before a start."""


@runtime_checkable
class Databases(Protocol):
    """Optional to a :class:`Backend`: database servers for sinks that write a table."""

    databases: frozenset[str]
    """The kinds it starts (``"postgres"``)."""

    def database(self, kind: str, data_dir: Path, log_dir: Path) -> Database:
        """A server of ``kind`` (one of :attr:`databases`), not started, with its data in ``data_dir``
        and its log in ``log_dir``. Raises ``ValueError`` for another kind."""


@runtime_checkable
class ForeignCluster(Protocol):
    """Optional to a :class:`Backend`: a cluster onceproof does not own (``external``). The run's topics
    then carry a prefix of their own (never a name the cluster already has), and the harness's Kafka
    clients take the cluster's security settings."""

    def security(self) -> KafkaSecurity:
        """How the harness's clients authenticate and encrypt (``kafka_config.configure`` takes it)."""

    def topic_names(self) -> TopicNames:
        """The run's topics (valid after :meth:`Backend.cluster` opened the run)."""


@runtime_checkable
class DryRun(Protocol):
    """Optional to a :class:`Backend`: every command a run would execute on a cluster onceproof does not own,
    listed without running one (``run --dry-run``)."""

    def dry_run(self, specs: list[str]) -> list[str]:
        """The lines to print for a run planning ``specs`` (``--nemesis``' specs). Raises ``BackendError``
        naming a spec the backend cannot run."""


@runtime_checkable
class RunResources(Protocol):
    """Optional to a :class:`Backend`: what a backend holds for the whole run beyond its services (SSH
    connections, the nodes' leases and watchdogs). The runner closes it after every other teardown step
    (it is pushed first on the teardown stack), on every exit path."""

    def close(self) -> None:
        """Release the run's resources, bounded in time; safe twice or when nothing was opened."""


@runtime_checkable
class Prepare(Protocol):
    """Optional to a :class:`Backend`: what runs need, fetched or built ahead of time (jars, images)."""

    def prepare(self) -> list[str]:
        """Fetch and cache what runs need (jars, images) ahead of time; lines saying what is ready."""


def can_perform(capabilities: frozenset[str] | set[str], spec: str) -> bool:
    """True when ``spec`` (``fault`` or ``fault:target``) is in ``capabilities``, directly or through
    ``fault:*``. A spec without a target stands for every target of its fault: callers expand it first
    (``onceproof.nemesis.catalog.expand``)."""
    name, _, _target = spec.partition(":")
    return spec in capabilities or f"{name}:*" in capabilities
