"""KAFKA-17754 probe (issue 29, item 5): can a produce request held up in the network land in a transactional
producer's *next* transaction when the producer keeps one epoch across transactions?

KAFKA-17754 (found by Jepsen): before KIP-890 part 2, a producer keeps its producer epoch across transactions;
a produce request of transaction T1, delayed in the network past T1's end, can reach the partition leader while
T2 of the same producer id and epoch is open on that partition, and be appended into T2: an aborted record
made visible by T2's commit. KIP-890 part 2 bumps the epoch at every transaction end (transaction version 2);
librdkafka does not implement it (confluentinc/confluent-kafka-python#5423), so a librdkafka producer reused
across transactions is the case to probe. onceproof's sink builds a producer and calls ``init_transactions()``
per task attempt (a fresh epoch per transaction), the defence #5423 proposes.

Two kinds of trial, on the local backend's proxied cluster (every client path through toxiproxy):

``--held produce`` (the partition's leader is not the transactional.id's coordinator, so only Produce is held):

1. ``begin_transaction()``; a latency toxic (upstream: towards the broker) on the client path of the
   partition's leader; produce record ``a``; the client gives up on it (``message.timeout.ms`` below the
   latency) and the transaction is aborted (``abort_transaction()``);
2. ``begin_transaction()``; produce ``b`` (its AddPartitionsToTxn goes to the coordinator, unheld; its Produce
   is held too); the toxic is removed, so both held requests reach the leader while T2 is open;
   ``commit_transaction()``;
3. a ``read_committed`` consumer reads the partition: ``a`` visible is the anomaly (an aborted read).

``--held endtxn`` (the coordinator is not the leader, so only the coordinator's requests are held):

1. ``begin_transaction()``; produce ``a``; ``flush()``; a latency toxic upstream on the coordinator's client
   path with toxicity 0.5 (toxiproxy draws per connection); ``commit_transaction()``: when the connection
   holding EndTxn(COMMIT) is held, librdkafka times the request out at ``socket.timeout.ms`` (below the
   latency) and sends it again on a new connection, which may be clean;
2. ``begin_transaction()``; produce ``b``; ``flush()``; wait until the held EndTxn(COMMIT) of T1 has reached
   the coordinator (the toxic's latency after it was added), remove the toxic, ``abort_transaction()``;
3. ``b`` visible is the anomaly: T1's delayed commit committed T2, which the application aborted.

Variants: ``long-lived`` (one producer, ``init_transactions()`` once, reused for every trial) and
``per-transaction`` (a new producer and ``init_transactions()`` per trial, onceproof's sink). The report counts,
per variant, trials, ``a`` visible (anomalies), and how each step ended.

Run: ``make probe-kafka17754`` (both kinds, the pinned broker; about 6 min: a 3-broker cluster with toxiproxy,
2 × 2 × ``--trials`` trials); ``ONCEPROOF_KAFKA_VERSION=3.9.1`` runs it on another broker from Maven Central.
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
                     "request.timeout.ms": message_timeout_ms, "socket.timeout.ms": message_timeout_ms,
                     "transaction.timeout.ms": 60000, "linger.ms": 0})


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


def _settle(prod: Producer, commit: bool) -> str:
    """Commit (or abort) the open transaction, retrying a timed-out call as librdkafka allows; how it ended."""
    call = prod.commit_transaction if commit else prod.abort_transaction
    word = "committed" if commit else "aborted"
    for _ in range(6):
        try:
            call(30)
            return word
        except KafkaException as e:
            err = e.args[0]
            if err.retriable():
                continue
            if commit and err.txn_requires_abort():
                try:
                    prod.abort_transaction(30)
                    return f"error: {err.str()} → aborted"
                except KafkaException as e2:
                    return f"error: {err.str()} → abort failed: {e2.args[0].str()}"
            return f"error: {err.str()}"
    return "timed out 6 times"


def trial(net, path: str, prod: Producer, topic: str, tag: str, latency_ms: int, renew) -> dict:
    """One ``--held produce`` trial (see the module docstring); what each step did, and under ``_producer``
    the producer of T2 (``renew(prod)``: the same one, or a new one initialised)."""
    steps: dict = {"_producer": prod}
    errors: list[str] = []
    prod.begin_transaction()
    toxic = net.slow(path, "latency", {"latency": latency_ms, "jitter": 0}, f"hold-{tag}", direction="upstream")
    try:
        prod.produce(topic, value=f"{tag}-a".encode(), partition=0,
                     on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
        left = prod.flush(latency_ms / 1000 + 10)
        steps["a_unacked"] = left
        steps["a_delivery_error"] = errors[:1]
        steps["t1"] = _settle(prod, commit=not errors and left == 0)
        prod = steps["_producer"] = renew(prod)
        prod.begin_transaction()
        prod.produce(topic, value=f"{tag}-b".encode(), partition=0)
        prod.poll(0.5)  # AddPartitionsToTxn (unheld) before the held requests go on
    except KafkaException as e:
        steps["t2"] = f"error: {e.args[0].str()}"
        return steps
    finally:
        net.unslow(path, toxic)
    try:
        prod.flush(30)
        steps["t2"] = _settle(prod, commit=True)
    except KafkaException as e:
        steps["t2"] = f"error: {e.args[0].str()}"
    return steps


def trial_endtxn(net, path: str, prod: Producer, topic: str, tag: str, latency_ms: int, renew) -> dict:
    """One ``--held endtxn`` trial (see the module docstring); what each step did, and under ``_producer``
    the producer of T2 (as :func:`trial`)."""
    steps: dict = {"_producer": prod}
    try:
        prod.begin_transaction()
        prod.produce(topic, value=f"{tag}-a".encode(), partition=0)
        prod.flush(30)
    except KafkaException as e:
        return {**steps, "t1": f"error before the hold: {e.args[0].str()}"}
    added = time.monotonic()
    toxic = net.slow(path, "latency", {"latency": latency_ms, "jitter": 0}, f"hold-{tag}", direction="upstream",
                     toxicity=0.5)
    try:
        steps["t1"] = _settle(prod, commit=True)
        steps["t1_commit_s"] = round(time.monotonic() - added, 2)
        prod = steps["_producer"] = renew(prod)
        prod.begin_transaction()
        prod.produce(topic, value=f"{tag}-b".encode(), partition=0)
        prod.flush(30)
        time.sleep(max(0.0, latency_ms / 1000 + 1 - (time.monotonic() - added)))
    except KafkaException as e:
        steps["t2"] = f"error: {e.args[0].str()}"
        return steps
    finally:
        net.unslow(path, toxic)
    steps["t2"] = _settle(prod, commit=False)  # the application aborts T2: b must never be visible
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--held", choices=("produce", "endtxn", "both"), default="both",
                    help="which requests the toxic holds (default both, one after the other)")
    ap.add_argument("--trials", type=int, default=5, help="trials per kind and variant (default 5)")
    ap.add_argument("--latency-ms", type=int, default=8000, help="how long the toxic holds a request (ms)")
    ap.add_argument("--message-timeout-ms", type=int, default=3000,
                    help="the producer's message.timeout.ms, request.timeout.ms and socket.timeout.ms")
    a = ap.parse_args(argv)
    kinds = ("produce", "endtxn") if a.held == "both" else (a.held,)
    work = Path(tempfile.mkdtemp(prefix="onceproof-kafka17754-"))
    backend = registry.get("local")
    cluster = backend.cluster(ClusterShape(work / "cluster", nodes=3, log_dir=work / "logs", proxied=True))
    net = backend.network(cluster, work / "logs")
    report: dict = {"kafka": "", "trials": a.trials, "latency_ms": a.latency_ms,
                    "message_timeout_ms": a.message_timeout_ms, "runs": {}}
    try:
        net.start()
        cluster.up()
        report["kafka"] = cluster.version
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for kind in kinds:
            for variant in ("long-lived", "per-transaction"):
                report["runs"][f"{kind}/{variant}"] = _run(a, cluster, net, admin, kind, variant)
    finally:
        cluster.down()
        net.stop()
    print(json.dumps(report, indent=1))
    print(f"kafka {report['kafka']}, latency {a.latency_ms} ms, client timeouts {a.message_timeout_ms} ms:")
    for name, r in report["runs"].items():
        print(f"  {name}: {len(r['aborted_visible'])} of {a.trials} aborted records visible "
              f"({', '.join(r['aborted_visible']) or 'none'}); {r['committed_visible']} committed records visible")
    return 0


def _run(a, cluster, net, admin, kind: str, variant: str) -> dict:
    """``--trials`` trials of ``kind`` with one producer (``long-lived``) or a new producer and
    ``init_transactions()`` before each transaction (``per-transaction``, onceproof's sink)."""
    topic = f"probe-{kind}-{variant}"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    leader = -1
    for _ in range(60):  # a new topic's metadata may lag its creation (seen on Kafka 3.5.2)
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        leader = parts[0].leader if 0 in parts else -1
        if leader >= 0:
            break
        time.sleep(0.5)
    # a transactional.id whose coordinator is another broker, so the toxic holds one kind of request only
    # (__transaction_state exists once a producer initialised)
    first = _producer(cluster.bootstrap, f"probe-{kind}-{variant}-0", a.message_timeout_ms)
    first.init_transactions(60)
    txn_id = next(t for t in (f"probe-{kind}-{variant}-{k}" for k in range(200))
                  if txn_coordinator(cluster.bootstrap, t)[0] not in (leader, -1))
    coordinator = txn_coordinator(cluster.bootstrap, txn_id)[0]
    path = f"client-{leader if kind == 'produce' else coordinator}"

    def fresh() -> Producer:
        p = _producer(cluster.bootstrap, txn_id, a.message_timeout_ms)
        p.init_transactions(60)
        return p

    prod = fresh()
    renew = (lambda p: p) if variant == "long-lived" else (lambda p: fresh())
    rows = []
    for i in range(a.trials):
        one = trial if kind == "produce" else trial_endtxn
        rows.append(one(net, path, prod, topic, f"{variant}-{i}", a.latency_ms, renew))
        prod = rows[-1].pop("_producer")
    time.sleep(a.latency_ms / 1000 + 2)  # whatever the toxic held has reached the broker by now
    seen = _visible(cluster.bootstrap, topic)
    aborted_tag = "-a" if kind == "produce" else "-b"
    settled = "t1" if kind == "produce" else "t2"  # the transaction the application did not commit
    aborted = [f"{variant}-{i}{aborted_tag}" for i, r in enumerate(rows) if r.get(settled) != "committed"]
    return {"leader": leader, "transactional_id": txn_id, "coordinator": coordinator, "held_path": path,
            "steps": rows, "aborted_visible": sorted(v for v in seen if v in aborted),
            "committed_visible": len([v for v in seen if v not in aborted])}


if __name__ == "__main__":
    raise SystemExit(main())
