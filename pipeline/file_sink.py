"""``--sink file``: Spark's own file sink (``FileStreamSink``), JSON lines, the Spark analogue of Flink's
two-phase-commit file sink.

Each micro-batch's tasks write data files straight into the output directory; the driver then commits
the batch by writing ``<dir>/_spark_metadata/<batchId>``, the list of files the batch's successful task
attempts wrote (``ManifestFileCommitProtocol``), and only then Spark's ``commits/<batchId>``. A replay of a
batch already in the metadata log is skipped (``FileStreamSink.addBatch``: ``batchId <=
fileLog.getLatestBatchId``). Files of killed or failed task attempts stay in the directory, listed
nowhere: a reader that honours the log (Spark's own file source, ``store/file_sink_log.py``'s committed
view) never sees them; one that lists the directory does.

Rows written: the keyed workload's value fields, one JSON object per line: ``{"key", "seq",
"in_partition", "in_offset", "in_ts"}``.

Fault hook (``kill-executor``): a sink task cannot be held between its writes and its commit from
outside Spark's writer, so it is held *during* its writes. A Python UDF on the written rows counts each
task's rows; at row :data:`HOLD_AFTER_ROWS` it claims the harness's pre-commit hold
(``pipeline.hooks.precommit_delay``, the same control file and ``hold`` event in ``sink.jsonl``) and
sleeps there, with the rows before it handed to the file writer (Python UDFs return results in batches
of ``spark.sql.execution.python.udf.maxRecordsPerBatch`` = 100 rows) and partly on disk. The executor
killed there leaves a partial data file that no log lists: an orphan, and duplicates for a listing
reader once the retried task writes the same rows again.
"""

from __future__ import annotations

import json
import os
import time

from pipeline import hooks

HOLD_AFTER_ROWS = 250
"""Rows a task hands to the file writer before it may be held: past the writer's buffers (Jackson's
8,000-char buffer, the stream encoder's 8 KB and the file stream's 4 KB, at ~85 bytes a row), so the
partial file a kill leaves holds records. A task with fewer rows is never held: give the file sink
micro-batches of more than 250 rows per input partition (``--trigger-ms 10000`` at 300 records/s over 6
partitions gives about 500)."""


def _hold_udf(control_dir: str, sink_log: str, incarnation: str):
    """The identity on ``in_partition`` that holds a task at row :data:`HOLD_AFTER_ROWS` when the harness
    asks (see the module docstring). One counter per (stage, partition, attempt) in the Python worker."""
    counts: dict[tuple, int] = {}

    def log(**fields):
        if not sink_log:
            return
        line = json.dumps({"time": time.time(), "event": "hold", "pid": os.getpid(), "incarnation": incarnation,
                           "sink": "file", **fields}) + "\n"
        fd = os.open(sink_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def hold(p):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        k = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        n = counts[k] = counts.get(k, 0) + 1
        if n == HOLD_AFTER_ROWS:
            batch = ctx.getLocalProperty("streaming.sql.batchId")
            where = {"batch": int(batch) if batch is not None else None, "partition": ctx.partitionId(),
                     "attempt": ctx.attemptNumber(), "rows_written": n - 1}
            hooks.precommit_delay(control_dir, where, log)
        return p

    return hold


def write(df, *, path: str, checkpoint: str, trigger_ms: int, control_dir: str = "", sink_log: str = "",
          incarnation: str = "0", name: str = "onceproof-file"):
    """Start the query writing the keyed transform's rows (``key``, JSON ``value``, ``in_partition``,
    ``in_offset``) to ``path`` as JSON lines through Spark's file sink; returns the ``StreamingQuery``.
    ``control_dir`` "" = no fault hook."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    v = F.from_json(F.col("value").cast("string"), "key STRING, seq LONG, in_partition LONG, in_offset LONG, "
                                                   "in_ts LONG")
    rows = df.select(v.alias("v")).select("v.*")
    if control_dir:
        hold = F.udf(_hold_udf(control_dir, sink_log, incarnation), LongType())
        rows = rows.withColumn("in_partition", hold(F.col("in_partition")))
    return (rows.writeStream.format("json").option("path", path)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .queryName(name).start())
