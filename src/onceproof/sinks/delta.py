"""Delta Lake outputs, each read at the table's latest committed version through its ``_delta_log``
(``onceproof.sinks.delta_table``, delta-rs):

* the bundled sinks, written through Delta's Spark connector (``onceproof.pipeline.delta_sink``):
  ``delta`` (Delta's streaming sink) and ``delta-foreachbatch`` (``txnAppId``/``txnVersion``), expected
  valid, and the ``delta-no-txn`` mutant, expected invalid. Delta 4.4.0 supports Spark up to 4.2, so they
  run on the PySpark :data:`RUNTIME` runtime, which the backend builds once and caches;
* ``--pipeline-cmd ... --output delta``: the table a user's job writes in ``{output_path}``
  (``sinks/user_outputs.py``).
"""

from __future__ import annotations

import dataclasses

from onceproof.pipeline import delta_sink
from onceproof.sinks.base import DRIVER_HOOKS, JobContext, Sink, path_values

OUTPUT_DIR = "delta-table"
"""The table's directory in the run directory (``results/<test>/<stamp>/delta-table``)."""
RUNTIME = "4.2.0"
"""The PySpark the bundled Delta sinks run on: delta-spark 4.4.0 requires ``pyspark<=4.2.0`` and builds
``delta-spark_4.2_2.13`` (``onceproof/deps/delta/pom.xml``)."""


def report_line(summary: dict) -> str:
    """One line on the output (``result["delta"]``): the version read, rows, files, orphans, txn actions."""
    latest = ", ".join(f"{a}={v}" for a, v in sorted((summary.get("txn_latest") or {}).items())) or "none"
    return (f"delta table read at version {summary.get('version')}: {summary.get('rows')} rows in "
            f"{summary.get('files')} files, orphan-files={summary.get('orphan_files')}; "
            f"{summary.get('txn_count')} txn actions (latest per appId: {latest})")


def _path(job: JobContext) -> str:
    if not job.args.file_sink_path:
        raise SystemExit(f"--sink {job.sink.name} needs --file-sink-path (the table's directory)")
    return job.args.file_sink_path


def write_streaming(df, job: JobContext):
    """The ``delta`` :class:`~onceproof.sinks.base.Writer`: Delta's streaming sink. Raises ``SystemExit``
    without ``--file-sink-path``."""
    a = job.args
    return delta_sink.streaming(df, path=_path(job), checkpoint=a.checkpoint, trigger_ms=a.trigger_ms,
                                name=job.query_name)


def write_idempotent(df, job: JobContext):
    """The ``delta-foreachbatch`` Writer: appends with ``txnAppId`` = the run's sink id, ``txnVersion`` =
    the batch id (raises as :func:`write_streaming`)."""
    return job.foreach_batch(df, delta_sink.foreach_batch(_path(job), job.sink_id, job.control, job.event_log()))


def write_without_txn(df, job: JobContext):
    """The ``delta-no-txn`` mutant's Writer: the same appends without the txn options."""
    return job.foreach_batch(df, delta_sink.foreach_batch(_path(job), None, job.control, job.event_log()))


_TABLE = dict(reader="onceproof.sinks.delta_table:read_output", output_dir=OUTPUT_DIR,
              output_modes=frozenset({"append"}), result_key="delta", report_line=report_line,
              committed_end="onceproof.sinks.delta_table:DeltaLogEnds")
_BUNDLED = dict(spark_conf=delta_sink.SPARK_CONF, spark_runtime=RUNTIME, jars=("delta",), **_TABLE)

DELTA = Sink("delta", "Delta Lake's streaming sink: one Delta commit per micro-batch with SetTransaction(queryId, "
                      "batchId) (pipeline/delta_sink.py)", frozenset(), "valid", writer=write_streaming,
             label="Delta's streaming sink", **_BUNDLED)

DELTA_FOREACHBATCH = Sink("delta-foreachbatch", "Delta appends in foreachBatch with txnAppId/txnVersion (idempotent "
                                                "writes)", frozenset({DRIVER_HOOKS}), "valid",
                          writer=write_idempotent, label="the Delta foreachBatch sink", **_BUNDLED)

DELTA_NO_TXN = dataclasses.replace(
    DELTA_FOREACHBATCH, name="delta-no-txn", summary="a mutant: Delta appends in foreachBatch without "
                                                     "txnAppId/txnVersion", expect="invalid",
    writer=write_without_txn, label="the delta-no-txn mutant", targeted_by="commit", mutant=True)

USER_TABLE = Sink("delta", "your job's Delta table", frozenset(), "valid", writer=None,
                  label="your job's Delta table", jars=("delta",), job_values=path_values, **_TABLE)
"""``--pipeline-cmd ... --output delta``: the Delta table a user's job writes in ``{output_path}``. Its
``{jars}`` carry Delta's Spark connector built for the job's Spark line (``deps/delta/pom.xml``,
``jars.deps_classpath``), at the version of the job's own delta-spark package when it has one."""
