"""The JVM options of a pipeline's Spark JVMs (driver, and in ``local-cluster`` its master, workers and
executors): C1-only JIT and the serial GC, as the brokers use (``backends/local/kafka.py``). No pyspark
import: the harness reads it for a user's job, the bundled pipeline (``onceproof/job.py``) for its own.

Every driver start, and every first micro-batch after one, is JVM warm-up, which C2's compiler threads
and G1 make CPU-bound on a small machine. Measured on 2 cores:

* the bundled pipeline (``onceproof run --sink eos --nemesis kill-driver --time-limit 60 --seed 3``, two
  runs each, default JIT first): run wall time 155 / 141 s → 114 / 107 s, Spark start 25 / 21 s → 16 /
  15 s, first commit after the driver kill 48.5 / 49.3 s → 35.6 / 37.6 s, recovery 44 / 35 s → 14 / 10 s;
* a user's job (``tests/jobs/postgres_upsert_job.py`` under ``kill-driver-in-commit-window,kill-broker
  --seed 2``, one run each, its own JVM defaults first, then the options exported by hand): the test
  209 → 151 s, Spark start 25.6 → 17.5 s, the driver kill to the replayed batch's commit 105 → 68 s;
  through :func:`user_job_env`, the test 143 s.

Peak throughput of hot code can be lower with C1 only: ``ONCEPROOF_SPARK_JAVA_OPTS`` replaces the options,
and set to an empty string it restores the JVM's defaults (for a throughput benchmark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SPARK_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The default options (module docstring)."""
OVERRIDE_ENV = "ONCEPROOF_SPARK_JAVA_OPTS"
"""Replaces :data:`SPARK_JAVA_OPTS`; empty: the JVM's defaults."""
LAUNCHER_ENV = "JDK_JAVA_OPTIONS"
"""Read by the ``java`` launcher of JDK 9 and later and prepended to its command line (JEP 293's
companion, the ``java`` tool's documentation: "JDK_JAVA_OPTIONS"), so it reaches every JVM a job starts,
the executors its local-cluster workers launch included; ``JAVA_TOOL_OPTIONS`` would also reach ``jcmd``
and tools. The launcher notes it on stderr ("NOTE: Picked up JDK_JAVA_OPTIONS")."""


def spark_java_options(environ: Mapping[str, str]) -> str:
    """The options for a pipeline's Spark JVMs under ``environ`` (:data:`OVERRIDE_ENV` or the default);
    ``""`` for the JVM's defaults."""
    return environ.get(OVERRIDE_ENV, SPARK_JAVA_OPTS).strip()


def user_job_env(environ: Mapping[str, str], share: Sequence[str] = ()) -> dict[str, str]:
    """Variables that give a user's job (``--pipeline-cmd``) the same JVM options as the bundled pipeline,
    through :data:`LAUNCHER_ENV`, with ``share`` (the class-data sharing options of the job's PySpark,
    ``backends/local/spark_cds.user_job_options``) after them: ``{}`` when the user set that variable (their
    options are theirs) or there is no option. The options change only the JIT, the collector and where
    classes are read from, no semantics."""
    opts = " ".join([spark_java_options(environ), *share]).strip()
    if not opts or LAUNCHER_ENV in environ:
        return {}
    return {LAUNCHER_ENV: opts}
