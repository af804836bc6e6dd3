"""Spark's standalone cluster on the Spark nodes of ``nodes.toml``, installed and supervised over SSH:
the master on the ``spark-master`` node, one worker per ``spark-worker`` node (Spark's "Spark Standalone
Mode" page: ``org.apache.spark.deploy.master.Master`` and ``...worker.Worker spark://HOST:PORT``).

What runs there is the driver's own PySpark: the ``site`` dist (``backends/ssh/install.py``: the wheels
of the spark image unpacked, ``SPARK_HOME=<site>/pyspark``) and the Kafka connector jars, at the same
paths on every Spark node, so whatever the driver forwards to executors is valid on each of them. The
node needs only Java 17+ and a ``python3`` of the harness's minor version.

Evidence for the nemeses: the master's JSON status page (``http://<master>:8080/json/``) lists the workers
and the running applications; each process is an ``onceproof-node.py`` name (``spark-master``,
``spark-worker-<k>``) with a pid file checked against its start ticks.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import time
import urllib.request
from pathlib import Path, PurePosixPath

from onceproof.backends.base import BackendError
from onceproof.backends.ssh import install
from onceproof.backends.ssh.inventory import Inventory, Node
from onceproof.backends.ssh.node import NodeHelper
from onceproof.backends.ssh.remote import RemoteError
from onceproof.backends.ssh.transport import SshHub

MASTER_PORT = 7077
"""The master's RPC port (Spark's default)."""
MASTER_UI_PORT = 8080
"""The master's web UI, whose ``/json/`` the harness reads (Spark's default)."""
WORKER_CORES = 1
WORKER_MEMORY = "1g"
"""Each worker offers one core and 1 GiB, the local backend's ``local-cluster[2,1,1024]`` shape."""


class SparkNodesError(BackendError):
    """The Spark nodes could not be installed or started; the message names the node and the log."""


