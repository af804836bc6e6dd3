"""An example of a user's own PySpark pipeline, certified by onceproof (``docs/pipeline-contract.md``).

A plain Structured Streaming script, outside onceproof's packages: it reads JSON orders from Kafka at
read_committed, normalises them (a ``region`` from the key, the send time as an ISO timestamp), and writes
them to Kafka through onceproof's exactly-once sink library (``onceproof.pipeline.eos_sink``), one call inside
``foreachBatch``. Run it by hand::

    python examples/user_pipeline.py --bootstrap localhost:9092 --input-topic in --output-topic out \\
        --checkpoint /tmp/ckpt --jars <spark-sql-kafka jars, comma-separated>

or certify it under faults (the harness fills the placeholders and restarts it after every crash)::

    onceproof run --pipeline-cmd '{python} examples/user_pipeline.py --bootstrap {bootstrap}
        --input-topic {input_topic} --output-topic {output_topic} --checkpoint {checkpoint} --jars {jars}'
        --nemesis kill-driver-in-commit-window,kill-executor --seed 1

What it keeps of the contract: the source reads at ``read_committed``; the Kafka key and the value's
``key`` and ``seq`` pass through unchanged; ``checkpointLocation`` is the ``--checkpoint`` it is given, so
a restart resumes from Spark's offset log; it exits non-zero when the query fails. It also passes the
input partition and offset on, which the sink turns into the optional ``op.input`` provenance header.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from onceproof.pipeline.eos_sink import exactly_once_sink


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input-topic", required=True)
    ap.add_argument("--output-topic", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--jars", default="", help="Spark's Kafka connector jars, comma-separated")
    # local-cluster: executors are separate JVMs, as on a real cluster (local[*] has none to kill)
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    args = ap.parse_args(argv)

    builder = (SparkSession.builder.appName("orders-normaliser").master(args.master)
               .config("spark.ui.enabled", "false")
               .config("spark.executor.memory", "640m")
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    orders = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input_topic)
              .option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .option("failOnDataLoss", "true")
              .option("maxOffsetsPerTrigger", "5000")
              .load())
    v = F.from_json(F.col("value").cast("string"), "key STRING, seq LONG, t LONG")
    normalised = orders.select(
        F.col("key").cast("string").alias("key"),
        F.to_json(F.struct(
            v["key"].alias("key"), v["seq"].alias("seq"),
            F.upper(F.substring(F.col("key").cast("string"), 1, 2)).alias("region"),
            (v["t"] / 1000).cast("timestamp").cast("string").alias("sent_at"),
        )).cast("binary").alias("value"),
        F.col("partition").alias("in_partition"), F.col("offset").alias("in_offset"))

    # verify_complete: refuse a batch with fewer rows than Spark planned for it (a loss onceproof found
    # in Spark's read_committed source under a slowed link; docs/architecture.md, "A loss the harness found")
    sink = exactly_once_sink(bootstrap=args.bootstrap, input_topic=args.input_topic,
                             output_topic=args.output_topic, checkpoint=args.checkpoint, verify_complete=True)
    query = (normalised.writeStream.foreachBatch(sink)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="1 second")
             .start())
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
