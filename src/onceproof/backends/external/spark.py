"""The pipeline on a cluster onceproof does not own: ``--backend external``'s
:class:`~onceproof.backends.base.SparkApp` (issue 28, design §1.2).

* The driver: an incarnation is ``[spark] submit`` rendered with the job's arguments
  (:class:`~onceproof.backends.external.driver.TemplateDriverSupervisor`); killed through the map's
  ``[faults.kill-driver]``, paused and resumed through ``[faults.pause-driver]`` (its heal recorded in the
  pending-heal ledger first).
* The run's files: ``[spark.files] mode = "mounted"``: the run directory is below ``harness_path`` and the
  driver and executors see it at ``cluster_path``, so the pipeline's paths are rewritten to that side and the
  harness keeps reading its own.
* Kafka: the pipeline uses ``[spark] bootstrap`` (the cluster's inside addresses), the harness ``[kafka]
  bootstrap``.

``driver_pid`` is the local submit command's pid (the driver's own lives in the cluster's pid space): the
nemeses hand it back to :meth:`ExternalSpark.kill_driver` and :meth:`ExternalSpark.freeze_driver`, which act
on the current incarnation through the map. Implements ``SparkApp`` and ``DriverPause``; which of the driver
faults a run may plan is the map's to say (``ExternalBackend.capabilities``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from onceproof.backends.base import PipelineArgs
from onceproof.backends.common import jars
from onceproof.backends.common.spark import SupervisedDriver
from onceproof.backends.common.supervisor import read_ready
from onceproof.backends.external.cluster_file import ClusterFile
from onceproof.backends.external.commands import CommandRunner
from onceproof.backends.external.driver import TemplateDriverSupervisor
from onceproof.backends.external.fault_map import Command
from onceproof.backends.external.ledger import PendingHeals


def cluster_pipeline(cf: ClusterFile, pipeline: PipelineArgs) -> PipelineArgs:
    """``pipeline`` as the cluster runs it: its paths on the cluster's side of ``[spark.files]``, the
    cluster's own Kafka addresses and ``[spark] master``. Raises: ``ClusterFileError`` when the run
    directory is not below ``harness_path``."""
    sp = cf.spark
    side = sp.cluster_side
    return dataclasses.replace(pipeline, bootstrap=sp.bootstrap, master=sp.master,
                               checkpoint=Path(str(side(pipeline.checkpoint))),
                               control=Path(str(side(pipeline.control))),
                               sink_log=Path(str(side(pipeline.sink_log))))


def job_args(cf: ClusterFile, pipeline: PipelineArgs, connector: list[str] | None = None) -> list[str]:
    """``onceproof.job``'s arguments for the cluster: :func:`cluster_pipeline`'s, plus ``--jars`` with each
    connector jar under ``[spark] jars_dir`` (``connector``: the jars' file names, default those the harness
    resolves for its PySpark, which a cluster image built by ``make docker-images`` holds). Without
    ``jars_dir`` no ``--jars`` is passed: the submit template must bring the connector (``--packages``)."""
    args = cluster_pipeline(cf, pipeline).argv()
    if cf.spark.jars_dir:
        names = connector if connector is not None else [j.name for j in jars.spark_kafka_classpath().jars]
        args += ["--jars", ",".join(f"local:{cf.spark.jars_dir.rstrip('/')}/{n}" for n in names)]
    return args


class ExternalSpark(SupervisedDriver):
    """The supervised pipeline ``pipeline`` on the cluster of ``cf``; driver logs in ``log_dir``. The checkpoint,
    ``driver_pid`` (the submit command's), ``ready``, ``restarts`` and ``driver_log`` are
    :class:`SupervisedDriver`'s.

    Args:
        runner: runs the map's commands. ledger: the run's pending heals. run_id: ``{run_id}``/``{prefix}``.
        env: added to the submit command's environment (the Kafka password's variable, by name).
    """

    def __init__(self, cf: ClusterFile, pipeline: PipelineArgs, log_dir: Path, runner: CommandRunner,
                 ledger: PendingHeals, run_id: str, env: dict[str, str] | None = None):
        self.cf, self.pipeline, self.log_dir, self.runner, self.ledger = cf, pipeline, Path(log_dir), runner, ledger
        self.values = {**cf.variables, "run_id": run_id, "prefix": cf.run_prefix(run_id)}
        args = job_args(cf, pipeline)
        self.sup = TemplateDriverSupervisor(
            argv=[], log_dir=self.log_dir, env=dict(env or {}),
            render=lambda n: cf.spark.submit_command({**self.values, "incarnation": n}, args),
            stop_driver=lambda n: self._driver_command("kill-driver", n), run=runner.run)
        self._paused: str | None = None

    def _driver_command(self, key: str, n: int, heal: bool = False) -> Command | None:
        if key not in self.cf.faults.entries:
            return None
        values = self.cf.faults.values(key, {**self.values, "incarnation": n, "driver_pid": self.sup.pid or ""})
        return self.cf.faults.heal(key, values) if heal else self.cf.faults.run(key, values)

    # ------------------------------------------------------------------ SparkApp
    @property
    def starts_before_cluster(self) -> bool:
        """False: the cluster is already up; the driver starts once the run's topics exist."""
        return False

    def start(self) -> None:
        for d in (self.pipeline.checkpoint, self.pipeline.control, self.log_dir):
            Path(d).mkdir(parents=True, exist_ok=True)
        self.sup.start()

    def stop(self) -> None:
        """Resume a paused driver (its pending heal), then stop the supervision and the current driver."""
        self.thaw_driver(self.sup.pid or 0)
        self.sup.stop()

    def kill_now(self) -> None:
        self.sup.kill_now()

    def _current(self, pid: int) -> bool:
        """Whether ``pid`` names the current incarnation: its submit command's pid, or the pid the driver
        announced for itself (in the cluster's pid space: the commit-window hook's ``{"batch", "pid"}`` and
        the ready file's, e.g. 1 in a container); only a live driver announces, and only one lives."""
        if pid == self.sup.pid:
            return True
        ready = read_ready(self.pipeline.control)
        return self.sup.pid is not None and ready is not None and ready.get("pid") == pid

    def kill_driver(self, pid: int) -> bool:
        """Kill the current incarnation through ``[faults.kill-driver]`` when ``pid`` names it
        (:meth:`_current`); True when its submit command ended."""
        return self._current(pid) and self.sup.kill_current()

    def freeze_driver(self, pid: int) -> bool:
        """Pause the current incarnation through ``[faults.pause-driver]`` (heal recorded first); True when
        its command exited 0."""
        n = self.sup.incarnations
        run, heal = self._driver_command("pause-driver", n), self._driver_command("pause-driver", n, heal=True)
        if not self._current(pid) or run is None or heal is None:
            return False
        token = self.ledger.add(f"pause-driver:{n}", heal)
        if self.runner.run(run).returncode != 0:
            self.ledger.settle(token)
            return False
        self._paused = token
        return True

    def thaw_driver(self, pid: int) -> None:
        """Resume what :meth:`freeze_driver` paused (its recorded heal)."""
        token, self._paused = self._paused, None
        if token is None:
            return
        for e in self.ledger.entries():
            if e.token == token and self.runner.run(e.heal).returncode == 0:
                self.ledger.settle(token)

    def log_files(self) -> list[Path]:
        """The submit commands' output (the driver's log where the command attaches to it)."""
        return sorted(self.log_dir.glob("driver-*.log"))
