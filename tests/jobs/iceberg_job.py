"""A user's job that streams Kafka records into an Apache Iceberg table through ``foreachBatch`` and
``MERGE INTO`` (``onceproof run --pipeline-cmd ... --output iceberg``), with no onceproof code in it.

The catalog comes from ``--iceberg-conf`` (a JSON object of Spark settings, applied to the session
builder one by one) and the table from ``--table``; the job creates the table when it is missing. Each
micro-batch is merged on the record's identity, ``(key, seq)``: a row already in the table is not inserted
again, so a batch Spark replays after a driver crash between Iceberg's commit and its own ``commits/N`` adds
nothing (Spark's Structured Streaming Programming Guide, "foreachBatch": "use the batchId ... or upsert").
``--naive`` appends each batch instead: a replayed batch is appended again, which onceproof must report as
``duplicate``.
"""

from __future__ import annotations

import argparse
import json
import sys

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--bootstrap", "--input-topic", "--checkpoint", "--table", "--iceberg-conf"):
        ap.add_argument(a, required=True)
    ap.add_argument("--jars", default="")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--naive", action="store_true", help="append each batch: no MERGE on the record's identity")
    args = ap.parse_args(argv)

    builder = (SparkSession.builder.appName("iceberg-job").master(args.master)
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "640m")
               .config("spark.sql.shuffle.partitions", "2"))
    for key, value in json.loads(args.iceberg_conf).items():
        builder = builder.config(key, value)
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    runtime = sorted(j.rsplit("/", 1)[-1] for j in args.jars.split(",") if "/iceberg-spark-runtime" in j)
    print(f"iceberg_job: pyspark {pyspark.__version__}; Iceberg in --jars: {', '.join(runtime) or 'none'}", flush=True)

    spark.sql(f"CREATE TABLE IF NOT EXISTS {args.table} (key STRING, seq BIGINT, in_partition BIGINT, "
              f"in_offset BIGINT) USING iceberg")

    def write(df, batch_id: int) -> None:
        if args.naive:
            df.writeTo(args.table).append()
            return
        df.createOrReplaceTempView("batch")
        df.sparkSession.sql(f"MERGE INTO {args.table} t USING batch s ON t.key = s.key AND t.seq = s.seq "
                            f"WHEN NOT MATCHED THEN INSERT *")

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
