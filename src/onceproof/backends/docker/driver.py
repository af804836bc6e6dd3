"""Runs the PySpark driver (``python -m onceproof.job``) in a container on the run's network and restarts
it from the same checkpoint when it dies, as a cluster manager's supervise mode would — the Docker
counterpart of ``backends/common/supervisor.py``'s ``DriverSupervisor``, with the same interface
(``start``, ``pid``, ``stop``, ``kill_now``, ``restarts``, ``events``).

A subclass of ``DriverSupervisor`` that replaces how an incarnation runs and stops: the local one starts
a host ``python`` and stops it by its process group; here each incarnation is a container
(``onceproof/spark``, ``pid_mode=host``) started and removed through the engine. What carries over
unchanged: one ``driver-<n>.log`` per incarnation in the
run's logs, ``ONCEPROOF_DRIVER_INCARNATION=<n>`` in its environment, a 1 s pause before a restart, and
pids that are host pids (so the driver's own announcements, ``driver.ready`` and the commit-window
hook, name a process the harness can see and the nemeses can aim at).

The container runs ``sh -c 'exec python -m onceproof.job ... >> <log> 2>&1'``: the Python driver is the
container's main process, so its pid is the container's ``State.Pid``, and ``docker kill`` takes it
with its JVM (a container without its own pid namespace loses every process when its main one dies).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

import docker
from onceproof.backends.common.supervisor import DriverSupervisor
from onceproof.backends.docker.site import DockerSite

SPARK_KAFKA_DIR = "/opt/onceproof/spark-kafka"  # the connector's jars in onceproof/spark


def driver_command(argv: list[str], jar_dir: str = SPARK_KAFKA_DIR) -> list[str]:
    """The driver container's command: ``onceproof.job`` with ``argv`` (passed as ``sh``'s positional
    arguments, never parsed by the shell) and every connector jar in ``jar_dir`` as ``--jars local:...``
    (in the image on every node, so an executor copies them from its own disk, never from the driver).
    Output is appended to ``$ONCEPROOF_DRIVER_LOG`` (set in the container's environment)."""
    script = (f'jars=""; for j in {jar_dir}/*.jar; do jars="$jars${{jars:+,}}local:$j"; done; '
              f'exec python -m onceproof.job "$@" --jars "$jars" >> "$ONCEPROOF_DRIVER_LOG" 2>&1')
    return ["sh", "-c", script, "onceproof.job", *argv]


@dataclass(kw_only=True)
class ContainerDriverSupervisor(DriverSupervisor):
    """Keeps one driver container alive until :meth:`stop`. From :class:`DriverSupervisor`: ``argv``
    (``onceproof.job`` arguments: in-network bootstrap, ``spark://`` master), ``log_dir``
    (``driver-<n>.log`` per incarnation), ``restart_delay_s``, ``events`` (``(time, "start"|"exit", pid,
    exit code)``), ``incarnations``, :meth:`start` and :meth:`restarts`.

    Attributes:
        site: the run's containers.
        image: the Spark image.
        env: the container's environment (``PYTHONPATH`` to the repository, ...).
        volumes: bind mounts (the run directory and the repository at their host paths).
    """

    site: DockerSite
    image: str
    env: dict[str, str]
    volumes: dict
    _container: object = None
    _pid: int | None = None

    @property
    def pid(self) -> int | None:
        """Host pid of the current driver (the Python process), ``None`` between incarnations."""
        with self._lock:
            pid = self._pid
        return pid if pid is not None and _alive(pid) else None

    @property
    def container(self):
        """The current incarnation's container (``None`` between incarnations)."""
        with self._lock:
            return self._container

    def role(self, n: int) -> str:
        return f"driver-{n}"

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.incarnations += 1
            n = self.incarnations
            log = self.log_dir / f"driver-{n}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            env = {**self.env, "ONCEPROOF_DRIVER_INCARNATION": str(n), "ONCEPROOF_DRIVER_LOG": str(log)}
            try:
                c = self.site.run(self.role(n), self.image, ip=None, aliases=["driver"], env=env,
                                  command=driver_command(self.argv), volumes=self.volumes, pid_host=True,
                                  log_path=self.log_dir / f"container-driver-{n}.log", hostname="driver",
                                  working_dir=str(self.log_dir))
                c.reload()
                pid = c.attrs["State"]["Pid"] or None
            except docker.errors.APIError as e:
                with open(log, "a") as f:
                    f.write(f"onceproof: starting the driver container failed: {e}\n")
                self.events.append((time.time(), "start-failed", None, None))
                self._stop.wait(5.0)
                continue
            with self._lock:
                self._container, self._pid = c, pid
            self.events.append((time.time(), "start", pid, None))
            while pid is not None and _alive(pid) and not self._stop.is_set():
                time.sleep(0.2)
            if self._stop.is_set():
                break
            self.events.append((time.time(), "exit", pid, _exit_code(c)))
            with self._lock:
                self._container, self._pid = None, None
            self.site.remove(c)
            self._stop.wait(self.restart_delay_s)
        self._remove_current()

    def _remove_current(self) -> None:
        with self._lock:
            c, self._container, self._pid = self._container, None, None
        if c is not None:
            self.site.remove(c)

    def stop(self) -> None:
        """Stop supervising and remove the driver's container; waits for the thread (≤ 15 s), then removes
        whatever driver container of the run is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._remove_current()
        for c in self.site.containers():
            if c.name.startswith(self.site.layout.container("driver-")):
                self.site.remove(c)

    def kill_now(self) -> None:
        """Remove the current driver container at once (the teardown watchdog's last resort)."""
        self._stop.set()
        self._remove_current()

    def kill(self, pid: int) -> bool:
        """``docker kill`` the driver container whose main process is ``pid`` and wait (≤ 5 s) for the
        process to go. A pid that is no driver of this run is left alone. True when ``pid`` is gone."""
        c = self.container
        target = None
        if c is not None and self._pid == pid:
            target = c
        else:
            for d in self.site.containers():
                if d.name.startswith(self.site.layout.container("driver-")) and d.attrs["State"].get("Pid") == pid:
                    target = d
        if target is not None:
            try:
                target.kill()
            except docker.errors.APIError:
                pass  # exited meanwhile
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not _alive(pid)

    def executors(self) -> list:
        """None here: executors run in the worker containers (``DockerSpark.executors``)."""
        return []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _exit_code(c) -> int | None:
    try:
        return c.wait(timeout=10).get("StatusCode")
    except Exception:  # noqa: BLE001 - removed meanwhile, or the engine is slow: unknown
        return None
