"""``--sink at-least-once``: Spark's own Kafka writer (``DataFrame.write.format("kafka")``), unchanged.

The same ``KafkaWriteTask`` that Spark's streaming Kafka sink uses, which the Spark docs call "at least
once" (Structured Streaming + Kafka Integration Guide, "Writing Data to Kafka"): a retried task or a
replayed batch writes its rows again. Run inside ``foreachBatch`` like the eos sink, so both get the
same driver hook; records carry the provenance headers through Spark's ``headers`` column. Expected
``invalid`` under the ``process`` package (any task retry rewrites).
"""

from __future__ import annotations

from functools import partial

from onceproof import kafka_config
from onceproof.pipeline import provenance
from onceproof.sinks.base import DRIVER_HOOKS, JobContext, Sink


def write_batch(job: JobContext, batch_df, batch_id: int) -> None:
    """The ``foreachBatch`` body: Spark's Kafka writer, then the driver's after-commit hook."""
    # pyspark: this module is also imported on the harness side (the sink registry), which needs no Spark
    from pyspark.sql import functions as F

    def h(name, col):
        return F.struct(F.lit(name).alias("key"), col.cast("string").cast("binary").alias("value"))

    headers = [h(provenance.BATCH, F.lit(batch_id)), h(provenance.SINK_PARTITION, F.spark_partition_id()),
               h(provenance.SINK, F.lit(job.sink.name)), h(provenance.INCARNATION, F.lit(job.incarnation))]
    if "in_partition" in batch_df.columns:  # a workload whose rows keep their input record (workloads/base.py)
        headers.append(h(provenance.INPUT, F.concat_ws(":", F.col("in_partition").cast("string"),
                                                       F.col("in_offset").cast("string"))))
    out = batch_df.select("key", "value", F.array(*headers).alias("headers"))
    (out.write.format("kafka").options(**kafka_config.spark_options(job.args.bootstrap))
     .option("topic", job.args.output_topic).option("kafka.acks", "all").save())
    job.control.after_sink_commit(batch_id)


def write(df, job: JobContext):
    """The :class:`~onceproof.sinks.base.Writer`: :func:`write_batch` in ``foreachBatch``."""
    return job.foreach_batch(df, partial(write_batch, job))


AT_LEAST_ONCE = Sink("at-least-once", "Spark's own Kafka sink (no transactions)", frozenset({DRIVER_HOOKS}),
                     "invalid", writer=write, reader="onceproof.sinks.kafka_topic:read_output",
                     label="Spark's Kafka sink", targeted_by="process")
