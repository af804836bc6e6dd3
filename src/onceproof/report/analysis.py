"""The numbers the report shows, as frames and arrays (no HTML, no plotting).

* :func:`fault_windows`, :func:`heal_times`: the nemesis history on the test clock;
* :func:`timeline_panels`: input and output rate, end-to-end latency and lag per time bin;
* :func:`bad_keys`, :func:`key_sequences`: the points of the per-key sequence plots.

x is **seconds since test start** (``Run.t0``, see :mod:`onceproof.report.load`). Columnar pandas / numpy (binning
with ``numpy.histogram``, ``groupby`` quantiles, ``merge`` / ``merge_asof``); the only Python loops run
over fault ops (a handful) and the ≤ ``MAX_KEYS`` plotted keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from onceproof.report.load import Run
from onceproof.store.runfiles import HISTORY, INPUT, LIVE, OUTPUT, SINK

MAX_KEYS = 10  # bad keys plotted
MAX_POINTS_PER_KEY = 1500  # in-order points drawn per key plot (anomalous points are always drawn)
MAX_BINS = 1800  # time plots use 1-s bins up to this many seconds, wider bins beyond


@dataclass
class Series:
    """A time series for the plots. ``x``: seconds since test start; ``y``: in ``unit``."""

    name: str
    x: np.ndarray
    y: np.ndarray
    unit: str = ""
    dash: str | None = None


@dataclass
class Panel:
    """One row of the timeline figure: a title, its series and a note on the data's source."""

    title: str
    series: list[Series]
    source: str = ""
    step: bool = False  # draw as a step line (per-bin rates)


def fault_windows(nemesis: pd.DataFrame | None, t0: float | None) -> pd.DataFrame:
    """One row per fault op: ``fault, op, start_s, end_s, duration_s, outcome, target, evidence (dict),
    planned_s, effective (bool)``, seconds since test start. An ``info`` op is paired with the latest
    unpaired ``invoke`` of the same fault; an invoke with no completion gets ``outcome='(no completion
    recorded)'`` and ``end_s = start_s``. ``heal`` ops are not faults and are left out."""
    cols = ["fault", "op", "start_s", "end_s", "duration_s", "outcome", "target", "evidence", "planned_s",
            "effective"]
    if nemesis is None or t0 is None or not len(nemesis) or "f" not in nemesis.columns:
        return pd.DataFrame(columns=cols)
    ops = nemesis[nemesis["f"] != "heal"]
    rows, pending = [], {}
    for op in ops.to_dict("records"):  # a handful of ops: a plain loop is clearest
        f, wall = str(op.get("f")), _num(op.get("wall"))
        if op.get("type") == "invoke":
            pending[f] = op
            continue
        inv = pending.pop(f, None)
        start = _num(inv.get("wall")) if inv else wall
        planned = _num(inv.get("planned_s")) if inv else _num(op.get("planned_s"))
        rows.append({"fault": f, "start_s": start - t0, "end_s": wall - t0, "outcome": _str(op.get("outcome")),
                     "target": _str(op.get("target")), "evidence": op.get("evidence") if isinstance(
                         op.get("evidence"), dict) else {}, "planned_s": planned})
    for f, inv in pending.items():
        s = _num(inv.get("wall")) - t0
        rows.append({"fault": f, "start_s": s, "end_s": s, "outcome": "(no completion recorded)", "target": "",
                     "evidence": {}, "planned_s": _num(inv.get("planned_s"))})
    if not rows:
        return pd.DataFrame(columns=cols)
    w = pd.DataFrame(rows).sort_values("start_s", kind="stable").reset_index(drop=True)
    w["duration_s"] = w["end_s"] - w["start_s"]
    w["effective"] = w["outcome"] == "effective"
    w["op"] = w.groupby("fault").cumcount() + 1
    return w[cols]


def heal_times(nemesis: pd.DataFrame | None, t0: float | None) -> list[float]:
    """Seconds since start of each distinct heal moment (heal ops of several faults within 1 s merge)."""
    if nemesis is None or t0 is None or "f" not in nemesis.columns:
        return []
    t = (pd.to_numeric(nemesis.loc[nemesis["f"] == "heal", "wall"], errors="coerce").dropna() - t0).sort_values()
    return [float(x) for x in t[t.diff().fillna(np.inf) > 1.0]]


