"""What the eos sink task logs to ``sink.jsonl`` for each way a transaction ends, with a fake producer,
marker consumer and TaskContext (no Kafka, no Spark): a failed ``commit_transaction()`` is
``commit-unknown`` and never ``abort``; ``abort`` only after ``abort_transaction()`` returned; every event
carries the driver incarnation and every record the ``op.incarnation`` header; marker-read errors are
logged with their exception class. Then the checker reads such a log without a false aborted-read."""

import json
from collections import namedtuple

import pandas as pd
import pyspark
import pytest
from confluent_kafka import KafkaError, KafkaException

from onceproof.checkers import transactions
from onceproof.pipeline import marker, provenance
from onceproof.pipeline import transactional_sink as ts

Row = namedtuple("Row", "key value in_partition in_offset")


def kerr(code, fatal=False, abortable=False, retriable=False):
    return KafkaException(KafkaError(code, "injected", fatal=fatal, retriable=retriable, txn_requires_abort=abortable))


class FakeProducer:
    """Records calls; ``fail`` maps a method name to the exception it raises."""

    def __init__(self, fail=None, produced=None):
        self.fail = fail or {}
        self.calls = []
        self.produced = produced if produced is not None else []

    def _call(self, name):
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def init_transactions(self, *_):
        self._call("init_transactions")

    def begin_transaction(self):
        self._call("begin_transaction")

    def produce(self, topic, key, value, headers, on_delivery):
        self.produced.append({"key": key, "value": value, "headers": dict(headers)})

    def poll(self, *_):
        return 0

    def flush(self, *_):
        self._call("flush")
        return 0

    def send_offsets_to_transaction(self, *_):
        self._call("send_offsets_to_transaction")

    def commit_transaction(self, *_):
        self._call("commit_transaction")

    def abort_transaction(self, *_):
        self._call("abort_transaction")


class FakeConsumer:
    def consumer_group_metadata(self):
        return object()

    def close(self):
        pass


class Ctx:
    def __init__(self, partition, attempt):
        self.p, self.a = partition, attempt

    def partitionId(self):
        return self.p

    def attemptNumber(self):
        return self.a


@pytest.fixture
def sink(tmp_path, monkeypatch):
    """run(attempt, fail=..., marker_value=... | marker_error=...) → the producer; events() → the log."""
    log = tmp_path / "sink.jsonl"
    cfg = ts.SinkConfig(bootstrap="x", output_topic="out", progress_topic="prog", sink_id="s", log_path=str(log),
                        incarnation="2")
    produced: list = []
    monkeypatch.setattr(marker, "open_consumer", lambda *a: FakeConsumer())

    def run(attempt, fail=None, marker_value=2, marker_error=None, batch=3, partition=1):
        prod = FakeProducer(fail, produced)
        monkeypatch.setattr(ts, "_producer", lambda *a: prod)

        def read(*_a, **_k):
            if marker_error is not None:
                raise marker_error
            return marker_value

        monkeypatch.setattr(marker, "read", read)
        monkeypatch.setattr(pyspark.TaskContext, "get", lambda: Ctx(partition, attempt))
        rows = [Row(f"k{i}", json.dumps({"key": f"k{i}", "seq": 0}).encode(), 0, 10 + i) for i in range(3)]
        try:
            ts.write_partition(cfg, batch, iter(rows))
        except (ts.SinkError, KafkaException, RuntimeError):
            pass
        return prod

    def events():
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

    run.events, run.produced = events, produced
    return run


def test_failed_commit_is_commit_unknown_never_abort(sink):
    prod = sink(0, fail={"commit_transaction": kerr(KafkaError._TIMED_OUT)})
    assert [e["event"] for e in sink.events()] == ["begin", "commit-unknown"]
    assert "abort_transaction" not in prod.calls  # a timed-out commit is not aborted behind its back
    cu = sink.events()[1]
    assert (cu["error_class"], cu["error_code"]) == ("KafkaException", "_TIMED_OUT")


