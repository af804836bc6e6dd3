"""Apache Iceberg outputs, each read at the table's current snapshot with pyiceberg
(``onceproof.sinks.iceberg_table``):

* the bundled sinks, written through Iceberg's Spark runtime (``onceproof.pipeline.iceberg_sink``):
  ``iceberg`` (Iceberg's streaming write) and ``iceberg-foreachbatch`` (a batch-id snapshot property
  checked before each append), expected valid, and the ``iceberg-no-idempotence`` mutant, expected
  invalid. Iceberg builds its Spark runtime for Spark 3.5, 4.0 and 4.1 only (``deps/iceberg/pom.xml``),
  so they run on the PySpark :data:`RUNTIME` runtime, which the backend builds once and caches;
* ``--pipeline-cmd ... --output iceberg``: the table ``{output_table}`` a user's job writes with the
  catalog ``{iceberg_conf}`` defines (``sinks/user_outputs.py``).

The catalog is a Hadoop (file-system) catalog whose warehouse is the run's :data:`OUTPUT_DIR`: it needs no
service, lives and dies with the run directory, and commits by an atomic rename on a local file system
(``pipeline/iceberg_sink.catalog_conf``).
"""

from __future__ import annotations

import dataclasses
import json

from onceproof.pipeline import iceberg_sink
from onceproof.sinks.base import DRIVER_HOOKS, JobContext, JobPlace, Sink

OUTPUT_DIR = "iceberg-warehouse"
"""The catalog's warehouse in the run directory (``results/<test>/<stamp>/iceberg-warehouse``)."""
RUNTIME = "4.1.4"
"""The PySpark the bundled Iceberg sinks run on: the newest 4.1 release, the newest Spark line Iceberg
1.12.0 builds ``iceberg-spark-runtime-4.1_2.13`` for."""


def report_line(summary: dict) -> str:
    """One line on the output (``result["iceberg"]``): the snapshot read, rows, files, orphans, and the
    latest snapshot's streaming epoch or batch property."""
    last = (summary.get("snapshot_summaries") or [{}])[-1]
    marker = (f"epoch {last['epoch_id']} of query {last.get('query_id')}" if "epoch_id" in last else
              f"batch {last['batch_id']} of {last.get('sink_id')}" if "batch_id" in last else "no batch marker")
    return (f"iceberg table read at snapshot {summary.get('snapshot_id')} ({summary.get('metadata')}, "
            f"{summary.get('snapshots')} snapshots): {summary.get('rows')} rows in {summary.get('files')} files, "
            f"orphan-files={summary.get('orphan_files')}; latest snapshot: {marker}")


def report_rows(summary: dict) -> tuple[str, list[dict]]:
    """The report's table of the snapshots read (the latest ``iceberg_table.SHOWN``), one row each: id,
    sequence number, operation, added records, and the streaming query and epoch or the batch property."""
    shown = summary.get("snapshot_summaries") or []
    title = (f"Iceberg snapshots (the latest {len(shown)} of {summary.get('snapshots')}; current "
             f"{summary.get('snapshot_id')}, {summary.get('metadata')})")
    cols = ("snapshot_id", "sequence_number", "operation", "added_records", "total_records", "query_id", "epoch_id",
            "sink_id", "batch_id")
    return title, [{c: s[c] for c in cols if c in s} for s in shown]


def job_values(place: JobPlace) -> dict[str, str]:
    """The placeholders a user's ``--output iceberg`` job gets: ``iceberg_conf`` (the catalog's Spark
    settings as a JSON object, ``iceberg_sink.catalog_conf`` of the warehouse, ``place.directory``) and
    ``output_table`` (``<catalog>.<namespace>.<table>``)."""
    return {"iceberg_conf": json.dumps(iceberg_sink.catalog_conf(str(place.directory or ""))),
            "output_table": iceberg_sink.TABLE}


def _warehouse(job: JobContext) -> str:
    if not job.args.file_sink_path:
        raise SystemExit(f"--sink {job.sink.name} needs --file-sink-path (the catalog's warehouse)")
    return job.args.file_sink_path


def write_streaming(df, job: JobContext):
    """The ``iceberg`` :class:`~onceproof.sinks.base.Writer`: Iceberg's streaming write. Raises
    ``SystemExit`` without ``--file-sink-path``."""
    a = job.args
    return iceberg_sink.streaming(df, warehouse=_warehouse(job), checkpoint=a.checkpoint, trigger_ms=a.trigger_ms,
                                  name=job.query_name)


def _appends(df, job: JobContext, idempotent: bool):
    return job.foreach_batch(df, iceberg_sink.foreach_batch(df.sparkSession, _warehouse(job), job.sink_id, idempotent,
                                                            job.control, job.event_log()))


def write_idempotent(df, job: JobContext):
    """The ``iceberg-foreachbatch`` Writer: appends whose snapshot carries the run's sink id and the batch
    id, skipping a batch a snapshot already carries (raises as :func:`write_streaming`)."""
    return _appends(df, job, True)


def write_without_check(df, job: JobContext):
    """The ``iceberg-no-idempotence`` mutant's Writer: the same appends, never checked."""
    return _appends(df, job, False)


_TABLE = dict(reader="onceproof.sinks.iceberg_table:read_output", output_dir=OUTPUT_DIR,
              output_modes=frozenset({"append"}), result_key="iceberg", report_line=report_line,
              report_rows=report_rows,
              committed_end="onceproof.sinks.iceberg_table:MetadataEnds", jars=("iceberg",))
_BUNDLED = dict(spark_conf=iceberg_sink.SPARK_CONF, spark_runtime=RUNTIME, **_TABLE)

ICEBERG = Sink("iceberg", "Iceberg's streaming write: one snapshot per micro-batch carrying the query id and "
                          "epoch id (pipeline/iceberg_sink.py)", frozenset(), "valid", writer=write_streaming,
               label="Iceberg's streaming write", **_BUNDLED)

ICEBERG_FOREACHBATCH = Sink("iceberg-foreachbatch", "Iceberg appends in foreachBatch, skipping a batch id a "
                                                    "snapshot's summary already carries", frozenset({DRIVER_HOOKS}),
                            "valid", writer=write_idempotent, label="the Iceberg foreachBatch sink", **_BUNDLED)

ICEBERG_NO_IDEMPOTENCE = dataclasses.replace(
    ICEBERG_FOREACHBATCH, name="iceberg-no-idempotence",
    summary="a mutant: Iceberg appends in foreachBatch without checking for the batch's snapshot",
    expect="invalid", writer=write_without_check, label="the iceberg-no-idempotence mutant", targeted_by="commit",
    mutant=True)

USER_TABLE = Sink("iceberg", "your job's Iceberg table", frozenset(), "valid", writer=None,
                  label="your job's Iceberg table", job_values=job_values, **_TABLE)
"""``--pipeline-cmd ... --output iceberg``: the table ``{output_table}`` a user's job writes in the catalog
``{iceberg_conf}`` defines. Its ``{jars}`` carry Iceberg's Spark runtime built for the job's Spark line
(``deps/iceberg/pom.xml``, ``jars.deps_classpath``)."""
