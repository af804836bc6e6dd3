"""The exactly-once Kafka sink as a library: one call inside your PySpark job's ``foreachBatch``.

::

    from onceproof.pipeline.eos_sink import exactly_once_sink

    sink = exactly_once_sink(bootstrap="broker:9092", input_topic="in", output_topic="out",
                             checkpoint="/ckpt/my-query")
    (df.writeStream.foreachBatch(sink)
       .option("checkpointLocation", "/ckpt/my-query").start())

``df`` must have the columns ``key`` (string or binary) and ``value`` (binary or string), as Spark's
own Kafka sink wants; ``in_partition`` and ``in_offset`` (the input record's Kafka partition and
offset, ints) are optional and, when present, become the ``op.input`` provenance header that lets the
checker pair each output record with its input record.

What it does (``pipeline/transactional_sink.py``, docs/architecture.md, "The exactly-once sink"; the design of Flink's
``TwoPhaseCommitSinkFunction`` on Kafka transactions, KIP-98): each (micro-batch ``batchId``, Spark
partition ``p``) is written in one Kafka transaction by the producer of ``transactional.id =
<sink_id>-<p>``, and the same transaction commits a progress marker (``batchId + 1`` as the committed
offset of group ``<sink_id>-marker-<p>`` on the progress topic). A retried task or a replayed batch
first calls ``init_transactions()``, which fences every older producer of its id (producer epoch,
KIP-98) and aborts its open transaction, then reads the marker and skips a (batch, partition) already
committed. Provenance headers ``op.batch``, ``op.sink_partition``, ``op.attempt``, ``op.txn_id``,
``op.sink``, ``op.incarnation`` (``pipeline/provenance.py``) go on every record.

Guarantees, for readers at ``isolation.level=read_committed``:

* every row of every micro-batch Spark runs to completion is visible exactly once, across task retries,
  executor losses, driver restarts from the same checkpoint and broker failures, provided the batch is
  deterministic (a replay of batch N reads the same input offsets, which Spark's offset log ensures for
  the Kafka source, and computes the same rows per partition);
* records of a failed attempt are never visible (its transaction is aborted, never committed);
* per Spark partition, records keep the partition's order.

Limits:

* **No atomic visibility across partitions**: each Spark partition commits its own transaction, so a
  reader can see partition 0 of batch N before partition 1 of it (Kafka has no cross-producer
  transaction; KIP-939 proposes two-phase commit with an external coordinator). Every record is still
  visible once.
* Rows that keep ``in_partition`` are written by input Kafka partition: the ``transactional.id`` and
  marker of sink partition *p* belong to input partition *p*, so a replay is skipped exactly where it
  was committed even when a restart splits the batch into other Spark partitions (another
  ``minPartitions``, another Spark version). Rows without it are written by Spark partition index,
  which must then stay stable across replays (a stateful stream: ``spark.sql.shuffle.partitions`` is
  fixed by the checkpoint).
* ``transaction.timeout.ms`` (``txn_timeout_ms``) bounds how long a dead attempt's open transaction
  pins the output's last stable offset (LSO) and stalls read_committed readers; it must be ≤ the
  brokers' ``transaction.max.timeout.ms`` (900,000 ms by default).
* A fresh checkpoint gets a fresh sink id (``<checkpoint>/onceproof-sink-id``), so its batches, numbered
  from 0 again, are not skipped under an older query's markers.

Configuration (arguments of :func:`exactly_once_sink`); under ``onceproof run --pipeline-cmd`` two
environment variables, set by the harness's supervisor, turn on its observation points: ``ONCEPROOF_SINK_LOG``
(append one JSON line per transaction event, read by the checker for provenance and aborted-read checks)
and ``ONCEPROOF_CONTROL_DIR`` (the fault hooks of ``pipeline/hooks.py``: a held pre-commit window for
``kill-executor``, the commit-delay faults). Outside the harness both are unset and cost nothing.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from onceproof.kafka_config import client_config
from onceproof.pipeline import completeness, hooks, input_count
from onceproof.pipeline.identity import default_sink_id, driver_incarnation, input_partitions
from onceproof.pipeline.transactional_sink import SinkConfig, abort_leftovers, log_event, write_partition

SINK_LOG_ENV = "ONCEPROOF_SINK_LOG"
CONTROL_DIR_ENV = "ONCEPROOF_CONTROL_DIR"


class ExactlyOnceSink:
    """A ``foreachBatch`` function: ``sink(batch_df, batch_id)`` writes the batch exactly once.

    Built by :func:`exactly_once_sink` (or directly from a :class:`SinkConfig`). ``guard`` (a
    :class:`onceproof.pipeline.completeness.Guard`) turns on the completeness check
    (``pipeline/completeness.py``): the batch is cached, counted per input partition against Spark's
    offset log (and, for an input written in transactions, a second reader's count of the same ranges),
    and written from the same cached rows; an incomplete batch raises
    :class:`onceproof.pipeline.completeness.IncompleteBatch` before any transaction begins, so Spark fails
    the batch and the restarted query replays it; a batch the second reader cannot count in time is
    written unchecked (a ``batch-unchecked`` event in the sink log; a counted one logs ``input-counted``
    with its planned offsets and rows). It needs the
    ``in_partition`` and ``in_offset`` columns. ``control``: the harness's hooks, run after every
    partition committed and before Spark writes ``commits/<batchId>``.

    Raises (from ``__call__``): ``pyspark`` errors wrapping :class:`onceproof.pipeline.transactional_sink.SinkError`
    when a partition cannot commit after Spark's task retries (``spark.task.maxFailures``).
    """

    def __init__(self, cfg: SinkConfig, guard: completeness.Guard | None = None,
                 control: hooks.ControlDir | None = None, input_topic: str | None = None):
        self.cfg = cfg
        self.guard = guard
        self.control = control or hooks.ControlDir(cfg.control_dir or None)
        self.input_topic = input_topic or (guard.topic if guard else None)
        self._admin = None

    def __call__(self, batch_df, batch_id: int) -> None:
        # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        batch_df = batch_df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = None  # rows per input partition: one JVM job serves the guard and the tasks' checks
            if self.guard is not None:
                counts = _counts(batch_df, F.col("in_partition"))
                try:
                    completeness.verify(batch_df, self.guard, batch_id, counts=counts)
                except completeness.IncompleteBatch as e:
                    log_event(self.cfg, "incomplete-batch", batch=batch_id, error=str(e))
                    raise
                except completeness.Unverifiable as e:
                    log_event(self.cfg, "batch-unchecked", batch=batch_id, error=str(e))
                if self.guard.last and self.guard.last["batch"] == batch_id:  # counted by the second reader
                    log_event(self.cfg, "input-counted", **self.guard.last)
            self._write(batch_df, batch_id, counts)
        finally:
            batch_df.unpersist()
        self.control.after_sink_commit(batch_id)

    def _write(self, batch_df, batch_id: int, in_counts: dict[int, int] | None = None) -> None:
        """Write the (persisted) batch, one transaction per sink partition (``write_partition``), each
        task checked against the row count the driver took of its partition first (a JVM-side count of
        the cached batch: a task whose input stream ended early must not commit; ``write_partition``).
        ``in_counts``: that count per input partition when the caller already took it (the guard's).

        Rows that carry their input record (``in_partition``) are regrouped so that sink partition *p*
        holds exactly the rows of input Kafka partition *p*, in input-offset order: the
        ``transactional.id`` and marker of *p* then name an input topic-partition, whatever ranges Spark
        split the batch into. Spark's partition index is not such a name: a restart with another
        ``minPartitions`` (or a Spark version that splits ranges differently) replays batch N in other
        ranges, and a marker keyed by index then skips rows never committed and rewrites committed
        ones (issue 10's upgrade finding; the ``eos-index-keyed`` mutant keeps that behaviour). The
        number of sink partitions is the input topic's partition count now, read from Kafka: partitions
        are only ever added, so it exceeds every input partition of any batch, replayed or new, and the
        index of input partition *p* is *p* (``partitionBy`` places key *k* at ``k % n``). Rows without
        ``in_partition`` (a stateful workload's output) keep Spark's partitioning, which the checkpoint
        fixes (``spark.sql.shuffle.partitions`` is stored in the offset log).
        """
        # pyspark: only where Spark runs; this module is imported on the harness side too, which needs no Spark
        from pyspark.sql import functions as F

        flaws = self.cfg.flaws
        if flaws.nondeterministic:  # the eos-nondeterministic mutant: a replay splits the batch otherwise
            n = max(1, batch_df.rdd.getNumPartitions())  # an empty first batch has 0 partitions
            write = partial(write_partition, self.cfg, batch_id)
            batch_df.repartition(n, (F.rand() * n).cast("int")).rdd.foreachPartition(write)
            return
        if flaws.index_keyed or "in_partition" not in batch_df.columns or not self.input_topic:
            expected = _counts(batch_df, F.spark_partition_id())
            batch_df.rdd.foreachPartition(partial(write_partition, self.cfg, batch_id, expected=expected))
            return
        expected = in_counts if in_counts is not None else _counts(batch_df, F.col("in_partition"))
        write = partial(write_partition, self.cfg, batch_id, expected=expected)
        (batch_df.rdd.map(lambda r: (r.in_partition, r))
         .partitionBy(self._input_partitions(), lambda k: k)
         .foreachPartition(lambda it: write(sorted((r for _, r in it), key=lambda r: r.in_offset))))

    def _input_partitions(self) -> int:
        """The input topic's partition count from Kafka's metadata (one AdminClient, kept)."""

        if self._admin is None:
            self._admin = AdminClient(client_config(self.cfg.bootstrap, {"log_level": 3}))
        md = self._admin.list_topics(self.input_topic, timeout=30)
        t = md.topics.get(self.input_topic)
        if t is None or t.error is not None or not t.partitions:
            raise RuntimeError(f"input topic {self.input_topic!r} has no partition metadata: "
                               f"{t.error if t is not None else 'not found'}")
        return max(t.partitions) + 1


def _counts(batch_df, by) -> dict[int, int]:
    """``{sink partition: rows}`` of the (cached) batch, counted in the JVM: by ``spark_partition_id()``
    (the partitions ``batch_df.rdd`` has) or by ``in_partition`` (the input Kafka partition)."""
    return {int(r[0]): int(r[1]) for r in batch_df.groupBy(by.alias("p")).count().collect()}


def exactly_once_sink(*, bootstrap: str, input_topic: str, output_topic: str, checkpoint: str | os.PathLike,
                      progress_topic: str | None = None, sink_id: str | None = None,
                      txn_timeout_ms: int = 60000, verify_complete: bool = False,
                      transactional_input: bool = True, fence_on_start: bool = True) -> ExactlyOnceSink:
    """The transactional Kafka sink for ``foreachBatch`` (module docstring: guarantees and limits).

    Call it on the driver before ``writeStream.start()``, once per driver start.

    Args:
        bootstrap: Kafka bootstrap servers, ``host:port[,...]``.
        input_topic: the query's input topic; its partition count (read from Kafka now) sizes the pool of
            transactional ids fenced at start.
        output_topic: where rows go.
        checkpoint: the query's ``checkpointLocation``; the sink id is stored there
            (``onceproof.pipeline.identity.default_sink_id``), so a restart from the same checkpoint keeps its ids.
        progress_topic: the markers' topic (1 partition; created when missing); default
            ``<output_topic>-progress``.
        sink_id: prefix of every ``transactional.id`` and marker group; default: the checkpoint's.
        txn_timeout_ms: the producers' ``transaction.timeout.ms``, ms (≥ 6000: ``message.timeout.ms`` is
            5 s less).
        verify_complete: refuse a batch whose rows do not cover the offset ranges Spark planned for it
            (needs ``in_partition``/``in_offset``; ``pipeline/completeness.py``).
        transactional_input: the input topic may be written in transactions (commit markers, aborted
            records take offsets), so ``verify_complete`` counts each range with a read_committed librdkafka
            reader (``pipeline/input_count.py``), right for any input; ``False`` takes every offset for a
            record, which saves that read but refuses every batch of an input that has transactions.
        fence_on_start: settle every id of the pool now (``init_transactions()``), so a dead driver's
            open transactions stop pinning the output's LSO at once rather than at their timeout.

    Raises: ``RuntimeError`` when the input topic has no partition metadata;
    ``confluent_kafka.KafkaException`` when Kafka does not answer (creating the progress topic,
    fencing); ``ValueError`` for ``txn_timeout_ms`` < 6000.
    """

    if txn_timeout_ms < 6000:
        raise ValueError(f"txn_timeout_ms={txn_timeout_ms}: must be ≥ 6000 (message.timeout.ms is 5000 less)")
    progress_topic = progress_topic or f"{output_topic}-progress"
    _ensure_progress_topic(bootstrap, progress_topic)
    cfg = SinkConfig(bootstrap=bootstrap, output_topic=output_topic, progress_topic=progress_topic,
                     sink_id=sink_id or default_sink_id(Path(checkpoint), "onceproof-eos"),
                     txn_timeout_ms=txn_timeout_ms, log_path=os.environ.get(SINK_LOG_ENV, ""),
                     control_dir=os.environ.get(CONTROL_DIR_ENV, ""), incarnation=driver_incarnation())
    if fence_on_start:
        abort_leftovers(cfg, input_partitions(bootstrap, input_topic))
    guard = None
    if verify_complete:
        counter = input_count.RangeCounter(bootstrap) if transactional_input else None
        guard = completeness.Guard(str(checkpoint), input_topic, counter)
    return ExactlyOnceSink(cfg, guard=guard, input_topic=input_topic)


def _ensure_progress_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Create the 1-partition progress topic unless it exists (replication: up to 3, as many brokers as
    there are). Raises ``confluent_kafka.KafkaException`` for any error but "already exists"."""

    a = AdminClient(client_config(bootstrap, {"log_level": 3}))
    md = a.list_topics(timeout=timeout_s)
    if topic in md.topics and md.topics[topic].error is None:
        return
    fut = a.create_topics([NewTopic(topic, 1, min(3, len(md.brokers)))], operation_timeout=timeout_s)[topic]
    try:
        fut.result(timeout=timeout_s)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
