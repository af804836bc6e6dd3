"""Runs the PySpark driver (``python -m onceproof.job``, or a user's ``--pipeline-cmd``) and restarts it
from the same checkpoint when it dies, as a cluster manager's supervise mode would.

The driver is started in its own process group: the Python driver, its JVM, the in-JVM
``local-cluster`` master and workers, every executor JVM and every Python worker share that group, so a
driver kill or a teardown signals them all at once and leaves no orphan JVM.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from onceproof.backends.base import PipelineArgs
from onceproof.backends.common import jars, processes
from onceproof.backends.user_pipeline import PipelineCommand

log = logging.getLogger("onceproof.spark")
_warned: set[str] = set()

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
APP_POLL_S = 2.0


def driver_env(executor_dir: Path | None = None, python: str | None = None) -> dict[str, str]:
    """Environment for the driver: loopback only, ``python`` (default: this interpreter) for the driver
    and its Python workers, executor logs (the local-cluster workers' work dirs) under ``executor_dir``."""
    python = python or sys.executable
    env = dict(os.environ)
    if executor_dir is not None:
        executor_dir.mkdir(parents=True, exist_ok=True)
        env["SPARK_WORKER_DIR"] = str(executor_dir)
    env.update({
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "localhost",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("SPARK_HOME", None)  # the pip-installed pyspark finds its own
    return env


STOP_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL of the driver's process group when the supervision stops."""


@dataclass
class DriverSupervisor:
    """Keeps one driver process alive until :meth:`stop`: whenever the driver exits — killed, crashed,
    or stopped on request with exit code 0 (``upgrade:graceful``) — the next incarnation starts after
    ``restart_delay_s``, unless :meth:`stop` was called.

    Attributes:
        argv: the driver's whole command line (:func:`driver_argv`: the bundled pipeline or a user's ``--pipeline-cmd``
            expanded), the same for every incarnation until :meth:`use_runtime` changes it.
        python: the interpreter of the driver's Python workers (``PYSPARK_PYTHON``), the one ``argv``
            runs: this interpreter, or a cached second PySpark runtime (``backends/local/runtimes.py``).
        log_dir: ``driver-<n>.log`` per incarnation goes here.
        cwd: the driver's working directory (default ``log_dir``).
        env: extra environment variables for the driver.
        restart_delay_s: pause before a restart, seconds.
        events: ``(time, "start"|"exit", pid, returncode)`` for every incarnation.
        watch_apps: poll the executors' command lines for ``--app-id`` every ``APP_POLL_S`` s, for a
            pipeline that does not announce its Spark application (a user's; the bundled one writes
            ``control/driver.apps.jsonl``).
        app_ids: the application ids seen so, every incarnation's: where that pipeline left its executor
            logs (:func:`collect_executor_logs`).
    """

    argv: list[str]
    log_dir: Path
    executor_dir: Path | None = None
    python: str = field(default_factory=lambda: sys.executable)
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    watch_apps: bool = False
    restart_delay_s: float = 1.0
    events: list[tuple] = field(default_factory=list)
    app_ids: set[str] = field(default_factory=set)
    incarnations: int = 0
    _proc: object = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Start the supervision thread (which starts the first driver)."""
        self._thread = threading.Thread(target=self._loop, name="driver-supervisor", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        """Pid (and process-group id) of the current driver, or ``None`` between incarnations."""
        with self._lock:
            p = self._proc
            return p.pid if p is not None and p.poll() is None else None

    def use_runtime(self, argv: list[str], python: str) -> None:
        """Start every later incarnation with ``argv`` and ``python`` (the running one is left alone: it
        changes at its next restart, after a crash, a kill or a stop)."""
        with self._lock:
            self.argv, self.python = list(argv), python

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.incarnations += 1
            log = self.log_dir / f"driver-{self.incarnations}.log"
            with self._lock:
                argv, python = list(self.argv), self.python
            env = driver_env(self.executor_dir, python)
            # the sink keys its attempts by (incarnation, batch, partition, attempt): Spark restarts
            # attempt numbers at 0 in every new driver
            env["ONCEPROOF_DRIVER_INCARNATION"] = str(self.incarnations)
            env.update(self.env)
            proc = processes.spawn(argv, log_path=log, env=env, cwd=self.cwd or self.log_dir)
            with self._lock:
                self._proc = proc
            self.events.append((time.time(), "start", proc.pid, None))
            next_poll = time.monotonic() + APP_POLL_S
            while proc.poll() is None and not self._stop.is_set():
                time.sleep(0.2)
                if self.watch_apps and time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + APP_POLL_S
                    self.app_ids.update(app_id(p) for p in self.executors())
                    self.app_ids.discard("?")
            if self._stop.is_set():
                break
            self.events.append((time.time(), "exit", proc.pid, proc.returncode))
            # Executors outlive a SIGKILLed driver for a while; clear the whole group before restarting.
            processes.kill_group(proc.pid)
            self._stop.wait(self.restart_delay_s)
        with self._lock:
            p = self._proc
        if p is not None:
            # by now the run has read what it checks; the grace only lets the JVMs end their logs. Spark's
            # shutdown hooks rarely finish in it (the default run's teardown spent the whole 5 s here)
            processes.stop_group(p.pid, grace_s=STOP_GRACE_S)

    def stop(self) -> None:
        """Stop the driver and everything in its process group; waits for the thread (≤ 15 s), then
        SIGKILLs the group whatever the thread is doing."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        with self._lock:
            p = self._proc
        if p is not None:
            processes.kill_group(p.pid)

    def kill_now(self) -> None:
        """SIGKILL the current driver's process group without waiting for the supervision thread (the
        teardown watchdog's last resort)."""
        self._stop.set()
        with self._lock:
            p = self._proc
        if p is not None:
            processes.kill_group(p.pid)

    def executors(self) -> list[psutil.Process]:
        """Live executor JVMs of the current driver (``CoarseGrainedExecutorBackend`` processes)."""
        pid = self.pid
        if pid is None:
            return []
        out = []
        for p in processes.group_members(pid):
            try:
                if EXECUTOR_MAIN in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def restarts(self) -> int:
        """Number of times the driver died and was restarted."""
        return sum(1 for e in self.events if e[1] == "exit")


def _arg(proc: psutil.Process, name: str) -> str:
    try:
        args = proc.cmdline()
        return args[args.index(name) + 1]
    except (psutil.Error, ValueError, IndexError):
        return "?"


def executor_id(proc: psutil.Process) -> str:
    """Spark executor id from an executor JVM's ``--executor-id`` argument ("?" if unreadable)."""
    return _arg(proc, "--executor-id")


def app_id(proc: psutil.Process) -> str:
    """Spark application id from an executor JVM's ``--app-id`` argument ("?" if unreadable)."""
    return _arg(proc, "--app-id")


def connector_jars(pyspark_jars: Path | None = None, spark_version: str | None = None,
                   extra: tuple[str, ...] = (), versions: dict[str, str] | None = None) -> str:
    """The Spark Kafka connector's classpath for a PySpark at ``spark_version`` (default: this
    interpreter's), and the ``extra`` classpaths of ``deps/`` (``PipelineArgs.jars``: ``"delta"``), each
    built for that Spark's line, comma-separated for ``spark.jars`` (resolved by Maven on first use,
    :mod:`onceproof.backends.common.jars`), minus what the PySpark in ``pyspark_jars`` (default: this
    interpreter's ``pyspark/jars``) ships. An extra library with no build for that Spark line is left out
    with a warning (a Delta job written with delta-rs needs none; config refuses a job whose own
    delta-spark cannot run on its Spark). ``versions``: ``{library: version}`` overriding the pinned ones
    (a job's own delta-spark package, ``Interpreter.deps_versions``). Raises ``ResolveError``."""
    version = spark_version or _own_pyspark_version()
    cps = [jars.spark_kafka_classpath(pyspark_jars, spark_version)]
    for name in extra:
        try:
            cps.append(jars.deps_classpath(name, pyspark_jars, version, (versions or {}).get(name)))
        except jars.NoBuildForSpark as e:
            if str(e) not in _warned:  # once per process, not at every driver restart
                _warned.add(str(e))
                log.warning("{jars} leaves %s out: %s", name, e)
    return ",".join(str(j) for cp in cps for j in cp.jars)


def _own_pyspark_version() -> str:
    import pyspark  # lazy: heavy, and only a driver start needs it

    return pyspark.__version__


def driver_argv(pipeline: PipelineArgs, python: str | None = None, pyspark_jars: Path | None = None,
                spark_version: str | None = None, versions: dict[str, str] | None = None) -> list[str]:
    """The driver's command line: ``python -m onceproof.job`` with the pipeline's options (see
    ``onceproof/job.py --help``) and the connector's jars; or, for a user's pipeline
    (``pipeline.command``), that command with its placeholders filled (``backends/user_pipeline.py``).
    ``python`` (default: this interpreter), ``pyspark_jars`` (its ``pyspark/jars``) and ``spark_version``
    (its PySpark's) name another PySpark: a second runtime (:mod:`onceproof.backends.local.runtimes`) or
    the user's interpreter (``--pipeline-python``, :mod:`onceproof.backends.common.interpreter`);
    ``versions``: the ``deps/`` versions its packages pin (:func:`connector_jars`)."""
    python = python or sys.executable
    if pipeline.command:
        return PipelineCommand.parse(pipeline.command).argv(
            {"python": python, "bootstrap": pipeline.bootstrap, "input_topic": pipeline.input_topic,
             "output_topic": pipeline.output_topic, "checkpoint": str(pipeline.checkpoint),
             "master": pipeline.master, "jars": connector_jars(pyspark_jars, spark_version, pipeline.jars, versions),
             # its output's own placeholders (Sink.job_values): config refuses those of another output
             **dict(pipeline.output_values)})
    return [python, "-m", "onceproof.job", *pipeline.argv(), "--jars",
            connector_jars(pyspark_jars, spark_version, pipeline.jars, versions)]


def collect_executor_logs(control: Path, dest: Path, app_ids: set[str] | frozenset[str] = frozenset(),
                          pyspark_dirs: list[Path] | None = None) -> int:
    """Keep each incarnation's executor *logs* and drop the rest of its work directory.

    ``local-cluster`` workers write each application's executor directories under
    ``<pyspark>/work/<app-id>/<executor-id>/`` (the worker's default work dir is ``$SPARK_HOME/work``);
    they hold ``stdout``/``stderr`` and copies of every ``--jars`` jar (≈ 20 MB per executor). Only the
    logs belong in a run (``dest/<app-id>/<executor-id>/stderr``); the whole application directory is
    then removed, so nothing accumulates inside the virtualenv. The applications: those the bundled
    pipeline announced in ``control/driver.apps.jsonl``, and ``app_ids`` (seen on the executors' command
    lines, :attr:`DriverSupervisor.app_ids`). ``pyspark_dirs``: the ``pyspark`` package directories
    whose ``work/`` to look in (default: this interpreter's; a second runtime's workers write under its
    own). Returns the number of applications collected. Never raises for a missing or half-written
    directory.
    """
    apps = set(app_ids)  # and those the bundled pipeline announced
    try:
        for line in (control / "driver.apps.jsonl").read_text().splitlines():
            try:
                apps.add(json.loads(line)["app_id"])
            except (ValueError, KeyError, TypeError):
                continue
    except FileNotFoundError:
        pass
    works = [d / "work" for d in (pyspark_dirs or [jars.pyspark_jars_dir().parent])]
    n = 0
    for app in sorted(apps):
        src = next((w / app for w in works if (w / app).is_dir()), None)
        if src is None:
            continue
        for f in src.glob("*/*"):
            if f.is_file() and f.name in ("stdout", "stderr"):
                out = dest / app / f.parent.name / f.name
                out.parent.mkdir(parents=True, exist_ok=True)
                try:
                    shutil.copyfile(f, out)
                except OSError:
                    continue
        shutil.rmtree(src, ignore_errors=True)
        n += 1
    return n


def read_ready(control: Path) -> dict | None:
    """The current driver's ``driver.ready`` file (pid, query id), or ``None`` before the query starts."""
    try:
        return json.loads((control / "driver.ready").read_text())
    except (FileNotFoundError, ValueError):
        return None


def checkpoint_ready(checkpoint: Path, pid: int | None) -> dict | None:
    """Readiness of a pipeline without onceproof's hooks: a driver runs (``pid``) and its query has
    started, i.e. Spark wrote ``<checkpoint>/metadata`` (``{"id": <query id>}``, written by
    ``StreamExecution`` when ``writeStream.start()`` runs, before the first micro-batch). ``None`` before
    that. Returns ``{"pid", "query_id", "source": "checkpoint"}``."""
    if pid is None:
        return None
    try:
        meta = json.loads((checkpoint / "metadata").read_text().splitlines()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return {"pid": pid, "query_id": meta.get("id"), "source": "checkpoint"}
