"""KAFKA-17754 probe (issue 29, item 5): can a produce request held up in the network land in a transactional
producer's *next* transaction when the producer keeps one epoch across transactions?

KAFKA-17754 (found by Jepsen): before KIP-890 part 2, a producer keeps its producer epoch across transactions;
a produce request of transaction T1, delayed in the network past T1's end, can reach the partition leader while
T2 of the same producer id and epoch is open on that partition, and be appended into T2: an aborted record
made visible by T2's commit. KIP-890 part 2 bumps the epoch at every transaction end (transaction version 2);
librdkafka does not implement it (confluentinc/confluent-kafka-python#5423), so a librdkafka producer reused
across transactions is the case to probe. onceproof's sink builds a producer and calls ``init_transactions()``
per task attempt (a fresh epoch per transaction), the defence #5423 proposes.

One trial, on the local backend's proxied cluster (every client path through toxiproxy):

1. ``begin_transaction()``; a latency toxic (upstream: towards the broker) on the client path of the
   partition's leader; produce record ``a``; the client gives up on it (``message.timeout.ms`` below the
   latency) and the transaction is aborted (``abort_transaction()``);
2. the toxic is removed, so what it held goes on to the broker; ``begin_transaction()``; produce ``b``;
   ``commit_transaction()``;
3. a ``read_committed`` consumer reads the partition: ``a`` visible is the anomaly.

Variants: ``long-lived`` (one producer, ``init_transactions()`` once, reused for every trial) and
``per-transaction`` (a new producer and ``init_transactions()`` per trial, onceproof's sink). The report counts,
per variant, trials, ``a`` visible (anomalies), and how each step ended.

Run: ``make probe-kafka17754`` (about 3 min: a 3-broker cluster with toxiproxy, 2 × ``--trials`` trials).
It is an experiment, not a test: it prints what it saw and exits 0 unless it could not run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from onceproof.backends import registry
from onceproof.backends.base import ClusterShape
from onceproof.nemesis.targets import txn_coordinator


def _producer(bootstrap: str, txn_id: str, message_timeout_ms: int) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "enable.idempotence": True,
                     "acks": "all", "message.timeout.ms": message_timeout_ms,
                     "request.timeout.ms": message_timeout_ms, "transaction.timeout.ms": 60000,
                     "linger.ms": 0})


def _visible(bootstrap: str, topic: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[str] = []
    idle = 0
    while idle < 5:
        m = c.poll(1.0)
        if m is None:
            idle += 1
            continue
        if m.error() is None:
            out.append(m.value().decode())
    c.close()
    return out


def trial(net, path: str, prod: Producer, topic: str, tag: str, latency_ms: int) -> dict:
    """One trial (see the module docstring); what each step did."""
    steps: dict = {}
    errors: list[str] = []
    prod.begin_transaction()
    toxic = net.slow(path, "latency", {"latency": latency_ms, "jitter": 0}, f"hold-{tag}", direction="upstream")
    prod.produce(topic, value=f"{tag}-a".encode(), partition=0,
                 on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
    left = prod.flush(latency_ms / 1000 + 10)
    steps["a_unacked"] = left
    steps["a_delivery_error"] = errors[:1]
    try:
        prod.commit_transaction(30) if not errors and left == 0 else prod.abort_transaction(30)
        steps["t1"] = "committed" if not errors and left == 0 else "aborted"
    except KafkaException as e:
        steps["t1"] = f"error: {e.args[0].str()}"
        try:
            prod.abort_transaction(30)
            steps["t1"] += " → aborted"
        except KafkaException as e2:
            steps["t1"] += f" → abort failed: {e2.args[0].str()}"
    net.unslow(path, toxic)
    try:
        prod.begin_transaction()
        prod.produce(topic, value=f"{tag}-b".encode(), partition=0)
        prod.flush(30)
        prod.commit_transaction(30)
        steps["t2"] = "committed"
    except KafkaException as e:
        steps["t2"] = f"error: {e.args[0].str()}"
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5, help="trials per variant (default 5)")
    ap.add_argument("--latency-ms", type=int, default=8000, help="how long the toxic holds the request (ms)")
    ap.add_argument("--message-timeout-ms", type=int, default=3000, help="the producer's message.timeout.ms")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="onceproof-kafka17754-"))
    backend = registry.get("local")
    cluster = backend.cluster(ClusterShape(work / "cluster", nodes=3, log_dir=work / "logs", proxied=True))
    net = backend.network(cluster, work / "logs")
    report: dict = {"kafka": "", "trials": a.trials, "latency_ms": a.latency_ms,
                    "message_timeout_ms": a.message_timeout_ms, "variants": {}}
    try:
        net.start()
        cluster.up()
        report["kafka"] = cluster.version
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for variant in ("long-lived", "per-transaction"):
            topic = f"probe-{variant}"
            admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
            md = admin.list_topics(topic, timeout=10)
            leader = md.topics[topic].partitions[0].leader
            path = f"client-{leader}"
            # a transactional.id whose coordinator is another broker: only the produce request is held, not
            # the EndTxn that ends its transaction (__transaction_state exists once a producer initialised)
            first = _producer(cluster.bootstrap, f"probe-{variant}-0", a.message_timeout_ms)
            first.init_transactions(60)
            txn_id = next(t for t in (f"probe-{variant}-{k}" for k in range(200))
                          if txn_coordinator(cluster.bootstrap, t)[0] != leader)
            prod = None
            rows = []
            for i in range(a.trials):
                if prod is None or variant == "per-transaction":
                    prod = _producer(cluster.bootstrap, txn_id, a.message_timeout_ms)
                    prod.init_transactions(60)
                rows.append(trial(net, path, prod, topic, f"{variant}-{i}", a.latency_ms))
            time.sleep(a.latency_ms / 1000 + 2)  # whatever the toxic held has reached the broker by now
            seen = _visible(cluster.bootstrap, topic)
            report["variants"][variant] = {
                "leader": leader, "transactional_id": txn_id, "coordinator": txn_coordinator(cluster.bootstrap,
                                                                                             txn_id)[0],
                "steps": rows,
                "aborted_visible": sorted(v for v in seen if v.endswith("-a")),
                "committed_visible": len([v for v in seen if v.endswith("-b")])}
    finally:
        cluster.down()
        net.stop()
    print(json.dumps(report, indent=1))
    for v, r in report["variants"].items():
        print(f"{v}: {len(r['aborted_visible'])} of {a.trials} aborted records visible; "
              f"{r['committed_visible']} committed records visible")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
