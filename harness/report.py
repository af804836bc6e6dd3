"""The per-run HTML report (``report.html``) and the results index (``index.html``).

``build_report(run_dir)`` reads whatever a run directory holds and writes ONE self-contained HTML file
next to it; ``build_index(results_root)`` writes a static table of every run under
``results_root/<test>/<stamp>/``. From the shell: ``python -m harness.report RUN_DIR... [--junit]
[--index ROOT]`` (``--junit`` also writes each run's ``junit.xml``, see ``harness/junit.py``).

Inputs (all optional; each missing or unreadable file is named in the report, and every section that
can still be drawn is drawn — a crashed run with only ``test.json`` + ``results.json`` still renders):

* ``test.json`` – config, versions, fault schedule, replay command.
* ``results.json`` – verdict, counts, examples, faults, ... (``docs/results-schema.md``).
* ``history.jsonl`` – workload ops; ``wall`` (epoch s) and ``time`` (ns since test start).
* ``nemesis.jsonl`` – fault ``invoke`` / ``info`` pairs and ``heal`` ops, same clock as the history.
* ``input.parquet`` / ``output.parquet`` – the topics as checked; ``timestamp`` (Kafka record
  timestamp, epoch ms) may be absent in older runs; output carries ``in_ts`` (input record timestamp,
  epoch ms) and provenance columns ``op.*``.
* ``sink.jsonl`` – the eos sink's begin / commit / skip / abort events (epoch s).
* ``recovery.json`` – per-partition end offsets after recovery.

Time axis: every plot's x is **seconds since test start**. The origin ``t0`` (epoch s) is
``wall - time/1e9`` of the history (the same origin as the nemesis history), falling back to the
nemesis history, then ``test.json`` ``started``, then the earliest input timestamp.

Plotting library: **plotly**, with its JavaScript inlined once in the page (~4.8 MB). Reasons:

* the report must open from disk with no network, and plotly's bundle is one inlineable script with no
  further fetches (no fonts, no MathJax: we switch it off);
* faults land in windows of a few seconds in runs of minutes; the time plots share one x-axis, so
  zooming into a fault window zooms every series at once, and hovering a fault bar shows its target
  and evidence — static PNGs (matplotlib, base64) would need a crop per fault to show the same;
* the cost, a few MB per run directory, is small next to the run's own ``history.jsonl`` and logs,
  and ``index.html`` carries no JS at all.

The analysis is columnar pandas / numpy (binning with ``numpy.histogram``, ``groupby``
quantiles, ``merge`` / ``merge_asof``); the only Python loops run over fault ops (a handful) and the
≤10 plotted keys.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import logging
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger("onceproof.report")

REPORT_NAME = "report.html"
INDEX_NAME = "index.html"
MAX_EXAMPLES = 10  # examples shown per anomaly
MAX_KEYS = 10  # bad keys plotted
MAX_POINTS_PER_KEY = 1500  # in-order points drawn per key plot (anomalous points are always drawn)
MIN_BAND_S = 0.5  # minimum drawn width of a fault band, seconds (an instantaneous kill stays visible)
LANE_PX, LANE_PX_PER_FAULT, PANEL_PX, GAP_PX = 40, 34, 230, 70  # timeline figure geometry, pixels
MAX_BINS = 1800  # time plots use 1-s bins up to this many seconds, wider bins beyond

#: The files of a run directory, in the order the "files" section lists them.
RUN_FILES: dict[str, str] = {
    "test.json": "config, versions, fault schedule, replay command",
    "results.json": "verdict, anomaly counts and examples, faults, timings",
    "history.jsonl": "workload ops (send invoke / ok / fail / info)",
    "nemesis.jsonl": "fault ops with target, outcome and evidence",
    "input.parquet": "the input topic as checked",
    "output.parquet": "the output topic as checked",
    "sink.jsonl": "eos sink begin / commit / skip / abort events (eos sink only)",
    "recovery.json": "end offsets, consumed offsets, output LSO / high watermark after recovery",
}

VERDICT_COLORS = {"valid": "#1a7f37", "invalid": "#cf222e", "unknown": "#9a6700", "crashed": "#8250df"}
FAULT_PALETTE = ["#d62728", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
NOT_EFFECTIVE_COLOR = "#9e9e9e"
# provenance fields first in example tables, then whatever else the examples carry
EXAMPLE_FIELD_ORDER = ["key", "seq", "partition", "offset", "batch", "sink_partition", "attempt", "txn_id",
                       "input", "sink"]


# ----------------------------------------------------------------------------------------------- loading


@dataclass
class Run:
    """Everything read from one run directory. A frame or dict is ``None`` when its file is absent or
    unreadable; ``missing`` names absent files, ``problems`` unreadable ones (with the error)."""

    run_dir: Path
    test: dict | None = None
    results: dict | None = None
    recovery: dict | None = None
    history: pd.DataFrame | None = None  # columns: type, f, wall (epoch s), time (ns), key, seq, ...
    nemesis: pd.DataFrame | None = None  # columns: type, f, wall, time, outcome, target, evidence, ...
    input: pd.DataFrame | None = None  # columns: partition, offset, key, seq, [timestamp ms], [t ms]
    output: pd.DataFrame | None = None  # + in_partition, in_offset, in_ts (ms), op.* provenance
    sink: pd.DataFrame | None = None  # columns: time (epoch s), event, batch, partition, attempt, ...
    live: pd.DataFrame | None = None  # the during-faults reader: partition, offset, key, seq, in_ts, seen_ms
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    t0: float | None = None  # test start, epoch seconds
    t0_source: str = ""

    @property
    def name(self) -> str:
        for d, k in ((self.results, "test"), (self.test, "name")):
            if d and d.get(k):
                return str(d[k])
        return self.run_dir.name

    @property
    def verdict(self) -> str:
        if self.results is None:
            return "crashed"
        return str(self.results.get("verdict") or "crashed")

    @property
    def replay(self) -> str | None:
        for d in (self.results, self.test):
            if d and d.get("replay"):
                return str(d["replay"])
        return None


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


def load_run(run_dir: Path) -> Run:
    """Read every file of ``run_dir`` that exists and can be parsed; never raises for bad data."""
    run = Run(Path(run_dir))
    run.test = _load(run, "test.json", lambda p: json.loads(p.read_text()))
    run.results = _load(run, "results.json", lambda p: json.loads(p.read_text()))
    run.recovery = _load(run, "recovery.json", lambda p: json.loads(p.read_text()))
    run.history = _load(run, "history.jsonl", _read_jsonl)
    run.nemesis = _load(run, "nemesis.jsonl", _read_jsonl)
    run.input = _load(run, "input.parquet", pd.read_parquet)
    run.output = _load(run, "output.parquet", pd.read_parquet)
    run.sink = _load(run, "sink.jsonl", _read_jsonl)
    run.live = _load(run, "live.parquet", pd.read_parquet)
    run.t0, run.t0_source = time_origin(run)
    return run


def _load(run: Run, name: str, reader):
    path = run.run_dir / name
    if not path.exists():
        run.missing.append(name)
        return None
    try:
        return reader(path)
    except Exception as e:  # noqa: BLE001 - an unreadable file is reported, the rest still renders
        run.problems.append(f"{name}: {type(e).__name__}: {e}")
        return None


def _read_jsonl(path: Path) -> pd.DataFrame:
    """A JSON-lines file as a frame. Uses pandas' C reader; a torn line (a crashed writer) falls back to
    ``harness.history.read``, which drops a torn last line."""
    if path.stat().st_size == 0:
        return pd.DataFrame()
    try:
        return pd.read_json(path, lines=True, dtype=False, convert_dates=False)
    except ValueError:
        from harness.history import read

        return read(path)


def time_origin(run: Run) -> tuple[float | None, str]:
    """The test's start as epoch seconds, and where it came from (see the module docstring)."""
    for name, df in (("history.jsonl", run.history), ("nemesis.jsonl", run.nemesis)):
        if df is not None and {"wall", "time"} <= set(df.columns):
            d = pd.to_numeric(df["wall"], errors="coerce") - pd.to_numeric(df["time"], errors="coerce") / 1e9
            d = d.dropna()
            if len(d):
                return float(d.median()), f"{name} (wall - time)"
    started = (run.test or {}).get("started")
    if started:
        try:
            return dt.datetime.strptime(started, "%Y-%m-%dT%H:%M:%S%z").timestamp(), "test.json started"
        except ValueError:
            pass
    for col in ("timestamp", "t"):
        if run.input is not None and col in run.input.columns and len(run.input):
            return float(pd.to_numeric(run.input[col]).min()) / 1000.0, f"earliest input.parquet {col}"
    return None, "unknown: no history, no test.json start, no input timestamps"


