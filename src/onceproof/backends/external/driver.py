"""Runs the PySpark driver on a cluster onceproof does not own, through the user's ``[spark] submit``
template, and starts the next incarnation from the same checkpoint when one ends: the external counterpart
of ``backends/common/supervisor.py``'s ``DriverSupervisor``, with the same interface (``start``, ``pid``,
``stop``, ``kill_now``, ``restarts``, ``events``, ``incarnations``).

An incarnation is the rendered submit command (a client-mode ``spark-submit``, ``docker compose run``,
``kubectl run --attach``), run on the harness's machine in a process group of its own, its output in
``driver-<n>.log``. It lives as long as the driver does. ``pid`` is that local command's pid, not the
driver's (which lives in the cluster's own pid space). The driver is stopped from outside by the map's
``[faults.kill-driver]`` (rendered with the incarnation), which also ends the submit command; killing
the local command alone might leave the driver running in the cluster.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from onceproof.backends.common import processes
from onceproof.backends.common.supervisor import DriverSupervisor
from onceproof.backends.external.fault_map import Command
from onceproof.backends.ssh.remote import Completed, RemoteError


@dataclass(kw_only=True)
class TemplateDriverSupervisor(DriverSupervisor):
    """Keeps one driver incarnation running until :meth:`stop`. From :class:`DriverSupervisor`: ``log_dir``
    (``driver-<n>.log``), ``env`` (added to the harness's environment: the Kafka password's variable,
    never argv), ``restart_delay_s``, ``events``, ``incarnations``; ``argv`` is unused (see ``render``).

    Attributes:
        render: ``render(n)`` → incarnation ``n``'s submit command.
        stop_driver: ``stop_driver(n)`` → the command that kills incarnation ``n`` in the cluster (the map's
            ``kill-driver``), or ``None`` when the map has none (then only the local command is killed).
        run: runs such a command (``commands.CommandRunner.run``).
    """

    render: Callable[[int], Command]
    stop_driver: Callable[[int], Command | None]
    run: Callable[[Command], Completed]

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.incarnations += 1
            n = self.incarnations
            cmd = self.render(n)
            env = {**os.environ, **self.env, "ONCEPROOF_DRIVER_INCARNATION": str(n)}
            try:
                proc = processes.spawn(list(cmd.argv), log_path=self.log_dir / f"driver-{n}.log", env=env,
                                       cwd=self.cwd or self.log_dir)
            except OSError as e:
                self.events.append((time.time(), "start-failed", None, str(e)))
                self._stop.wait(5.0)
                continue
            with self._lock:
                self._proc = proc
            self.events.append((time.time(), "start", proc.pid, None))
            while proc.poll() is None and not self._stop.is_set():
                time.sleep(0.2)
            if self._stop.is_set():
                break
            self.events.append((time.time(), "exit", proc.pid, proc.returncode))
            processes.kill_group(proc.pid)
            self._stop.wait(self.restart_delay_s)
        self._end_current()

    def _end_current(self) -> None:
        with self._lock:
            p, n = self._proc, self.incarnations
        if p is None:
            return
        if p.poll() is None:
            cmd = self.stop_driver(n)
            if cmd is not None:
                with contextlib.suppress(RemoteError, OSError):
                    self.run(cmd)
        processes.kill_group(p.pid)

    def stop(self) -> None:
        """Stop supervising: kill the current incarnation in the cluster (the map's ``kill-driver``) and
        its local submit command; waits for the thread (≤ 15 s + the command's deadline)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._end_current()

    def kill_now(self) -> None:
        """The teardown's last resort: the same as :meth:`stop` without waiting for the thread."""
        self._stop.set()
        self._end_current()

    def kill_current(self) -> bool:
        """Kill the current incarnation through the map and wait (≤ 15 s) for its submit command to end;
        True when it did. The supervisor then starts the next incarnation."""
        with self._lock:
            p, n = self._proc, self.incarnations
        if p is None or p.poll() is not None:
            return False
        cmd = self.stop_driver(n)
        if cmd is None:
            return False
        done = self.run(cmd)
        if done.returncode != 0:
            return False
        deadline = time.monotonic() + 15
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return p.poll() is not None

    def executors(self) -> list:
        """None: the executors run in the cluster."""
        return []
