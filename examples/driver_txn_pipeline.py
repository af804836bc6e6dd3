"""An example user pipeline that writes on the driver: each micro-batch is collected and produced in one
Kafka transaction, with no onceproof code in it (``docs/pipeline-contract.md``).

It is the shape many teams write first: ``foreachBatch`` → ``collect()`` → one transactional producer on
the driver. Its executors only read Kafka, so a fault must hit them while a batch is in flight to test
anything (``kill-executor`` aims at that window, ``nemesis/kill_executor.py``).

Exactly-once comes from a marker: the batch id is produced in the same transaction as the rows, to a
one-partition marker topic (``<output-topic>-batches``), and a batch whose id is ≤ the last committed
marker is skipped. Spark replays the last batch after a driver crash between the transaction's commit
and its own ``commits/N`` (``MicroBatchExecution``: the sink must be idempotent per batch id); the marker
makes that replay a no-op. The one ``transactional.id`` (``<app>-driver``) fences a previous driver's
open transaction at ``init_transactions()`` (KIP-98). ``--naive`` leaves the marker check out: the
replayed batch is written again, which onceproof reports as ``duplicate``.

The traps real jobs fall into are options: ``--isolation-level read_uncommitted`` (the records of aborted
input transactions reach the output), ``--fail-on-data-loss false`` (input deleted before it was read is
skipped in silence) and ``--starting-offsets latest`` (a query that lost its checkpoint skips what
arrived meanwhile). ``--retry-aborted N`` is the retry confluent-kafka's transactions example teaches (an
abortable error: abort, then write the batch again with the same producer); on a broker without KIP-890 part 1
(Kafka before 3.6, whose upgrade notes name the fix: transaction partition verification,
``transaction.partition.verification.enable``) a Produce request of the aborted attempt that arrives late is
appended anyway and committed with a later transaction, so the batch is in the output twice (docs/versions.md,
"The pre-KIP-890 hunt").

Run it under faults::

    onceproof run --pipeline-cmd '{python} examples/driver_txn_pipeline.py --bootstrap {bootstrap}
        --input-topic {input_topic} --output-topic {output_topic} --checkpoint {checkpoint} --jars {jars}'
        --nemesis kill-driver,kill-executor,kill-broker --time-limit 60 --seed 2
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

MARKER_SUFFIX = "-batches"


def last_marker(bootstrap: str, topic: str) -> int:
    """The batch id of the last committed marker record (read_committed), -1 when there is none."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        last = -1
        if hi <= lo:
            return last
        c.assign([TopicPartition(topic, 0, max(lo, hi - 50))])  # the last markers (control records included)
        while True:
            m = c.poll(30)
            if m is None:
                raise TimeoutError(f"no end of {topic} within 30 s")
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return last
                raise KafkaException(m.error())
            last = max(last, int(json.loads(m.value())["batch"]))
    finally:
        c.close()


def ensure_topic(bootstrap: str, topic: str) -> None:
    """Create the one-partition marker topic when it does not exist (replication 3, min ISR 2)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    fut = admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic]
    try:
        fut.result(60)
    except Exception as e:  # noqa: BLE001 - another driver created it first
        if "TOPIC_ALREADY_EXISTS" not in str(e):
            raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for a in ("--bootstrap", "--input-topic", "--output-topic", "--checkpoint"):
        ap.add_argument(a, required=True)
    ap.add_argument("--jars", default="", help="Spark's Kafka connector jars, comma-separated")
    ap.add_argument("--master", default="local-cluster[2,1,1024]")
    ap.add_argument("--naive", action="store_true", help="no marker check: a replayed batch is written again")
    ap.add_argument("--starting-offsets", default="earliest", choices=("earliest", "latest"),
                    help="where a query without a checkpoint starts reading")
    ap.add_argument("--fail-on-data-loss", default="true", choices=("true", "false"),
                    help="stop the query when input it has not read was deleted (false: skip it)")
    ap.add_argument("--isolation-level", default="read_committed", choices=("read_committed", "read_uncommitted"),
                    help="the Kafka source's kafka.isolation.level")
    ap.add_argument("--retry-aborted", type=int, default=0, metavar="N",
                    help="on an abortable transaction error, abort and write the batch again with the same "
                         "producer, up to N times (confluent-kafka's transactions example does so)")
    ap.add_argument("--message-timeout-ms", type=int, default=0,
                    help="the producer's message.timeout.ms (0: librdkafka's default, 300000)")
    args = ap.parse_args(argv)
    markers = args.output_topic + MARKER_SUFFIX
    ensure_topic(args.bootstrap, markers)

    builder = (SparkSession.builder.appName("driver-txn").master(args.master)
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "640m"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")

    conf = {"bootstrap.servers": args.bootstrap, "transactional.id": "driver-txn-driver",
            "transaction.timeout.ms": 60000, "linger.ms": 5}
    if args.message_timeout_ms:
        conf["message.timeout.ms"] = args.message_timeout_ms
    producer = Producer(conf)
    producer.init_transactions(60)  # fences and aborts a previous driver's open transaction

    def write(df, batch_id: int) -> None:
        if not args.naive and batch_id <= last_marker(args.bootstrap, markers):
            return  # a replay of a batch already committed
        rows = df.collect()
        for attempt in range(args.retry_aborted + 1):
            producer.begin_transaction()
            try:
                for r in rows:
                    producer.produce(args.output_topic, key=r["key"], value=r["value"])
                producer.produce(markers, key=b"batch", value=json.dumps({"batch": batch_id}).encode(), partition=0)
                producer.commit_transaction(60)
                return
            except KafkaException as e:
                if attempt == args.retry_aborted or not e.args[0].txn_requires_abort():
                    raise
                print(f"batch {batch_id}: {e.args[0].str()}; aborting and writing it again", flush=True)
                producer.abort_transaction(60)

    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input_topic).option("startingOffsets", args.starting_offsets)
              .option("kafka.isolation.level", args.isolation_level).option("failOnDataLoss", args.fail_on_data_loss)
              .option("maxOffsetsPerTrigger", "5000").load())
    query = (source.selectExpr("key", "value").writeStream.foreachBatch(write)
             .option("checkpointLocation", args.checkpoint).trigger(processingTime="1 second").start())
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