# ---------------------------------------------------------------------------------------------- analysis


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
        return pd.to_numeric(run.input["timestamp"]) / 1000.0 - run.t0, "input.parquet timestamp (Kafka)"
    ok = _ok_sends(run.history)
    if ok is not None:
        return ok - run.t0, "history.jsonl ok sends (wall)"
    if run.input is not None and "t" in run.input.columns:
        return pd.to_numeric(run.input["t"]) / 1000.0 - run.t0, "input.parquet t (send time in the value)"
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
        return pd.to_numeric(out["timestamp"], errors="coerce"), "output.parquet timestamp (Kafka)"
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
        "commit time of the record's transaction (sink.jsonl): output.parquet has no timestamp column"


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
        panels.append(Panel("input rate (sends/s)", ser, "history.jsonl", step=True))
    elif in_t is not None:
        panels.append(Panel("input rate (records/s)", [Series("input records/s", x, counts_per_bin(in_t, edges) / w,
                                                                "1/s")], in_src, step=True))
        notes.append("input rate from " + in_src + ": history.jsonl is missing")
    else:
        notes.append("no input rate: history.jsonl and input timestamps are missing")

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
            src = out_src + " - output.parquet in_ts"
            vis = _visibility_p99(run, edges, w, t0)
            if vis is not None:
                series.append(Series("visible p99 (live reader)", vis[0], vis[1], "ms", "dash"))
                src += "; visible = live.parquet seen_ms - in_ts (read_committed reader during the faults)"
            panels.append(Panel("end-to-end latency (ms): output time - input record time (in_ts)", series, src))
    elif out_ms is None:
        notes.append("no latency: " + _why_no_output_time(run))
    else:
        notes.append("no latency: output.parquet has no in_ts column")

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


