"""The workload's at-most-once (the default) and transactional producers (``workloads/producers.py``) on
a real 3-broker cluster, through a broker kill and restart: every send completed exactly once in the
history, every ``ok`` at its recorded place in the input at read_committed, no record visible twice,
none visible that the history says failed."""

import json
import time

import pytest

from onceproof.clients import topics
from onceproof.store.history import HistoryWriter
from onceproof.workloads import producers

pytestmark = pytest.mark.cluster


def _ops(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("producer", ["at-most-once", "transactional"])
def test_sends_are_ok_where_they_landed_and_never_visible_twice(cluster, tmp_path, producer):
    bs, topic = cluster.bootstrap, f"in-{producer}"
    topics.create_topics(bs, {topic: 3})
    hist = HistoryWriter(tmp_path / "history.jsonl")
    wl = producers.client_class(producer)(bs, topic, hist, rate=400, keys=20, seed=3)
    wl.start()
    try:
        time.sleep(4)
        cluster.kill(1)  # a leader and maybe the transaction coordinator go: commits time out, retry, move
        time.sleep(6)
        cluster.start(1)
        time.sleep(4)
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
