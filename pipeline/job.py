"""The system under test: a PySpark Structured Streaming job, Kafka → map → Kafka.

Run as ``python -m pipeline.job --bootstrap ... --sink eos|at-least-once`` (the harness's supervisor
does, and restarts it from the same checkpoint when it dies).

Source: Spark's Kafka source on the input topic, ``kafka.isolation.level=read_committed``,
``startingOffsets=earliest``, ``failOnDataLoss=true``, at most ``--max-offsets`` records per micro-batch.
Map: keeps the Kafka key and the JSON value's ``key`` and ``seq``, adds the input partition/offset and the
input append time. Sinks (both inside ``foreachBatch``, see ``pipeline/transactional_sink.py`` for why):

* ``eos`` – the transactional sink of DESIGN §2.
* ``at-least-once`` – Spark's own Kafka writer (``DataFrame.write.format("kafka")``), unchanged: the
  same ``KafkaWriteTask`` that Spark's streaming Kafka sink uses, which the Spark docs call "at least
  once". Records carry the provenance headers through Spark's ``headers`` column.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from pipeline import hooks, provenance
from pipeline.transactional_sink import SinkConfig, abort_leftovers, write_partition

SINKS = ("eos", "at-least-once", "eos-no-marker")
# eos-no-marker is a mutant: the transactional sink without its progress-marker check, so a replayed
# batch is written again. It exists to prove the harness catches what the marker prevents.


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="pipeline.job", description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers host:port[,...]")
    ap.add_argument("--input-topic", default="input")
    ap.add_argument("--output-topic", default="output")
    ap.add_argument("--progress-topic", default="output-progress")
    ap.add_argument("--sink", choices=SINKS, default="eos")
    ap.add_argument("--sink-id", default="onceproof", help="transactional.id / marker group prefix")
    ap.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--jars", default="", help="comma-separated jars (Spark's Kafka connector)")
    ap.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger, ms")
    ap.add_argument("--max-offsets", type=int, default=5000, help="maxOffsetsPerTrigger, records")
    ap.add_argument("--txn-timeout-ms", type=int, default=60000)
    ap.add_argument("--control-dir", default="", help="fault-hook control directory")
    ap.add_argument("--sink-log", default="", help="append sink transaction events here (JSON lines)")
    ap.add_argument("--pool-size", type=int, default=6, help="sink partitions (= input partitions)")
    return ap.parse_args(argv)


def build_spark(args: argparse.Namespace):
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.appName(f"onceproof-{args.sink}").master(args.master)
         .config("spark.ui.enabled", "false")
         .config("spark.executor.memory", "640m")
         .config("spark.driver.memory", "768m")
         .config("spark.task.maxFailures", "8")
         .config("spark.sql.shuffle.partitions", str(args.pool_size))
         .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
         .config("spark.network.timeout", "60s")
         .config("spark.executor.heartbeatInterval", "5s")
         .config("spark.deploy.maxExecutorRetries", "1000")
         .config("spark.python.worker.reuse", "true"))
    if args.jars:
        b = b.config("spark.jars", args.jars)
    return b.getOrCreate()


def transform(src):
    """Input rows (Kafka source schema) → ``key: string, value: binary (JSON), in_partition, in_offset``.

    The output value is ``{"key", "seq", "in_partition", "in_offset", "in_ts"}`` with ``in_ts`` the input
    record's append time in ms.
    """
    from pyspark.sql import functions as F

    schema = "key STRING, seq LONG"
    parsed = src.select(
        F.col("key").cast("string").alias("kkey"),
        F.from_json(F.col("value").cast("string"), schema).alias("v"),
        F.col("partition").alias("in_partition"),
        F.col("offset").alias("in_offset"),
        (F.col("timestamp").cast("double") * 1000).cast("long").alias("in_ts"),
    )
    value = F.to_json(F.struct(F.col("v.key").alias("key"), F.col("v.seq").alias("seq"),
                               "in_partition", "in_offset", "in_ts"))
    return parsed.select(F.col("kkey").alias("key"), value.cast("binary").alias("value"),
                         "in_partition", "in_offset")


def eos_batch(cfg: SinkConfig, control: hooks.ControlDir, batch_df, batch_id: int) -> None:
    """foreachBatch body of the exactly-once sink: one transaction per partition, then the hook."""
    batch_df.rdd.foreachPartition(partial(write_partition, cfg, batch_id))
    control.after_sink_commit(batch_id)


def alo_batch(args: argparse.Namespace, control: hooks.ControlDir, batch_df, batch_id: int) -> None:
    """foreachBatch body of the at-least-once sink: Spark's Kafka writer, then the hook."""
    from pyspark.sql import functions as F

    def h(name, col):
        return F.struct(F.lit(name).alias("key"), col.cast("string").cast("binary").alias("value"))

    out = batch_df.select(
        "key", "value",
        F.array(h(provenance.BATCH, F.lit(batch_id)),
                h(provenance.SINK_PARTITION, F.spark_partition_id()),
                h(provenance.INPUT, F.concat_ws(":", F.col("in_partition").cast("string"),
                                                F.col("in_offset").cast("string"))),
                h(provenance.SINK, F.lit("at-least-once"))).alias("headers"))
    (out.write.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
     .option("topic", args.output_topic).option("kafka.acks", "all").save())
    control.after_sink_commit(batch_id)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = build_spark(args)
    spark.sparkContext.setLogLevel("WARN")
    control = hooks.ControlDir(args.control_dir)
    cfg = SinkConfig(bootstrap=args.bootstrap, output_topic=args.output_topic,
                     progress_topic=args.progress_topic, sink_id=args.sink_id,
                     skip_marker_check=args.sink == "eos-no-marker",
                     txn_timeout_ms=args.txn_timeout_ms, log_path=args.sink_log,
                     control_dir=args.control_dir)
    src = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", args.bootstrap)
           .option("subscribe", args.input_topic)
           .option("startingOffsets", "earliest")
           .option("failOnDataLoss", "true")
           .option("kafka.isolation.level", "read_committed")
           .option("maxOffsetsPerTrigger", str(args.max_offsets))
           .load())
    df = transform(src)
    if args.sink in ("eos", "eos-no-marker"):
        abort_leftovers(cfg, args.pool_size)
        body = partial(eos_batch, cfg, control)
    else:
        body = partial(alo_batch, args, control)
    query = (df.writeStream.foreachBatch(body)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=f"{args.trigger_ms} milliseconds")
             .queryName(f"onceproof-{args.sink}")
             .start())
    control.mark_ready({"query_id": str(query.id), "run_id": str(query.runId), "sink": args.sink,
                        "app_id": spark.sparkContext.applicationId})
    print(f"query {query.id} started, sink={args.sink}", flush=True)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