def _why_no_output_time(run: Run) -> str:
    if run.output is None:
        return "output.parquet is missing"
    if not len(run.output):
        return "output.parquet is empty"
    return ("output.parquet has no timestamp column (a run older than record timestamps) and no sink.jsonl "
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


# ----------------------------------------------------------------------------------------------- figures


def _fault_colors(run: Run, windows: pd.DataFrame) -> dict[str, str]:
    names = list(dict.fromkeys([*(_config(run).get("nemesis") or []),
                                *((run.results or {}).get("faults") or {}), *windows["fault"].tolist()]))
    return {n: FAULT_PALETTE[i % len(FAULT_PALETTE)] for i, n in enumerate(names)}


def timeline_figure(run: Run, panels: list[Panel], windows: pd.DataFrame, colors: dict[str, str]):
    """Stacked plots sharing one x-axis (seconds since test start): a fault lane (one bar per fault op,
    colored by fault when effective, grey otherwise) over ``panels``; every effective fault is a shaded
    band across all rows, at least ``MIN_BAND_S`` wide; heal moments are dashed lines."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    lane = len(windows) > 0
    titles = (["faults (bar = nemesis invoke → completion; hover for target and evidence)"] if lane else []) + \
        [p.title for p in panels]
    n = len(titles)
    heights = ([LANE_PX + LANE_PX_PER_FAULT * windows["fault"].nunique()] if lane else []) + [PANEL_PX] * len(panels)
    plot_px = sum(heights) + GAP_PX * (n - 1)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=GAP_PX / plot_px,
                        subplot_titles=titles, row_heights=heights)
    xmax = max([float(p.series[0].x.max()) for p in panels if p.series and len(p.series[0].x)] +
               [float(windows["end_s"].max()) if lane else 0.0])
    xmin = min([float(p.series[0].x.min()) for p in panels if p.series and len(p.series[0].x)] + [0.0])
    min_w = max(MIN_BAND_S, (xmax - xmin) / 300.0)
    if lane:
        w = windows.assign(width=np.maximum(windows["duration_s"].astype(float), min_w),
                           hover=windows.apply(_fault_hover, axis=1))
        for f, color in colors.items():
            sel = w[(w["fault"] == f) & w["effective"]]
            if len(sel):
                fig.add_trace(go.Bar(y=sel["fault"], x=sel["width"], base=sel["start_s"], orientation="h",
                                     marker_color=color, name=f"{f} (effective)", hovertext=sel["hover"],
                                     hoverinfo="text", legendgroup="faults", width=0.6), row=1, col=1)
        sel = w[~w["effective"]]
        if len(sel):
            fig.add_trace(go.Bar(y=sel["fault"], x=sel["width"], base=sel["start_s"], orientation="h",
                                 marker_color=NOT_EFFECTIVE_COLOR, name="fault not effective / skipped",
                                 hovertext=sel["hover"], hoverinfo="text", legendgroup="faults", width=0.6),
                          row=1, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=list(colors)[::-1], row=1, col=1)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"]
    for r, p in enumerate(panels, start=2 if lane else 1):
        for i, s in enumerate(p.series):
            fig.add_trace(go.Scatter(x=s.x, y=s.y, name=s.name, mode="lines" if p.step else "lines+markers",
                                     marker={"size": 3},
                                     line={"shape": "hv" if p.step else "linear", "width": 1.5, "dash": s.dash,
                                           "color": palette[i % len(palette)]},
                                     legendgroup=f"row{r}", legendgrouptitle_text=p.title.split(" (")[0],
                                     hovertemplate=f"%{{x:.1f}} s: %{{y:,.1f}} {s.unit}<extra>{s.name}</extra>"),
                          row=r, col=1)
        fig.update_yaxes(title_text=p.series[0].unit if p.series else "", row=r, col=1, rangemode="tozero"
                         if not p.title.startswith("lag") else "normal")
    for _, wrow in windows[windows["effective"].astype(bool)].iterrows():
        color = colors.get(wrow["fault"], "#d62728")
        fig.add_vrect(x0=wrow["start_s"], x1=wrow["start_s"] + max(wrow["duration_s"], min_w),
                      fillcolor=color, opacity=0.18, line_width=0, layer="below", row="all", col=1)
        if wrow["duration_s"] > min_w:  # a long wait (e.g. for the commit window): mark when it landed
            fig.add_vline(x=wrow["end_s"], line_color=color, line_width=1.5, opacity=0.7, row="all", col=1)
    for i, t in enumerate(heal_times(run.nemesis, run.t0)):
        fig.add_vline(x=t, line_dash="dash", line_color="#555", line_width=1, row="all", col=1)
        fig.add_annotation(x=t, y=1, yref="y domain", xref="x", text="heal" if i == 0 else "heal (teardown)",
                           showarrow=False, xanchor="left", yanchor="top", font={"size": 10, "color": "#555"},
                           row=1, col=1)
    fig.update_xaxes(title_text="seconds since test start", row=n, col=1)
    fig.update_xaxes(showticklabels=True)
    fig.update_layout(template="plotly_white", height=plot_px + 40 + 50,
                      margin={"l": 70, "r": 30, "t": 40, "b": 50}, hovermode="closest", barmode="overlay",
                      legend={"groupclick": "toggleitem", "tracegroupgap": 12}, font={"size": 12})
    return fig


def _fault_hover(r: pd.Series) -> str:
    ev = "<br>".join(f"  {html.escape(str(k))}: {html.escape(str(v))}" for k, v in (r["evidence"] or {}).items())
    return (f"<b>{html.escape(r['fault'])} #{r['op']}</b>: {html.escape(r['outcome'])}<br>"
            f"target: {html.escape(r['target'])}<br>{r['start_s']:.2f} s → {r['end_s']:.2f} s "
            f"({r['duration_s']:.2f} s)" + (f"<br>evidence:<br>{ev}" if ev else ""))


KIND_STYLE = {
    "in order": {"color": "#1f77b4", "symbol": "circle", "size": 4},
    "duplicate copy": {"color": "#d62728", "symbol": "diamond", "size": 8},
    "unexpected": {"color": "#ff7f0e", "symbol": "square", "size": 8},
    "lost": {"color": "#000000", "symbol": "x", "size": 9},
}


def keys_figure(run: Run, keys: list[str], pts: pd.DataFrame):
    """Small multiples, one per key: y = seq, x = position in the key's output (partition, offset order).
    A clean key is a straight diagonal; a duplicate is a red point under the line (a seq seen again); a
    re-delivered run of records is a sawtooth; a lost seq is a black x where it should have been."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    counts = (run.results or {}).get("bad_keys") or {}
    ncols = 2 if len(keys) > 1 else 1
    nrows = math.ceil(len(keys) / ncols)
    titles = [f"{k}: " + ", ".join(f"{a}={n}" for a, n in (counts.get(k) or {}).items()) for k in keys]
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=titles, vertical_spacing=0.32 / max(nrows, 1),
                        horizontal_spacing=0.07)
    shown: set[str] = set()
    for i, k in enumerate(keys):
        r, c = i // ncols + 1, i % ncols + 1
        pk = pts[pts["key"] == k]
        for kind, st in KIND_STYLE.items():
            sel = pk[pk["kind"] == kind]
            if not len(sel):
                continue
            fig.add_trace(go.Scatter(x=sel["x"], y=sel["seq"], mode="markers", name=kind, legendgroup=kind,
                                     showlegend=kind not in shown, marker=st, hovertext=sel["hover"],
                                     hoverinfo="text"), row=r, col=c)
            shown.add(kind)
        fig.update_xaxes(title_text="position in the key's output", title_font_size=10, row=r, col=c)
        fig.update_yaxes(title_text="seq", title_font_size=10, row=r, col=c)
    fig.update_layout(template="plotly_white", height=300 * nrows + 110, margin={"l": 60, "r": 20, "t": 70, "b": 40},
                      legend={"orientation": "h", "yref": "container", "y": 1.0, "yanchor": "top", "x": 0},
                      font={"size": 11})
    return fig