def input_times(run: Run) -> tuple[pd.Series | None, str]:
    """Seconds since start at which each input record was appended (for the lag), and the source."""
    if run.t0 is None:
        return None, ""
    if run.input is not None and "timestamp" in run.input.columns:
        return pd.to_numeric(run.input["timestamp"]) / 1000.0 - run.t0, f"{INPUT} timestamp (Kafka)"
    ok = _ok_sends(run.history)
    if ok is not None:
        return ok - run.t0, f"{HISTORY} ok sends (wall)"
    if run.input is not None and "t" in run.input.columns:
        return pd.to_numeric(run.input["t"]) / 1000.0 - run.t0, f"{INPUT} t (send time in the value)"
    return None, ""


def _ok_sends(history: pd.DataFrame | None) -> pd.Series | None:
    if history is None or not {"type", "wall"} <= set(history.columns):
        return None
    h = history[history["type"] == "ok"]
    if "f" in h.columns:
        h = h[h["f"] == "send"]
    return pd.to_numeric(h["wall"], errors="coerce").dropna()


def output_times_ms(run: Run) -> tuple[pd.Series | None, str]:
    """Epoch ms at which each output record appeared (index aligned with ``run.output``), and the source:
    the Kafka record timestamp, else (older runs) the commit time of the record's transaction from
    ``sink.jsonl``, joined on ``(op.batch, op.sink_partition, op.attempt)``."""
    out = run.output
    if out is None or not len(out):
        return None, ""
    if "timestamp" in out.columns:
        return pd.to_numeric(out["timestamp"], errors="coerce"), f"{OUTPUT} timestamp (Kafka)"
    keys = ["op.batch", "op.sink_partition", "op.attempt"]
    sink = run.sink
    if sink is None or not set(keys) <= set(out.columns) or "event" not in sink.columns:
        return None, ""
    c = sink[sink["event"] == "commit"]
    if not len(c) or not {"batch", "partition", "attempt", "time"} <= set(c.columns):
        return None, ""
    c = pd.DataFrame({k: pd.to_numeric(c[src], errors="coerce").astype("Int64").astype(str)
                      for k, src in zip(keys, ("batch", "partition", "attempt"), strict=True)}
                     | {"_commit_ms": pd.to_numeric(c["time"]) * 1000.0})
    c = c.drop_duplicates(keys, keep="last")
    m = out[keys].astype(str).merge(c, on=keys, how="left")
    if m["_commit_ms"].isna().all():
        return None, ""
    return pd.Series(m["_commit_ms"].to_numpy(), index=out.index), \
        f"commit time of the record's transaction ({SINK}): {OUTPUT} has no timestamp column"


def bin_width(lo: float, hi: float) -> float:
    """1-s bins, widened so a long run has at most ``MAX_BINS`` bins."""
    return float(max(1, math.ceil((hi - lo) / MAX_BINS)))


def counts_per_bin(t_s: pd.Series, edges: np.ndarray) -> np.ndarray:
    """Number of events in each bin ``[edges[i], edges[i+1])``; ``t_s`` in seconds. Shape: len(edges)-1."""
    t = t_s.dropna().to_numpy(dtype=float)
    return np.histogram(t, bins=edges)[0] if len(edges) > 1 else np.zeros(0)


