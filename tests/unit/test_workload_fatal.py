"""Issue 7 item 7: a workload producer that hits a fatal error is recreated, not left silent.

librdkafka offers no public way to make a real idempotent producer fatal on demand (its
``rd_kafka_test_fatal_error`` is not exposed by confluent-kafka), so this unit test drives the
workload's *own* logic (the generator, the history ops, the recreation) through a stand-in
``Producer`` class with confluent-kafka's callback contract: ``error_cb(err)`` with ``err.fatal()``,
``on_delivery(err, msg)`` from ``poll``/``flush``. It claims nothing about Kafka itself.
"""

from __future__ import annotations

import json
import time

import pytest

import onceproof.workloads.keyed as keyed
from onceproof.store.history import HistoryWriter


class _Err:
    def __init__(self, text: str, fatal: bool):
        self._text, self._fatal = text, fatal

    def str(self) -> str:
        return self._text

    def fatal(self) -> bool:
        return self._fatal

    def code(self) -> int:
        return -150  # librdkafka's RD_KAFKA_RESP_ERR__FATAL


class _Msg:
    def __init__(self, partition: int, offset: int):
        self._p, self._o = partition, offset

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


class _FakeProducer:
    """Instance 1 goes fatal after ``FATAL_AFTER`` sends: its queued records then fail with a fatal
    error and anything produced later is never delivered. Later instances deliver every record."""

    FATAL_AFTER = 20
    instances: list[_FakeProducer] = []

    def __init__(self, conf: dict):
        self.conf, self.queue, self.sent, self.fatal = conf, [], 0, False
        self.first = not _FakeProducer.instances
        _FakeProducer.instances.append(self)
        self._offset = 0

    def produce(self, topic, key=None, value=None, on_delivery=None):
        self.sent += 1
        self.queue.append(on_delivery)
        if self.first and self.sent == self.FATAL_AFTER and not self.fatal:
            self.fatal = True
            self.conf["error_cb"](_Err("Fatal error: unrecoverable sequence gap", True))

    def _drain(self):
        while self.queue:
            cb = self.queue.pop(0)
            if self.fatal:
                cb(_Err("_FATAL: producer is fenced by a fatal error", True), None)
            else:
                cb(None, _Msg(0, self._offset))
                self._offset += 1

    def poll(self, timeout=None):
        if timeout:
            time.sleep(min(timeout, 0.001))
        self._drain()
        return 0

    def flush(self, timeout=None):
        self._drain()
        return 0


def _send_until(tmp_path, done=lambda wl: wl.stats.ok >= 100) -> keyed.KeyedWorkload:
    """A workload on the patched ``Producer``, run until ``done(workload)`` (by default: 100 sends are
    ok; at most 10 s), then stopped; its history is ``tmp_path / "history.jsonl"``."""
    hist = HistoryWriter(tmp_path / "history.jsonl")
    wl = keyed.KeyedWorkload("127.0.0.1:1", "in", hist, rate=2000, keys=3, seed=1)
    wl.start()
    deadline = time.monotonic() + 10
    while not done(wl) and time.monotonic() < deadline:
        time.sleep(0.01)
    wl.stop()
    hist.close()
    return wl


@pytest.fixture
def fake_producer(monkeypatch):
    _FakeProducer.instances = []
    monkeypatch.setattr(keyed, "Producer", _FakeProducer)
    return _FakeProducer


