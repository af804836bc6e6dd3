"""`onceproof check --bootstrap` on a pipeline that may still be running: input not processed yet is not
reported `lost` unless the pipeline is shown caught up, by its consumer group (`--group`) or by quiet
topics (`--settle`); otherwise the verdict is `unknown` and says which option to pass. The check is
stored as a run directory (results.json, report.html, junit.xml, parquet snapshots).

The caught-up logic is unit-tested with a fake cluster; the rest needs a real one (marker `cluster`)."""

from __future__ import annotations

import json
import time

from onceproof.checking import recovery
from onceproof.checking.recovery import RecoveryStatus
from tests.conftest import run_cli

# ---------------------------------------------------------------------------------- caught-up, no cluster


class FakeCluster:
    """``recovery.status`` / ``recovery.group_offsets`` over scripted offsets, on a fake clock."""

    def __init__(self, monkeypatch, input_end, output=None, group=None):
        self.t = 0.0
        self.input_end, self.output, self.group = input_end, output or (lambda t: {0: 10}), group
        monkeypatch.setattr(recovery, "status", self.status)
        monkeypatch.setattr(recovery, "group_offsets", lambda bs, g, topic, parts: self.group(self.t))

    def status(self, bootstrap, input_topic, output_topic, ckpt):
        out = self.output(self.t)
        return RecoveryStatus(True, [], self.input_end(self.t), {}, dict(out), dict(out))

    def clock(self):
        return self.t

    def sleep(self, s):
        self.t += s

    def wait(self, **kw):
        return recovery.caught_up("bs", "in", "out", clock=self.clock, sleep=self.sleep, **kw)


def test_without_group_or_settle_the_status_says_which_option_to_pass(monkeypatch):
    f = FakeCluster(monkeypatch, lambda t: {0: 10})
    st = f.wait(timeout_s=60)
    assert not st.finished and st.reasons == [recovery.NO_CRITERION]
    assert "--group" in st.reasons[0] and "--settle" in st.reasons[0]
    assert f.t < 2, "nothing to wait for: it should not use up the timeout"


def test_group_behind_is_not_caught_up_until_it_commits_the_end(monkeypatch):
    f = FakeCluster(monkeypatch, lambda t: {0: 10, 1: 5}, group=lambda t: {0: 10, 1: 5 if t >= 4 else 2})
    st = f.wait(group="pipe", timeout_s=30)
    assert st.finished and 4 <= st.seconds < 6 and st.consumed == {0: 10, 1: 5}


def test_group_that_never_catches_up_times_out_with_the_reason(monkeypatch):
    f = FakeCluster(monkeypatch, lambda t: {0: 10}, group=lambda t: {0: 7})
    st = f.wait(group="pipe", timeout_s=10)
    assert not st.finished and st.seconds >= 10
    assert any("behind the input by 3 records" in r for r in st.reasons), st.reasons


def test_group_without_offsets_names_the_option(monkeypatch):
    f = FakeCluster(monkeypatch, lambda t: {0: 10}, group=lambda t: {})
    st = f.wait(group="nobody", timeout_s=5)
    assert not st.finished and any("no committed offsets" in r and "--group" in r for r in st.reasons)


def test_settle_needs_the_topics_quiet_for_that_long(monkeypatch):
    # the output grows until t=5, then stays: caught up at t≈5+settle
    f = FakeCluster(monkeypatch, lambda t: {0: 10}, output=lambda t: {0: min(int(t), 5)})
    st = f.wait(settle_s=3, timeout_s=60)
    assert st.finished and 8 <= st.seconds < 10, st


def test_settle_never_reached_while_the_input_keeps_growing(monkeypatch):
    f = FakeCluster(monkeypatch, lambda t: {0: int(t)})
    st = f.wait(settle_s=3, timeout_s=20)
    assert not st.finished and any("--settle" in r for r in st.reasons)


def test_both_criteria_must_hold_when_both_are_given(monkeypatch):
    f = FakeCluster(monkeypatch, lambda t: {0: 10}, group=lambda t: {0: 9})
    st = f.wait(group="pipe", settle_s=2, timeout_s=10)
    assert not st.finished and any("behind" in r for r in st.reasons)


def test_unreachable_bootstrap_is_a_one_line_crash_and_stores_nothing(tmp_path):
    results = tmp_path / "results"
    t0 = time.monotonic()
    p = run_cli(["check", "--bootstrap", "127.0.0.1:1", "--results", str(results)], timeout=120)
    assert p.returncode == 255, p.stdout + p.stderr
    err = p.stderr.strip()
    assert "\n" not in err and "Traceback" not in p.stdout + err and "127.0.0.1:1" in err and "--bootstrap" in err
    assert not results.exists()
    assert time.monotonic() - t0 < 60


# ---------------------------------------------------------------------------------------- real cluster


def produce(bootstrap: str, topic: str, pairs: list[tuple[str, int]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for k, s in pairs:
        p.produce(topic, key=k, value=json.dumps({"key": k, "seq": s}), partition=0)
    p.flush(30)


def commit_group(bootstrap: str, group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    c.close()


def check(bootstrap, inp, out, results, *extra, timeout="10"):
    p = run_cli(["check", "--bootstrap", bootstrap, "--input-topic", inp, "--output-topic", out,
                 "--recovery-timeout", timeout, "--results", str(results), "--json", *extra], timeout=300)
    r = json.loads(p.stdout[p.stdout.index("{"):]) if "{" in p.stdout else None
    return p, r


def topics_with(cluster, name, inputs, outputs):
    from onceproof.clients import topics

    inp, out = f"in-{name}", f"out-{name}"
    topics.create_topics(cluster.bootstrap, {inp: 1, out: 1})
    produce(cluster.bootstrap, inp, inputs)
    produce(cluster.bootstrap, out, outputs)
    return inp, out


RECS = [(k, s) for s in range(5) for k in "abc"]  # 15 records


