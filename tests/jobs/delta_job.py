"""A user's job that writes a Delta Lake table through ``foreachBatch`` with delta-rs (``deltalake``), the
way a job on a Spark that delta-spark does not support yet can write Delta (``onceproof run
--pipeline-cmd ... --output delta``), with no onceproof code in it.

Each micro-batch is collected on the driver and appended in one Delta commit that carries a ``txn``
action, ``(appId, version) = (delta-job, batchId)``: Delta's idempotent-write rule (docs.delta.io,
"Idempotent table writes in foreachBatch"; PROTOCOL.md, "Transaction Identifiers"). delta-rs does not skip
a replay by itself, so the job asks the table for its app id's last version first and skips a batch at or
below it (Spark replays the last batch after a driver crash between the commit and its own ``commits/N``).
``--naive`` writes without the txn action and without the check: a replayed batch is appended again,
which onceproof must report as ``duplicate``.
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa
import pyspark
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

APP = "delta-job"
SCHEMA = pa.schema([("key", pa.string()), ("seq", pa.int64()), ("in_partition", pa.int64()),
                    ("in_offset", pa.int64())])


def committed_version(path: str) -> int | None:
    """The last batch id this job committed to the table (its txn action), ``None`` before the first."""
    try:
        return DeltaTable(path).transaction_version(APP)
    except TableNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--bootstrap", "--input-topic", "--checkpoint", "--path"):
        ap.add_argument(a, required=True)
    ap.add_argument("--jars", default="")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--naive", action="store_true", help="no txn action, no replay check")
    args = ap.parse_args(argv)

    builder = (SparkSession.builder.appName(APP).master(args.master)
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "640m"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    print(f"delta_job: pyspark {pyspark.__version__} in {sys.executable}", flush=True)
    delta_jars = sorted(j.rsplit("/", 1)[-1] for j in args.jars.split(",") if "/delta-spark_" in j)
    print(f"delta_job: Delta's Spark connector in --jars: {', '.join(delta_jars) or 'none'}", flush=True)

    def write(df, batch_id: int) -> None:
        if not args.naive:
            done = committed_version(args.path)
            if done is not None and done >= batch_id:
                return  # a replay of a batch already committed
        rows = [r.asDict() for r in df.collect()]
        if not rows:
            return
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        props = None if args.naive else CommitProperties(app_transactions=[Transaction(app_id=APP, version=batch_id)])
        write_deltalake(args.path, table, mode="append", commit_properties=props)

    v = F.from_json(F.col("value").cast("string"), "key STRING, seq LONG")
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input_topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", "5000").load())
    rows = source.select(v.alias("v"), F.col("partition").cast("long").alias("in_partition"),
                         F.col("offset").alias("in_offset"))
    query = (rows.select("v.key", "v.seq", "in_partition", "in_offset").writeStream.foreachBatch(write)
             .option("checkpointLocation", args.checkpoint).trigger(processingTime="1 second").start())
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
