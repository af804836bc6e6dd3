"""The counter checker on synthetic data: a simulated update-mode aggregation, with and without
faults, and hand-made outputs for each anomaly."""

import json
import random

import numpy as np
import pandas as pd
import pytest

from onceproof.checkers.counter import DEFINITE, Recovery, check, decode

EMPTY = pd.DataFrame(columns=["type", "f", "key", "seq"])


def make_input(parts=None, per_key=6, seed=0):
    """Keys living in one input partition each, interleaved at random within the partition;
    ``seq`` = 0, 1, 2, ... per key."""
    parts = parts or {0: ["a", "b", "c"], 1: ["d", "e"]}
    rnd = random.Random(seed)
    rows = []
    for p, keys in parts.items():
        left = {k: 0 for k in keys}
        off = 0
        while left:
            k = rnd.choice(sorted(left))
            rows.append({"key": k, "seq": left[k], "partition": p, "offset": off})
            off += 1
            left[k] += 1
            if left[k] == per_key:
                del left[k]
    return pd.DataFrame(rows)


def out_part(key):
    return sum(map(ord, key)) % 2


def simulate(inp, batch=4, double=None, skip=None):
    """Update-mode aggregation over micro-batches of ``batch`` offsets per input partition: after
    each batch, one row per key the batch touched. ``double`` = a batch id whose records are applied
    twice (a replay on state that already held them); ``skip`` = an input (partition, offset) never
    applied. Returns (output frame, per output row the truth from the applied multiset: "ok",
    "double" or "missed")."""
    inp = inp.sort_values(["partition", "offset"])
    applied: dict[str, list[int]] = {}
    rows, truth = [], []
    next_off = {0: 0, 1: 0}
    nb = int(inp["offset"].max()) // batch + 1
    for b in range(nb):
        recs = inp[inp["offset"] // batch == b]
        times = 2 if b == double else 1
        touched = []
        for _ in range(times):
            for r in recs.itertuples():
                if skip == (r.partition, r.offset):
                    continue
                applied.setdefault(r.key, []).append(r.seq)
                if r.key not in touched:
                    touched.append(r.key)
        for k in touched:
            xs = applied[k]
            p = out_part(k)
            rows.append({"key": k, "count": len(xs), "sum": sum(xs), "max_seq": max(xs),
                         "partition": p, "offset": next_off[p], "op.batch": str(b)})
            next_off[p] += 1
            if len(set(xs)) < len(xs):
                truth.append("double")
            elif sorted(xs) != list(range(len(xs))):
                truth.append("missed")
            else:
                truth.append("ok")
    out = pd.DataFrame(rows)
    for f in ("count", "sum", "max_seq"):
        out[f] = out[f].astype("Int64")
    return out, truth


def agg_row(key, seqs, partition=0, offset=0, batch=None):
    r = {"key": key, "count": len(seqs), "sum": sum(seqs), "max_seq": max(seqs),
         "partition": partition, "offset": offset}
    if batch is not None:
        r["op.batch"] = batch
    return r


def frame(rows):
    out = pd.DataFrame(rows)
    for f in ("count", "sum", "max_seq"):
        out[f] = out[f].astype("Int64")
    return out


def one_key_input(n=4, key="a"):
    return pd.DataFrame({"key": [key] * n, "seq": list(range(n)), "partition": [0] * n,
                         "offset": list(range(n))})


def test_clean_run_is_valid():
    inp = make_input()
    out, truth = simulate(inp)
    assert set(truth) == {"ok"}
    r = check(EMPTY, inp, out)
    assert r["verdict"] == "valid" and r["valid"] is True
    assert all(v == 0 for v in r["counts"].values())
    assert r["stats"]["keys"] == 5 and r["stats"]["keys_with_output"] == 5
    assert r["stats"]["matching_rows"] == len(out) and r["stats"]["input_records"] == 30
    assert r["bad_keys"] == {} and r["unknown_reasons"] == []
    assert set(r["definite"]) == set(DEFINITE)


def test_row_order_of_the_frames_does_not_matter():
    inp = make_input(seed=3)
    out, _ = simulate(inp, double=1)
    shuffled = check(EMPTY, inp.sample(frac=1, random_state=1), out.sample(frac=1, random_state=2))
    ordered = check(EMPTY, inp, out)
    assert shuffled["verdict"] == "invalid"
    assert shuffled["counts"] == ordered["counts"]
    assert shuffled["anomalies"] == ordered["anomalies"]


def test_replayed_batch_applied_twice_is_a_double_count_on_the_right_rows():
    inp = make_input()
    out, truth = simulate(inp, double=1)
    bad = [i for i, t in enumerate(truth) if t == "double"]
    assert bad and set(truth) <= {"ok", "double"}
    r = check(EMPTY, inp, out)
    assert r["verdict"] == "invalid"
    assert r["counts"]["state-double-count"] == len(bad)
    assert r["counts"]["state-missed"] == 0 and r["counts"]["state-regression"] == 0
    doubled_keys = set(out["key"].iloc[bad])
    assert set(r["bad_keys"]) == doubled_keys
    # the first example is the first doubled row in output (partition, offset) order
    first = out.iloc[bad].sort_values(["partition", "offset"]).iloc[0]
    ex = r["anomalies"]["state-double-count"][0]
    assert (ex["key"], ex["partition"], ex["offset"]) == (first["key"], first["partition"], first["offset"])
    assert ex["batch"] == "1"
    assert ex["count"] == first["count"] and ex["sum"] == first["sum"]
    # the nearest prefix: that count's (seqs 0..count-1), or the whole input (6) when above it
    c = min(int(first["count"]), 6)
    assert ex["prefix"] == {"count": c, "sum": c * (c - 1) // 2, "max_seq": c - 1}
    assert ex["input_count"] == 6
    assert ex["sum"] < ex["prefix"]["sum"] or ex["count"] > 6
    # every doubled key also ends wrong
    assert r["counts"]["state-final-mismatch"] == len(doubled_keys)


def test_skipped_record_is_missed():
    inp = make_input()
    # skip a record that is not its key's last one, so later aggregates skip over it
    key_last = inp.groupby("key")["offset"].transform("max")
    victim = inp[(inp["offset"] < key_last) & (inp["seq"] > 0)].iloc[0]
    out, truth = simulate(inp, skip=(victim["partition"], victim["offset"]))
    missed = [i for i, t in enumerate(truth) if t == "missed"]
    assert missed and set(truth) <= {"ok", "missed"}
    r = check(EMPTY, inp, out)
    assert r["verdict"] == "invalid"
    assert r["counts"]["state-missed"] == len(missed)
    assert r["counts"]["state-double-count"] == 0
    assert list(r["bad_keys"]) == [victim["key"]]
    ex = r["anomalies"]["state-missed"][0]
    assert ex["key"] == victim["key"] and "batch" in ex
    assert ex["max_seq"] > ex["prefix"]["max_seq"]


def test_hand_made_missed_and_double_count_examples():
    inp = one_key_input(4)                      # a: seq 0, 1, 2, 3
    out = frame([agg_row("a", [0, 2], offset=0, batch="7"),        # 1 skipped
                 agg_row("a", [0, 1, 0, 1], offset=1, batch="8"),  # {0,1} applied twice
                 agg_row("a", [0, 1, 2, 3, 3], offset=2),          # above the input's count
                 agg_row("a", [0, 1, 2, 3], offset=3)])
    r = check(EMPTY, inp, out)
    assert r["counts"]["state-missed"] == 1 and r["counts"]["state-double-count"] == 2
    assert r["counts"]["state-final-mismatch"] == 0  # the last one is the whole input
    m = r["anomalies"]["state-missed"][0]
    assert m == {"key": "a", "count": 2, "sum": 2, "max_seq": 2, "partition": 0, "offset": 0,
                 "batch": "7", "prefix": {"count": 2, "sum": 1, "max_seq": 1}, "input_count": 4}
    d1, d2 = r["anomalies"]["state-double-count"]
    assert d1["offset"] == 1 and d1["prefix"] == {"count": 4, "sum": 6, "max_seq": 3}
    assert d2["offset"] == 2 and d2["why"] == "count above the key's input count"
    assert d2["prefix"] == {"count": 4, "sum": 6, "max_seq": 3}  # nearest: the whole input


def test_same_count_and_max_but_other_sum_is_a_double_count():
    inp = one_key_input(5)
    # {0, 2, 2, 3}: count 4 and max 3 as prefix 4, sum 7 > 6: only a doubled record gets there
    out = frame([agg_row("a", [0, 2, 2, 3]), agg_row("a", [0, 1, 2, 3, 4], offset=1)])
    r = check(EMPTY, inp, out)
    assert r["counts"]["state-double-count"] == 1 and r["counts"]["state-missed"] == 0


def test_regression_points_at_the_longer_prefix_seen_before():
    inp = one_key_input(5)
    out = frame([agg_row("a", [0, 1], offset=0, batch="0"),
                 agg_row("a", [0, 1, 2, 3], offset=1, batch="1"),
                 agg_row("a", [0, 1, 2], offset=2, batch="2"),      # back from 4 to 3
                 agg_row("a", [0, 1], offset=3, batch="2"),         # and further back
                 agg_row("a", [0, 1, 2, 3, 4], offset=4, batch="3")])
    r = check(EMPTY, inp, out)
    assert r["verdict"] == "invalid"
    assert r["counts"]["state-regression"] == 2
    assert r["counts"]["state-double-count"] == r["counts"]["state-missed"] == 0
    first = r["anomalies"]["state-regression"][0]
    assert (first["count"], first["offset"], first["batch"]) == (3, 2, "2")
    assert first["after"] == {"count": 4, "sum": 6, "max_seq": 3, "partition": 0, "offset": 1, "batch": "1"}
    assert r["anomalies"]["state-regression"][1]["after"]["count"] == 4
    assert r["bad_keys"] == {"a": {"state-regression": 2}}


def test_regression_is_per_key():
    inp = pd.concat([one_key_input(3, "a"), one_key_input(3, "b").assign(offset=[3, 4, 5])])
    # b's short prefix after a's long one is no regression: prefixes are compared per key
    out = frame([agg_row("a", [0, 1, 2], offset=0), agg_row("b", [0], offset=1),
                 agg_row("b", [0, 1, 2], offset=2)])
    r = check(EMPTY, inp, out)
    assert r["verdict"] == "valid"


def test_a_repeated_aggregate_is_a_duplicate_emission():
    inp = one_key_input(3)
    out = frame([agg_row("a", [0, 1], offset=0, batch="0"), agg_row("a", [0, 1], offset=1, batch="0"),
                 agg_row("a", [0, 1, 2], offset=2, batch="1")])
    r = check(EMPTY, inp, out)
    assert r["counts"]["duplicate"] == 1 and r["counts"]["state-regression"] == 0
    assert r["anomalies"]["duplicate"][0]["after"]["offset"] == 0
    assert r["verdict"] == "invalid" and "duplicate" in r["definite"]


def test_short_last_aggregate_invalid_when_recovered_unknown_when_not():
    inp = make_input()
    out, _ = simulate(inp)
    # drop the last output row of key "d": its last aggregate is now a strict prefix
    last_d = out[out["key"] == "d"].index[-1]
    short = out.drop(index=last_d)
    r = check(EMPTY, inp, short)
    assert r["verdict"] == "invalid"
    assert r["counts"]["state-final-mismatch"] == 1
    assert all(r["counts"][a] == 0 for a in DEFINITE)
    ex = r["anomalies"]["state-final-mismatch"][0]
    assert ex["key"] == "d" and ex["input_count"] == 6
    assert ex["expected"] == {"count": 6, "sum": 15, "max_seq": 5}
    assert ex["why"] == "last aggregate is not the whole input"
    prev = out[out["key"] == "d"].iloc[-2]
    assert ex["last"]["count"] == prev["count"] and ex["last"]["offset"] == prev["offset"]
    assert ex["last"]["batch"] == prev["op.batch"]

    r2 = check(EMPTY, inp, short, Recovery(finished=False, reasons=["output LSO < HW on 1"]))
    assert r2["verdict"] == "unknown" and r2["valid"] == "unknown"
    assert r2["unknown_reasons"] == ["output LSO < HW on 1"]
    assert r2["counts"]["state-final-mismatch"] == 1


def test_key_without_any_output_is_a_final_mismatch():
    inp = make_input()
    out, _ = simulate(inp)
    r = check(EMPTY, inp, out[out["key"] != "b"])
    assert r["verdict"] == "invalid"
    assert r["counts"]["state-final-mismatch"] == 1
    ex = r["anomalies"]["state-final-mismatch"][0]
    assert ex["key"] == "b" and ex["why"] == "no output for the key" and "last" not in ex


def test_definite_anomaly_is_invalid_even_if_recovery_did_not_finish():
    inp = make_input()
    out, _ = simulate(inp, double=0)
    r = check(EMPTY, inp, out, Recovery(finished=False, reasons=["deadline"]))
    assert r["verdict"] == "invalid" and r["valid"] is False
    assert r["unknown_reasons"] == ["deadline"]  # kept, as exactly_once keeps them


def test_unparsable_values_and_foreign_keys_are_unexpected():
    inp = one_key_input(2)
    raw = pd.DataFrame({
        "key": [b"a", b"a", b"a", b"zz", b"a", b"a"],
        "value": [json.dumps({"key": "a", "count": 1, "sum": 0, "max_seq": 0}).encode(),
                  b"not json",
                  b'{"key": "a", "count": "2", "sum": 1, "max_seq": 1}',   # a string count
                  json.dumps({"key": "zz", "count": 1, "sum": 0, "max_seq": 0}).encode(),
                  json.dumps({"key": "a", "count": 1, "sum": 0, "max_seq": 9}).encode(),
                  json.dumps({"key": "a", "count": 2, "sum": 1, "max_seq": 1}).encode()],
        "partition": [0] * 6, "offset": list(range(6)), "op.batch": ["0", "1", "1", "1", "1", "2"]})
    r = check(EMPTY, inp, decode(raw))
    assert r["verdict"] == "invalid"
    assert r["counts"]["unexpected"] == 4
    ux = r["anomalies"]["unexpected"]
    assert [(u["offset"], u["why"]) for u in ux] == [
        (1, "value without key/count/sum/max_seq"), (2, "value without key/count/sum/max_seq"),
        (3, "key not in the input"), (4, "max_seq outside the key's input seqs")]
    assert ux[0]["key"] == "a" and ux[0]["batch"] == "1" and "count" not in ux[0]
    assert ux[2]["key"] == "zz"
    assert r["counts"]["state-final-mismatch"] == 0  # the last row of "a" is its whole input
    assert r["bad_keys"] == {"a": {"unexpected": 3}, "zz": {"unexpected": 1}}


def test_count_below_one_is_unexpected():
    inp = one_key_input(1)
    out = frame([{"key": "a", "count": 0, "sum": 0, "max_seq": 0, "partition": 0, "offset": 0},
                 agg_row("a", [0], offset=1)])
    r = check(EMPTY, inp, out)
    assert r["counts"]["unexpected"] == 1 and r["anomalies"]["unexpected"][0]["why"] == "count below 1"


def test_decode_fast_and_slow_paths_agree():
    vals = [{"key": "a", "count": 3, "sum": 3, "max_seq": 2},
            {"key": "b", "count": 1, "sum": 0, "max_seq": 0, "extra": "x"},
            {"key": "c", "count": 2, "sum": 1}]                    # no max_seq
    clean = pd.DataFrame({"key": [b"a", b"b", b"c"], "value": [json.dumps(v).encode() for v in vals],
                          "partition": [0, 1, 0], "offset": [0, 0, 1]})
    fast = decode(clean)
    # garbage and a tombstone go one by one, the rest still through pyarrow
    mixed = decode(pd.concat([clean, pd.DataFrame({"key": [b"d", b"e"], "value": [b"\xff{", None],
                                                   "partition": [1, 1], "offset": [1, 2]})],
                             ignore_index=True))
    # a value pyarrow rejects (a float count) sends every value down the per-record path
    slow = decode(pd.concat([clean, pd.DataFrame({"key": [b"f"], "value": [b'{"key":"f","count":1.0}'],
                                                  "partition": [1], "offset": [3]})], ignore_index=True))
    assert list(fast.columns) == ["key", "partition", "offset", "count", "sum", "max_seq"]
    for d in (fast, mixed.iloc[:3], slow.iloc[:3]):
        assert d["key"].tolist() == ["a", "b", "c"]
        assert d["count"].tolist() == [3, 1, 2]
        assert d["max_seq"].iloc[:2].tolist() == [2, 0] and pd.isna(d["max_seq"].iloc[2])
        assert str(d["count"].dtype) == "Int64"
    assert mixed["key"].iloc[3:].tolist() == ["d", "e"]  # the record's Kafka key when the value has none
    assert mixed[["count", "sum", "max_seq"]].iloc[3:].isna().all().all()
    assert slow["key"].iloc[3] == "f" and pd.isna(slow["count"].iloc[3])


def test_decode_keeps_large_integers_exact_next_to_a_null():
    big = 2 ** 53 + 1  # not a float
    raw = pd.DataFrame({"key": [b"a", b"a"], "partition": [0, 0], "offset": [0, 1],
                        "value": [json.dumps({"key": "a", "count": big, "sum": 0, "max_seq": 0}).encode(),
                                  b'{"key":"a","count":null,"sum":0,"max_seq":0}']})
    d = decode(raw)
    assert d["count"].iloc[0] == big and pd.isna(d["count"].iloc[1])
    over = decode(pd.DataFrame({"key": [b"a"], "partition": [0], "offset": [0],
                                "value": [b'{"key":"a","count":99999999999999999999,"sum":0,"max_seq":0}']}))
    assert pd.isna(over["count"].iloc[0])


def test_decode_rejects_non_integers():
    raw = pd.DataFrame({"key": [b"a"] * 3,
                        "value": [b'{"key":"a","count":1.5,"sum":0,"max_seq":0}',
                                  b'{"key":"a","count":true,"sum":0,"max_seq":0}',
                                  b'{"key":"a","count":1,"sum":0,"max_seq":0}'],
                        "partition": [0] * 3, "offset": [0, 1, 2]})
    d = decode(raw)
    assert d["count"].isna().tolist() == [True, True, False]


@pytest.mark.parametrize("seed", range(6))
def test_many_keys_and_partitions_interleaved_with_one_fault(seed):
    rnd = random.Random(seed)
    parts = {p: [f"k{p}-{i}" for i in range(7)] for p in (0, 1)}
    inp = make_input(parts, per_key=9, seed=seed)
    kind = rnd.choice(["double", "skip"])
    if kind == "double":
        out, truth = simulate(inp, batch=5, double=rnd.randrange(3))
    else:
        v = inp[inp["seq"].between(1, 7)].sample(1, random_state=seed).iloc[0]
        out, truth = simulate(inp, batch=5, skip=(v["partition"], v["offset"]))
    out = out.sample(frac=1, random_state=seed)
    truth = pd.Series(truth, index=out.index.sort_values()).loc[out.index]
    r = check(EMPTY, inp, out)
    assert r["counts"]["state-double-count"] == int((truth == "double").sum())
    assert r["counts"]["state-missed"] == int((truth == "missed").sum())
    assert r["counts"]["state-regression"] == r["counts"]["unexpected"] == 0
    bad = set(out["key"][truth != "ok"])
    assert bad and set(r["bad_keys"]) == bad
    assert r["verdict"] == "invalid"


def test_irregular_and_split_input_keys_are_counted():
    inp = pd.DataFrame({"key": ["a", "a", "a", "b", "b"], "seq": [0, 1, 1, 0, 1],
                        "partition": [0, 0, 0, 0, 1], "offset": [0, 1, 2, 3, 0]})
    out = frame([agg_row("a", [0, 1, 1]), agg_row("b", [0, 1], offset=1)])
    r = check(EMPTY, inp, out)
    # the input's own repeat is owed too: the aggregate of all three records is right
    assert r["verdict"] == "valid"
    assert r["stats"]["irregular_keys"] == 1 and r["stats"]["split_keys"] == 1


def test_input_rows_without_seq_are_left_out():
    inp = one_key_input(4)
    inp["seq"] = inp["seq"].astype("Int64")
    inp.loc[3, "seq"] = pd.NA
    out = frame([agg_row("a", [0, 1, 2])])
    r = check(EMPTY, inp, out)
    assert r["verdict"] == "valid" and r["stats"]["input_unparsable"] == 1


def test_empty_frames():
    r = check(EMPTY, pd.DataFrame(), pd.DataFrame())
    assert r["verdict"] == "valid" and r["stats"]["keys"] == 0
    r = check(EMPTY, one_key_input(2), pd.DataFrame())
    assert r["verdict"] == "invalid" and r["counts"]["state-final-mismatch"] == 1
    r = check(EMPTY, pd.DataFrame(), frame([agg_row("a", [0])]))
    assert r["counts"]["unexpected"] == 1


def test_large_run_matches_the_simulated_truth():
    # 20k keys x 50 records, a doubled batch: vectorised paths at a size where per-row code would show
    rng = np.random.default_rng(0)
    nkeys, per = 20_000, 50
    keys = np.array([f"k{i}" for i in range(nkeys)], dtype=object)
    kc = np.repeat(np.arange(nkeys), per)
    rng.shuffle(kc)
    part = kc % 2
    seq = np.zeros(len(kc), np.int64)
    order = np.argsort(kc, kind="stable")
    seq[order] = np.tile(np.arange(per), nkeys)
    inp = pd.DataFrame({"key": keys[kc], "seq": seq, "partition": part})
    inp["offset"] = inp.groupby("partition").cumcount()
    # one output row per key every 10 records: prefixes 10, 20, ..., 50; key k7's prefix 30 doubled
    ks = np.repeat(np.arange(nkeys), 5)
    p = np.tile(np.arange(10, 51, 10), nkeys)
    out = pd.DataFrame({"key": keys[ks], "count": p, "sum": p * (p - 1) // 2, "max_seq": p - 1,
                        "partition": ks % 2})
    out["offset"] = out.groupby("partition").cumcount()
    bad = (out["key"] == "k7") & (out["count"] >= 30)
    out.loc[bad, "count"] += 10                  # the batch of seqs 20..29 applied a second time
    out.loc[bad, "sum"] += sum(range(20, 30))
    r = check(EMPTY, inp, out)
    assert r["counts"]["state-double-count"] == 3
    assert r["stats"]["matching_rows"] == len(out) - 3
    assert list(r["bad_keys"]) == ["k7"]


def test_the_counter_workload_counts_sends_and_an_acknowledged_send_missing_from_the_input():
    from onceproof.workloads import registry

    inp = one_key_input(3)
    out = frame([agg_row("a", [0, 1, 2], offset=0, batch="0")])
    hist = pd.DataFrame({"type": ["invoke", "ok"] * 4 + ["invoke", "info"], "f": "send",
                         "key": ["a"] * 10, "seq": [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]})
    r = registry.get("counter").check(hist, inp, out)
    assert (r["stats"]["sends_ok"], r["stats"]["sends_info"], r["stats"]["sends_fail"]) == (4, 1, 0)
    assert r["counts"]["lost-write"] == 1 and r["anomalies"]["lost-write"] == [{"key": "a", "seq": 3}]
    assert r["verdict"] == "invalid" and "lost-write" in r["definite"]
    clean = registry.get("counter").check(hist[hist["seq"] != 3], inp, out)
    assert clean["verdict"] == "valid" and clean["counts"]["lost-write"] == 0
