"""``--sink file``: Spark's own file sink (``FileStreamSink``), JSON lines, the Spark analogue of Flink's
two-phase-commit file sink.

Each micro-batch's tasks write data files straight into the output directory; the driver then commits
the batch by writing ``<dir>/_spark_metadata/<batchId>``, the list of files the batch's successful task
attempts wrote (``ManifestFileCommitProtocol``), and only then Spark's ``commits/<batchId>``. A replay of a
batch already in the metadata log is skipped (``FileStreamSink.addBatch``: ``batchId <=
fileLog.getLatestBatchId``). Files of killed or failed task attempts stay in the directory, listed
nowhere: a reader that honours the log (Spark's own file source, ``sinks/file_log.py``'s committed view)
never sees them; one that lists the directory does. The sink's entry is ``sinks/files.py``.

Rows written: the keyed workload's value fields, one JSON object per line: ``{"key", "seq",
"in_partition", "in_offset", "in_ts"}``.

Fault hook (``kill-executor``): a sink task cannot be held between its writes and its commit from
outside Spark's writer, so it is held *during* its writes, once part of its data file is on disk. A
Python UDF on the written rows counts its task's rows; at row :data:`HOLD_AT_ROW`, when the harness
asks for this partition, it waits (≤ :data:`DISK_WAIT_S` s) for the task's data file
(``part-<partition>-*`` in the output directory, written to since the task's first row) to reach the
disk, then claims the harness's pre-commit hold (``onceproof.pipeline.hooks.precommit_delay``: the same control
file, and a ``hold`` event in ``sink.jsonl``) and sleeps there. The executor killed there leaves a
partial data file that no log lists: an orphan, and duplicates for a listing reader once the retried
task writes the same rows again. A partition with fewer rows per micro-batch is never held.
:data:`WRITE_BUFFER_BYTES` says how large a task's writes must be for that file to hold records.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from onceproof.pipeline import hooks, keyed_columns
from onceproof.pipeline.transactional_sink import append_event

HOLD_AT_ROW = 2000
"""The row of its partition at which a task may be held: by then the rows handed to the writer are past
:data:`WRITE_BUFFER_BYTES` (at ~85 bytes a row, with the UDF some rows ahead of the writer; at row 1,200
nothing was on disk yet, at row 2,000 the first 86,016 bytes were, measured on Spark 4.3)."""
DISK_WAIT_S = 5.0
SPARK_CONF = {
    # the Python UDF hands rows back to the writer 20 at a time (default 100) through a 4 KB socket
    # buffer (spark.buffer.size, default 64 KB), so the writer is never far behind the UDF
    "spark.sql.execution.python.udf.maxRecordsPerBatch": "20",
    "spark.buffer.size": "4096",
}
"""Spark settings of a file-sink pipeline."""

WRITE_BUFFER_BYTES = 86_016
"""Bytes a data file holds in memory before its first write to disk, measured on Spark 4.3 (JSON,
local file system: the output stream's 64 KB ``io.file.buffer.size`` plus the encoder's and Jackson's
buffers): a task must write more than this for a kill to leave records in its orphan. So the file sink
needs micro-batches of more than :data:`HOLD_AT_ROW` rows per input partition, e.g. ``--rate 1800
--max-offsets 40000 --trigger-ms 10000`` over 6 partitions (~3,000)."""


def _on_disk(path: str, partition: int, since: float) -> int:
    """Bytes on disk of the largest data file of ``partition`` written to since ``since`` (epoch s; its
    mtime), 0 for none."""
    prefix = f"part-{partition:05d}-"
    best = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.name.startswith(prefix):
                    st = e.stat()
                    if st.st_mtime >= since and st.st_size > best:
                        best = st.st_size
    except OSError:
        return 0
    return best


def _hold_udf(path: str, control_dir: str, sink_log: str, incarnation: str):
    """The identity on ``in_partition`` that holds its task once the task's data file is partly on disk,
    when the harness asks (module docstring). State per (stage, partition, attempt) in the Python worker:
    rows seen, the time of the first, and whether it already held."""
    tasks: dict[tuple, list] = {}

    def log(**fields):
        append_event(sink_log, incarnation, "hold", sink="file", **fields)

    def hold(p):
        # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
        from pyspark import TaskContext

        ctx = TaskContext.get()
        k = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        # rows seen and the first row's time. The task's data file was created before its first row;
        # its mtime passes that time once a flush put data on disk, which an older file never does.
        t = tasks.setdefault(k, [0, time.time()])
        t[0] += 1
        if t[0] != HOLD_AT_ROW:
            return p
        try:
            asked = hooks._hold_partition(Path(control_dir) / hooks.PRECOMMIT_HOLD)
        except FileNotFoundError:
            return p
        if asked is not None and asked != ctx.partitionId():
            return p
        # this worker runs ahead of the file writer: wait (bounded) for the rows handed back so far to
        # reach the disk, so the file a kill leaves behind holds records
        deadline = time.monotonic() + DISK_WAIT_S
        size = _on_disk(path, ctx.partitionId(), t[1])
        while not size and time.monotonic() < deadline:
            time.sleep(0.05)
            size = _on_disk(path, ctx.partitionId(), t[1])
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        where = {"batch": int(batch) if batch is not None else None, "partition": ctx.partitionId(),
                 "attempt": ctx.attemptNumber(), "rows_handed_to_writer": t[0] - 1, "bytes_on_disk": size}
        hooks.precommit_delay(control_dir, where, log)
        return p

    return hold


def write(df, *, path: str, checkpoint: str, trigger_ms: int, control_dir: str = "", sink_log: str = "",
          incarnation: str = "0", name: str = "onceproof-file"):
    """Start the query writing the keyed transform's rows (``key``, JSON ``value``, ``in_partition``,
    ``in_offset``) to ``path`` as JSON lines through Spark's file sink; returns the ``StreamingQuery``.
    ``control_dir`` "" = no fault hook."""
    # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    rows = keyed_columns.rows_of(df)
    if control_dir:
        # a pickled (not Arrow) UDF: Arrow batches 10,000 rows, so no row would reach the writer before the hold
        hold = F.udf(_hold_udf(path, control_dir, sink_log, incarnation), LongType(), useArrow=False)
        rows = rows.withColumn("in_partition", hold(F.col("in_partition")))
    return (rows.writeStream.format("json").option("path", path)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{trigger_ms} milliseconds")
            .queryName(name).start())