class SshSparkCluster:
    """The standalone master and workers of ``inv`` for run ``run_id``, through ``hub``.

    Attributes after :meth:`install`: ``site`` and ``connector``, the dists' directories on the nodes
    (the same path on each).
    """

    def __init__(self, inv: Inventory, hub: SshHub, run_id: str, local_dir: Path, log_dir: Path | None = None):
        self.inv, self.hub, self.run_id, self.local_dir = inv, hub, run_id, local_dir
        self._log_dir = log_dir
        become = inv.ssh.become == "sudo"
        names = dict.fromkeys(n.name for n in (*inv.with_role("spark-master"), *inv.with_role("spark-worker"),
                                                *inv.with_role("driver")))
        self.helpers = {name: NodeHelper(hub.remote(name), inv.root, run_id,
                                         root_commands=become or inv.node(name).user == "root") for name in names}
        self.master: Node = inv.with_role("spark-master")[0]
        self.workers: list[Node] = inv.with_role("spark-worker")
        self.site: PurePosixPath | None = None
        self.connector: PurePosixPath | None = None
        self.source: PurePosixPath | None = None

    @property
    def master_url(self) -> str:
        """``spark://<master address>:7077``."""
        return f"spark://{self.master.address}:{MASTER_PORT}"

    @property
    def log_dir(self) -> Path:
        return self._log_dir or self.local_dir / "logs"

    def env(self) -> dict[str, str]:
        """The environment of every Spark process and of the driver: onceproof's source and the shipped
        PySpark on the ``PYTHONPATH``, PySpark as ``SPARK_HOME``, ``python3`` for Python workers."""
        assert self.site is not None
        path = f"{self.source}:{self.site}" if self.source is not None else str(self.site)
        return {"SPARK_HOME": f"{self.site}/pyspark", "PYTHONPATH": path, "PYSPARK_PYTHON": "python3",
                "SPARK_DAEMON_MEMORY": "512m",
                "PYSPARK_DRIVER_PYTHON": "python3", "SPARK_LOCAL_DIRS": str(self.helpers[self.master.name].run_dir
                                                                            / "spark-local")}

    def install(self) -> dict[str, bool]:
        """Ship the helper, the site and the connector jars to every Spark node, in parallel;
        ``{node: whether the site was uploaded now}``. Raises: :class:`SparkNodesError`."""
        site, conn, src = install.site_dist(), install.spark_kafka_dist(), install.source_dist()

        def one(name: str) -> bool:
            h = self.helpers[name]
            h.install()
            path, uploaded = install.ensure(h.remote, self.inv.root, site, timeout_s=900)
            self.site = path / "site"
            cpath, _ = install.ensure(h.remote, self.inv.root, conn)
            self.connector = cpath / "jars"
            spath, _ = install.ensure(h.remote, self.inv.root, src)
            self.source = spath / "src"
            return uploaded
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.helpers)) as ex:
                return dict(zip(self.helpers, ex.map(one, self.helpers), strict=True))
        except RemoteError as e:
            raise SparkNodesError(f"installing Spark on the Spark nodes failed: {e}") from None

    def _java(self, main: list[str]) -> list[str]:
        """``spark-class <main> ...``: Spark's own launcher script (it sets ``SPARK_SCALA_VERSION`` through
        ``load-spark-env.sh``, which the worker's executor launcher needs, and then ``exec``s the JVM, so
        the pid is the JVM's)."""
        return [f"{self.site}/pyspark/bin/spark-class", *main]

    def up(self, timeout_s: float = 120.0) -> None:
        """Install, start the master and every worker, and wait until the master lists every worker ALIVE.
        Raises: :class:`SparkNodesError`."""
        self.local_dir.mkdir(parents=True, exist_ok=True)
        self.install()
        m = self.helpers[self.master.name]
        m.start("spark-master", self._java(["org.apache.spark.deploy.master.Master", "--host", self.master.address,
                                            "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)]),
                log=m.run_dir / "spark" / "spark-master.log", env=self.env())
        for k, w in enumerate(self.workers, 1):
            h = self.helpers[w.name]
            work = h.run_dir / "spark" / "work"
            h.start(f"spark-worker-{k}", self._java([
                "org.apache.spark.deploy.worker.Worker", "--host", w.address, "--cores", str(WORKER_CORES),
                "--memory", WORKER_MEMORY, "--work-dir", str(work), self.master_url]),
                log=h.run_dir / "spark" / f"spark-worker-{k}.log", env=self.env())
        self.wait_workers(len(self.workers), timeout_s)

    def status(self) -> dict:
        """The master's ``/json/`` status (workers, active apps). Raises: ``OSError``/``ValueError``."""
        url = f"http://{self.master.address}:{MASTER_UI_PORT}/json/"
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read().decode())

    def wait_workers(self, n: int, timeout_s: float) -> dict:
        """Block until the master lists ``n`` ALIVE workers; its status. Raises: :class:`SparkNodesError`."""
        deadline = time.monotonic() + timeout_s
        last: object = "no answer"
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                st = self.status()
                alive = [w for w in st.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= n:
                    return st
                last = f"{len(alive)} of {n} workers alive"
            time.sleep(1.0)
        raise SparkNodesError(f"the Spark master at {self.master_url} did not list {n} workers within "
                              f"{timeout_s:.0f} s ({last}); see {self.log_dir}/<node>/ after collection")

    def down(self) -> None:
        """SIGKILL the master and the workers (and, through their groups, their executors); collect logs."""
        for h in self.helpers.values():
            for proc in ["spark-master", *[f"spark-worker-{k}" for k in range(1, len(self.workers) + 1)]]:
                with contextlib.suppress(RemoteError):
                    h.signal(proc, "KILL")
        self.collect_logs()

    def collect_logs(self) -> list[Path]:
        """Copy the master's and the workers' logs into ``log_dir/<node>/``."""
        out = []
        for name, h in self.helpers.items():
            listing = h.remote.run(["sh", "-c", f'ls "{h.run_dir}/spark"/*.log 2>/dev/null'], timeout_s=30)
            for f in listing.stdout.split():
                dest = self.log_dir / name / PurePosixPath(f).name
                dest.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(RemoteError):
                    h.remote.get(PurePosixPath(f), dest)
                    out.append(dest)
        return out
