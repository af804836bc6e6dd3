"""The workload's transactional (the default) and at-most-once producers (``workloads/producers.py``) on
a real 3-broker cluster, through a broker kill and restart: every send completed exactly once in the
history, every ``ok`` at its recorded place in the input at read_committed, no record visible twice,
none visible that the history says failed. The transactional one also aborts some transactions on
purpose after their records reached the log (visible at read_uncommitted only), is fenced once by a
second producer with its transactional.id and carries on with a new one, and the completeness
guard's second reader (``pipeline/input_count.py``) counts what each isolation level sees."""

import json
import time

import pytest

from onceproof.clients import topics
from onceproof.pipeline.input_count import RangeCounter
from onceproof.store.history import HistoryWriter
from onceproof.workloads import producers
from onceproof.workloads.transactional_client import ABORTED_ON_PURPOSE

pytestmark = [pytest.mark.cluster,  # a workload thread that dies is a failure, not a warning
              pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")]


def _ops(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("producer", ["at-most-once", "transactional"])
def test_sends_are_ok_where_they_landed_and_never_visible_twice(cluster, tmp_path, producer):
    bs, topic = cluster.bootstrap, f"in-{producer}"
    topics.create_topics(bs, {topic: 3})
    hist = HistoryWriter(tmp_path / "history.jsonl")
    wl = producers.client(producer, bs, topic, hist, rate=400, keys=20, seed=3, input_aborts=0.2)
    wl.start()
    try:
        time.sleep(4)
        cluster.kill(1)  # a leader and maybe the transaction coordinator go: commits time out, retry, move
        time.sleep(6)
        cluster.start(1)
        # go on until the producer wrote on after the restart: 8 s, and for the transactional one at
        # least 30 transactions with one aborted on purpose (a coordinator that moved with the kill can
        # stall its commits for most of that time: 4 transactions in 18 s once)
        deadline = time.monotonic() + 90
        time.sleep(8)
        if producer == "transactional":  # once commits flow again (a stalled one would become info)
            begun = wl.txns
            while wl.txns < begun + 5 and time.monotonic() < deadline:
                time.sleep(0.5)
            made, fenced_at = wl.producers, _fence(bs, wl)
        while producer == "transactional" and time.monotonic() < deadline and \
                (wl.txns < 30 or not wl.aborted_on_purpose or wl.producers == made or
                 _sent_since(tmp_path / "history.jsonl", fenced_at) < 200):
            time.sleep(1)
    finally:
        wl.stop()
        hist.close()
    ops = _ops(tmp_path / "history.jsonl")
    invokes = [(o["key"], o["seq"]) for o in ops if o["type"] == "invoke"]
    done = {}
    for o in ops:
        if o["type"] in ("ok", "fail", "info"):
            assert (o["key"], o["seq"]) not in done, f"completed twice: {o}"
            done[(o["key"], o["seq"])] = o
    assert sorted(done) == sorted(invokes), "every send completed once"
    oks = [o for o in done.values() if o["type"] == "ok"]
    assert len(oks) > 0.6 * len(invokes), wl.stats

    read = topics.read_topic(bs, topic, committed=True, with_headers=False, decode=topics.decode_values)
    assert read.complete
    f = read.frame
    seen = list(zip(f["key"], f["seq"].astype(int)))
    assert len(seen) == len(set(seen)), "a record visible twice at read_committed"
    at = {(int(p), int(o)): (k, int(s)) for p, o, k, s in zip(f["partition"], f["offset"], f["key"], f["seq"])}
    for o in oks:
        assert at.get((o["partition"], o["offset"])) == (o["key"], o["seq"]), o
    visible = set(seen)
    assert not [k for k, o in done.items() if o["type"] == "fail" and k in visible], "a failed send is visible"
    assert visible <= {k for k, o in done.items() if o["type"] in ("ok", "info")}
    assert wl.producers >= 1

    if producer == "transactional":
        _aborted_on_purpose_and_counted(bs, topic, wl, done, f)
        # fenced by another producer with its transactional.id: a new producer carries on
        after = _sent_since(tmp_path / "history.jsonl", fenced_at)
        assert wl.producers > made and after >= 200, (wl.producers, after, wl.errors[-5:])
        # the fencing reaches the client through error_cb, a commit or an abort: each is in errors
        assert any("fenced" in e for e in wl.errors), wl.errors[-5:]


def _fence(bs: str, wl) -> float:
    """Fence the workload's producer the way a second instance of a job does: ``init_transactions()``
    with the same transactional.id bumps the producer epoch (KIP-98), and the workload's next request
    fails with a fatal fencing error. Returns the time (epoch s) it was fenced."""
    from confluent_kafka import Producer

    from onceproof.kafka_config import client_config

    other = Producer(client_config(bs, {"transactional.id": wl.transactional_id}))
    other.init_transactions(30)
    other.flush(1)
    return time.time()


def _sent_since(history, t: float) -> int:
    """The ``ok`` sends in ``history`` (a history.jsonl path) whose transaction committed after ``t``
    (epoch s)."""
    return sum(1 for o in _ops(history) if o["type"] == "ok" and o["wall"] > t)


def _aborted_on_purpose_and_counted(bs: str, topic: str, wl, done: dict, committed) -> None:
    """Transactions aborted on purpose: their sends are ``fail`` ops naming the transaction, their records
    are in the log (read_uncommitted) but not at read_committed; the range counter agrees with both reads."""
    on_purpose = [o for o in done.values() if o.get("error") == ABORTED_ON_PURPOSE]
    assert wl.aborted_on_purpose > 0 and on_purpose, (wl.aborted_on_purpose, wl.txns)
    assert all(o["type"] == "fail" and o["txn"].startswith(wl.transactional_id + "#") for o in on_purpose)
    assert 0.05 < wl.aborted_on_purpose / wl.txns < 0.4, (wl.aborted_on_purpose, wl.txns)
    unc = topics.read_topic(bs, topic, committed=False, with_headers=False, decode=topics.decode_values).frame
    in_log = set(zip(unc["key"], unc["seq"].astype(int)))
    assert {(o["key"], o["seq"]) for o in on_purpose} & in_log, "no aborted record reached the log"
    ends = topics.end_offsets(bs, topic, committed=False)
    ranges = {int(p): (0, int(e)) for p, e in ends.items()}
    for isolation, frame in (("read_committed", committed), ("read_uncommitted", unc)):
        counted = RangeCounter(bs, isolation).count(topic, ranges)
        want = frame.groupby("partition").size().to_dict()
        assert counted == {p: int(want.get(p, 0)) for p in ranges}, (isolation, counted, want)
