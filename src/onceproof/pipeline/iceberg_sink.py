"""``--sink iceberg``, ``iceberg-foreachbatch`` and the ``iceberg-no-idempotence`` mutant: the keyed
workload's rows (:mod:`onceproof.pipeline.keyed_columns`) in the Apache Iceberg table :data:`TABLE` of a
Hadoop (file-system) catalog whose warehouse is ``--file-sink-path``, through Iceberg's Spark runtime
(``org.apache.iceberg:iceberg-spark-runtime``, ``onceproof/deps/iceberg/pom.xml``).

* :func:`streaming` (``iceberg``, expected valid): Iceberg's streaming write,
  ``writeStream.format("iceberg")``. Each micro-batch is one snapshot whose summary carries
  ``spark.sql.streaming.queryId`` and ``spark.sql.streaming.epochId`` (the batch id); a replayed batch whose
  epoch the table already holds for that query is skipped (Iceberg's ``SparkWrite.StreamingAppend``,
  ``findLastCommittedEpochId``). No hook: the commit-window kill watches the table's metadata files.
* :func:`foreach_batch` (``iceberg-foreachbatch``, expected valid): ``foreachBatch`` appending with two
  snapshot properties, :data:`SINK_PROPERTY` (the run's sink id, stable across driver restarts) and
  :data:`BATCH_PROPERTY` (the batch id), written through Iceberg's ``snapshot-property.<key>`` write option
  (iceberg.apache.org/docs/latest/spark-configuration, "Write options"). Before each append it looks for a
  snapshot carrying both in the table's ``snapshots`` metadata table, and skips the batch when one does.
* ``iceberg-no-idempotence`` (a mutant expected invalid): the same append without the check, so a batch
  replayed after its snapshot and before Spark's ``commits/N`` is appended again.

The foreachBatch writers call the driver's after-commit hook
(``onceproof.pipeline.hooks.ControlDir.after_sink_commit``) once the batch's snapshot is committed, before
Spark writes ``commits/N``: ``kill-driver-in-commit-window`` kills there.
"""

from __future__ import annotations

from onceproof.pipeline import hooks, keyed_columns

CATALOG = "onceproof"
"""The Spark catalog name the harness defines (:func:`catalog_conf`)."""
NAMESPACE = "db"
TABLE_NAME = "output"
TABLE = f"{CATALOG}.{NAMESPACE}.{TABLE_NAME}"
"""The table the bundled sinks write, and a user's job's ``{output_table}``: ``<catalog>.<namespace>.<table>``."""
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
"""Iceberg's SQL extensions (``MERGE INTO``, ``CALL``): iceberg.apache.org/docs/latest/spark-configuration."""
SPARK_CONF = {"spark.sql.extensions": EXTENSIONS}
"""The session-wide settings; the catalog's own are set at run time (:func:`use_catalog`), for its
warehouse is the run's directory."""
SINK_PROPERTY = "onceproof.sink-id"
BATCH_PROPERTY = "onceproof.batch-id"
"""The snapshot summary properties ``iceberg-foreachbatch`` writes and checks."""
SCHEMA = "key STRING, seq BIGINT, in_partition BIGINT, in_offset BIGINT, in_ts BIGINT"
""":data:`onceproof.pipeline.keyed_columns.COLUMNS` as the table's columns."""


def catalog_conf(warehouse: str) -> dict[str, str]:
    """The Spark settings that define catalog :data:`CATALOG`: Iceberg's ``SparkCatalog`` of type
    ``hadoop`` (a file-system catalog: each commit is the atomic rename of ``metadata/v<N>.metadata.json``,
    no server) whose warehouse is ``warehouse`` (a directory path), and the SQL extensions. A user's job
    gets it as ``{iceberg_conf}`` (JSON). Source: iceberg.apache.org/docs/latest/spark-configuration,
    "Catalog configuration"."""
    return {"spark.sql.extensions": EXTENSIONS,
            f"spark.sql.catalog.{CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{CATALOG}.type": "hadoop",
            f"spark.sql.catalog.{CATALOG}.warehouse": warehouse}


def use_catalog(spark, warehouse: str) -> None:
    """Define catalog :data:`CATALOG` on ``spark`` (catalog settings are read when the catalog is first
    used, so they may be set after the session starts) and create :data:`TABLE` unless it exists."""
    for k, v in catalog_conf(warehouse).items():
        if k != "spark.sql.extensions":  # a static setting: SPARK_CONF gave it when the session was built
            spark.conf.set(k, v)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {TABLE} ({SCHEMA}) USING iceberg")


def streaming(df, *, warehouse: str, checkpoint: str, trigger_ms: int, name: str):
    """Start Iceberg's streaming write into :data:`TABLE` in ``warehouse``; returns the ``StreamingQuery``."""
    use_catalog(df.sparkSession, warehouse)
    return (keyed_columns.rows_of(df).writeStream.format("iceberg").outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .queryName(name).toTable(TABLE))


def committed(spark, sink_id: str, batch_id: int) -> bool:
    """Whether a snapshot of :data:`TABLE` carries ``sink_id`` and ``batch_id`` in its summary (the
    ``snapshots`` metadata table, read at the table's current metadata)."""
    spark.sql(f"REFRESH TABLE {TABLE}")
    found = spark.sql(f"SELECT 1 FROM {TABLE}.snapshots WHERE summary['{SINK_PROPERTY}'] = '{sink_id}' "
                      f"AND summary['{BATCH_PROPERTY}'] = '{batch_id}' LIMIT 1")
    return bool(found.take(1))


def foreach_batch(spark, warehouse: str, sink_id: str, idempotent: bool, control: hooks.ControlDir, log):
    """The ``foreachBatch`` body appending each micro-batch to :data:`TABLE`, its snapshot carrying
    ``sink_id`` and the batch id; when ``idempotent`` (``iceberg-foreachbatch``) a batch a snapshot already
    carries is skipped, else (``iceberg-no-idempotence``) appended again. ``log(event, **fields)`` records a
    ``commit`` (or ``skip``) in ``sink.jsonl``. Raises Spark's errors (the batch fails and the supervisor
    restarts the driver). The catalog is defined on ``spark`` and the table created now, before the query
    starts (its session is cloned from ``spark`` then)."""
    use_catalog(spark, warehouse)

    def write(batch_df, batch_id: int) -> None:
        if idempotent and committed(batch_df.sparkSession, sink_id, batch_id):
            log("skip", batch=batch_id, sink_id=sink_id)
        else:
            (keyed_columns.rows_of(batch_df).writeTo(TABLE)
             .option(f"snapshot-property.{SINK_PROPERTY}", sink_id)
             .option(f"snapshot-property.{BATCH_PROPERTY}", str(batch_id)).append())
            log("commit", batch=batch_id, sink_id=sink_id)
        control.after_sink_commit(batch_id)

    return write
