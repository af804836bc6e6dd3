"""What every supervised pipeline whose processes are host processes shares: the local backend's
driver in its process group, and the Docker backend's driver and executors in ``pid_mode=host``
containers. A sink task announces its host pid (``sink.jsonl``); its executor is the JVM above it.

:class:`SupervisedSpark` holds the :class:`onceproof.backends.base.SparkApp` and
:class:`onceproof.backends.base.ExecutorFaults` members that read the run's files and walk host
processes; a backend's subclass starts, stops and signals its own driver.
"""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from onceproof.backends.base import Executor, PipelineArgs
from onceproof.backends.common.supervisor import (
    EXECUTOR_MAIN,
    DriverSupervisor,
    checkpoint_ready,
    executor_id,
    read_ready,
)


class SupervisedSpark:
    """The shared part of a backend's :class:`~onceproof.backends.base.SparkApp`. A subclass sets
    ``pipeline`` (:class:`PipelineArgs`), ``sup`` (its driver supervisor: ``pid``, ``restarts()``) and
    ``log_dir`` (where ``driver-<n>.log`` are written)."""

    pipeline: PipelineArgs
    sup: DriverSupervisor
    log_dir: Path

    @property
    def checkpoint(self) -> Path:
        return self.pipeline.checkpoint

    @property
    def driver_pid(self) -> int | None:
        """Pid (and process-group id) of the current driver, ``None`` between incarnations."""
        return self.sup.pid

    def ready(self) -> dict | None:
        if self.pipeline.command:
            return checkpoint_ready(self.pipeline.checkpoint, self.sup.pid)
        return read_ready(self.pipeline.control)

    def restarts(self) -> int:
        return self.sup.restarts()

    def executor_of(self, task_pid: int) -> Executor | None:
        """The executor JVM above the Python worker ``task_pid`` (worker ← pyspark daemon ← executor)."""
        try:
            for a in psutil.Process(task_pid).parents():
                if EXECUTOR_MAIN in " ".join(a.cmdline()):
                    return host_executor(a)
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

    def executor_cpu_s(self, executor: Executor) -> float | None:
        """User + system CPU seconds of the executor JVM (psutil), ``None`` when it is gone or its pid
        now belongs to another process."""
        try:
            p = psutil.Process(executor.pid)
            if executor.started and abs(p.create_time() - executor.started) > 1e-3:
                return None
            t = p.cpu_times()
        except (psutil.Error, OSError):
            return None
        return t.user + t.system

    def driver_log(self) -> Path | None:
        """The most recently written ``driver-<n>.log``."""
        logs = sorted(self.log_dir.glob("driver-*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else None


def host_executor(p: psutil.Process) -> Executor:
    """The :class:`Executor` of executor JVM ``p`` (its start time 0 when it cannot be read)."""
    try:
        started = p.create_time()
    except psutil.Error:
        started = 0.0
    return Executor(executor_id(p), p.pid, started)
