"""The checker on synthetic data: each anomaly is detected with exact counts and provenance."""

import pandas as pd
import pytest

from onceproof.checkers.exactly_once import Recovery, check


def make_input(keys=3, per_key=5):
    rows = []
    off = {0: 0, 1: 0}
    for s in range(per_key):
        for k in range(keys):
            p = k % 2
            rows.append({"key": f"k{k}", "seq": s, "partition": p, "offset": off[p]})
            off[p] += 1
    return pd.DataFrame(rows)


def pipe(inp, batch_of=lambda r: r["offset"] // 4):
    """The perfect pipeline: one output record per input record, same partition, same order."""
    rows = []
    for r in inp.sort_values(["partition", "offset"]).to_dict("records"):
        rows.append({"key": r["key"], "seq": r["seq"], "partition": r["partition"], "offset": len(rows),
                     "op.batch": str(batch_of(r)), "op.attempt": "0", "op.txn_id": f"s-{r['partition']}",
                     "op.input": f"{r['partition']}:{r['offset']}"})
    out = pd.DataFrame(rows)
    out["seq"] = out["seq"].astype("Int64")
    return out


def history_for(inp):
    ok = inp.assign(type="ok", f="send")
    inv = inp.assign(type="invoke", f="send")
    return pd.concat([inv, ok], ignore_index=True)


def test_clean_run_is_valid():
    inp = make_input()
    r = check(history_for(inp), inp, pipe(inp))
    assert r["verdict"] == "valid"
    assert all(v == 0 for v in r["counts"].values())
    assert r["stats"]["input_records"] == 15 and r["stats"]["output_records"] == 15


def test_duplicate_counted_per_pair_with_provenance_of_each_copy():
    inp = make_input()
    out = pipe(inp)
    replay = out.iloc[[2, 3]].assign(offset=[100, 101], **{"op.attempt": "1"})
    out = pd.concat([out, replay], ignore_index=True)
    r = check(history_for(inp), inp, out)
    assert r["verdict"] == "invalid"
    assert r["counts"]["duplicate"] == 2 and r["counts"]["duplicate-records"] == 2
    ex = r["anomalies"]["duplicate"][0]
    assert len(ex["copies"]) == 2
    assert {c["attempt"] for c in ex["copies"]} == {"0", "1"}
    assert all("batch" in c and "txn_id" in c for c in ex["copies"])
    # a re-emitted copy is a duplicate, not also a reordering
    assert r["counts"]["nonmonotonic"] == 0


def test_lost_after_finished_recovery_is_invalid():
    inp = make_input()
    out = pipe(inp).drop(index=[4]).reset_index(drop=True)
    r = check(history_for(inp), inp, out)
    assert r["verdict"] == "invalid"
    assert r["counts"]["lost"] == 1
    lost = r["anomalies"]["lost"][0]
    assert {"key", "seq", "input_partition", "input_offset"} <= set(lost)


def test_lost_with_unfinished_recovery_is_unknown_never_valid():
    inp = make_input()
    out = pipe(inp).iloc[:-3]
    r = check(history_for(inp), inp, out, Recovery(finished=False, reasons=["output LSO < HW on 0"]))
    assert r["verdict"] == "unknown"
    assert r["unknown_reasons"] == ["output LSO < HW on 0"]
    # and a clean-looking but unfinished run is unknown as well
    r2 = check(history_for(inp), inp, pipe(inp), Recovery(finished=False, reasons=["deadline"]))
    assert r2["verdict"] == "unknown"


def test_definite_anomaly_beats_unfinished_recovery():
    inp = make_input()
    out = pd.concat([pipe(inp), pipe(inp).iloc[[0]].assign(offset=99)], ignore_index=True)
    r = check(history_for(inp), inp, out, Recovery(finished=False, reasons=["deadline"]))
    assert r["verdict"] == "invalid"


def test_unexpected_record_and_garbage_value():
    inp = make_input()
    out = pipe(inp)
    extra = pd.DataFrame([{"key": "k0", "seq": 999, "partition": 0, "offset": 200},
                          {"key": "zz", "seq": pd.NA, "partition": 1, "offset": 201}])
    extra["seq"] = extra["seq"].astype("Int64")
    r = check(history_for(inp), inp, pd.concat([out, extra], ignore_index=True))
    assert r["counts"]["unexpected"] == 2
    assert r["verdict"] == "invalid"
    assert r["anomalies"]["unexpected"][0]["seq"] == 999


def test_nonmonotonic_reordering_within_a_key():
    inp = make_input(keys=1, per_key=6)
    out = pipe(inp)
    # swap the records of seq 2 and 3 of k0 in the output: each keeps its own provenance (op.input), as
    # a reordering pipeline would emit it (swapping only the seq would make both copies name the wrong
    # input record: that is ``unexpected`` + ``lost`` under per-input-record accounting)
    out.loc[[2, 3], ["seq", "op.input"]] = out.loc[[3, 2], ["seq", "op.input"]].values
    r = check(history_for(inp), inp, out)
    assert r["counts"]["nonmonotonic"] == 1
    ex = r["anomalies"]["nonmonotonic"][0]
    assert (ex["seq"], ex["prev_seq"]) == (2, 3)
    assert r["counts"]["lost"] == 0 and r["counts"]["duplicate"] == 0


def test_order_is_owed_per_input_partition_when_a_key_moved_to_a_new_partition():
    """The input topic grew mid-run: k0's seq 0-2 are in partition 0, its seq 3-5 in new partition 2 (its
    producer's partitioner mapped it anew). Spark reads the two partitions in separate tasks, so the new
    partition's records may reach the output first: no order is owed across them. Within one input
    partition a step back is still nonmonotonic."""
    rows = [{"key": "k0", "seq": s, "partition": 0 if s < 3 else 2, "offset": s if s < 3 else s - 3}
            for s in range(6)]
    inp = pd.DataFrame(rows)

    def out_of(order):
        out = pd.DataFrame([{"key": "k0", "seq": s, "partition": 0, "offset": i, "op.batch": "1", "op.attempt": "0",
                             "op.input": f"{rows[s]['partition']}:{rows[s]['offset']}"} for i, s in enumerate(order)])
        out["seq"] = out["seq"].astype("Int64")
        return out

    r = check(history_for(inp), inp, out_of([3, 4, 0, 5, 1, 2]))  # partitions interleaved, each in order
    assert r["counts"]["nonmonotonic"] == 0 and r["verdict"] == "valid", r["counts"]
    r = check(history_for(inp), inp, out_of([3, 0, 2, 1, 4, 5]))  # seq 1 after seq 2, both of partition 0
    assert r["counts"]["nonmonotonic"] == 1 and r["verdict"] == "invalid", r["counts"]
    assert (r["anomalies"]["nonmonotonic"][0]["seq"], r["anomalies"]["nonmonotonic"][0]["prev_seq"]) == (1, 2)


def test_an_aborted_input_records_copy_is_an_aborted_input_read_naming_its_transaction():
    """The workload aborted a transaction on purpose (its sends are ``fail`` ops, its records absent at
    read_committed); a read_uncommitted source copied one of them: aborted-input-read, not unexpected,
    with the input transaction and its outcome; a pair in neither stays unexpected."""
    inp = make_input(keys=2, per_key=4)
    hist = history_for(inp)
    aborted = pd.DataFrame([{"key": "k0", "seq": 9, "type": "fail", "f": "send", "txn": "wl-abc#7",
                             "error": "aborted on purpose"}])
    hist = pd.concat([hist, aborted], ignore_index=True)
    out = pipe(inp)
    extra = pd.DataFrame([{"key": "k0", "seq": 9, "partition": 0, "offset": 100, "op.batch": "3"},
                          {"key": "k1", "seq": 50, "partition": 0, "offset": 101, "op.batch": "3"}])
    out = pd.concat([out, extra.astype({"seq": "Int64"})], ignore_index=True)
    r = check(hist, inp, out)
    assert r["counts"]["aborted-input-read"] == 1 and r["counts"]["unexpected"] == 1, r["counts"]
    assert r["verdict"] == "invalid" and "aborted-input-read" in r["definite"]
    ex = r["anomalies"]["aborted-input-read"][0]
    assert (ex["key"], ex["seq"], ex["input_txn"], ex["input_outcome"]) == ("k0", 9, "wl-abc#7", "aborted on purpose")
    assert r["anomalies"]["unexpected"][0]["seq"] == 50
    assert r["bad_keys"]["k0"]["aborted-input-read"] == 1, r["bad_keys"]
    clean = check(hist, inp, pipe(inp))  # the aborted send is not owed: not lost, not a lost write
    assert clean["verdict"] == "valid" and clean["counts"]["aborted-input-read"] == 0, clean["counts"]


def test_an_output_without_an_order_column_is_not_judged_for_order():
    """A table with no order column (``order_rank`` all NA): the rows of a key in any order are no
    reordering, and the result says the order was not judged; duplicates and losses are still found."""
    inp = make_input(keys=1, per_key=6)
    out = pipe(inp).iloc[[5, 2, 0, 4, 1, 3]].reset_index(drop=True)
    out["offset"] = range(len(out))  # positions of a physical read, such as ctid order
    assert check(history_for(inp), inp, out)["counts"]["nonmonotonic"] > 0  # judged by position, it goes back
    out["order_rank"] = pd.array([pd.NA] * len(out), dtype="Int64")
    r = check(history_for(inp), inp, out)
    assert r["verdict"] == "valid" and r["counts"]["nonmonotonic"] == 0, r["counts"]
    assert r["order"] == "not judged (no order column)"
    r = check(history_for(inp), inp, pd.concat([out, out.iloc[[0]]], ignore_index=True))
    assert r["counts"]["duplicate"] == 1 and r["verdict"] == "invalid", r["counts"]


def test_an_order_rank_orders_across_ranks_only():
    """Rows of one rank (one Delta commit, one file sink batch) have no order among themselves; a later
    rank holding an earlier input record of the key than an earlier rank does goes back."""
    inp = make_input(keys=1, per_key=6)
    out = pipe(inp).iloc[[2, 0, 1, 5, 3, 4]].reset_index(drop=True)
    out["offset"] = range(len(out))
    out["order_rank"] = pd.array([0, 0, 0, 1, 1, 1], dtype="Int64")  # seq 0-2 committed first, 3-5 after
    r = check(history_for(inp), inp, out)
    assert r["verdict"] == "valid" and r["order"] == "order rank", (r["counts"], r["order"])
    out["order_rank"] = pd.array([1, 1, 1, 0, 0, 0], dtype="Int64")  # seq 3-5 committed before seq 0-2
    r = check(history_for(inp), inp, out)
    assert r["counts"]["nonmonotonic"] == 1 and r["verdict"] == "invalid", r["counts"]
    ex = r["anomalies"]["nonmonotonic"][0]
    assert (ex["seq"], ex["prev_seq"], ex["order_rank"]) == (0, 5, 1), ex
    assert check(history_for(inp), inp, pipe(inp))["order"] == "output position"


def test_lost_write_is_an_acknowledged_send_missing_from_input():
    inp = make_input()
    hist = history_for(inp)
    hist = pd.concat([hist, pd.DataFrame([{"type": "ok", "f": "send", "key": "k1", "seq": 77,
                                           "partition": 1, "offset": 500}])], ignore_index=True)
    r = check(hist, inp, pipe(inp))
    assert r["counts"]["lost-write"] == 1
    assert r["anomalies"]["lost-write"][0]["seq"] == 77
    assert r["verdict"] == "invalid"


def test_info_sends_are_neither_required_nor_forbidden():
    inp = make_input()
    hist = history_for(inp)
    info = pd.DataFrame([{"type": "info", "f": "send", "key": "k2", "seq": 50}])
    r = check(pd.concat([hist, info], ignore_index=True), inp, pipe(inp))
    assert r["verdict"] == "valid"
    assert r["stats"]["sends_info"] == 1


def test_bad_keys_summary_names_each_anomaly():
    inp = make_input()
    out = pipe(inp)
    out = pd.concat([out.drop(index=[0]), out.iloc[[5]].assign(offset=300)], ignore_index=True)
    r = check(history_for(inp), inp, out)
    lost_key = inp.sort_values(["partition", "offset"]).iloc[0]["key"]
    assert r["bad_keys"][lost_key]["lost"] == 1
    assert sum(v.get("duplicate", 0) for v in r["bad_keys"].values()) == 1


@pytest.mark.parametrize("n_keys,per_key", [(1, 1), (50, 40)])
def test_sizes(n_keys, per_key):
    inp = make_input(n_keys, per_key)
    assert check(history_for(inp), inp, pipe(inp))["verdict"] == "valid"


def test_empty_everything_is_valid_when_recovered():
    e = pd.DataFrame()
    assert check(e, e, e)["verdict"] == "valid"