def timeline_panels(run: Run) -> tuple[list[Panel], list[str]]:
    """The time plots that the run's data allows, and a note per plot that could not be drawn.

    Panels (x = bin start, seconds since test start):
    input rate (ok sends/s; also fail/info sends/s when present), output rate (records/s by output time),
    end-to-end latency (output time - in_ts, ms: p50 / p99 / max per bin) and lag (cumulative input
    records - cumulative output records at each bin's end; also against distinct output (key, seq))."""
    notes: list[str] = []
    if run.t0 is None:
        return [], ["no time plots: the test's start time is unknown (" + run.t0_source + ")"]
    t0 = run.t0
    in_t, in_src = input_times(run)
    ok = _ok_sends(run.history)
    out_ms, out_src = output_times_ms(run)
    out_t = out_ms / 1000.0 - t0 if out_ms is not None else None
    spans = [s for s in (in_t, out_t, None if ok is None else ok - t0) if s is not None and len(s.dropna())]
    if not spans:
        return [], ["no time plots: no ok sends, no input timestamps, no output times"]
    lo = min(0.0, min(float(s.min()) for s in spans))
    hi = max(float(s.max()) for s in spans)
    w = bin_width(lo, hi)
    edges = np.arange(math.floor(lo / w) * w, hi + w + 1e-9, w)
    x = edges[:-1]
    panels: list[Panel] = []

    # input rate
    if run.history is not None and {"type", "wall"} <= set(run.history.columns):
        h = run.history
        if "f" in h.columns:
            h = h[h["f"] == "send"]
        ser = []
        for typ, dash in (("ok", None), ("fail", "dot"), ("info", "dash")):
            tt = pd.to_numeric(h.loc[h["type"] == typ, "wall"], errors="coerce") - t0
            if typ == "ok" or len(tt):
                ser.append(Series(f"{typ} sends/s", x, counts_per_bin(tt, edges) / w, "1/s", dash))
        panels.append(Panel("input rate (sends/s)", ser, HISTORY, step=True))
    elif in_t is not None:
        panels.append(Panel("input rate (records/s)", [Series("input records/s", x, counts_per_bin(in_t, edges) / w,
                                                                "1/s")], in_src, step=True))
        notes.append(f"input rate from {in_src}: {HISTORY} is missing")
    else:
        notes.append(f"no input rate: {HISTORY} and input timestamps are missing")

    # output rate
    if out_t is not None:
        panels.append(Panel("output rate (records/s)", [Series("output records/s", x, counts_per_bin(out_t, edges) / w,
                                                                 "1/s")], out_src, step=True))
    else:
        notes.append("no output rate: " + _why_no_output_time(run))

    # latency
    if out_ms is not None and run.output is not None and "in_ts" in run.output.columns:
        lat = pd.DataFrame({"t": out_t, "lat": out_ms - pd.to_numeric(run.output["in_ts"], errors="coerce")}).dropna()
        if len(lat):
            b = np.floor((lat["t"] - edges[0]) / w).astype("int64")
            g = lat["lat"].groupby(b)
            # every bin, NaN where nothing was output: the lines break instead of bridging a stall
            allbins = pd.RangeIndex(int(b.min()), int(b.max()) + 1)
            q = g.quantile([0.5, 0.99]).unstack().reindex(allbins)
            mx = g.max().reindex(allbins)
            xs = edges[0] + (allbins.to_numpy() + 0.5) * w
            series = [Series("p50", xs, q[0.5].to_numpy(), "ms"), Series("p99", xs, q[0.99].to_numpy(), "ms"),
                      Series("max", xs, mx.to_numpy(), "ms", "dot")]
            src = f"{out_src} - {OUTPUT} in_ts"
            vis = _visibility_p99(run, edges, w, t0)
            if vis is not None:
                series.append(Series("visible p99 (live reader)", vis[0], vis[1], "ms", "dash"))
                src += f"; visible = {LIVE} seen_ms - in_ts (read_committed reader during the faults)"
            panels.append(Panel("end-to-end latency (ms): output time - input record time (in_ts)", series, src))
    elif out_ms is None:
        notes.append("no latency: " + _why_no_output_time(run))
    else:
        notes.append(f"no latency: {OUTPUT} has no in_ts column")

    # lag
    if in_t is not None and out_t is not None:
        cin = np.cumsum(counts_per_bin(in_t, edges))
        cout = np.cumsum(counts_per_bin(out_t, edges))
        ser = [Series("input - output records", edges[1:], cin - cout, "records")]
        o = run.output.assign(_t=out_t.to_numpy())
        if {"key", "seq"} <= set(o.columns):
            first = o.dropna(subset=["_t"]).sort_values("_t", kind="stable").drop_duplicates(["key", "seq"])
            cdist = np.cumsum(counts_per_bin(first["_t"], edges))
            if (cdist != cout).any():
                ser.append(Series("input - distinct output (key, seq)", edges[1:], cin - cdist, "records", "dash"))
        panels.append(Panel("lag (records): cumulative input - cumulative output", ser,
                            f"input: {in_src}; output: {out_src}"))
    else:
        notes.append("no lag: " + ("no input times" if in_t is None else _why_no_output_time(run)))
    return panels, notes


def _visibility_p99(run: Run, edges: np.ndarray, w: float, t0: float):
    """Per-bin p99 of visibility latency (``seen_ms - in_ts``, ms) from ``live.parquet``, binned by the
    time the during-faults reader saw each record; ``None`` without that file."""
    lv = run.live
    if lv is None or not {"seen_ms", "in_ts"} <= set(lv.columns) or lv.empty:
        return None
    seen = pd.to_numeric(lv["seen_ms"], errors="coerce")
    lat = pd.DataFrame({"t": seen / 1000.0 - t0, "lat": seen - pd.to_numeric(lv["in_ts"], errors="coerce")}).dropna()
    if lat.empty:
        return None
    b = np.floor((lat["t"] - edges[0]) / w).astype("int64")
    allbins = pd.RangeIndex(int(b.min()), int(b.max()) + 1)
    p99 = lat["lat"].groupby(b).quantile(0.99).reindex(allbins)
    return edges[0] + (allbins.to_numpy() + 0.5) * w, p99.to_numpy()



