"""Fuzz the prototype: simulated Spark micro-batch update-mode outputs."""
import numpy as np, pandas as pd, time
from proto_state_check import classify
rng = np.random.default_rng(1)

def simulate(nkeys=2000, nrec=200_000, nbatches=300, fault=None):
    keys = rng.integers(0, nkeys, nrec)
    seq = pd.Series(keys).groupby(keys).cumcount().to_numpy()
    inp = pd.DataFrame({"key": keys, "seq": seq})
    bounds = np.sort(rng.choice(np.arange(1, nrec), nbatches - 1, replace=False))
    bid = np.searchsorted(bounds, np.arange(nrec), side="right")
    df = inp.assign(b=bid)
    fb = nbatches // 2
    if fault == "dup":       # batch fb's records applied twice to state
        df = pd.concat([df, df[df.b == fb]]).sort_values("b", kind="stable")
    if fault == "skip":      # batch fb's records never applied
        df = df[df.b != fb]
    g = df.groupby(["b", "key"]).agg(c=("seq", "size"), s=("seq", "sum")).reset_index()
    g = g.sort_values(["key", "b"])
    g["cnt"] = g.groupby("key").c.cumsum(); g["sm"] = g.groupby("key").s.cumsum()
    out = g.sort_values(["b", "key"]).reset_index(drop=True)
    out["partition"] = 0; out["offset"] = np.arange(len(out))
    return inp, out[["key", "cnt", "sm", "partition", "offset", "b"]], fb

for fault in [None, "dup", "skip"]:
    inp, out, fb = simulate(fault=fault)
    t = time.time(); res = classify(inp, out); dt = time.time() - t
    lab = res.label.value_counts().to_dict()
    first_bad = res[res.label != ""].b.min() if (res.label != "").any() else None
    print(fault, f"{dt:.2f}s", lab, "first bad batch", first_bad, "fault batch", fb,
          "keys_without_output", len(res.attrs["keys_without_output"]))
