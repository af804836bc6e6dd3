"""The Spark driver's and executors' class-data sharing archives (``backends/common/cds.py``): which
archive a driver of a given PySpark maps, and the training run that makes them.

The harness side (:func:`driver_env`, :func:`train_archives`) keys the archives by the PySpark's ``jars``
directory and version, which decide the class path ``spark-submit`` gives the driver and the workers give
the executors. The training run (:func:`main`, ``python -m onceproof.backends.local.spark_cds``) runs in
that PySpark's interpreter: a ``local-cluster[1,1,1024]`` session (one executor, so one dump) built by
the bundled pipeline's own ``onceproof.job.build_spark``, its warm-up micro-batch and a shuffle, then a
normal stop, at which both JVMs dump what they loaded. It reports the class path each JVM ran with, which
:func:`onceproof.backends.common.cds.promote` checks the archives against.

Which PySparks get archives: the harness's own (``onceproof deps``, which ``make setup`` calls) and each
cached runtime (``backends/local/runtimes.py``, trained by its interpreter when the runtime is first
ensured: about 37 s each on 2 cores, once per machine, since the runtimes' cache outlives checkouts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from onceproof.backends.common import cds, jars
from onceproof.pipeline.identity import SPARK_CDS_ENV

ENV = SPARK_CDS_ENV
"""The driver's environment variable naming its archives' JVM options (``pipeline/identity.py``)."""

KINDS = ("spark-driver", "spark-executor")
TRAIN_TIMEOUT_S = 300.0
"""The longest the training run may take, s (about 30 s on 2 cores)."""


def key(pyspark_dir: Path, pyspark_version: str) -> str:
    """What decides a PySpark's JVM class path and whether a JVM maps an archive made with it: its ``jars``
    directory (resolved), version, and the jars' sizes and times (:func:`cds.stamp`)."""
    jars_dir = os.path.realpath(pyspark_dir / "jars")
    return f"{jars_dir}\0{pyspark_version}\0{cds.stamp(Path(jars_dir).glob('*.jar'))}"


def driver_env(pyspark_dir: Path, pyspark_version: str) -> dict[str, str]:
    """``{ENV: ...}`` with the archives' options for a driver of that PySpark, ``{}`` when there is no
    archive (or ``ONCEPROOF_CDS=0``) or no ``java``."""
    opts = _options(pyspark_dir, pyspark_version)
    return {ENV: json.dumps(opts)} if any(opts.values()) else {}


def _options(pyspark_dir: Path, pyspark_version: str) -> dict[str, list[str]]:
    """``{"driver": [...], "executor": [...]}``: each archive's options for that PySpark (``[]`` without
    one), ``{}`` when there is no ``java``."""
    try:
        java = jars.java_binary()
    except jars.ResolveError:
        return {}
    k = key(pyspark_dir, pyspark_version)
    return {kind.removeprefix("spark-"): cds.options(kind, java, k) for kind in KINDS}


def user_job_options(pyspark_dir: Path, pyspark_version: str) -> list[str]:
    """The class-data sharing options for every JVM of a user's job (``--pipeline-cmd``) on that PySpark,
    which reach them through ``JDK_JAVA_OPTIONS`` (``pipeline/jvm.py``): the driver's archive, ``[]`` when
    there is none (another PySpark, ``ONCEPROOF_CDS=0``, no ``java``).

    One archive for all of them, since the job's ``SparkSession`` settings are the user's: its driver and
    its executors share the driver's class path and map it (measured on 2 cores, a quiet machine, PySpark
    4.3.0: a ``local-cluster[2,1,1024]`` session, a first job and a first SQL query 18.6 s → 12.0 / 10.6 s),
    while ``spark-submit``'s launcher JVM, on a class path of its own, cannot; the JVM's own ``cds`` log is
    turned off so that it ignores the archive without a word on the job's standard output, as a JVM with
    ``-Xshare:auto`` does for the bundled pipeline (``backends/common/cds.py``)."""
    opts = _options(pyspark_dir, pyspark_version).get("driver", [])
    return [*opts, "-Xlog:cds=off", "-Xlog:cds+dynamic=off"] if opts else []


