"""What every supervised pipeline whose processes are host processes shares: the local backend's
driver in its process group, and the Docker backend's driver and executors in ``pid_mode=host``
containers. A sink task announces its host pid (``sink.jsonl``); its executor is the JVM above it.

:class:`SupervisedDriver` holds the :class:`onceproof.backends.base.SparkApp` members that read the run's
files and the supervisor (every backend's, the ssh and external ones too); :class:`SupervisedSpark` adds the
:class:`onceproof.backends.base.ExecutorFaults` members that walk host processes. A backend's subclass
starts, stops and signals its own driver.
"""

from __future__ import annotations

import os
import re
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


class SupervisedDriver:
    """The driver's side of a backend's :class:`~onceproof.backends.base.SparkApp`, read from the run's
    files and the supervisor: every backend's, wherever its driver runs. A subclass sets ``pipeline``
    (:class:`PipelineArgs`, paths as the harness sees them), ``sup`` (its driver supervisor: ``pid``,
    ``restarts()``) and ``log_dir`` (where ``driver-<n>.log`` are, written or relayed)."""

    pipeline: PipelineArgs
    sup: DriverSupervisor
    log_dir: Path

    @property
    def checkpoint(self) -> Path:
        return self.pipeline.checkpoint

    @property
    def driver_pid(self) -> int | None:
        """The supervisor's pid of the current driver (on the local backend also its process group),
        ``None`` between incarnations."""
        return self.sup.pid

    def ready(self) -> dict | None:
        if self.pipeline.command:
            return checkpoint_ready(self.pipeline.checkpoint, self.sup.pid)
        return read_ready(self.pipeline.control)

    def restarts(self) -> int:
        return self.sup.restarts()

    def driver_log(self) -> Path | None:
        """The most recently written ``driver-<n>.log``."""
        logs = sorted(self.log_dir.glob("driver-*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else None


class SupervisedSpark(SupervisedDriver):
    """:class:`SupervisedDriver` plus the :class:`~onceproof.backends.base.ExecutorFaults` members of a backend
    whose executors are host processes (local, Docker with ``pid_mode=host``)."""

    def executor_of(self, task_pid: int, host: str | None = None) -> Executor | None:
        """The executor JVM above the Python worker ``task_pid`` (worker ← pyspark daemon ← executor); ``host``
        is not needed: every pid here is the harness host's."""
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

    def freeze_executor(self, executor: Executor) -> bool:
        """SIGSTOP the executor JVM alone (its worker keeps running, so Spark sees no exit)."""
        p = _process(executor)
        if p is None:
            return False
        try:
            p.suspend()
        except psutil.Error:
            return False
        return True

    def thaw_executor(self, executor: Executor) -> None:
        p = _process(executor)
        if p is not None:
            try:
                p.resume()
            except psutil.Error:
                pass

    def executor_unread_bytes(self, executor: Executor) -> int | None:
        """The receive queues of the executor's established sockets to its driver's RPC port (the port of
        its ``--driver-url``), summed; ``None`` when the process or its tables cannot be read."""
        p = _process(executor)
        if p is None:
            return None
        try:
            port = driver_port(p.cmdline())
            inodes = socket_inodes(executor.pid)
            tables = [Path(f"/proc/{executor.pid}/net/{t}").read_text() for t in ("tcp", "tcp6")]
        except (psutil.Error, OSError):
            return None
        if port is None:
            return None
        return unread_bytes(tables, inodes, port)


def host_executor(p: psutil.Process) -> Executor:
    """The :class:`Executor` of executor JVM ``p`` (its start time 0 when it cannot be read)."""
    try:
        started = p.create_time()
    except psutil.Error:
        started = 0.0
    return Executor(executor_id(p), p.pid, started)


def _process(executor: Executor) -> psutil.Process | None:
    """``executor``'s JVM, ``None`` when it is gone or its pid now belongs to another process."""
    try:
        p = psutil.Process(executor.pid)
        if executor.started and abs(p.create_time() - executor.started) > 1e-3:
            return None
    except psutil.Error:
        return None
    return p


_DRIVER_URL = re.compile(r"CoarseGrainedScheduler@\[?[^\s\]]*\]?:(\d+)")


def driver_port(cmdline: list[str]) -> int | None:
    """The driver's RPC port from an executor's ``--driver-url spark://CoarseGrainedScheduler@host:port``
    (``None`` without one)."""
    m = _DRIVER_URL.search(" ".join(cmdline))
    return int(m.group(1)) if m else None


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds open (``/proc/<pid>/fd/* -> socket:[<inode>]``).
    Raises ``OSError`` when its fd table cannot be read."""
    out = set()
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            link = os.readlink(f"{fds}/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


_ESTABLISHED = "01"


def unread_bytes(tables: list[str], inodes: set[int], port: int) -> int:
    """Sum of ``rx_queue`` over the established sockets of ``tables`` (the text of ``/proc/<pid>/net/tcp``
    and ``tcp6``: a header line, then ``sl local rem st tx_queue:rx_queue tr:when retrnsmt uid timeout
    inode ...``, addresses ``HEXADDR:HEXPORT``, queues in hex bytes) whose inode is in ``inodes`` and whose
    remote port is ``port``."""
    total = 0
    for table in tables:
        for line in table.splitlines()[1:]:
            f = line.split()
            if len(f) < 10 or f[3] != _ESTABLISHED:
                continue
            try:
                if int(f[9]) not in inodes or int(f[2].rsplit(":", 1)[1], 16) != port:
                    continue
                total += int(f[4].split(":")[1], 16)
            except (ValueError, IndexError):
                continue
    return total
