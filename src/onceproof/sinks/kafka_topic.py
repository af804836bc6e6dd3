"""The committed state of a sink that writes a Kafka topic: the topic at ``read_committed``.

The reader of the ``eos`` sink, its mutants and ``at-least-once`` (:class:`onceproof.sinks.base.OutputReader`).
Kafka's isolation levels give the two views (KIP-98): ``read_committed`` stops at the last stable
offset (LSO) and skips aborted transactions' records; ``read_uncommitted`` reads to the high watermark.
"""

from __future__ import annotations

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec

from onceproof.clients import topics
from onceproof.sinks.base import OutputLocation, OutputView
from onceproof.workloads import registry as workloads


def read_output(location: OutputLocation) -> OutputView:
    """``location.topic`` read at read_uncommitted, then at read_committed, into an
    :class:`~onceproof.sinks.base.OutputView`: ``committed`` decoded by ``location.workload``'s decoder
    with the provenance headers; ``uncommitted`` as ``partition``/``offset`` only, taking nothing else
    from its messages (it only tells which records read_committed hid:
    ``onceproof.checkers.transactions.hidden_aborted``). Uncommitted first, so that a record committed
    between the two reads is in both: read the other way round, it would be counted as hidden.
    ``unsettled`` says when the committed read did not reach its end offsets within
    ``location.timeout_s`` seconds. Raises ``onceproof.clients.topics.TopicError`` as ``read_topic``
    does."""
    chunk = location.chunk or topics.READ_CHUNK
    unc = topics.read_topic(location.bootstrap, location.topic, committed=False, timeout_s=location.timeout_s,
                            with_headers=False, places_only=True, chunk=chunk)
    out = topics.read_topic(location.bootstrap, location.topic, committed=True, timeout_s=location.timeout_s,
                            with_headers=True, decode=workloads.get(location.workload).decode, chunk=chunk)
    unsettled = ([] if out.complete else
                 [f"reading {location.topic} did not reach its end offsets within {location.timeout_s:.0f}s"])
    return OutputView(committed=out.frame, uncommitted=unc.frame, unsettled=unsettled)


class OutputEnds:
    """The output topic's end offsets at read_committed (the LSO, KIP-98), polled through one AdminClient
    (``ListOffsets`` with ``READ_COMMITTED``; ``onceproof.clients.topics.end_offsets`` builds a client per
    call, too slow for a 50 ms poll): a :class:`~onceproof.sinks.base.CommittedEnd`. Raises
    ``confluent_kafka.KafkaException`` when the topic's metadata cannot be read."""

    poll_s = 0.05
    settle_s = 0.5
    """The previous batch's commit markers land after its ``commit_transaction()`` returned (KIP-98's
    two-phase commit): growth this long after ``offsets/N`` appears is not batch N's
    (``nemesis/commit_window_watch.py``). Long enough for the markers on 2 loaded cores, short beside a
    micro-batch's read, write and commit."""

    def __init__(self, location: OutputLocation):
        self.topic = topics.partitions(location.bootstrap, location.topic)
        self.name = location.topic
        self.admin = topics.admin(location.bootstrap)

    def read(self) -> dict[int, int]:
        """``{partition: LSO}``. Raises ``confluent_kafka.KafkaException`` when a partition has none now."""
        req = {TopicPartition(self.name, p): OffsetSpec.latest() for p in self.topic}
        futs = self.admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5)
        return {tp.partition: f.result(timeout=10).offset for tp, f in futs.items()}

    def close(self) -> None:
        """Nothing to release."""
