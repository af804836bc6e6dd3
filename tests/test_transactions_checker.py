"""Transaction-level checks on synthetic data: aborted reads, hidden aborted data, stuck partitions,
the during-faults reader, and how they change the verdict."""

import pandas as pd

from checkers import compose, transactions
from checkers.exactly_once import check


def out_records(n=6, batch=3, attempt=0):
    return pd.DataFrame({"key": [f"k{i % 2}" for i in range(n)], "seq": pd.array([i // 2 for i in range(n)], dtype="Int64"),
                         "partition": [0] * n, "offset": list(range(n)),
                         "op.batch": [str(batch)] * n, "op.sink_partition": ["1"] * n, "op.attempt": [str(attempt)] * n,
                         "op.txn_id": ["s-1"] * n})


def sink_log(rows):
    return pd.DataFrame(rows)


def test_aborted_attempt_needs_abort_without_commit():
    log = sink_log([{"event": "begin", "batch": 3, "partition": 1, "attempt": 0},
                    {"event": "abort", "batch": 3, "partition": 1, "attempt": 0, "error": "fenced"},
                    {"event": "commit", "batch": 3, "partition": 1, "attempt": 1},
                    {"event": "abort", "batch": 4, "partition": 0, "attempt": 0},
                    {"event": "commit", "batch": 4, "partition": 0, "attempt": 0}])
    ab = transactions.aborted_attempts(log)
    assert ab[["batch", "sink_partition", "attempt"]].values.tolist() == [[3, 1, 0]]


def test_records_of_an_aborted_attempt_are_aborted_reads_with_provenance():
    log = sink_log([{"event": "abort", "batch": 3, "partition": 1, "attempt": 0, "error": "fenced"}])
    n, ex = transactions.aborted_reads(out_records(attempt=0), log)
    assert n == 6 and ex[0]["batch"] == 3 and ex[0]["attempt"] == 0 and ex[0]["error"] == "fenced"
    n2, _ = transactions.aborted_reads(out_records(attempt=1), log)
    assert n2 == 0


def test_hidden_aborted_counts_uncommitted_only_records():
    committed = out_records(4)
    uncommitted = pd.concat([committed, out_records(6).iloc[4:]], ignore_index=True)
    assert transactions.hidden_aborted(uncommitted, committed) == 2
    assert transactions.hidden_aborted(None, committed) == 0


def test_stuck_partitions():
    assert transactions.stuck({0: 10, 1: 5}, {0: 10, 1: 9}) == [{"partition": 1, "lso": 5, "hw": 9}]


def test_live_view_duplicates_aborted_and_latency():
    live = out_records(4).assign(in_ts=[1000, 1000, 1000, 1000], seen_ms=[1100, 1200, 1300, 2000])
    live = pd.concat([live, live.iloc[[0]].assign(offset=9, seen_ms=2100)], ignore_index=True)
    lv = transactions.live_view(live, pd.DataFrame())
    assert lv["counts"]["live-duplicate"] == 1 and lv["counts"]["live-aborted-read"] == 0
    assert lv["latency_ms"]["max"] == 1100 and lv["latency_ms"]["n"] == 5
    assert len(lv["anomalies"]["live-duplicate"][0]["copies"]) == 2


def _base(output):
    inp = output[["key", "seq", "partition", "offset"]].astype({"seq": "int64"})
    return check(pd.DataFrame(), inp, output)


def test_compose_verdicts():
    out = out_records()
    base = _base(out)
    assert base["verdict"] == "valid"
    assert compose.combine(base, output=out)["verdict"] == "valid"
    log = sink_log([{"event": "abort", "batch": 3, "partition": 1, "attempt": 0}])
    r = compose.combine(base, output=out, sink_log=log)
    assert r["verdict"] == "invalid" and r["counts"]["aborted-read"] == 6
    r = compose.combine(base, output=out, lso={0: 3}, hw={0: 6})
    assert r["verdict"] == "unknown" and r["counts"]["stuck"] == 1 and "stuck" in r["unknown_reasons"][0]
    live = out.assign(in_ts=0, seen_ms=5)
    live = pd.concat([live, live.iloc[[1]]], ignore_index=True)
    r = compose.combine(base, output=out, live=live, lso={0: 3}, hw={0: 6})
    assert r["verdict"] == "invalid" and r["counts"]["live-duplicate"] == 1
