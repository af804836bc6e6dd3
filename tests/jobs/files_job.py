"""A user's job that writes JSON files (``onceproof run --pipeline-cmd ... --output files``), with no
onceproof code in it.

The correct job uses Spark's file sink, ``writeStream.format("json").option("path", DIR)``: each
micro-batch's files are committed by the sink's log, ``DIR/_spark_metadata/N``, and a batch whose ``N``
is already logged is skipped on replay (``FileStreamSink.addBatch``), so a reader of the directory sees
each record once. ``--naive`` writes each micro-batch from ``foreachBatch`` with
``df.write.mode("append").json(DIR)``: no log, so a batch Spark replays after a driver crash between the
write and ``commits/N`` is written again, and every reader of the directory (Spark's batch reader lists
every file when there is no ``_spark_metadata``) sees it twice. onceproof must report ``duplicate``.

Fields: ``key`` and ``seq`` (the record's identity, from the input's JSON value), ``in_partition`` and
``in_offset`` (where the record was read).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

JOB = "files-job"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--bootstrap", "--input-topic", "--checkpoint", "--path"):
        ap.add_argument(a, required=True)
    ap.add_argument("--jars", default="")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--naive", action="store_true", help="foreachBatch + df.write: no log, a replay is written again")
    args = ap.parse_args(argv)

    builder = (SparkSession.builder.appName(JOB).master(args.master)
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "640m"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    kafka_jars = [n for n in (j.rsplit("/", 1)[-1] for j in args.jars.split(",")) if n.startswith("spark-sql-kafka")]
    print(f"files_job: Spark {spark.version}, Kafka connector {', '.join(kafka_jars) or 'none'}", flush=True)

    v = F.from_json(F.col("value").cast("string"), "key STRING, seq LONG")
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input_topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", "5000").load())
    rows = (source.select(v.alias("v"), F.col("partition").alias("in_partition"), F.col("offset").alias("in_offset"))
            .select("v.key", "v.seq", "in_partition", "in_offset").coalesce(1))
    if args.naive:
        def write(df, batch_id: int) -> None:
            df.write.mode("append").json(args.path)

        writer = rows.writeStream.foreachBatch(write)
    else:
        writer = rows.writeStream.format("json").option("path", args.path)
    query = (writer.option("checkpointLocation", args.checkpoint).trigger(processingTime="1 second").start())
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
