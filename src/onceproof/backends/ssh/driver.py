"""Runs the PySpark driver on the ``driver`` node of ``nodes.toml`` and restarts it from the same checkpoint
when it dies, as a cluster manager's supervise mode would: the ssh counterpart of
``backends/common/supervisor.py``'s ``DriverSupervisor``, with the same interface (``start``, ``pid``,
``stop``, ``kill_now``, ``restarts``, ``events``, ``incarnations``).

Each incarnation is an ``onceproof-node.py`` process named ``driver-<n>`` (its own session and process
group, ``ONCEPROOF_RUN`` in its environment, a pid file checked against its start ticks), its output in
``<run>/logs/driver-<n>.log`` on the node, which the run-files relay brings back to the harness's
``logs/``. Pids are the node's: the pipeline's own announcements (``driver.ready``, the commit-window
hook) name the same process, so a nemesis aims at what the supervisor knows.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import PurePosixPath

from onceproof.backends.common.supervisor import DriverSupervisor
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.remote import RemoteError

POLL_S = 1.0
"""How often the supervisor asks the node whether the driver still runs, seconds (one SSH command each)."""
GONE = "gone"


@dataclass(kw_only=True)
class RemoteDriverSupervisor(DriverSupervisor):
    """Keeps one driver process alive on the driver node until :meth:`stop`. From
    :class:`DriverSupervisor`: ``argv`` (the whole command, e.g. ``python3 -m onceproof.job ...``),
    ``log_dir`` (the harness's logs; unused here: the relay fills it), ``env``, ``restart_delay_s``,
    ``events`` (``(time, "start"|"exit"|"start-failed", pid, exit code or signal)``), ``incarnations``.

    Attributes:
        helper: the driver node's ``onceproof-node.py``.
        remote_logs: ``<run>/logs`` on the node.
        remote_cwd: the driver's working directory on the node.
    """

    helper: NodeHelper
    remote_logs: PurePosixPath
    remote_cwd: PurePosixPath
    _pid: int | None = None
    _name: str | None = None

    @property
    def pid(self) -> int | None:
        """The current driver's pid on the node, ``None`` between incarnations."""
        with self._lock:
            return self._pid

    @property
    def name(self) -> str | None:
        """The current incarnation's process name (``driver-<n>``), ``None`` between incarnations."""
        with self._lock:
            return self._name

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.incarnations += 1
            n = self.incarnations
            name = f"driver-{n}"
            with self._lock:
                argv = list(self.argv)
            env = {**self.env, "ONCEPROOF_DRIVER_INCARNATION": str(n), "PYTHONUNBUFFERED": "1"}
            try:
                pid = self.helper.start(name, argv, log=self.remote_logs / f"{name}.log", env=env, cwd=self.remote_cwd)
            except RemoteError as e:
                self.events.append((time.time(), "start-failed", None, str(e)[-300:]))
                self._stop.wait(5.0)
                continue
            with self._lock:
                self._pid, self._name = pid, name
            self.events.append((time.time(), "start", pid, None))
            end = None
            while not self._stop.wait(POLL_S):
                try:
                    st = self.helper.status(name)
                except RemoteError:
                    continue  # a slow or briefly cut SSH connection is not a dead driver
                if st.get("state") == GONE or st.get("exit"):
                    end = st.get("exit") or {}
                    break
            if self._stop.is_set():
                break
            with self._lock:
                self._pid, self._name = None, None
            self.events.append((time.time(), "exit", pid, end.get("code", end.get("signal")) if end else None))
            # its executors belong to the workers' groups; the driver's group is cleared before the next one
            with contextlib.suppress(RemoteError):
                self.helper.signal(name, "KILL")
            self._stop.wait(self.restart_delay_s)
        self._kill_current()

    def _kill_current(self) -> None:
        with self._lock:
            name, self._pid, self._name = self._name, None, None
        if name is not None:
            with contextlib.suppress(RemoteError):
                self.helper.signal(name, "KILL")

    def stop(self) -> None:
        """Stop supervising and SIGKILL the current driver's group on the node; waits for the thread (≤ 15 s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._kill_current()

    def kill_now(self) -> None:
        """SIGKILL the current driver without waiting for the thread (the teardown's last resort)."""
        self._stop.set()
        self._kill_current()

    def signal_driver(self, pid: int, sig: str) -> bool:
        """Send ``sig`` (``KILL``, ``STOP``, ``CONT``) to the driver ``pid`` when it is the current one;
        True when sent."""
        with self._lock:
            name, current = self._name, self._pid
        if name is None or current != pid:
            return False
        try:
            return bool(self.helper.signal(name, sig).get("sent"))
        except RemoteError:
            return False

    def kill(self, pid: int) -> bool:
        """SIGKILL the driver ``pid``'s group and wait (≤ 10 s) for the node to report it gone; True when it is."""
        with self._lock:
            name = self._name if self._pid == pid else None
        if name is None or not self.signal_driver(pid, "KILL"):
            return False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(RemoteError):
                if self.helper.status(name).get("state") == GONE:
                    return True
            time.sleep(0.2)
        return False

    def executors(self) -> list:
        """None here: the executors run on the worker nodes."""
        return []
