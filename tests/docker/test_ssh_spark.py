"""Spark's standalone cluster installed and run over SSH (``backends/ssh/spark.py``) on ``onceproof/node``
containers that have Java and Python and nothing else: the driver's PySpark shipped as a site of
unpacked wheels, a master and two workers started through ``onceproof-node.py``, and a PySpark job run on
the driver node whose tasks land on both workers' executors.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from onceproof.backends.ssh import inventory
from onceproof.backends.ssh.spark import SshSparkCluster
from onceproof.backends.ssh.transport import SshHub
from tests.docker.ssh_nodes import ssh_nodes

pytestmark = [pytest.mark.docker, pytest.mark.extended]

ROLES = (["broker"], ["spark-master", "spark-worker", "driver"], ["spark-worker"])
JOB = """
import json, socket
from pyspark.sql import SparkSession
s = (SparkSession.builder.master({master!r}).appName("onceproof-ssh-smoke")
     .config("spark.executor.memory", "512m").config("spark.cores.max", "2").getOrCreate())
total = s.range(1000).selectExpr("sum(id) AS t").collect()[0]["t"]
hosts = sorted(set(s.sparkContext.parallelize(range(64), 8).map(lambda _: socket.gethostname()).collect()))
print(json.dumps({{"total": total, "hosts": hosts}}), flush=True)
s.stop()
"""


def test_a_standalone_cluster_over_ssh_runs_a_pyspark_job_on_both_workers(docker_engine, docker_images, tmp_path):
    with ssh_nodes(docker_engine.client, docker_images["node"].tag, tmp_path / "nodes", count=3, roles=ROLES) as n:
        inv = inventory.load(n.nodes_toml)
        with SshHub(inv) as hub:
            spark = SshSparkCluster(inv, hub, uuid.uuid4().hex[:12], tmp_path / "spark")
            t0 = time.monotonic()
            try:
                spark.up(timeout_s=180)
                up_s = time.monotonic() - t0
                st = spark.status()
                assert sorted(w["host"] for w in st["workers"] if w["state"] == "ALIVE") == \
                    sorted([n.ips["n2"], n.ips["n3"]])
                driver = spark.helpers["n2"]
                out = driver.run_dir / "job.out"
                driver.remote.run(["sh", "-c", f'cat > "{driver.run_dir}/job.py"'],
                                  stdin=JOB.format(master=spark.master_url), root=True).check()
                driver.start("driver-1", ["python3", str(driver.run_dir / "job.py")], log=out, env=spark.env())
                deadline = time.monotonic() + 240
                while driver.status("driver-1")["state"] != "gone" and time.monotonic() < deadline:
                    time.sleep(1)
                text = driver.remote.run(["cat", str(out)]).stdout
                st = driver.status("driver-1")
                warnings = "\n".join(ln for ln in text.splitlines() if "WARN" in ln or "ERROR" in ln)
                assert st["exit"] == {"code": 0, "time": st["exit"]["time"]}, warnings[-4000:]
                result = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
                assert result == {"total": 499500, "hosts": ["n2", "n3"]}, text[-2000:]
            finally:
                spark.down()
            assert {p.parent.name for p in spark.log_dir.glob("*/*.log")} >= {"n2", "n3"}
            # a second install uploads nothing
            assert SshSparkCluster(inv, hub, uuid.uuid4().hex[:12], tmp_path / "again").install() == \
                {"n2": False, "n3": False}
        print(f"Spark master + 2 workers over SSH up in {up_s:.1f} s (site shipped and unpacked)")
