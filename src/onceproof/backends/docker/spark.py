"""The pipeline on a Spark standalone cluster in containers: the Docker backend's
:class:`onceproof.backends.base.SparkApp`.

Containers (``onceproof/spark``, all on the run's network, all ``pid_mode=host``):

* ``spark-master`` – ``org.apache.spark.deploy.master.Master`` at ``spark://spark-master:7077``;
* ``spark-worker-1``, ``spark-worker-2`` – one core and 1 GiB each (the job asks 640 MiB per executor:
  one executor per worker, the shape of the local backend's ``local-cluster[2,1,1024]``);
* ``driver-<n>`` – the driver in client deploy mode, one container per incarnation, supervised by
  :class:`onceproof.backends.docker.driver.ContainerDriverSupervisor`.

Every Spark container bind-mounts the run directory (checkpoint, control dir, ``sink.jsonl``, logs) and
the repository (read-only, ``PYTHONPATH``) at their host paths, so the pipeline's paths mean the same
everywhere and its hooks work as on the local backend. The pipeline reaches Kafka through the brokers'
in-network ``APP`` listener (``backends/docker/layout.py``).

``pid_mode=host`` makes every pid a host pid: the driver's announcements (``driver.ready``, the commit-window
hook), a sink task's pid in ``sink.jsonl``, the executor JVMs. So the process-level methods shared with the
local backend (:class:`onceproof.backends.common.spark.SupervisedSpark`) apply: ``executor_of`` walks a task's
parents up to its executor JVM, ``kill_executor`` SIGKILLs that JVM (inside its worker container; the worker
reports it lost and the master starts a replacement), ``freeze_executor`` SIGSTOPs it and
``executor_unread_bytes`` reads its sockets in its container's network namespace (``/proc/<pid>/net``),
``driver_log`` / ``ready`` read the run's files.
Executors are the ``CoarseGrainedExecutorBackend`` processes ``docker top`` lists in the workers, for the
current application. A driver kill is ``docker kill`` of its container.

Logs: ``driver-<n>.log`` per incarnation; ``spark-master.log`` and ``spark-worker-<k>.log``; each
executor's ``stdout``/``stderr`` under ``executors/worker-<k>/<app-id>/<executor-id>/`` (the workers'
work directories are bind-mounted there; the jars Spark copies into them are deleted at stop).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import psutil

from onceproof.backends.base import BackendError, Executor, PipelineArgs
from onceproof.backends.common.spark import SupervisedSpark
from onceproof.backends.common.supervisor import EXECUTOR_MAIN, executor_id, read_ready
from onceproof.backends.docker.driver import ContainerDriverSupervisor
from onceproof.backends.docker.layout import MASTER_HOST, MASTER_PORT, WORKERS
from onceproof.backends.docker.site import DockerSite
from onceproof.checkout import IMPORT_ROOT

REPO = IMPORT_ROOT
"""Mounted read-only into every Spark container and put on its ``PYTHONPATH``: the directory that holds
this ``onceproof`` package (``src/`` in a checkout)."""
WORK_DIR = "/var/lib/spark/work"  # SPARK_WORKER_DIR in onceproof/spark


def shared_dirs(paths: list[Path]) -> list[Path]:
    """The fewest directories that contain every one of ``paths`` (each resolved): a path inside another
    is dropped. Sorted."""
    out: list[Path] = []
    for p in sorted({Path(p).resolve() for p in paths}, key=lambda p: len(p.parts)):
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return sorted(out)


def spark_volumes(pipeline: PipelineArgs, log_dir: Path, repo: Path = REPO) -> dict:
    """Bind mounts of every Spark container: the run's directories read-write and the repository
    read-only, each at its host path."""
    dirs = shared_dirs([pipeline.checkpoint, pipeline.control, pipeline.sink_log.parent, log_dir])
    vols = {str(d): {"bind": str(d), "mode": "rw"} for d in dirs}
    repo = repo.resolve()
    if not any(repo == d or d in repo.parents for d in dirs):
        vols[str(repo)] = {"bind": str(repo), "mode": "ro"}
    return vols


def pipeline_for_network(pipeline: PipelineArgs, bootstrap: str, master_url: str) -> PipelineArgs:
    """``pipeline`` as the in-network driver runs it: Kafka through the brokers' ``APP`` listener and the
    standalone master, unless the user named a master other than the default ``local-cluster[...]``
    (``local[2]`` then runs inside the driver's container)."""
    master = master_url if pipeline.master.startswith("local-cluster") else pipeline.master
    return dataclasses.replace(pipeline, bootstrap=bootstrap, master=master)


def executors_in(top: dict, app_id: str | None) -> list[int]:
    """Pids of ``app_id``'s executor JVMs among ``docker top`` output ``top`` (``{"Titles": [...],
    "Processes": [[...], ...]}``, with a ``PID`` and a ``CMD``/``COMMAND`` column; pids are host pids).
    No app id: none."""
    if not app_id or not top:
        return []
    titles = top.get("Titles") or []
    try:
        ipid = titles.index("PID")
        icmd = next(i for i, t in enumerate(titles) if t in ("CMD", "COMMAND"))
    except (ValueError, StopIteration):
        return []
    out = []
    for row in top.get("Processes") or []:
        cmd = row[icmd]
        if EXECUTOR_MAIN in cmd and f"--app-id {app_id}" in cmd:
            out.append(int(row[ipid]))
    return out


class DockerSpark(SupervisedSpark):
    """The supervised pipeline ``pipeline`` on a standalone cluster of ``image`` on ``site``'s network;
    logs in ``log_dir``. Nothing runs until :meth:`start`.

    Implements :class:`~onceproof.backends.base.SparkApp`, ``DriverPause``, ``ExecutorFaults`` and
    ``ExecutorPause`` (shared with the local backend; its freeze has not been run on Docker yet); not
    ``TaskKill`` (``zombie-task`` has not been verified on this backend) nor ``Runtimes`` (its driver runs
    the one PySpark of the ``onceproof/spark`` image; ``upgrade:pyspark`` is for the local backend).
    """

    def __init__(self, site: DockerSite, image: str, pipeline: PipelineArgs, network_bootstrap: str,
                 log_dir: Path, run_env: dict[str, str] | None = None):  # noqa: D107 - see the class
        self.site = site
        self.image = image
        self.pipeline = pipeline
        self.log_dir = log_dir
        self.executor_dir = log_dir / "executors"
        self.inner = pipeline_for_network(pipeline, network_bootstrap, site.layout.master_url)
        self.volumes = spark_volumes(pipeline, log_dir)
        self.env = {"PYTHONPATH": str(REPO.resolve()), "PYTHONUNBUFFERED": "1", **(run_env or {})}
        self.sup = ContainerDriverSupervisor(argv=self.inner.argv(), log_dir=log_dir, site=site, image=image,
                                             env=self.env, volumes=self.volumes)

    # ------------------------------------------------------------------ the cluster
    def _start_cluster(self, timeout_s: float = 120.0) -> None:
        lay = self.site.ensure_network()
        for d in (self.pipeline.checkpoint, self.pipeline.control, self.log_dir):
            Path(d).mkdir(parents=True, exist_ok=True)
        self.site.run("spark-master", self.image, ip=lay.master_ip, aliases=[MASTER_HOST], env=self.env,
                      command=["spark-class", "org.apache.spark.deploy.master.Master", "--host", MASTER_HOST,
                               "--port", str(MASTER_PORT), "--webui-port", "8080"],
                      volumes=self.volumes, pid_host=True, log_path=self.log_dir / "spark-master.log")
        self._wait_log("spark-master", "I have been elected leader", timeout_s)
        for k in range(1, WORKERS + 1):
            work = self.executor_dir / f"worker-{k}"
            work.mkdir(parents=True, exist_ok=True)
            host = lay.worker_host(k)
            self.site.run(host, self.image, ip=lay.worker_ip(k), aliases=[host], env=self.env,
                          command=["spark-class", "org.apache.spark.deploy.worker.Worker", "--cores", "1",
                                   "--memory", "1g", lay.master_url],
                          volumes={**self.volumes, str(work): {"bind": WORK_DIR, "mode": "rw"}}, pid_host=True,
                          log_path=self.log_dir / f"{host}.log")
        for k in range(1, WORKERS + 1):
            self._wait_log(lay.worker_host(k), "Successfully registered with master", timeout_s)

    def _wait_log(self, role: str, text: str, timeout_s: float) -> None:
        """Wait until container ``role`` logs ``text``. Raises ``BackendError`` with its log tail when it
        exits or ``timeout_s`` s pass."""
        deadline = time.monotonic() + timeout_s
        while True:
            c = self.site.get(role)
            logs = c.logs().decode(errors="replace") if c is not None else ""
            if text in logs:
                return
            if c is None or c.status not in ("running", "created") or time.monotonic() > deadline:
                why = "exited" if c is not None and c.status not in ("running", "created") else \
                    f"did not log {text!r} in {timeout_s:.0f}s"
                raise BackendError(f"Spark's {role} {why}:\n{logs[-1500:]}")
            time.sleep(0.5)

    # ------------------------------------------------------------------ SparkApp
    @property
    def starts_before_cluster(self) -> bool:
        """False: :meth:`start` blocks while the master and workers start, so started first it would not
        overlap the brokers' start but delay it."""
        return False

    def start(self) -> None:
        """Start the master and the workers (waiting until both workers registered, ≤ 120 s), then the
        supervised driver; returns without waiting for the query.

        Raises: ``BackendError`` when the master or a worker does not come up (its log included).
        """
        self._start_cluster()
        self.sup.start()

    def stop(self) -> None:
        """Stop the driver, then the master and workers (their logs saved); keep the executors' logs and
        delete the jars Spark copied next to them."""
        try:
            self.sup.stop()
        finally:
            self._remove_cluster()
            _prune_work(self.executor_dir)

    def kill_now(self) -> None:
        self.sup.kill_now()
        self._remove_cluster()

    def _remove_cluster(self) -> None:
        lay = self.site.layout
        for role in [*(lay.worker_host(k) for k in range(1, WORKERS + 1)), "spark-master"]:
            c = self.site.get(role)
            if c is not None:
                self.site.remove(c)

    def kill_driver(self, pid: int) -> bool:
        """``docker kill`` the driver container whose main process is ``pid``; True when ``pid`` is gone.
        The supervisor starts the next incarnation."""
        return self.sup.kill(pid)

    def freeze_driver(self, pid: int) -> bool:
        """``docker pause`` the driver container whose main process is ``pid`` (the cgroup freezer)."""
        c = self.sup.container
        if c is None or self.sup.pid != pid:
            return False
        try:
            c.pause()
            return True
        except Exception:  # noqa: BLE001 - docker.errors.APIError: the container is gone or not running
            return False

    def thaw_driver(self, pid: int) -> None:
        c = self.sup.container
        if c is not None:
            try:
                c.unpause()
            except Exception:  # noqa: BLE001 - docker.errors.APIError: gone, or not paused
                pass

    def executors(self) -> list[Executor]:
        """The current application's executor JVMs in the worker containers (``docker top``; host pids)."""
        ready = read_ready(self.pipeline.control)
        app = ready.get("app_id") if ready and ready.get("pid") == self.sup.pid else None
        out = []
        for k in range(1, WORKERS + 1):
            c = self.site.get(self.site.layout.worker_host(k))
            if c is None or c.status != "running":
                continue
            try:
                pids = executors_in(c.top(ps_args="-eo pid,args"), app)
            except Exception:  # noqa: BLE001 - the worker is going away
                continue
            for pid in pids:
                try:
                    p = psutil.Process(pid)
                    out.append(Executor(executor_id(p), pid, p.create_time()))
                except psutil.Error:
                    continue
        return out

    def log_files(self) -> list[Path]:
        """Driver logs, the master's and workers' logs, and every executor's ``stdout``/``stderr``."""
        own = [self.log_dir / "spark-master.log"] + [self.log_dir / f"{self.site.layout.worker_host(k)}.log"
                                                     for k in range(1, WORKERS + 1)]
        return (sorted(self.log_dir.glob("driver-*.log")) + [p for p in own if p.exists()]
                + sorted(self.executor_dir.glob("worker-*/*/*/std*")))


def _prune_work(executor_dir: Path) -> None:
    """Keep each executor's ``stdout``/``stderr`` under ``executor_dir/worker-<k>/<app>/<id>/``; delete
    everything else Spark put there (copies of the application's jars and files)."""
    for f in executor_dir.glob("worker-*/*/*/*"):
        if f.name in ("stdout", "stderr"):
            continue
        if f.is_dir():
            shutil.rmtree(f, ignore_errors=True)
        else:
            f.unlink(missing_ok=True)

