"""``--sink delta``, ``delta-foreachbatch`` and the ``delta-no-txn`` mutant: the keyed workload's rows
(:mod:`onceproof.pipeline.keyed_columns`) in a Delta table at ``--file-sink-path``, through Delta Lake's
Spark connector (``io.delta:delta-spark``, ``onceproof/deps/delta/pom.xml``).

* :func:`streaming` (``delta``, expected valid): Delta's streaming sink, ``writeStream.format("delta")``.
  Each micro-batch is one Delta commit carrying ``SetTransaction(queryId, batchId)``; a replayed batch
  whose commit exists is skipped ("Skipping already complete epoch"): Delta's ``DeltaSink.addBatch``, and
  PROTOCOL.md, "Transaction Identifiers". No hook: the commit-window kill watches ``_delta_log``.
* :func:`foreach_batch` (``delta-foreachbatch``, expected valid): ``foreachBatch`` appending with the
  writer options ``txnAppId`` (the run's sink id, stable across driver restarts) and ``txnVersion``
  (the batch id): Delta skips a write whose ``(appId, version)`` the table already holds (docs.delta.io,
  "Idempotent table writes in foreachBatch"; ``WriteIntoDelta``/``DeltaCommand.hasBeenExecuted``).
* ``delta-no-txn`` (a mutant expected invalid): the same append without the two options, so a batch
  replayed after its Delta commit and before Spark's ``commits/N`` is appended again.

The foreachBatch writers call the driver's after-commit hook
(``onceproof.pipeline.hooks.ControlDir.after_sink_commit``) once the batch's commit is in ``_delta_log``,
before Spark writes ``commits/N``: ``kill-driver-in-commit-window`` kills there.
"""

from __future__ import annotations

from onceproof.pipeline import hooks, keyed_columns

SPARK_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # the table's state is rebuilt in 50 shuffle partitions by default (DeltaSQLConf
    # DELTA_SNAPSHOT_PARTITIONS): 50 tasks per commit on 2 executors of 1 core
    "spark.databricks.delta.snapshotPartitions": "2",
}
"""Delta's session settings (docs.delta.io, "Quickstart": "Set up Apache Spark with Delta Lake"), and
the snapshot's partitions for a small table on a small cluster."""


def streaming(df, *, path: str, checkpoint: str, trigger_ms: int, name: str):
    """Start Delta's streaming sink into ``path``; returns the ``StreamingQuery``."""
    return (keyed_columns.rows_of(df).writeStream.format("delta").outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .queryName(name).start(path))


def foreach_batch(path: str, app_id: str | None, control: hooks.ControlDir, log):
    """The ``foreachBatch`` body appending each micro-batch to ``path``: with ``txnAppId=app_id`` and
    ``txnVersion=batchId`` (``delta-foreachbatch``), or, ``app_id`` ``None``, without (``delta-no-txn``).
    ``log(event, **fields)`` records a ``commit`` in ``sink.jsonl``. Raises Spark's errors (the batch
    fails and the supervisor restarts the driver)."""

    def write(batch_df, batch_id: int) -> None:
        w = keyed_columns.rows_of(batch_df).write.format("delta").mode("append")
        if app_id is not None:
            w = w.option("txnAppId", app_id).option("txnVersion", batch_id)
        w.save(path)
        log("commit", batch=batch_id, txn_app_id=app_id)
        control.after_sink_commit(batch_id)

    return write
