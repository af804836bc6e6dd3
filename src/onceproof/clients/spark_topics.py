"""Read a topic with Spark's Kafka batch source into checker columns (the Spark engine's
``onceproof.clients.topics.read_topic`` + ``decode_values``).

``spark.read.format("kafka")`` reads every partition from ``earliest`` to the end offsets it looks up
when the query is planned: with ``kafka.isolation.level=read_committed`` those are the last stable
offsets, so records of open and aborted transactions and the transaction markers are not returned
(Spark's source skips the offsets read_committed hides; Structured Streaming + Kafka Integration
Guide, "Kafka Specific Configurations"; KIP-98). A re-planned query would look the end offsets up
again, so the caller writes the frame once (``checking/spark/checks.py`` saves it as the run's
parquet snapshot) and checks what it wrote.

The Kafka connector is not in PySpark's jars: the session needs ``spark.jars`` = the jars of
``onceproof.backends.common.jars.spark_kafka_classpath()``
(``onceproof.checking.spark.checks.session(kafka=True)`` sets it).

Columns, as ``topics.decode_values`` gives them: ``key`` (the value's ``key``, else the record key, UTF-8),
``seq`` (long; null when the value is not a JSON object with an integer ``seq``: the checker counts it
``unexpected``), ``partition``, ``offset``, ``timestamp`` (epoch ms) and, with ``headers``, one string
column per header name (the last value of a repeated header; null where a record lacks it). Values whose
``seq`` is a JSON float or a numeric string decode to null here but to a number in ``decode_values``;
the workloads write integers.
"""

from __future__ import annotations

from onceproof.kafka_config import spark_options

VALUE_SCHEMA = "key string, seq string"


class SparkTopicError(RuntimeError):
    """Spark could not read the topic (no Kafka connector on the session's classpath, no broker)."""


def read(spark, bootstrap: str, topic: str, *, committed: bool = True, headers: bool = True):
    """``topic`` from ``bootstrap`` as checker columns (module docstring), at ``read_committed`` unless
    ``committed`` is false.

    Raises: :class:`SparkTopicError` naming the fix when the Kafka source is missing.
    """

    try:
        raw = (spark.read.format("kafka")
               .options(**spark_options(bootstrap))
               .option("subscribe", topic)
               .option("startingOffsets", "earliest")
               .option("endingOffsets", "latest")
               .option("kafka.isolation.level", "read_committed" if committed else "read_uncommitted")
               .option("includeHeaders", "true" if headers else "false")
               .load())
    except Exception as e:  # noqa: BLE001 - AnalysisException when the data source is missing
        if "kafka" in str(e).lower() and "data source" in str(e).lower():
            raise SparkTopicError("Spark has no Kafka data source: start the session with the connector "
                                  "(onceproof.checking.spark.checks.session(kafka=True), or spark.jars = the jars "
                                  "`onceproof deps` resolves)") from e
        raise
    return decode(raw, header_names(raw) if headers else [])


def header_names(raw) -> list[str]:
    """The header names of ``raw`` (Spark's Kafka rows), in order of first appearance (one small job)."""
    from pyspark.sql import functions as F

    h = raw.select("partition", "offset", F.posexplode("headers").alias("i", "h"))
    first = h.groupBy(F.col("h.key").alias("name")).agg(F.min(F.struct("partition", "offset", "i")).alias("at"))
    return [r["name"] for r in first.orderBy("at").collect()]


def decode(raw, headers: list[str]):
    """Spark's Kafka rows (``key``, ``value`` binary, ``partition``, ``offset``, ``timestamp``,
    ``headers``) → checker columns (module docstring) plus ``onceproof.store.spark_readers.ORD``."""
    from pyspark.sql import functions as F

    from onceproof.store.spark_readers import ORD

    v = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    obj = F.trim(F.col("value").cast("string")).startswith("{")
    cols = [F.coalesce(F.when(obj, v["key"]), F.col("key").cast("string")).alias("key"),
            F.when(obj, v["seq"].try_cast("long")).alias("seq"),
            F.col("partition").cast("long").alias("partition"), F.col("offset").cast("long").alias("offset"),
            F.unix_millis("timestamp").alias("timestamp")]
    for name in headers:
        last = F.try_element_at(F.filter("headers", _named(name)), F.lit(-1))
        cols.append(last["value"].cast("string").alias(name))
    return raw.select(*cols).withColumn(ORD, F.monotonically_increasing_id())


def _named(name: str):
    """A one-argument predicate for ``F.filter`` (a second argument would be the element's index)."""
    from pyspark.sql import functions as F

    return lambda h: h["key"] == F.lit(name)
