"""Prototype (research only) of a vectorized prefix-aggregate checker.

Not wired into onceproof; lives here to validate the algorithm proposed in
state-and-eos-test-driver.md.  Run:  python proto_state_check.py
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def prefix_tables(inp: pd.DataFrame):
    """inp: columns key, seq, in visible input order (partition, offset).

    Returns (keys Index, n per key, base offset per key, flat cumsum array F,
    flat cum-sum-of-squares Q) where F[base[k] + i] is sum(seq) over the first
    i input records of key k (i = 0..n_k)."""
    codes, keys = pd.factorize(inp["key"], sort=False)
    seq = inp["seq"].to_numpy(np.int64)
    order = np.argsort(codes, kind="stable")          # keep input order within key
    codes_s, seq_s = codes[order], seq[order]
    n = np.bincount(codes_s, minlength=len(keys))      # records per key
    base = np.concatenate(([0], np.cumsum(n + 1)[:-1]))  # start of key's block
    pos = np.arange(len(codes_s)) - np.repeat(np.cumsum(n) - n, n)  # 0-based pos in key
    F = np.zeros(int((n + 1).sum()), np.int64)
    Q = np.zeros_like(F)
    # cumulative sums within key: global cumsum minus value at block start
    first = np.cumsum(n) - n                           # index of each key's first record
    cs = np.cumsum(seq_s)
    cs -= np.repeat(cs[first] - seq_s[first], n)       # restart the running sum per key
    cq = np.cumsum(seq_s * seq_s)
    cq -= np.repeat(cq[first] - seq_s[first] ** 2, n)
    F[base[codes_s] + pos + 1] = cs
    Q[base[codes_s] + pos + 1] = cq
    # input integrity: idealized seq must be 0..n_k-1 in order
    contiguous = bool((seq_s == pos).all())
    return keys, n, base, F, Q, contiguous


def classify(inp: pd.DataFrame, out: pd.DataFrame, final: bool = True) -> pd.DataFrame:
    """out: columns key, cnt, sm, [sq], partition, offset (visible order)."""
    keys, n, base, F, Q, contiguous = prefix_tables(inp)
    out = out.sort_values(["partition", "offset"], kind="stable").reset_index(drop=True)
    kc = keys.get_indexer(out["key"])                  # -1 = key never in input
    c = out["cnt"].to_numpy(np.int64)
    s = out["sm"].to_numpy(np.int64)
    known = kc >= 0
    nk = np.where(known, n[np.maximum(kc, 0)], 0)
    in_range = known & (c >= 1) & (c <= nk)
    idx = np.where(in_range, base[np.maximum(kc, 0)] + c, 0)
    exp = np.where(in_range, F[idx], -1)
    ok = in_range & (s == exp)
    if "sq" in out:
        ok &= np.where(in_range, Q[idx], -1) == out["sq"].to_numpy(np.int64)

    label = np.full(len(out), "", dtype=object)
    label[~known] = "state-phantom"                     # output for a key never produced
    over = known & (c > nk)                             # above every input prefix
    label[over] = "state-double-count"
    label[in_range & ~ok & (s < exp)] = "state-double-count"   # sum deficit => a dup (proof needs contiguous seq)
    label[in_range & ~ok & (s > exp)] = "state-missed"         # sum excess  => a gap
    label[in_range & ~ok & (s == exp)] = "state-mixed"         # only with sq: dup+gap cancelling in sum
    label[known & (c < 1)] = "state-invalid"

    df = out.assign(kc=kc, ok=ok, label=label)
    # regression / duplicate emission among valid rows, in visible order per key
    v = df[df.ok].copy()
    v["p"] = v["cnt"]
    v["prev_max"] = v.groupby("kc")["p"].cummax().groupby(v["kc"]).shift(1)
    df.loc[v.index[v.p < v.prev_max], "label"] = "state-regression"
    df.loc[v.index[v.p == v.prev_max], "label"] = "output-duplicate"

    if final:
        last = df.groupby("kc").tail(1)
        last = last[last.kc >= 0]
        stale = last[(last.ok) & (last.cnt < n[last.kc.to_numpy()])]
        df.loc[stale.index, "label"] = df.loc[stale.index, "label"].where(
            df.loc[stale.index, "label"] != "", "state-final-short")
        missing = np.setdiff1d(np.flatnonzero(n > 0), df.kc[df.kc >= 0].unique())
        df.attrs["keys_without_output"] = keys[missing].tolist()
    df.attrs["input_contiguous"] = contiguous
    return df


def _demo():
    # key a: 6 records seq 0..5 ; key b: 3 records seq 0..2
    inp = pd.DataFrame({"key": ["a", "a", "b", "a", "b", "a", "a", "b", "a"],
                        "seq": [0, 1, 0, 2, 1, 3, 4, 2, 5]})
    S = lambda p: p * (p - 1) // 2
    rows = [
        ("a", 2, S(2)),            # ok prefix 2
        ("b", 1, S(1)),            # ok
        ("a", 4, S(4)),            # ok
        ("a", 4, S(4)),            # replayed batch re-emitted -> output-duplicate
        ("a", 6, S(4) + 2 + 3),    # batch {4,5} lost? no: dup of {2,3}: count 6, sum 0+1+2+3+2+3=11 < S(6)=15
        ("b", 2, 0 + 2),           # skipped seq 1: count 2, sum 2 > S(2)=1 -> missed
        ("a", 3, S(3)),            # shorter than earlier valid 4 -> regression
        ("a", 7, 99),              # count above n_a=6 -> double-count
        ("z", 1, 0),               # phantom
    ]
    out = pd.DataFrame(rows, columns=["key", "cnt", "sm"])
    out["partition"] = 0
    out["offset"] = np.arange(len(out))
    res = classify(inp, out)
    print(res[["key", "cnt", "sm", "ok", "label"]].to_string())
    print("keys_without_output:", res.attrs["keys_without_output"],
          "input_contiguous:", res.attrs["input_contiguous"])


if __name__ == "__main__":
    _demo()