def test_fatal_producer_error_recreates_the_producer_and_sending_goes_on(tmp_path, fake_producer):
    wl = _send_until(tmp_path)
    ops = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]

    assert wl.producers == 2 and len(fake_producer.instances) == 2, "a fatal error must bring a new producer"
    assert wl.stats.ok >= 100, f"sending stopped after the fatal error: {wl.stats}"
    assert any(e.endswith("(fatal)") for e in wl.errors)
    assert wl.new_errors() and wl.new_errors() == [], "the fatal error reaches the console once"
    # what the fatal instance held is indeterminate (info), never ok and never silently dropped
    info = [o for o in ops if o["type"] == "info"]
    assert info and all("fatal" in o["error"].lower() for o in info)
    # every invoke is completed exactly once, and per key the attempted seqs have no gap
    invokes = {(o["key"], o["seq"]) for o in ops if o["type"] == "invoke"}
    done = [(o["key"], o["seq"]) for o in ops if o["type"] in ("ok", "fail", "info")]
    assert sorted(done) == sorted(invokes) and len(done) == len(set(done))
    for k in {k for k, _ in invokes}:
        seqs = sorted(s for kk, s in invokes if kk == k)
        assert seqs == list(range(len(seqs)))
    # sends after the recreation come back ok from the new instance
    assert fake_producer.instances[1].sent > 0
    assert any(o["type"] == "ok" for o in ops[ops.index(info[-1]):])


class _NoOffsetProducer(_FakeProducer):
    """Delivers every record, but reports the 10th without an offset (``Message.offset()`` is ``None``:
    librdkafka's answer to a retry the broker already holds, DUPLICATE_SEQUENCE_NUMBER)."""

    def _drain(self):
        while self.queue:
            cb = self.queue.pop(0)
            cb(None, _Msg(0, None if self._offset == 9 else self._offset))
            self._offset += 1


def test_a_delivery_without_an_offset_is_ok_and_sending_goes_on(tmp_path, monkeypatch):
    from onceproof.store.readers import read_history

    monkeypatch.setattr(keyed, "Producer", _NoOffsetProducer)
    wl = _send_until(tmp_path)

    assert wl.stats.ok >= 100 and not wl.errors, f"sending stopped: {wl.stats}, {wl.errors}"
    assert wl.stats.ends == {0: wl.stats.ok}, "the other deliveries still move the input's end"
    ops = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    ok = [o for o in ops if o["type"] == "ok"]
    assert [o["offset"] for o in ok].count(None) == 1 and ok[9]["offset"] is None
    frame = read_history(tmp_path)
    assert frame[frame["type"] == "ok"]["offset"].isna().sum() == 1


def test_a_transactions_delivery_without_an_offset_commits_as_ok(tmp_path):
    from onceproof.workloads.transactional_client import TransactionalWorkload

    hist = HistoryWriter(tmp_path / "history.jsonl")
    wl = TransactionalWorkload("127.0.0.1:1", "in", hist, rate=1, keys=3, seed=1)
    for i in range(3):
        wl._sent("k0", i)
        wl._complete("k0", i, None, _Msg(2, None if i == 1 else 40 + i))
    wl._record("ok", "")  # the commit succeeded
    hist.close()

    ops = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [(o["type"], o["seq"], o["offset"]) for o in ops] == [("ok", 0, 40), ("ok", 1, None), ("ok", 2, 42)]
    assert wl.stats.ok == 3 and wl.stats.ends == {2: 43}


class _BuggyProducer(_FakeProducer):
    """Its 30th ``produce`` raises a ``TypeError``: a bug in the send path, not a client error."""

    def produce(self, topic, key=None, value=None, on_delivery=None):
        if self.sent == 29:
            raise TypeError("'>=' not supported between instances of 'NoneType' and 'int'")
        super().produce(topic, key=key, value=value, on_delivery=on_delivery)


def test_a_send_loop_that_dies_records_when_and_why(tmp_path, monkeypatch):
    monkeypatch.setattr(keyed, "Producer", _BuggyProducer)
    monkeypatch.setattr("threading.excepthook", lambda args: None)  # the thread's traceback is expected
    wl = _send_until(tmp_path, lambda wl: wl.stopped_by is not None)

    assert wl.stopped_by is not None and "TypeError(" in wl.stopped_by, wl.errors
    at, _, why = wl.stopped_by.partition(" ")
    assert len(at) == 8 and at[2] == at[5] == ":" and why.startswith("TypeError(")
    assert f"{at} the workload stopped sending: {why} (fatal)" in wl.errors
    assert wl.stats.ok < 30, "nothing is sent after the loop died"
