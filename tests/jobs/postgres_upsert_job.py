"""A user's job that upserts every record into a PostgreSQL table from its executors (``onceproof run
--pipeline-cmd ... --output postgres``), with no onceproof code in it.

The table's primary key is the record's identity, ``(key, seq)``. Each micro-batch is written by every
executor partition in its own transaction with ``INSERT ... ON CONFLICT (key, seq) DO UPDATE`` (from a
``COPY`` into a temporary table, the usual bulk upsert), so a
replayed batch (Spark replays the last batch after a driver crash between the sink's writes and its own
``commits/N``) overwrites the rows it wrote before instead of adding copies: idempotence by the key, no
progress table. The table has no ``id``: nothing in it says in which order the rows were written, and a
``DO UPDATE`` writes a new row version at a new physical place.

Columns: ``key`` and ``seq`` (from the input's JSON value), ``in_partition`` and ``in_offset`` (where the
record was read).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--bootstrap", "--input-topic", "--checkpoint", "--dsn", "--table"):
        ap.add_argument(a, required=True)
    ap.add_argument("--jars", default="")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    args = ap.parse_args(argv)

    import psycopg
    from psycopg import sql

    with psycopg.connect(args.dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text NOT NULL, seq bigint NOT NULL, in_partition int, "
                          "in_offset bigint, PRIMARY KEY (key, seq))").format(sql.Identifier(args.table)))

    builder = (SparkSession.builder.appName("postgres-upsert-job").master(args.master)
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "640m"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    dsn, table = args.dsn, args.table

    def upsert(rows) -> None:
        """One executor partition's rows in one transaction (runs on an executor)."""
        import psycopg
        from psycopg import sql

        batch = [tuple(r) for r in rows]
        if not batch:
            return
        # the bulk-upsert pattern: COPY into a temporary table, then one INSERT ... ON CONFLICT from it
        with psycopg.connect(dsn) as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("CREATE TEMP TABLE staged (key text, seq bigint, in_partition int, in_offset bigint) "
                        "ON COMMIT DROP")
            with cur.copy("COPY staged (key, seq, in_partition, in_offset) FROM STDIN") as cp:
                for r in batch:
                    cp.write_row(r)
            cur.execute(sql.SQL("INSERT INTO {} (key, seq, in_partition, in_offset) SELECT DISTINCT ON (key, seq) "
                                "key, seq, in_partition, in_offset FROM staged ON CONFLICT (key, seq) DO UPDATE "
                                "SET in_partition = EXCLUDED.in_partition, in_offset = EXCLUDED.in_offset")
                        .format(sql.Identifier(table)))

    def write(df, batch_id: int) -> None:
        df.foreachPartition(upsert)

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