def _fig_html(fig, div_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False, include_mathjax=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}})


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


# ---------------------------------------------------------------------------------------------- HTML bits


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


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


def _fmt(v: Any) -> str:
    """A JSON value for a table cell (escaped)."""
    if isinstance(v, (list, tuple)):
        if all(not isinstance(x, (dict, list)) for x in v):
            return _e(", ".join(str(x) for x in v))
        return f"<code>{_e(json.dumps(v, default=str))}</code>"
    if isinstance(v, dict):
        return f"<code>{_e(json.dumps(v, default=str))}</code>"
    if isinstance(v, float):
        return _e(f"{v:g}")
    return _e(v)


def _kv_table(d: dict, cls: str = "kv") -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in d.items())
    return f'<table class="{cls}">{rows}</table>'


def _table(records: list[dict], cols: list[str] | None = None, cls: str = "data") -> str:
    """An HTML table of flat-ish dicts; columns = ``cols`` or the union of keys in a stable order."""
    if not records:
        return "<p class=muted>none</p>"
    cols = cols or _columns(records)
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>" for r in records)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _columns(records: list[dict]) -> list[str]:
    seen = list(dict.fromkeys(k for r in records for k in r))
    return [c for c in EXAMPLE_FIELD_ORDER if c in seen] + [c for c in seen if c not in EXAMPLE_FIELD_ORDER]


