"""The progress marker: the last micro-batch a sink partition committed, stored atomically with its data.

The marker for sink partition ``p`` of sink ``S`` is the committed offset of consumer group
``<S>-marker-<p>`` on partition 0 of the progress topic, and its value is ``batchId + 1`` (offset 0
then means "batch 0 done", and "no offset" means "nothing committed"). It is written with
``send_offsets_to_transaction`` inside the same Kafka transaction as the partition's rows, so the marker
and the rows become visible together or not at all (KIP-98: offsets committed in a transaction are
applied only when the transaction commits).

It is read with ``committed()`` on a ``read_committed`` consumer, *after* ``init_transactions()`` has
fenced and settled any older producer of the same ``transactional.id``, so no transaction that could
still change it is pending. librdkafka sends OffsetFetch with ``require_stable`` (KIP-447), so even a
pending transactional offset commit would be waited for, not skipped.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition

from onceproof.kafka_config import client_config

NONE = -1


def group_id(sink_id: str, partition: int) -> str:
    """Consumer group that holds sink partition ``partition``'s marker."""
    return f"{sink_id}-marker-{partition}"


def open_consumer(bootstrap: str, sink_id: str, partition: int) -> Consumer:
    """A non-subscribing read_committed consumer of the marker group; also the source of the group
    metadata passed to ``send_offsets_to_transaction``."""
    return Consumer(client_config(bootstrap, {
        "group.id": group_id(sink_id, partition),
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "socket.timeout.ms": 10000,
        "log_level": 3,
    }))


def read(consumer: Consumer, progress_topic: str, timeout_s: float = 30.0) -> int:
    """The last committed batchId for this consumer's sink partition, or ``NONE`` (-1).

    Raises: ``confluent_kafka.KafkaException`` in both failure modes, so callers can classify it with
    ``KafkaError.retriable()`` and log one exception class: when the OffsetFetch request fails (e.g.
    the group coordinator does not answer within ``timeout_s`` seconds: ``_TIMED_OUT``), and when the
    request succeeds but carries a per-partition error (``TopicPartition.error``, e.g.
    ``UNSTABLE_OFFSET_COMMIT`` while a transactional offset commit is pending, KIP-447). Before this,
    the second case raised a bare ``RuntimeError`` that the sink neither logged nor retried.
    """
    tp = consumer.committed([TopicPartition(progress_topic, 0)], timeout=timeout_s)[0]
    if tp.error:
        raise KafkaException(tp.error)
    return tp.offset - 1 if tp.offset >= 0 else NONE


def offsets_for(progress_topic: str, batch_id: int) -> list[TopicPartition]:
    """The offsets to hand to ``send_offsets_to_transaction`` to record ``batch_id`` as done."""
    return [TopicPartition(progress_topic, 0, batch_id + 1)]
