"""`onceproof check --bootstrap` on hand-made topics of a real cluster: it reports exactly the planted
duplicate, gap and reordering; an aborted transaction stays invisible; an open transaction is `stuck`."""

import json

import pytest
from confluent_kafka import Producer

from onceproof.clients import topics
from tests.conftest import run_cli

pytestmark = pytest.mark.cluster


def rec(key, seq):
    return {"key": key, "value": json.dumps({"key": key, "seq": seq})}


def produce(bootstrap, topic, records, transactional_id=None, finish="commit"):
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"}
    if transactional_id:
        conf.update({"transactional.id": transactional_id, "transaction.timeout.ms": 600000})
    p = Producer(conf)
    if transactional_id:
        p.init_transactions(30)
        p.begin_transaction()
    for r in records:
        p.produce(topic, key=r["key"], value=r["value"], partition=0)
    p.flush(30)
    if transactional_id and finish == "commit":
        p.commit_transaction(30)
    elif transactional_id and finish == "abort":
        p.abort_transaction(30)
    return p  # an open transaction stays open while this producer lives


def check(bootstrap, inp, out, results):
    p = run_cli(["check", "--bootstrap", bootstrap, "--input-topic", inp, "--output-topic", out,
                 "--recovery-timeout", "5", "--settle", "2", "--results", str(results), "--json"], timeout=300)
    return p.returncode, json.loads(p.stdout[p.stdout.index("{"):])


def test_planted_anomalies_exactly(cluster, tmp_path):
    bs = cluster.bootstrap
    topics.create_topics(bs, {"in1": 1, "out1": 1})
    inputs = [rec(k, s) for s in range(5) for k in "abc"]
    produce(bs, "in1", inputs)
    a = [rec("a", s) for s in (0, 1, 2, 2, 3, 4)]            # duplicate a/2
    b = [rec("b", s) for s in (0, 1, 2, 4)]                  # gap: b/3 lost
    c = [rec("c", s) for s in (0, 1, 3, 2, 4)]               # c/2 after c/3: reordered
    produce(bs, "out1", a + b + c)
    produce(bs, "out1", [rec("a", 99), rec("b", 3)], transactional_id="aborter", finish="abort")
    open_p = produce(bs, "out1", [rec("c", 98)], transactional_id="hanger", finish="open")
    code, r = check(bs, "in1", "out1", tmp_path / "results")
    counts = r["counts"]
    assert counts["duplicate"] == 1 and r["anomalies"]["duplicate"][0]["key"] == "a"
    assert counts["lost"] == 1 and (r["anomalies"]["lost"][0]["key"], r["anomalies"]["lost"][0]["seq"]) == ("b", 3)
    assert counts["nonmonotonic"] == 1 and r["anomalies"]["nonmonotonic"][0]["key"] == "c"
    assert counts["unexpected"] == 0, r["anomalies"]["unexpected"]      # aborted a/99 and b/3 stayed invisible
    assert counts["stuck"] == 1 and r["anomalies"]["stuck"][0]["partition"] == 0
    assert r["stats"]["aborted_hidden"] >= 2
    assert r["verdict"] == "invalid" and code == 1
    open_p.abort_transaction(30)


def test_open_transaction_alone_gives_unknown_then_valid_once_it_ends(cluster, tmp_path):
    bs = cluster.bootstrap
    topics.create_topics(bs, {"in2": 1, "out2": 1})
    recs = [rec(k, s) for s in range(3) for k in "xy"]
    produce(bs, "in2", recs)
    produce(bs, "out2", recs)
    open_p = produce(bs, "out2", [rec("x", 50)], transactional_id="hanger2", finish="open")
    code, r = check(bs, "in2", "out2", tmp_path / "results")
    assert r["verdict"] == "unknown" and code == 2
    assert r["counts"]["stuck"] == 1 and any("stuck" in x or "LSO" in x for x in r["unknown_reasons"])
    open_p.abort_transaction(30)
    code, r = check(bs, "in2", "out2", tmp_path / "results")
    assert r["verdict"] == "valid" and code == 0, r