def train_archives(python: str | None = None, pyspark_dir: Path | None = None,
                   pyspark_version: str | None = None) -> list[str]:
    """Make the missing Spark archives of a PySpark by running :func:`main` in its interpreter:
    ``python`` with its ``pyspark_dir`` and ``pyspark_version`` (a runtime, ``backends/local/runtimes.py``,
    which imports onceproof from the harness's environment), by default this interpreter and its PySpark
    (the one the bundled pipeline runs on). Returns a line per archive, ``[]`` when there is nothing to
    make. Raises ``RuntimeError`` (with the run's output) when the training run fails or times out."""
    if not cds.enabled():
        return []
    if python is None or pyspark_dir is None or pyspark_version is None:
        import pyspark  # lazy: heavy, and only this interpreter's version is asked

        python, pyspark_dir, pyspark_version = sys.executable, Path(pyspark.__file__).parent, pyspark.__version__
    java = jars.java_binary()
    k = key(pyspark_dir, pyspark_version)
    if not any(cds.missing(kind, java, k) for kind in KINDS):
        return []
    dumps = {kind: cds.dump_target(kind, java, k) for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="onceproof-cds-") as d:
        out = Path(d) / "classpaths.json"
        argv = [python, "-m", "onceproof.backends.local.spark_cds", "--driver-dump", str(dumps["spark-driver"]),
                "--executor-dump", str(dumps["spark-executor"]), "--out", str(out)]
        env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
        env.pop("SPARK_HOME", None)
        env.pop(ENV, None)
        try:
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S, cwd=d, env=env)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the Spark class-data sharing training run took over {TRAIN_TIMEOUT_S:.0f} s") \
                    from None
            if proc.returncode != 0 or not out.is_file():
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
                raise RuntimeError(f"the Spark class-data sharing training run failed "
                                   f"(exit {proc.returncode}):\n{tail}")
        except RuntimeError:
            for t in dumps.values():
                t.unlink(missing_ok=True)
            raise
        paths = json.loads(out.read_text())
    return [cds.promote(dumps[kind], kind, java, k, paths.get(kind.removeprefix("spark-"), ""))
            for kind in KINDS]


def _executor_classpath(driver_pid: int) -> str:
    """The ``-cp`` of the executor JVM below the driver (``local-cluster``'s workers live in the driver's
    JVM and launch the executors as its children); ``""`` when none is found."""
    import psutil

    for p in psutil.Process(driver_pid).children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if any("CoarseGrainedExecutorBackend" in a for a in cmd) and "-cp" in cmd:
            return cmd[cmd.index("-cp") + 1]
    return ""


def main(argv: list[str] | None = None) -> int:
    """The training run (in the PySpark whose archives are made); writes ``--out``: ``{"driver": class
    path, "executor": class path}``."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--driver-dump", required=True)
    ap.add_argument("--executor-dump", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from onceproof import job

    os.environ[ENV] = json.dumps({"driver": [f"-XX:ArchiveClassesAtExit={a.driver_dump}"],
                                  "executor": [f"-XX:ArchiveClassesAtExit={a.executor_dump}"]})
    args = argparse.Namespace(sink="cds-training", master="local-cluster[1,1,1024]", jars="")
    spark = job.build_spark(args, 2)
    spark.sparkContext.setLogLevel("WARN")
    job.warm_up(spark, spark.sparkContext.defaultParallelism)
    spark.range(100_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    jvm = spark.sparkContext._jvm
    paths = {"driver": jvm.java.lang.System.getProperty("java.class.path"),
             "executor": _executor_classpath(int(jvm.java.lang.ProcessHandle.current().pid()))}
    gateway = spark.sparkContext._gateway.proc  # the driver JVM's process (pyspark.java_gateway)
    spark.stop()  # the executor exits (and dumps) here
    gateway.stdin.close()  # the driver JVM exits on its stdin's end (PythonGatewayServer) and dumps
    gateway.wait(timeout=120)
    Path(a.out).write_text(json.dumps(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
