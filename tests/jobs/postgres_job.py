"""A user's job that writes a PostgreSQL table through ``foreachBatch`` (``onceproof run --pipeline-cmd ...
--output postgres``), with no onceproof code in it.

Each micro-batch is collected on the driver and inserted in one database transaction together with a
progress row, ``(job) -> last batchId``; a batch whose id is ≤ the committed progress is a replay (Spark
replays the last batch after a driver crash between the sink's commit and its own ``commits/N``) and is
skipped. ``--naive`` leaves the progress row out: each batch is still one transaction, but a replayed
batch is inserted again, which onceproof must report as ``duplicate``.

Columns: ``key`` and ``seq`` (the record's identity, from the input's JSON value), ``in_partition`` and
``in_offset`` (where the record was read).
"""

from __future__ import annotations

import argparse
import sys

import psycopg
from psycopg import sql
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

JOB = "postgres-job"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--bootstrap", "--input-topic", "--checkpoint", "--dsn", "--table"):
        ap.add_argument(a, required=True)
    ap.add_argument("--jars", default="")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--naive", action="store_true", help="no progress row: a replayed batch is inserted again")
    args = ap.parse_args(argv)
    table = sql.Identifier(args.table)
    with psycopg.connect(args.dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text, seq bigint, in_partition int, in_offset bigint)")
                  .format(table))
        c.execute("CREATE TABLE IF NOT EXISTS job_progress (job text PRIMARY KEY, batch_id bigint NOT NULL)")

    builder = (SparkSession.builder.appName(JOB).master(args.master)
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "640m"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    def write(df, batch_id: int) -> None:
        rows = df.collect()
        with psycopg.connect(args.dsn) as conn, conn.transaction():
            if not args.naive:
                done = conn.execute("SELECT batch_id FROM job_progress WHERE job = %s FOR UPDATE", (JOB,)).fetchone()
                if done is not None and done[0] >= batch_id:
                    return  # a replay of a batch already committed
            with conn.cursor().copy(sql.SQL("COPY {} (key, seq, in_partition, in_offset) FROM STDIN")
                                    .format(table)) as cp:
                for r in rows:
                    cp.write_row(tuple(r))
            if not args.naive:
                conn.execute("INSERT INTO job_progress VALUES (%s, %s) ON CONFLICT (job) DO UPDATE "
                             "SET batch_id = EXCLUDED.batch_id", (JOB, batch_id))

    v = F.from_json(F.col("value").cast("string"), "key STRING, seq LONG")
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input_topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", "5000").load())
    rows = source.select(v.alias("v"), F.col("partition").alias("in_partition"), F.col("offset").alias("in_offset"))
    query = (rows.select("v.key", "v.seq", "in_partition", "in_offset").writeStream.foreachBatch(write)
             .option("checkpointLocation", args.checkpoint).trigger(processingTime="1 second").start())
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