def _is_nested(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def examples_table(examples: list) -> str:
    """Anomaly examples as ONE table. Flat dicts are one row each (columns = union of their keys).
    An example holding a list of dicts (a duplicate's ``copies``) becomes one row per element: its flat
    fields (key, seq) span those rows, then a ``#`` column and the elements' fields (provenance)."""
    exs = [x if isinstance(x, dict) else {"value": x} for x in examples]
    if not exs:
        return ""
    flat_cols = _columns([{k: v for k, v in x.items() if not _is_nested(v)} for x in exs])
    nested_keys = list(dict.fromkeys(k for x in exs for k, v in x.items() if _is_nested(v)))
    sub_cols = _columns([c for x in exs for k in nested_keys for c in x.get(k) or []])
    head = "".join(f"<th>{_e(c)}</th>" for c in flat_cols)
    if nested_keys:
        head += f"<th>{_e('/'.join(nested_keys))} #</th>" + "".join(f"<th>{_e(c)}</th>" for c in sub_cols)
    rows = []
    for i, x in enumerate(exs):
        subs = [el for k in nested_keys for el in (x.get(k) or [])] if nested_keys else []
        span = max(1, len(subs))
        cls = "ex-even" if i % 2 == 0 else "ex-odd"
        lead = "".join(f'<td rowspan={span}>{_fmt(x.get(c, ""))}</td>' for c in flat_cols)
        if not subs:
            rows.append(f"<tr class={cls}>{lead}" + "<td></td>" * ((len(sub_cols) + 1) if nested_keys else 0)
                        + "</tr>")
            continue
        for j, el in enumerate(subs):
            cells = f"<td class=num>{j + 1}</td>" + "".join(f"<td>{_fmt(el.get(c, ''))}</td>" for c in sub_cols)
            rows.append(f"<tr class={cls}>{lead if j == 0 else ''}{cells}</tr>")
    return f'<table class="data small"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def anomaly_names(results: dict) -> list[str]:
    """Every anomaly name in ``counts`` then ``anomalies`` (order kept; new names need no code change)."""
    return list(dict.fromkeys([*(results.get("counts") or {}), *(results.get("anomalies") or {})]))


def _anomalies_html(run: Run) -> str:
    r = run.results or {}
    names = anomaly_names(r)
    if not names:
        return "<p class=muted>no anomaly counts in results.json (the check did not run)</p>"
    counts, anomalies = r.get("counts") or {}, r.get("anomalies") or {}
    rows = []
    for a in names:
        n = counts.get(a)
        exs = list(anomalies.get(a) or [])
        bad = isinstance(n, (int, float)) and n > 0 or (n is None and exs)
        shown = examples_table(exs[:MAX_EXAMPLES])
        more = ""
        if isinstance(n, int) and exs and n > len(exs[:MAX_EXAMPLES]):
            more = f"<p class=muted>{len(exs[:MAX_EXAMPLES])} of {n} shown</p>"
        if not exs and a in counts and a not in anomalies:
            shown = "<span class=muted>(a count only)</span>"
        rows.append(f'<tr class="{"bad" if bad else "ok"}" id="anomaly-{_e(a)}"><th>{_e(a)}</th>'
                    f'<td class=num>{_e("-" if n is None else n)}</td><td>{shown}{more}</td></tr>')
    return ('<table class="data anomalies"><thead><tr><th>anomaly</th><th>count</th><th>examples (up to '
            f'{MAX_EXAMPLES}, with provenance)</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _bad_keys_html(run: Run) -> str:
    bk = (run.results or {}).get("bad_keys") or {}
    if not bk:
        return "<p class=muted>no bad keys</p>"
    recs = [{"key": k, **v} for k, v in bk.items()]
    return f"<details><summary>{len(bk)} bad keys (worst first)</summary>{_table(recs)}</details>"


def _faults_html(run: Run, windows: pd.DataFrame, colors: dict[str, str]) -> str:
    parts = []
    faults = (run.results or {}).get("faults") or {}
    requested = _config(run).get("nemesis") or []
    outcomes = list(dict.fromkeys(["effective", *[o for d in faults.values() for o in d]]))
    cov = (run.results or {}).get("coverage")
    if cov:
        parts.append("<h3 id=coverage>coverage</h3><p class=muted>per fault and target, in turns: planned, taken "
                     "effect, and <b>exercised</b> (hit the pipeline where it can hurt: a killed executor held a "
                     "running sink task, a killed leader's partition moved). A <code>valid</code> verdict needs "
                     "every planned row exercised at least once.</p>" +
                     _table([{"fault": c["fault"], "target": c["target"], "planned": c["planned"],
                              "invoked": c["invoked"], "effective": c["effective"], "exercised": c["exercised"],
                              "other": ", ".join(f"{k}={v}" for k, v in c.get("other", {}).items())}
                             for c in cov]))
        parts.extend(f"<div class=notice>{_e(w)}</div>" for w in (run.results or {}).get("coverage_warnings") or [])
    elif faults or requested:
        recs = []
        for f in dict.fromkeys([*requested, *faults]):
            d = faults.get(f, {})
            recs.append({"fault": f, **{o: d.get(o, 0) for o in outcomes}})
        parts.append(_table(recs, ["fault", *outcomes]))
    elif run.results is not None:
        parts.append("<p class=muted>no faults in results.json</p>")
    if len(windows):
        parts.append("<h3>nemesis ops</h3><p class=muted>invoke / done: seconds since test start; planned: seconds "
                     "after the nemesis started (it waits for the first committed batch)</p>" +
                     _nemesis_ops_table(windows, colors))
    elif run.nemesis is None:
        parts.append("<p class=muted>nemesis.jsonl is missing: no per-op detail</p>")
    heals = heal_times(run.nemesis, run.t0)
    if heals:
        parts.append(f"<p>heal at {', '.join(f'{t:.1f} s' for t in heals)}</p>")
    sched = (run.test or {}).get("schedule")
    if sched:
        parts.append("<details><summary>planned schedule (test.json)</summary>" +
                     _table([{"at (s)": s[0], "fault": s[1]} for s in sched if isinstance(s, list) and len(s) >= 2])
                     + "</details>")
    return "".join(parts) or "<p class=muted>no fault data</p>"


def _nemesis_ops_table(windows: pd.DataFrame, colors: dict[str, str]) -> str:
    """One row per fault op of :func:`fault_windows`, with a color swatch matching its plot band."""
    cols = ["fault", "#", "planned (s)", "invoke (s)", "done (s)", "took (s)", "outcome", "target", "evidence"]
    rows = []
    for w in windows.to_dict("records"):
        color = colors.get(w["fault"], "#999") if w["effective"] else NOT_EFFECTIVE_COLOR
        cells = [f'<span class=swatch style="background:{color}"></span>{_e(w["fault"])}',
                 str(w["op"]), *(_r(w[c]) for c in ("planned_s", "start_s", "end_s",
                                                                           "duration_s")),
                 _e(w["outcome"]), _e(w["target"]), _evidence(w["evidence"])]
        tds = "".join(f"<td class=num>{c}</td>" if 1 <= i <= 5 else f"<td class=nowrap>{c}</td>" if i == 0
                      else f"<td>{c}</td>" for i, c in enumerate(cells))
        rows.append(f'<tr class="{"eff" if w["effective"] else "noeff"}">{tds}</tr>')
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _evidence(ev: dict) -> str:
    if not ev:
        return ""
    return "".join(f"<div class=ev><b>{_e(k)}</b>: {_fmt(v)}</div>" for k, v in ev.items())


def _r(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.2f}"


def _recovery_html(run: Run) -> str:
    r = run.results or {}
    parts = []
    if r.get("recovery"):
        parts.append(_kv_table(r["recovery"]))
    if r.get("unknown_reasons"):
        parts.append("<p><b>unknown because:</b></p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in r["unknown_reasons"])
                     + "</ul>")
    rec = run.recovery
    if rec:
        per = [k for k in ("input_end", "consumed", "output_lso", "output_hw") if isinstance(rec.get(k), dict)]
        if per:
            parts_ = sorted({p for k in per for p in rec[k]}, key=lambda p: (len(str(p)), str(p)))
            recs = [{"partition": p, **{k: rec[k].get(p, "") for k in per}} for p in parts_]
            parts.append("<details><summary>recovery.json: offsets per partition</summary>" + _table(recs) +
                         "</details>")
    return "".join(parts) or "<p class=muted>no recovery data</p>"


def _sink_html(run: Run) -> str:
    s = run.sink
    if s is None or not len(s) or "event" not in s.columns:
        return ""
    counts = s["event"].value_counts()
    parts = [_table([{"event": k, "count": int(v)} for k, v in counts.items()])]
    # everything that did not end in a plain commit/skip (pipeline/transactional_sink.py's events)
    ab = s[s["event"].isin(["abort", "abandon", "commit-unknown", "abort-failed", "marker-error", "init-error",
                            "incomplete-batch"])]
    if len(ab):
        recs = ab.head(MAX_EXAMPLES).assign(time=((pd.to_numeric(ab["time"]) - run.t0).round(2)
                                                  if run.t0 is not None else ab["time"]))
        parts.append("<h3>aborts, unknown commit outcomes and errors</h3>" + _table([{k: v for k, v in x.items() if not _isna(v)}
                                                  for x in recs.to_dict("records")]))
    return "<section><h2>sink events (sink.jsonl)</h2>" + "".join(parts) + "</section>"


def _isna(v) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _files_html(run: Run) -> str:
    recs = []
    for name, what in RUN_FILES.items():
        p = run.run_dir / name
        state = "present" if p.exists() else "missing"
        if any(x.startswith(name + ":") for x in run.problems):
            state = "unreadable"
        recs.append({"file": name, "state": state, "size": _size(p) if p.exists() else "", "content": what})
    return _table(recs)


def _size(p: Path) -> str:
    n = p.stat().st_size
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


CSS = """
body{font:14px/1.45 -apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1f2328;background:#fff}
main{max-width:1360px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}
h2{font-size:18px;border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:16px 0 6px}
.verdict{display:inline-block;font-size:40px;font-weight:800;letter-spacing:1px;color:#fff;
  padding:4px 22px;border-radius:8px;margin:6px 0}
.summary{font-size:15px;margin:6px 0} .muted{color:#656d76}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;
  padding:8px 10px;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;margin:6px 0}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#f6f8fa} table.kv th{background:#f6f8fa;font-weight:600;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums} td.nowrap{white-space:nowrap}
table.small{font-size:12px} table.small th,table.small td{padding:1px 5px}
tr.bad>th,tr.bad>td.num{background:#ffebe9;color:#a40e26;font-weight:700} tr.ok>td.num{color:#1a7f37}
tr.noeff td{color:#656d76}
tr.ex-odd td{background:#f6f8fa} .kvp{margin-right:10px;white-space:nowrap}
pre.err{background:none;border:0;padding:0;margin:4px 0 0}
.notice{border-left:4px solid #9a6700;background:#fff8c5;padding:6px 10px;margin:8px 0}
.error{border-left:4px solid #cf222e;background:#ffebe9;padding:6px 10px;margin:8px 0}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.cols{display:flex;gap:28px;flex-wrap:wrap} nav a{margin-right:12px}
code{font-size:12px;white-space:pre-wrap;word-break:break-word}
.ev{max-width:640px;overflow-wrap:anywhere} table.data{max-width:100%}
"""


def _page(title: str, body: str, head_extra: str = "") -> str:
    return (f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{CSS}</style>{head_extra}"
            f"</head><body><main>{body}</main></body></html>\n")


def _summary_line(r: dict) -> str:
    """One line under the verdict: record counts, sends, driver restarts, recovery (escaped)."""
    st = r.get("stats") or {}

    def n(k: str) -> str:
        v = st.get(k, "?")
        return f"{v:,}" if isinstance(v, int) else str(v)

    bits = []
    if st:
        bits.append(f"input {n('input_records')} records, output {n('output_records')} records, {n('keys')} keys")
        bits.append(f"sends ok={n('sends_ok')} info={n('sends_info')} fail={n('sends_fail')}")
    if "driver_restarts" in r:
        bits.append(f"driver restarts={r['driver_restarts']}")
    rec = r.get("recovery") or {}
    if rec:
        bits.append(f"recovery {'finished' if rec.get('finished') else 'DID NOT FINISH'}"
                    + (f" in {rec['seconds']} s" if rec.get("seconds") is not None else ""))
    return _e(" · ".join(bits))


def _config(run: Run) -> dict:
    return (run.test or {}).get("config") or {}


def _header_html(run: Run) -> str:
    """Title, the big verdict, the summary line, notices (error, unknown reasons, missing files) and the
    replay command."""
    r, v = run.results or {}, run.verdict
    color = VERDICT_COLORS.get(v, VERDICT_COLORS["crashed"])
    meta = [f"run directory: {_e(run.run_dir)}"]
    if run.test and run.test.get("started"):
        meta.append(f"started {_e(run.test['started'])}")
    seed = r.get("seed", _config(run).get("seed"))
    if seed is not None:
        meta.append(f"seed {_e(seed)}")
    out = [f"<h1>{_e(run.name)}</h1>",
           f'<div class=verdict id=verdict style="background:{color}">{_e(v.upper())}</div>',
           f"<p class=summary>{_summary_line(r)}</p>", f"<p class=muted>{' · '.join(meta)}</p>",
           "<nav>" + "".join(f'<a href="#{n}">{n}</a>' for n in
                             ("anomalies", "timeline", "keys", "faults", "recovery", "config", "files")) + "</nav>"]
    if r.get("error"):  # usually an exception's repr(): show its escaped newlines as lines
        err = str(r["error"]).replace("\\n", "\n")
        out.append(f"<div class=error><b>error:</b><pre class=err>{_e(err)}</pre></div>")
    if run.results is None:
        out.append("<div class=error><b>results.json is missing or unreadable</b>: the run is still going, or "
                   "it was killed before writing it; shown as CRASHED.</div>")
    out += [f"<div class=notice><b>unknown because:</b> {_e(x)}</div>" for x in r.get("unknown_reasons") or []]
    if run.missing:
        out.append("<div class=notice><b>missing files:</b> " + ", ".join(_e(m) for m in run.missing) +
                   " — the sections that need them are left out or marked.</div>")
    out += [f"<div class=error><b>unreadable:</b> {_e(p)}</div>" for p in run.problems]
    if run.replay:
        out.append(f"<h2>replay</h2><pre id=replay>{_e(run.replay)}</pre>")
    return "".join(out)


def _timeline_section(run: Run, windows: pd.DataFrame, colors: dict[str, str]) -> tuple[str, int]:
    """The "over time" section and the number of plotly figures in it (0 or 1)."""
    panels, notes = timeline_panels(run)
    out, plots = ["<section id=timeline><h2>over time</h2>"], 0
    if panels or len(windows):
        out.append(_fig_html(timeline_figure(run, panels, windows, colors), "plot-timeline"))
        plots = 1
        legend = " ".join(f'<span class=kvp><span class=swatch style="background:{c};opacity:.5"></span>'
                          f"{_e(f)}</span>" for f, c in colors.items())
        out.append(f"<p class=muted>Shaded bands: effective faults, from nemesis invoke to completion (at least "
                   f"{MIN_BAND_S:g} s wide; a solid line at a long band's end marks when the fault landed): "
                   f"{legend}. Grey bars in the fault lane: faults that did not take effect. Time origin: "
                   f"{_e(run.t0_source)}. Drag to zoom (all rows zoom together), double-click to reset.</p>")
        srcs = "".join(f"<li>{_e(p.title)}: {_e(p.source)}</li>" for p in panels if p.source)
        if srcs:
            out.append(f"<details><summary>data sources</summary><ul>{srcs}</ul></details>")
    out += [f"<div class=notice>{_e(n)}</div>" for n in notes]
    out.append("</section>")
    return "".join(out), plots


def _keys_section(run: Run) -> tuple[str, int]:
    """The per-key sequence plots of the worst keys, and the number of plotly figures (0 or 1)."""
    keys = bad_keys(run)
    out, plots = ["<section id=keys><h2>per-key sequences</h2>"], 0
    if not keys:
        out.append("<p class=muted>no bad keys: nothing to plot</p>")
    else:
        pts = key_sequences(run, keys)
        if len(pts):
            total = len((run.results or {}).get("bad_keys") or {})
            out.append(f"<p class=muted>The {len(keys)} worst keys (of {total}). y = seq, x = position in the "
                       "key's output (output partition, offset order). A clean key is one rising diagonal; red "
                       "diamonds are re-delivered copies, black x lost seqs, orange squares seqs not in the "
                       "input. Hover a point for its provenance.</p>")
            out.append(_fig_html(keys_figure(run, keys, pts), "plot-keys"))
            plots = 1
        else:
            why = "output.parquet is missing" if run.output is None else "the bad keys are not in output.parquet"
            out.append(f"<div class=notice>no sequence plots: {why}</div>")
    out.append("</section>")
    return "".join(out), plots


def _config_section(run: Run) -> str:
    cfg, ver = _config(run), (run.test or {}).get("versions") or {}
    tim = (run.results or {}).get("timings") or {}
    return ("<section id=config><h2>config &amp; versions</h2><div class=cols>"
            + (f"<div><h3>config</h3>{_kv_table(cfg)}</div>" if cfg else "<p class=muted>no test.json config</p>")
            + (f"<div><h3>versions</h3>{_kv_table(ver)}</div>" if ver else "")
            + (f"<div><h3>timings (s)</h3>{_kv_table(tim)}</div>" if tim else "")
            + "</div></section>")


def render_report(run: Run) -> str:
    """The report page for a loaded run (a pure function of ``run``: no files written). Plotly's JS is
    inlined once in ``<head>`` when the page has at least one figure."""
    windows = fault_windows(run.nemesis, run.t0)
    colors = _fault_colors(run, windows)
    timeline, n1 = _timeline_section(run, windows, colors)
    keys, n2 = _keys_section(run)
    body = [
        _header_html(run),
        f"<section id=anomalies><h2>anomalies</h2>{_anomalies_html(run)}{_bad_keys_html(run)}</section>",
        timeline,
        keys,
        f"<section id=faults><h2>faults</h2>{_faults_html(run, windows, colors)}</section>",
        f"<section id=recovery><h2>recovery</h2>{_recovery_html(run)}</section>",
        _sink_html(run),
        _config_section(run),
        f"<section id=files><h2>files</h2>{_files_html(run)}</section>",
    ]
    head = f"<script>{_plotly_js()}</script>" if n1 + n2 else ""
    return _page(f"{run.name}: {run.verdict}", "".join(body), head)


def build_report(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` (self-contained, no network) and return its path."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    out = run_dir / REPORT_NAME
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(render_report(run), encoding="utf-8")
    os.replace(tmp, out)
    return out


# ------------------------------------------------------------------------------------------------- index


def find_runs(results_root: Path) -> list[Path]:
    """Run directories ``results_root/<test>/<stamp>/`` holding a ``results.json`` or a ``test.json``;
    the ``latest`` symlinks are skipped so each run is listed once. Newest first (by stamp)."""
    runs = []
    root = Path(results_root)
    if not root.is_dir():
        return []
    for test_dir in root.iterdir():
        if not test_dir.is_dir() or test_dir.is_symlink():
            continue
        for d in test_dir.iterdir():
            if d.is_dir() and not d.is_symlink() and ((d / "results.json").exists() or (d / "test.json").exists()):
                runs.append(d)
    return sorted(runs, key=lambda d: (d.name, d.parent.name), reverse=True)


def _index_row(d: Path, root: Path) -> str:
    r, t = {}, {}
    for name in ("results.json", "test.json"):
        try:
            (r if name == "results.json" else t).update(json.loads((d / name).read_text()))
        except (OSError, ValueError):
            pass
    v = str(r.get("verdict") or "crashed") if r else "no results"  # running, or killed before results.json
    counts = r.get("counts") or {}
    nz = ", ".join(f"{a}={n}" for a, n in counts.items() if n)
    if nz:
        csum = _e(nz)
    elif counts:
        csum = "no anomalies"
    elif r.get("error"):
        csum = _e(str(r["error"])[:120])
    else:
        csum = "<span class=muted>not checked</span>"
    faults = r.get("faults") or {}
    fsum = ", ".join(f"{f} {d_.get('effective', 0)}/{sum(d_.values())}" for f, d_ in faults.items())
    try:
        when = dt.datetime.strptime(d.name[:15], "%Y%m%dT%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        when = t.get("started", d.name)
    rel = os.path.relpath(d, root)
    link = (f'<a href="{_e(rel)}/{REPORT_NAME}">report</a>' if (d / REPORT_NAME).exists()
            else "<span class=muted>not built</span>")
    if (d / "junit.xml").exists():
        link += f' · <a href="{_e(rel)}/junit.xml">junit</a>'
    color = VERDICT_COLORS.get(v, "#656d76")
    total = (r.get("timings") or {}).get("total_s", "")
    return (f"<tr><td>{_e(r.get('test') or t.get('name') or d.parent.name)}</td><td>{_e(when)}</td>"
            f'<td><b style="color:{color}">{_e(v.upper())}</b></td><td>{csum}</td><td>{_e(fsum)}</td>'
            f"<td class=num>{_e(total)}</td><td>{link}</td></tr>")


def build_index(results_root: Path, build_missing: bool = False) -> Path:
    """Write ``results_root/index.html``: one row per run (test, time, verdict, non-zero anomaly counts,
    effective/total faults, duration, link to its ``report.html``), newest first. No JS.
    ``build_missing`` first builds the report of every run that has none."""
    root = Path(results_root)
    runs = find_runs(root)
    if build_missing:
        for d in runs:
            if not (d / REPORT_NAME).exists():
                try:
                    build_report(d)
                except Exception:  # noqa: BLE001 - one bad run must not hide the others
                    log.exception("report for %s failed", d)
    rows = "".join(_index_row(d, root) for d in runs)
    body = (f"<h1>onceproof runs</h1><p class=muted>{len(runs)} runs under {_e(root.resolve())}; newest first.</p>"
            "<table class=data><thead><tr><th>test</th><th>time</th><th>verdict</th><th>anomalies</th>"
            "<th>faults effective/total</th><th>total (s)</th><th>report</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>" if runs else "<h1>onceproof runs</h1><p>no runs yet</p>")
    out = root / INDEX_NAME
    root.mkdir(parents=True, exist_ok=True)
    out.write_text(_page("onceproof runs", body), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.report RUN_DIR... [--junit] [--index ROOT]``."""
    ap = argparse.ArgumentParser(prog="python -m harness.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dirs", nargs="*", type=Path, help="run directories to write report.html for")
    ap.add_argument("--junit", action="store_true", help="also write junit.xml for each run directory")
    ap.add_argument("--index", type=Path, metavar="ROOT", help="write ROOT/index.html (building missing reports)")
    a = ap.parse_args(argv)
    for d in a.run_dirs:
        print(build_report(d))
        if a.junit:
            from harness.junit import write_junit

            print(write_junit(d))
    if a.index:
        print(build_index(a.index, build_missing=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
