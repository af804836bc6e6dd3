"""The pipeline on the Spark nodes of ``nodes.toml``: the ssh backend's
:class:`~onceproof.backends.base.SparkApp`.

* The standalone master and workers: :class:`~onceproof.backends.ssh.spark.SshSparkCluster`.
* The driver: ``python3 -m onceproof.job`` on the ``driver`` node, in client deploy mode against the
  master, supervised by :class:`~onceproof.backends.ssh.driver.RemoteDriverSupervisor`.
* The run's files: the pipeline's paths are the node's run directory (``<root>/runs/<run>/checkpoint``,
  ``control``, ``sink.jsonl``, ``logs``); :class:`~onceproof.backends.ssh.relay.RunFilesRelay` keeps the
  harness's run directory in step with the Spark nodes', so the nemeses, the checkpoint readers and
  ``ready()`` keep reading local paths.

Implements ``SparkApp``, ``DriverPause`` (SIGSTOP/SIGCONT of the driver's group on its node) and
``ExecutorFaults``: an executor is a process of a worker node (``Executor.host`` is the node's name),
found, read and killed there by the node helper (``executors``, ``kill-executor``); a sink task's
``sink.jsonl`` events name its machine's hostname, which :meth:`SshSpark.executor_of` maps to its node.
Not ``ExecutorPause``: ``kill-executor`` on a sink without the pre-commit hook aims by CPU time.

``DriverClock`` (when the run planned ``driver-clock-skew``: :attr:`PipelineArgs.clock_file` set): the
driver's JVM starts under the driver node's libfaketime, its offset file ``driver-clock-offset`` in the run's
directory there (``backends/ssh/clock.py``; handed to the job in ``DRIVER_CLOCK_ENV``, as on the local
backend, so that only the JVM is preloaded).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path, PurePosixPath

from onceproof.backends.base import BackendError, Executor, PipelineArgs
from onceproof.backends.common.spark import SupervisedDriver
from onceproof.backends.ssh import clock
from onceproof.backends.ssh.driver import RemoteDriverSupervisor
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.relay import RunFilesRelay
from onceproof.backends.ssh.remote import RemoteError
from onceproof.backends.ssh.spark import SshSparkCluster
from onceproof.pipeline.identity import DRIVER_CLOCK_ENV, SINK_ID_FILE
from onceproof.store import runfiles


def remote_pipeline(pipeline: PipelineArgs, remote_run: PurePosixPath, master_url: str) -> PipelineArgs:
    """``pipeline`` as the driver node runs it: the run's paths under ``remote_run`` (the same names as in
    the harness's run directory) and the standalone master, unless the user named a master other than
    the default ``local-cluster[...]``."""
    master = master_url if pipeline.master.startswith("local-cluster") else pipeline.master
    return dataclasses.replace(pipeline, checkpoint=Path(str(remote_run / runfiles.CHECKPOINT)),
                               control=Path(str(remote_run / runfiles.CONTROL)),
                               sink_log=Path(str(remote_run / runfiles.SINK)), master=master)


class SshSpark(SupervisedDriver):
    """The supervised pipeline ``pipeline`` on ``spark``'s nodes; the harness's run directory is
    ``run_dir`` (``pipeline``'s checkpoint, control and sink log are in it), its logs ``log_dir``
    (``run_dir/logs``). Nothing runs until :meth:`start`. The checkpoint and the driver log (the harness's relayed
    copies), ``driver_pid`` (the node's pid), ``ready`` and ``restarts`` are :class:`SupervisedDriver`'s."""

    def __init__(self, spark: SshSparkCluster, pipeline: PipelineArgs, run_dir: Path, log_dir: Path):
        self.spark, self.pipeline, self.run_dir, self.log_dir = spark, pipeline, Path(run_dir), Path(log_dir)
        driver = spark.inv.with_role("driver")[0]
        self.helper = spark.helpers[driver.name]
        self.remote_run = self.helper.run_dir
        self.inner = remote_pipeline(pipeline, self.remote_run, spark.master_url)
        # its command and environment name the dists' paths on the nodes, known once start() installed them
        self.sup = RemoteDriverSupervisor(argv=[], log_dir=self.log_dir, helper=self.helper,
                                          remote_logs=self.remote_run / runfiles.LOGS, remote_cwd=self.remote_run)
        remotes = {name: h.remote for name, h in spark.helpers.items()
                   if name == driver.name or spark.inv.node(name).has("spark-worker")}
        self.relay = RunFilesRelay(remotes, self.remote_run, self.run_dir, driver.name)
        self._hostnames: dict[str, str] | None = None  # a worker's hostname -> its node name
        self.clock_file = self.remote_run / "driver-clock-offset"
        self._faketime: str | None = None  # the driver node's libfaketime, found at start() when planned
        self._clock_offset = 0.0

    # ------------------------------------------------------------------ SparkApp
    @property
    def starts_before_cluster(self) -> bool:
        """False: :meth:`start` installs and starts the Spark nodes first, which the brokers' start would
        only compete with for the harness's SSH connections."""
        return False

    def start(self) -> None:
        """Install and start the master and workers (waiting until every worker registered), send the
        checkpoint's sink id to the driver node, start the relay, then the supervised driver.

        Raises: ``SparkNodesError`` (a ``BackendError``) naming the node when Spark does not come up."""
        self.spark.up()
        r = self.helper.remote
        for sub in (runfiles.CHECKPOINT, runfiles.CONTROL, runfiles.LOGS):
            r.run(["mkdir", "-p", str(self.remote_run / sub)], timeout_s=30).check()
        sink_id = self.pipeline.checkpoint / SINK_ID_FILE
        if sink_id.exists():
            r.put(sink_id, self.remote_run / runfiles.CHECKPOINT / SINK_ID_FILE)
        self.relay.start()
        jars = ",".join(f"local:{self.spark.connector}/{j}" for j in self._connector_jars())
        argv = ["python3", "-m", "onceproof.job", *self.inner.argv(), *(["--jars", jars] if jars else [])]
        env = self.spark.env()
        if self.pipeline.clock_file is not None and not self.pipeline.command:
            self._faketime = clock.find_library(r)
            if self._faketime:
                clock.write_offset(r, self.clock_file, 0)
                env[DRIVER_CLOCK_ENV] = json.dumps(clock.preload(self._faketime, self.clock_file))
        self.sup.argv, self.sup.env = argv, env
        self.sup.start()

    def _connector_jars(self) -> list[str]:
        done = self.helper.remote.run(["ls", str(self.spark.connector)], timeout_s=30).check()
        return sorted(j for j in done.stdout.split() if j.endswith(".jar"))

    def stop(self) -> None:
        """Stop the driver, make the relay's last pass, then stop the master and workers (logs collected)."""
        try:
            self.sup.stop()
        finally:
            try:
                self.relay.stop()
            finally:
                self.spark.down()

    def kill_now(self) -> None:
        """SIGKILL the driver and the Spark daemons without waiting (the teardown's last resort)."""
        self.sup.kill_now()
        with contextlib.suppress(RemoteError):
            self.spark.down()

    def kill_driver(self, pid: int) -> bool:
        """SIGKILL the driver ``pid``'s group on its node; True when the node reports it gone."""
        return self.sup.kill(pid)

    def freeze_driver(self, pid: int) -> bool:
        """SIGSTOP the driver ``pid``'s group on its node; True when sent."""
        return self.sup.signal_driver(pid, "STOP")

    def thaw_driver(self, pid: int) -> None:
        """SIGCONT the driver ``pid``'s group."""
        self.sup.signal_driver(pid, "CONT")

    # ------------------------------------------------------------------ DriverClock
    def driver_clock_unavailable(self) -> str | None:
        if self.pipeline.clock_file is None:
            return "the driver was started with the real clock: plan driver-clock-skew in --nemesis"
        if self.pipeline.command:
            return "driver-clock-skew is for the bundled pipeline"
        return clock.missing(self.helper.remote, self._faketime)

    def set_driver_clock_offset(self, seconds: float) -> None:
        """Rewrite the driver's offset file on its node (every incarnation reads it). Raises
        ``BackendError`` naming the fix, ``ValueError`` for a fractional offset."""
        why = self.driver_clock_unavailable()
        if why:
            raise BackendError(why)
        try:
            clock.write_offset(self.helper.remote, self.clock_file, seconds)
        except RemoteError as e:
            raise BackendError(f"cannot offset the driver's clock: {e}") from None
        self._clock_offset = float(seconds)

    def driver_clock_offset(self) -> float:
        return self._clock_offset

    # ------------------------------------------------------------------ ExecutorFaults
    def _workers(self) -> dict[str, NodeHelper]:
        return {n.name: self.spark.helpers[n.name] for n in self.spark.workers}

    def _node_of_host(self, host: str) -> str | None:
        """The worker node whose hostname is ``host`` (each worker's ``hostname``, read once)."""
        if self._hostnames is None:
            names: dict[str, str] = {}
            for name, h in self._workers().items():
                with contextlib.suppress(RemoteError):
                    names[h.remote.run(["hostname"], timeout_s=15).check().stdout.strip()] = name
            self._hostnames = names
        return self._hostnames.get(host)

    def executors(self) -> list[Executor]:
        """The run's executor JVMs on every worker node (a node that cannot be read adds none)."""
        out: list[Executor] = []
        for name, h in self._workers().items():
            with contextlib.suppress(RemoteError):
                out += [_executor(e, name) for e in h.executors()]
        return out

    def executor_of(self, task_pid: int, host: str | None = None) -> Executor | None:
        """The executor above the task's Python worker ``task_pid`` on the worker node whose hostname is
        ``host`` (every worker node when ``host`` is unknown: pids of different machines may be equal, the
        first found is returned)."""
        node = self._node_of_host(host) if host else None
        for name, h in self._workers().items():
            if node is not None and name != node:
                continue
            with contextlib.suppress(RemoteError):
                found = h.executors(above=task_pid)
                if found:
                    return _executor(found[0], name)
        return None

    def kill_executor(self, executor: Executor) -> str | None:
        """SIGKILL ``executor`` alone on its node (its worker notices and reports it lost) and wait ≤ 10 s;
        why it failed, or ``None`` when it is gone (a pid now another process's counts as gone)."""
        h = self._workers().get(executor.host)
        if h is None:
            return f"no worker node named {executor.host!r}"
        try:
            done = h.kill_executor(executor.pid, executor.started)
        except RemoteError as e:
            return f"cannot reach {executor.host}: {e}"
        return None if done.get("gone") else done.get("why", "not gone")

    def executor_cpu_s(self, executor: Executor) -> float | None:
        """User + system CPU seconds of ``executor``'s JVM, read on its node; ``None`` when it is gone, its
        pid reused, or the node cannot be read."""
        h = self._workers().get(executor.host)
        if h is None:
            return None
        try:
            found = h.executors()
        except RemoteError:
            return None
        return next((e["cpu_s"] for e in found if e["pid"] == executor.pid
                     and abs(e["started"] - executor.started) <= 1e-3), None)

    def log_files(self) -> list[Path]:
        """The relayed driver logs and the collected master and worker logs (``logs/<node>/``)."""
        return sorted(self.log_dir.glob("driver-*.log")) + sorted(self.spark.log_dir.glob("*/*.log"))


def _executor(found: dict, node: str) -> Executor:
    """An :class:`Executor` on ``node`` from the node helper's ``executors`` answer."""
    return Executor(str(found["id"]), int(found["pid"]), float(found["started"]), node)
