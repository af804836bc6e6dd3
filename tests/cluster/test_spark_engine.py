"""The cluster half of ``tests/unit/test_spark_engine.py``: tests that need a local cluster or Spark."""

from __future__ import annotations

import pandas as pd
import pytest

from onceproof.harness.cli import main
from tests.unit.test_spark_engine import (  # noqa: F401 (fixtures are used by name)
    T0,
    _assert_same,
    _both,
    _copy,
    _history,
    _input,
    _out_frame,
    _write,
    counting_run,
    everything_run,
)


@pytest.mark.spark_local
def test_every_anomaly_gives_equal_results_and_exit_codes(spark, tmp_path, capsys):
    rd = everything_run(tmp_path / "everything")
    (pc, p), (sc, s) = _both(rd, capsys)
    c = p["counts"]
    # the planted anomalies are all there (so the comparison below compares something)
    assert (c["duplicate"], c["lost"], c["nonmonotonic"], c["lost-write"], c["failed-write-visible"],
            c["input-duplicate"], c["aborted-read"], c["stuck"], c["live-duplicate"], c["live-aborted-read"]) == \
        (5, 2, 1, 1, 1, 1, 1, 1, 1, 1), c
    assert (c["unexpected"], c["duplicate-records"]) == (5, 5), c
    assert p["verdict"] == "invalid" and pc == 1 and p["stats"]["live_rereads"] == 1 and p["warnings"]
    assert p["stats"]["aborted_hidden"] == 1 and p["stats"]["visibility_latency_ms"]["n"] == 8
    assert any("nemesis_nearby" in ex for ex in p["anomalies"]["lost"])
    assert sc == pc
    _assert_same(p, s)


@pytest.mark.spark_local
def test_counting_run_and_part_file_snapshots_give_equal_results(spark, tmp_path, capsys):
    rd = counting_run(tmp_path / "counting", spark=spark)
    assert (rd / "output.parquet").is_dir() and len(list((rd / "output.parquet").glob("*.parquet"))) > 1
    (pc, p), (sc, s) = _both(rd, capsys)
    assert p["verdict"] == "unknown" and pc == 2 and p["counts"]["lost"] == 2, p["counts"]
    assert any("ends before the input does" in r for r in p["unknown_reasons"])
    assert sc == pc
    _assert_same(p, s)


@pytest.mark.spark_local
def test_output_order_ranks_and_no_order_give_equal_results(spark, tmp_path, capsys):
    """A table's output frames: ranked (a later commit holding an earlier record of k0 goes back; rows
    within a commit are in no order) and unranked (no order column: not judged, though its positions
    go back)."""
    inp = _input()
    rows = inp.to_dict("records")
    copies = [_copy(r) for r in reversed(rows)]  # every key's records backwards by position
    out = _out_frame(copies).assign(partition=0)
    out["offset"] = range(len(out))
    n = len(out)
    ranked = out.assign(order_rank=pd.array([0] * (n - 1) + [1], dtype="Int64"))  # k0 seq 0 last, alone
    for name, frame, back, order in (("ranked", ranked, 1, "order rank"),
                                     ("unranked", out.assign(order_rank=pd.array([None] * n, dtype="Int64")), 0,
                                      "not judged (no order column)")):
        rd = _write(tmp_path / name, inp=inp, out=frame, history=_history(inp))
        (pc, p), (sc, s) = _both(rd, capsys)
        assert p["counts"]["nonmonotonic"] == back and p["order"] == order, (name, p["counts"], p.get("order"))
        assert sc == pc
        _assert_same(p, s)


