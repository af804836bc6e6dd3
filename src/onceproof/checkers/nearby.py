"""Attach to each anomaly example the nemesis ops nearest in time — the context a user needs to file a bug.

An example's time is the Kafka timestamp (epoch ms) of the record it names: the output record for
``duplicate`` copies, ``nonmonotonic``, ``unexpected`` and ``aborted-read`` examples (their
``partition``/``offset``), the input record for ``lost`` (``input_partition``/``input_offset``). The
nemesis ops are ``nemesis.jsonl`` completions (``wall`` = epoch s). Each example gains
``"nemesis_nearby": [{"f", "outcome", "target", "dt_s"}]``: up to ``k`` effective ops whose window
(invoke → completion) is closest to the example's time, ``dt_s`` < 0 meaning the fault came before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from onceproof.blocks import row_blocks


def fault_windows(ops: pd.DataFrame) -> pd.DataFrame:
    """Nemesis history → one row per effective fault: f, target, start_s, end_s (epoch seconds)."""
    # no fault completed: no history, or heals only (a run whose budget ran out before the first fault has
    # no "outcome" column: only completed faults carry one)
    if ops is None or ops.empty or "type" not in ops or "outcome" not in ops:
        return pd.DataFrame(columns=["f", "target", "outcome", "start_s", "end_s"])
    ops = ops[ops["f"] != "heal"].sort_values("index")
    inv = ops[ops["type"] == "invoke"]
    done = ops[ops["type"] == "info"]
    n = min(len(inv), len(done))
    w = pd.DataFrame({"f": done["f"].to_numpy()[:n], "target": done.get("target", pd.Series([""] * n)).to_numpy()[:n],
                      "outcome": done["outcome"].to_numpy()[:n],
                      "start_s": inv["wall"].to_numpy()[:n], "end_s": done["wall"].to_numpy()[:n]})
    return w[w["outcome"] == "effective"].reset_index(drop=True)


def _time_of(ex: dict, out_ts: dict, in_ts: dict) -> float | None:
    if "input_partition" in ex:
        t = in_ts.get((int(ex["input_partition"]), int(ex["input_offset"])))
    elif "copies" in ex and ex["copies"]:
        c = ex["copies"][-1]
        t = out_ts.get((int(c["partition"]), int(c["offset"])))
    elif "partition" in ex and "offset" in ex:
        t = out_ts.get((int(ex["partition"]), int(ex["offset"])))
    else:
        t = None
    return None if t is None else t / 1000.0


def _ts_index(frame: pd.DataFrame | None, keys: list[tuple[int, int]]) -> dict:
    """``{(partition, offset): timestamp}`` of ``frame``'s rows at ``keys`` (the few example records):
    the rows are narrowed by offset first (a table look-up per row, ``np.isin(kind="table")``, when the
    wanted offsets span at most 4 per row, else a hash look-up), so only those are copied."""
    if frame is None or frame.empty or "timestamp" not in frame or not keys:
        return {}
    want = pd.DataFrame(keys, columns=["partition", "offset"]).drop_duplicates()
    off, wo = frame["offset"], want["offset"].unique()
    if isinstance(off.dtype, np.dtype) and off.dtype.kind in "iu" and int(wo.max()) - int(wo.min()) <= 4 * len(off):
        near = _isin_table(off.to_numpy(), wo)  # one look-up per row in a table over wo's range
    else:
        near = off.isin(wo).to_numpy(dtype=bool)
    # the rows first, then the columns: ``.loc[mask, columns]`` would join the columns into one block,
    # copying them whole
    f = frame.iloc[np.flatnonzero(near)][["partition", "offset", "timestamp"]].astype(
        {"partition": "int64", "offset": "int64"})
    m = want.merge(f, on=["partition", "offset"], how="inner")
    return {(int(p), int(o)): float(t) for p, o, t in m.itertuples(index=False)}


def attach(result: dict, output: pd.DataFrame | None, input: pd.DataFrame | None, ops: pd.DataFrame | None,
           k: int = 3) -> dict:
    """Add ``nemesis_nearby`` to every example in ``result["anomalies"]`` (in place; also returned)."""
    w = fault_windows(ops)
    if w.empty:
        return result
    exs = [ex for lst in result.get("anomalies", {}).values() for ex in lst if isinstance(ex, dict)]
    out_keys, in_keys = [], []
    for ex in exs:
        if "input_partition" in ex:
            in_keys.append((int(ex["input_partition"]), int(ex["input_offset"])))
        elif ex.get("copies"):
            out_keys += [(int(c["partition"]), int(c["offset"])) for c in ex["copies"] if "offset" in c]
        elif "partition" in ex and "offset" in ex:
            out_keys.append((int(ex["partition"]), int(ex["offset"])))
    out_ts, in_ts = _ts_index(output, out_keys), _ts_index(input, in_keys)
    start, end = w["start_s"].to_numpy(float), w["end_s"].to_numpy(float)
    for ex in exs:
        t = _time_of(ex, out_ts, in_ts)
        if t is None:
            continue
        # signed distance from the fault window to t: 0 inside, <0 fault before t... reported as
        # fault time − t so that a negative dt means "the fault came before this record"
        dist = np.where(t < start, start - t, np.where(t > end, end - t, 0.0))
        order = np.argsort(np.abs(dist))[:k]
        ex["nemesis_nearby"] = [{"f": w.at[i, "f"], "target": w.at[i, "target"], "dt_s": round(float(dist[i]), 1)}
                                for i in order]
    return result


def _isin_table(x: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``np.isin(x, wanted)`` for integer arrays, through a bool table over ``wanted``'s range (as
    ``np.isin(kind="table")``), a block of rows at a time: no whole-length int copy of ``x``."""
    lo, hi = int(wanted.min()), int(wanted.max())
    table = np.zeros(hi - lo + 1, bool)
    table[np.asarray(wanted, dtype=np.int64) - lo] = True
    out = np.zeros(len(x), bool)
    for a, b in row_blocks(len(x)):
        xb = x[a:b]
        inr = (xb >= lo) & (xb <= hi)
        out[a:b][inr] = table[xb[inr].astype(np.int64) - lo]
    return out
