"""What a Spark cluster kept up across drivers would save a driver start (issue 42, item 2).

A driver of the bundled pipeline starts ``local-cluster[2,1,1024]``: its master and two workers run as
threads in the driver's JVM, and the workers launch one executor JVM each. On a standalone cluster kept up
(``spark://``), the master and workers are already there, but each application still gets executor JVMs
of its own (Spark's standalone mode: executors belong to one application), so only the in-process
master and worker start-up can be saved. This bench times that, one fresh driver process per sample:

* ``local-cluster``: ``SparkSession.builder.master("local-cluster[2,1,1024]").getOrCreate()`` then a
  two-partition job (both executors up and running tasks);
* ``standalone``: the same against a master and two workers (1 core, 1 GiB each) started once by this
  script with PySpark's own ``bin/spark-class`` and kept up across the samples.

Both with the pipeline's JVM options (``pipeline/jvm.py``) and without class-data sharing archives.
Prints and writes ``bench/spark_start.json``: per mode, the session and first-job seconds of each sample
and their medians. Usage: ``python bench/spark_start.py [--samples 3]`` (about 2 min on 2 cores). Needs
no Kafka; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from onceproof.pipeline import jvm

DRIVER = r"""
import sys, time, json
t0 = time.monotonic()
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("spark-start-bench")
         .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m").getOrCreate())
t1 = time.monotonic()
spark.sparkContext.parallelize(range(100), 2).map(lambda x: x * 2).count()
t2 = time.monotonic()
spark.stop()
print(json.dumps({"session_s": round(t1 - t0, 2), "first_job_s": round(t2 - t1, 2),
                  "to_first_job_s": round(t2 - t0, 2)}))
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    import pyspark

    return dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), PYSPARK_PYTHON=sys.executable,
                **{jvm.LAUNCHER_ENV: jvm.spark_java_options(os.environ)})


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:  # already gone
        pass


def _sample(master: str) -> dict:
    """One fresh driver process (its own process group: its JVM and a local-cluster's executors with it),
    killed as a group on a timeout (300 s) or an interrupt."""
    p = subprocess.Popen([sys.executable, "-c", DRIVER, master], env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            _killpg(p.pid, signal.SIGKILL)
            p.wait()
    if p.returncode != 0:
        raise RuntimeError(f"driver on {master} failed: {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


class Standalone:
    """A standalone master and ``workers`` workers on 127.0.0.1, each in a process group of its own, stopped by
    :meth:`stop` (SIGTERM, then SIGKILL after 10 s)."""

    def __init__(self, workers: int, work: Path):
        import pyspark

        spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        port = _port()
        self.url = f"spark://127.0.0.1:{port}"
        self.log = work / "master.log"
        self.procs: list[subprocess.Popen] = []
        self.files: list = []
        try:
            self._start(spark_class, port, workers, work)
        except BaseException:  # an interrupt or a failed start: nothing started stays up
            self.stop()
            raise

    def _start(self, spark_class: str, port: int, workers: int, work: Path) -> None:
        self.procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                        "127.0.0.1", "--port", str(port), "--webui-port", str(_port())],
                                       env=_env(), stdout=self._file(self.log), stderr=subprocess.STDOUT,
                                       start_new_session=True)]
        for i in range(workers):
            wdir = work / f"worker-{i}"
            wdir.mkdir()
            self.procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                 "--memory", "1g", "--webui-port", str(_port()), "--work-dir", str(wdir), self.url],
                env=_env(), stdout=self._file(work / f"worker-{i}.log"), stderr=subprocess.STDOUT,
                start_new_session=True))
        t0 = time.monotonic()
        while self.log.read_text().count("Registering worker") < workers:
            if time.monotonic() - t0 > 120 or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"the standalone cluster did not come up: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.up_s = round(time.monotonic() - t0, 2)

    def _file(self, path: Path):
        f = open(path, "w")  # noqa: SIM115 - closed by stop()
        self.files.append(f)
        return f

    def stop(self) -> None:
        """Stop the daemons (their process groups), then close their log files."""
        for p in self.procs:
            if p.poll() is None:
                _killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(p.pid, signal.SIGKILL)
                p.wait()
        for f in self.files:
            f.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=3, help="driver starts per mode (default 3)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("spark_start.json"))
    args = ap.parse_args()
    out: dict = {"samples": args.samples, "jvm_options": jvm.spark_java_options(os.environ)}
    local = "local-cluster[2,1,1024]"
    out["local-cluster"] = [_sample(local) for _ in range(args.samples)]
    with tempfile.TemporaryDirectory(prefix="spark-start-") as work:
        cluster = Standalone(2, Path(work))
        try:
            out["standalone_up_s"] = cluster.up_s
            out["standalone"] = [_sample(cluster.url) for _ in range(args.samples)]
        finally:
            cluster.stop()
    for mode in ("local-cluster", "standalone"):
        out[f"{mode}_median"] = {k: statistics.median(s[k] for s in out[mode]) for k in out[mode][0]}
        print(f"{mode:14} median: {out[f'{mode}_median']}  samples: {out[mode]}")
    print(f"standalone master and 2 workers up once in {out['standalone_up_s']} s")
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
