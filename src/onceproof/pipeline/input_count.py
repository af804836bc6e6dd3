"""How many records a Kafka reader at a given isolation level sees in offset ranges of the input: the
completeness guard's reference (``pipeline/completeness.py``) for an input written in transactions.

In a topic written with transactions, not every offset holds a record a reader sees: each transaction
ends with a commit or abort marker (a control record, never returned to a consumer), and a
read_committed reader skips the records of aborted transactions (KIP-98; the broker sends the aborted
transactions' ranges with each fetch and the client drops them). So ``until - from`` no longer says how
many rows a micro-batch of a read_committed Kafka source must hold. This counts them with librdkafka, a
Kafka client independent of Spark's (the guard exists because Spark's reader once returned fewer rows
than its plan), reading the same ranges at the same isolation level as the source.

A range ``[lo, hi)`` is counted once the consumer has passed ``hi``: a record at or past ``hi`` arrived,
or the partition's end (EOF) is at or past ``hi`` (the range ends in markers or aborted data). Spark
plans a read_committed batch up to the last stable offset, so every range is readable when it is asked
for; a broker fault can still hold the read up, so the count is bounded in time.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from onceproof.kafka_config import client_config

TIMEOUT_S = 20.0
"""Seconds a count may take before it gives up (``None``: the batch is not checked)."""


class RangeCounter:
    """Counts the records of ``topic`` ranges a reader at ``isolation`` (``read_committed`` or
    ``read_uncommitted``) sees, with one consumer kept between calls (assigned per call, no group
    offsets committed). Runs in the job's driver. Picklable: the consumer is made when first needed."""

    def __init__(self, bootstrap: str, isolation: str = "read_committed", timeout_s: float = TIMEOUT_S):
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation must be read_committed or read_uncommitted, got {isolation!r}")
        self.bootstrap, self.isolation, self.timeout_s = bootstrap, isolation, timeout_s
        self._consumer: Consumer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None}

    def consumer(self) -> Consumer:
        """The consumer, made on first use."""
        if self._consumer is None:
            self._consumer = Consumer(client_config(self.bootstrap, {
                "group.id": f"onceproof-guard-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                "isolation.level": self.isolation, "enable.partition.eof": True,
                "auto.offset.reset": "earliest", "log_level": 3}))
        return self._consumer

    def count(self, topic: str, ranges: dict[int, tuple[int, int]]) -> dict[int, int] | None:
        """``{partition: records in [lo, hi)}`` for ``ranges`` = ``{partition: (lo, hi)}`` (offsets, hi
        exclusive), as a reader at :attr:`isolation` sees them; ``None`` when some range could not be
        read to its end within :attr:`timeout_s` seconds (a broker down), or its head is no longer in the
        log (deleted since the source read it: the log start is past ``lo``). Raises nothing else from Kafka."""
        todo = {p: (lo, hi) for p, (lo, hi) in ranges.items() if hi > lo}
        counts = {p: 0 for p in ranges}
        if not todo:
            return counts
        c = self.consumer()
        deadline = time.monotonic() + self.timeout_s
        for p, (lo, _) in todo.items():  # a range whose head was deleted since (DeleteRecords, retention)
            try:
                low, _high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=max(1.0, self.timeout_s / 4))
            except KafkaException:
                return None
            if low > lo:
                return None  # what the source read there cannot be counted again
        c.assign([TopicPartition(topic, p, lo) for p, (lo, _) in todo.items()])
        try:
            while todo and time.monotonic() < deadline:
                for m in c.consume(1000, timeout=0.5):
                    p = m.partition()
                    if p not in todo:
                        continue
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF and m.offset() >= todo[p][1]:
                            del todo[p]
                        continue
                    if m.offset() >= todo[p][1]:
                        del todo[p]
                    elif m.offset() >= todo[p][0]:
                        counts[p] += 1
                if todo:
                    for tp in c.position([TopicPartition(topic, p) for p in todo]):
                        if tp.offset >= 0 and tp.offset >= todo[tp.partition][1]:
                            del todo[tp.partition]
        finally:
            c.unassign()
        return None if todo else counts

    def close(self) -> None:
        """Close the consumer; never raises."""
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            self._consumer = None