@pytest.mark.spark_local
def test_aborted_input_reads_give_equal_results(spark, tmp_path, capsys):
    """Output copies of two records of an input transaction the workload aborted (``fail`` sends, absent
    from the input), one of them twice, and one pair in neither: aborted-input-read 2, unexpected 1."""
    inp = _input()
    rows = inp.to_dict("records")
    aborted = [{"type": "fail", "f": "send", "key": "k0", "seq": s, "txn": "wl-1#4", "error": "aborted on purpose"}
               for s in (100, 101)]
    copies = [_copy(r) for r in rows] + [
        _copy({"key": "k0", "seq": s, "partition": 0, "offset": 900 + s}, ref=False) for s in (100, 101, 100)] + [
        _copy({"key": "k1", "seq": 500, "partition": 1, "offset": 999}, ref=False)]
    rd = _write(tmp_path / "aborted", inp=inp, out=_out_frame(copies), history=_history(inp, aborted))
    (pc, p), (sc, s) = _both(rd, capsys)
    c = p["counts"]
    assert (c["aborted-input-read"], c["unexpected"], c["duplicate"]) == (2, 1, 1), c
    assert p["anomalies"]["aborted-input-read"][0]["input_txn"] == "wl-1#4", p["anomalies"]["aborted-input-read"]
    assert sc == pc == 1
    _assert_same(p, s)


@pytest.mark.spark_local
def test_kafka_rows_decode_like_decode_values(spark):
    """Spark's Kafka source rows (schema of `spark.read.format("kafka")`) → the checker columns
    `onceproof.clients.topics.decode_values` makes from the same bytes (values with and without key/seq, garbage,
    a tombstone, repeated and missing headers)."""
    from pyspark.sql import types as T

    from onceproof.clients import spark_topics, topics

    vals = [b'{"key":"k1","seq":3}', b'{"seq":4}', b'not json', None, b'{"key":"k2"}', b'{"key":"k3","seq":7,"x":1}']
    keys = [b"k1", b"kk", b"k9", b"k8", None, b"k3"]
    hdrs = [[("op.batch", b"1"), ("op.input", b"0:1")], [], None, [("op.batch", b"2"), ("op.batch", b"3")],
            [("op.input", b"0:5")], [("op.txn_id", b"s-1")]]
    schema = T.StructType([T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
                           T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                           T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
                           T.StructField("timestampType", T.IntegerType()),
                           T.StructField("headers", T.ArrayType(T.StructType(
                               [T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])))])
    import datetime as dt

    ts = [dt.datetime.fromtimestamp((T0 + i) / 1000) for i in range(len(vals))]
    raw = spark.createDataFrame([(k, v, "t", 0, i, ts[i], 0, h) for i, (k, v, h) in enumerate(zip(keys, vals, hdrs))],
                                schema)
    got = spark_topics.decode(raw, spark_topics.header_names(raw)).toPandas()
    frame = pd.DataFrame({"partition": 0, "offset": range(len(vals)), "key": [k.decode() if k else None for k in keys],
                          "value": vals})
    want = topics.decode_values(frame)
    want = pd.concat([want, topics._headers_frame(hdrs)], axis=1)
    assert got["key"].tolist() == want["key"].astype(object).where(want["key"].notna(), None).tolist()
    assert got["seq"].astype("Int64").tolist() == want["seq"].tolist()
    assert got["timestamp"].tolist() == [T0 + i for i in range(len(vals))]
    for h in ("op.batch", "op.input", "op.txn_id"):
        assert got[h].tolist() == want[h].where(want[h].notna(), None).tolist(), h


@pytest.mark.spark_local
def test_a_corrupt_history_line_is_the_same_crash(spark, tmp_path, capsys):
    """A bad line before the last of `history.jsonl`: exit 255 on both engines, one line naming file:line."""
    inp = _input()
    rd = _write(tmp_path / "corrupt", inp=inp, out=_out_frame([_copy(r) for r in inp.to_dict("records")]),
                history=_history(inp))
    lines = (rd / "history.jsonl").read_text().splitlines()
    lines[3] = lines[3][:20]
    (rd / "history.jsonl").write_text("\n".join(lines) + "\n")
    errs = []
    for extra in ([], ["--engine", "spark"]):
        assert main(["check", str(rd), "--json", *extra]) == 255
        errs.append(capsys.readouterr().err.strip())
    assert "history.jsonl:4 is not a JSON object" in errs[0] and "\n" not in errs[0]
    assert errs[1] == errs[0]