def _why_no_output_time(run: Run) -> str:
    if run.output is None:
        return f"{OUTPUT} is missing"
    if not len(run.output):
        return f"{OUTPUT} is empty"
    return (f"{OUTPUT} has no timestamp column (a run older than record timestamps) and no {SINK} "
            "commit events to date the records by")


def bad_keys(run: Run, limit: int = MAX_KEYS) -> list[str]:
    """The worst keys per ``results.json`` ``bad_keys`` (already ordered worst first), at most ``limit``."""
    bk = (run.results or {}).get("bad_keys") or {}
    return [str(k) for k in list(bk)[:limit]]


def key_sequences(run: Run, keys: list[str]) -> pd.DataFrame:
    """Per plotted key, the points of its sequence plot. Columns: ``key, x, seq, kind, hover``.

    ``x`` is the record's position among the key's output records in output order (partition, offset);
    ``kind`` is ``in order`` (first copy), ``duplicate copy`` (a later copy of an already seen seq),
    ``unexpected`` (a seq not in the key's input) or ``lost`` (an input seq never in the output: drawn
    just before the first copy of the next higher seq, or after the last record). In-order points are
    thinned to ``MAX_POINTS_PER_KEY`` per key; every anomalous point is kept."""
    cols = ["key", "x", "seq", "kind", "hover"]
    out = run.output
    if out is None or not keys or not {"key", "seq"} <= set(out.columns):
        return pd.DataFrame(columns=cols)
    o = out[out["key"].astype(str).isin(keys)].dropna(subset=["seq"])
    o = o.assign(key=o["key"].astype(str), seq=o["seq"].astype("int64"))
    order = [c for c in ("partition", "offset") if c in o.columns]
    o = o.sort_values(["key", *order], kind="stable")
    o["x"] = o.groupby("key").cumcount()
    o["kind"] = np.where(o.duplicated(["key", "seq"], keep="first"), "duplicate copy", "in order")
    inp = None
    if run.input is not None and {"key", "seq"} <= set(run.input.columns):
        i = run.input[run.input["key"].astype(str).isin(keys)].dropna(subset=["seq"])
        inp = pd.DataFrame({"key": i["key"].astype(str), "seq": i["seq"].astype("int64")}).drop_duplicates()
        known = o[["key", "seq"]].merge(inp.assign(_in=True), on=["key", "seq"], how="left")["_in"].notna()
        o.loc[~known.to_numpy(), "kind"] = "unexpected"
    o["hover"] = _hover(o)
    parts = [o[cols]]
    if inp is not None:
        firsts = o[o["kind"] == "in order"][["key", "seq", "x"]]
        lost = inp.merge(firsts[["key", "seq"]].assign(_seen=True), on=["key", "seq"], how="left")
        lost = lost[lost["_seen"].isna()][["key", "seq"]]
        if len(lost):
            nxt = pd.merge_asof(lost.sort_values("seq"), firsts.sort_values("seq"), on="seq", by="key",
                                direction="forward")
            last_x = o.groupby("key")["x"].max()
            nxt["x"] = (nxt["x"] - 0.5).fillna(nxt["key"].map(last_x).fillna(0) + 1)
            nxt["kind"] = "lost"
            nxt["hover"] = "lost: key=" + nxt["key"] + " seq=" + nxt["seq"].astype(str) + " never in the output"
            parts.append(nxt[cols])
    pts = pd.concat(parts, ignore_index=True)
    # thin the in-order points of very long keys (anomalous points all stay)
    normal = pts["kind"] == "in order"
    n = normal.groupby(pts["key"]).transform("sum")
    stride = np.maximum(1, np.ceil(n / MAX_POINTS_PER_KEY)).astype("int64")
    pos = pts[normal].groupby("key").cumcount().reindex(pts.index)
    keep = ~normal | ((pos % stride) == 0)
    return pts[keep].reset_index(drop=True)


def _hover(o: pd.DataFrame) -> pd.Series:
    """Hover text per output record: key, seq, output partition/offset and the provenance fields."""
    s = "key=" + o["key"].astype(str) + " seq=" + o["seq"].astype(str)
    for c, label in (("partition", "out p"), ("offset", "offset"), ("op.batch", "batch"),
                     ("op.sink_partition", "sink partition"), ("op.attempt", "attempt"), ("op.txn_id", "txn"),
                     ("op.input", "input")):
        if c in o.columns:
            s = s + "<br>" + label + "=" + o[c].astype(str)
    return s


def anomaly_names(results: dict) -> list[str]:
    """Every anomaly name in ``counts`` then ``anomalies`` (order kept; new names need no code change)."""
    return list(dict.fromkeys([*(results.get("counts") or {}), *(results.get("anomalies") or {})]))


def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


def _str(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)