def test_commit_unknown_then_skip_gives_no_aborted_read(sink):
    sink(0, fail={"commit_transaction": kerr(KafkaError._TIMED_OUT)})
    sink(1, marker_value=3)  # the retry finds the marker at batch 3: attempt 0's commit landed
    ev = sink.events()
    assert [e["event"] for e in ev] == ["begin", "commit-unknown", "skip"]
    assert all(e["incarnation"] == "2" for e in ev)
    # attempt 0's records are visible; the checker must not call them aborted
    out = pd.DataFrame([{"key": r["key"], "seq": 0, "partition": 0, "offset": i, **r["headers"]}
                        for i, r in enumerate(sink.produced)])
    assert set(out["op.incarnation"]) == {"2"} and set(out["op.attempt"]) == {"0"}
    assert transactions.aborted_reads(out, pd.DataFrame(ev)) == (0, [])


def test_abortable_commit_error_then_abort_returns_is_abort(sink):
    prod = sink(0, fail={"commit_transaction": kerr(KafkaError._TIMED_OUT, abortable=True)})
    assert [e["event"] for e in sink.events()] == ["begin", "commit-unknown", "abort"]
    assert prod.calls[-1] == "abort_transaction"


def test_abortable_commit_error_and_failed_abort_stays_unknown(sink):
    sink(0, fail={"commit_transaction": kerr(KafkaError._TIMED_OUT, abortable=True),
                  "abort_transaction": kerr(KafkaError._TRANSPORT)})
    assert [e["event"] for e in sink.events()] == ["begin", "commit-unknown", "abort-failed"]


def test_abort_logged_only_after_abort_transaction_returned(sink):
    sink(0, fail={"send_offsets_to_transaction": kerr(KafkaError._TRANSPORT, abortable=True)})
    assert [e["event"] for e in sink.events()] == ["begin", "abort"]
    assert sink.events()[-1]["stage"] == "send_offsets"
    # the same failure, but abort_transaction() raises: not an abort, an abandoned transaction
    sink(1, fail={"send_offsets_to_transaction": kerr(KafkaError._TRANSPORT, abortable=True),
                  "abort_transaction": kerr(KafkaError._TIMED_OUT)})
    last = sink.events()[-1]
    assert last["event"] == "abandon" and last["abort_error_class"] == "KafkaException"


def test_fatal_error_before_commit_is_abandon_without_abort_call(sink):
    prod = sink(0, fail={"flush": kerr(KafkaError._FENCED, fatal=True)})
    assert [e["event"] for e in sink.events()] == ["begin", "abandon"]
    assert "abort_transaction" not in prod.calls
    assert sink.events()[-1]["kind"] == "fatal"


@pytest.mark.parametrize("exc,cls", [(kerr(KafkaError.UNSTABLE_OFFSET_COMMIT), "KafkaException"),
                                     (RuntimeError("reading marker failed"), "RuntimeError")])
def test_marker_read_errors_are_logged_with_their_class(sink, exc, cls):
    prod = sink(0, marker_error=exc)
    ev = sink.events()
    assert [e["event"] for e in ev] == ["marker-error"]
    assert ev[0]["error_class"] == cls and ev[0]["incarnation"] == "2"
    assert "begin_transaction" not in prod.calls


def test_marker_partition_error_is_a_kafka_exception():
    class TP:  # what committed() returns for a partition whose OffsetFetch carried an error
        error, offset = KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT), -1001

    class C:
        def committed(self, tps, timeout):
            return [TP()]

    with pytest.raises(KafkaException) as e:
        marker.read(C(), "prog")
    assert e.value.args[0].code() == KafkaError.UNSTABLE_OFFSET_COMMIT


def test_records_carry_the_incarnation_header(sink):
    sink(0)
    assert [e["event"] for e in sink.events()] == ["begin", "commit"]
    assert all(r["headers"][provenance.INCARNATION] == "2" for r in sink.produced)
    assert [r["headers"][provenance.INPUT] for r in sink.produced] == ["0:10", "0:11", "0:12"]
    assert provenance.INCARNATION in provenance.ALL and provenance.INCARNATION in provenance.ATTEMPT_KEY
