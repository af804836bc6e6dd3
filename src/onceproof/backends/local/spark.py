"""The pipeline on this machine: the local backend's :class:`onceproof.backends.base.SparkApp`.

The driver (``python -m onceproof.pipeline.job``, or a user's ``--pipeline-cmd``) runs under
:class:`DriverSupervisor` in its own process group with the ``local-cluster`` master, workers and executor JVMs it starts. Executors are found in that
group by their main class; a sink task's Python worker is found under its executor through the process
tree (worker ← pyspark daemon ← executor JVM).

Logs: ``driver-<n>.log`` per driver incarnation in ``log_dir``; each executor's ``stdout``/``stderr`` in
``log_dir/executors/<app-id>/<executor-id>/``, collected when the app stops.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import psutil

from onceproof.backends.base import Executor, PipelineArgs
from onceproof.backends.local import jars, processes, runtimes
from onceproof.backends.local.supervisor import (
    EXECUTOR_MAIN,
    DriverSupervisor,
    checkpoint_ready,
    collect_executor_logs,
    driver_argv,
    executor_id,
    read_ready,
)
from onceproof.pipeline.eos_sink import CONTROL_DIR_ENV, SINK_LOG_ENV


class LocalSpark:
    """The supervised pipeline ``pipeline``, logging to ``log_dir``. Not started until :meth:`start`."""

    def __init__(self, pipeline: PipelineArgs, log_dir: Path):
        self.pipeline = pipeline
        self.log_dir = log_dir
        self.executor_dir = log_dir / "executors"
        # a user's pipeline runs where onceproof was started (its command names its script relative to
        # there) and learns the run's hooks and sink log from the environment (pipeline/eos_sink.py)
        user = {"cwd": pipeline.cwd or Path.cwd(), "watch_apps": True,
                "env": {CONTROL_DIR_ENV: str(pipeline.control), SINK_LOG_ENV: str(pipeline.sink_log)}} \
            if pipeline.command else {}
        self.sup = DriverSupervisor(driver_argv(pipeline), log_dir, executor_dir=self.executor_dir, **user)
        self.pyspark_dirs = [jars.pyspark_jars_dir().parent]  # every runtime's: where executor logs land

    @property
    def checkpoint(self) -> Path:
        return self.pipeline.checkpoint

    @property
    def starts_before_cluster(self) -> bool:
        """Our pipeline waits for its input topic (``onceproof.pipeline.job.wait_for_input``); a user's may not."""
        return not self.pipeline.command

    @property
    def driver_pid(self) -> int | None:
        """Pid (and process-group id) of the current driver, ``None`` between incarnations."""
        return self.sup.pid

    def start(self) -> None:
        self.sup.start()

    def ready(self) -> dict | None:
        if self.pipeline.command:
            return checkpoint_ready(self.pipeline.checkpoint, self.sup.pid)
        return read_ready(self.pipeline.control)

    def stop(self) -> None:
        """Stop the driver's process group (≤ 15 s for the supervision thread, then SIGKILL), then keep
        each executor's logs and drop its work directory, and remove a second runtime's half-built
        environment that no build is writing (one a killed harness left)."""
        try:
            self.sup.stop()
        finally:
            collect_executor_logs(self.pipeline.control, self.executor_dir, self.sup.app_ids, self.pyspark_dirs)
            runtimes.discard_partial()

    def kill_now(self) -> None:
        self.sup.kill_now()

    def kill_driver(self, pid: int) -> bool:
        """SIGKILL process group ``pid`` and wait (≤ 5 s); True when ``pid`` is gone."""
        processes.kill_group(pid)
        return not processes.alive(pid)

    def freeze_driver(self, pid: int) -> bool:
        """SIGSTOP process group ``pid`` (the driver, its JVM, master, workers, executors)."""
        return processes.signal_group(pid, "SIGSTOP")

    def thaw_driver(self, pid: int) -> None:
        processes.signal_group(pid, "SIGCONT")

    def restarts(self) -> int:
        return self.sup.restarts()

    def set_runtime(self, version: str | None) -> str:
        """The next driver start runs PySpark ``version``: ``"previous"`` (the cached previous minor,
        :func:`runtimes.previous_version`, built on first use: ~40 s cold), an explicit version
        (``"4.2.1"``), or ``None`` (this interpreter's). The supervisor gets the runtime's interpreter
        for the driver and its Python workers, and the connector's jars minus what that PySpark ships;
        a ``--pipeline-cmd`` pipeline gets it through its ``{python}`` placeholder.

        Returns the version. Raises: ``runtimes.RuntimeBuildError`` (a ``BackendError``) naming the fix.
        """
        if version is None:
            import pyspark

            python, pyspark_dir, ver = sys.executable, jars.pyspark_jars_dir().parent, pyspark.__version__
        else:
            rt = runtimes.ensure(runtimes.previous_version() if version == "previous" else version)
            python, pyspark_dir, ver = str(rt.python), rt.pyspark_dir, rt.version
        self.sup.use_runtime(driver_argv(self.pipeline, python, pyspark_dir / "jars"), python)
        if pyspark_dir not in self.pyspark_dirs:
            self.pyspark_dirs.append(pyspark_dir)
        return ver

    def executors(self) -> list[Executor]:
        """Live executor JVMs of the current driver."""
        return [_executor(p) for p in self.sup.executors()]

    def executor_of(self, task_pid: int) -> Executor | None:
        """The executor JVM above the Python worker ``task_pid`` (worker ← pyspark daemon ← executor)."""
        try:
            for a in psutil.Process(task_pid).parents():
                if EXECUTOR_MAIN in " ".join(a.cmdline()):
                    return _executor(a)
        except psutil.Error:
            return None
        return None

    def kill_executor(self, executor: Executor) -> str | None:
        """SIGKILL the executor JVM (only that process: Spark's worker notices and reports it lost) and
        wait ≤ 10 s; returns why it failed, or ``None``. A pid now held by another process counts as gone."""
        try:
            victim = psutil.Process(executor.pid)
            if executor.started and abs(victim.create_time() - executor.started) > 1e-3:
                return None
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
        except psutil.NoSuchProcess:
            return None
        except psutil.TimeoutExpired:
            return "still alive 10 s after SIGKILL"
        return None

    def kill_task(self, task_pid: int) -> bool:
        """SIGKILL ``task_pid`` if it is still a PySpark worker (its command line names pyspark: a pid
        reused by another process since is left alone)."""
        try:
            p = psutil.Process(task_pid)
            if "pyspark" not in " ".join(p.cmdline()):
                return False
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=5)
        except (psutil.Error, psutil.TimeoutExpired):
            return False
        return True

    def driver_log(self) -> Path | None:
        """The most recently written ``driver-<n>.log``."""
        logs = sorted(self.log_dir.glob("driver-*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else None

    def log_files(self) -> list[Path]:
        return sorted(self.log_dir.glob("driver-*.log")) + sorted(self.executor_dir.glob("*/*/std*"))


def _executor(p: psutil.Process) -> Executor:
    try:
        started = p.create_time()
    except psutil.Error:
        started = 0.0
    return Executor(executor_id(p), p.pid, started)
