"""Which broker a broker fault hits: ``one``, ``minority``, ``leader`` or ``txn-coordinator``.

The transaction coordinator of a ``transactional.id`` is the leader of partition
``abs(javaHashCode(id)) % transaction.state.log.num.partitions`` of ``__transaction_state``
(Kafka's ``TransactionStateManager.partitionFor``, KIP-98). The Python client has no
DescribeTransactions call, so the lookup computes that partition and reads its leader from metadata.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException

from onceproof.clients import topics

TARGETS = ("one", "minority", "leader", "txn-coordinator")
TXN_STATE_TOPIC = "__transaction_state"


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (signed 32-bit) over UTF-16 code units."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``|n|``, with ``Integer.MIN_VALUE`` → 0."""
    return 0 if n == -(1 << 31) else abs(n)


def txn_state_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition holding ``transactional_id``'s state."""
    return kafka_abs(java_hash(transactional_id)) % partitions


def partition_leaders(bootstrap: str, topic: str, attempts: int = 3) -> dict[int, int]:
    """``{partition: leader node id}`` (``-1`` for no leader) from cluster metadata.

    A request that went to a broker just killed fails at once (librdkafka: ``_TRANSPORT``, "Broker
    transport failure") although the others answer: it is asked again through a new client, at most
    ``attempts`` times, 0.5 s apart. Raises: ``KafkaException`` when every attempt failed."""
    for i in range(attempts):
        try:
            md = topics.admin(bootstrap).list_topics(topic, timeout=10).topics.get(topic)
            break
        except KafkaException:
            if i == attempts - 1:
                raise
            time.sleep(0.5)
    if md is None or md.error is not None:
        return {}
    return {p: m.leader for p, m in md.partitions.items()}


def txn_coordinator(bootstrap: str, transactional_id: str) -> tuple[int, int]:
    """``(node id of the coordinator, __transaction_state partition)`` for ``transactional_id``; the node
    is ``-1`` when the partition has no leader (or the topic does not exist yet)."""
    leaders = partition_leaders(bootstrap, TXN_STATE_TOPIC)
    if not leaders:
        return -1, -1
    p = txn_state_partition(transactional_id, len(leaders))
    return leaders.get(p, -1), p


@dataclass
class Choice:
    """Brokers to hit and why (the evidence of the selection)."""

    nodes: list[int]
    why: dict


def choose(target: str, bootstrap: str, live: list[int], rng: random.Random, *, output_topic: str,
           sink_ids: list[str]) -> Choice:
    """Pick brokers for ``target`` among the ``live`` node ids.

    Raises: ``ValueError`` for an unknown target (the message lists the known ones).
    """
    live = sorted(live)
    if not live:
        return Choice([], {"reason": "no live broker"})
    if target == "one":
        return Choice([rng.choice(live)], {})
    if target == "minority":
        k = max(1, (len(live) - 1) // 2)
        return Choice(sorted(rng.sample(live, k)), {"size": k, "of": len(live)})
    if target == "leader":
        leaders = partition_leaders(bootstrap, output_topic)
        parts = sorted(p for p, n in leaders.items() if n in live)
        if not parts:
            return Choice([], {"reason": f"no live leader for {output_topic}"})
        p = rng.choice(parts)
        return Choice([leaders[p]], {"topic": output_topic, "partition": p})
    if target == "txn-coordinator":
        txn_id = rng.choice(sink_ids)
        node, part = txn_coordinator(bootstrap, txn_id)
        if node not in live:
            return Choice([], {"reason": f"no live coordinator for {txn_id}", "partition": part})
        return Choice([node], {"transactional_id": txn_id, "txn_state_partition": part})
    raise ValueError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
