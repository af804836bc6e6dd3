"""The report's plotly figures: the timeline (a fault lane over the time panels, fault bands across all
rows) and the per-key sequence plots.

Plotly, its JavaScript (~4.8 MB) loaded once per page: from the results root's ``assets/`` (one copy
shared by every run there, ``report/html.py``) or, for a report that must stand alone, inlined. Because:

* the report must open from disk with no network, and plotly's bundle is one script with no further
  fetches (no fonts, no MathJax: we switch it off);
* faults land in windows of a few seconds in runs of minutes; the time plots share one x-axis, so
  zooming into a fault window zooms every series at once, and hovering a fault bar shows its target
  and evidence — static PNGs (matplotlib, base64) would need a crop per fault to show the same;
* the cost is one bundle per results root (or per standalone report), and ``index.html`` carries no JS.

Plotly is imported inside the functions: loading a run or writing the index does not pay for it.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd

from onceproof.report.analysis import Panel, heal_times
from onceproof.report.load import Run

MIN_BAND_S = 0.5  # minimum drawn width of a fault band, seconds (an instantaneous kill stays visible)
LANE_PX, LANE_PX_PER_FAULT, PANEL_PX, GAP_PX = 40, 34, 230, 70  # timeline figure geometry, pixels
FAULT_PALETTE = ["#d62728", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
NOT_EFFECTIVE_COLOR = "#9e9e9e"


def fault_colors(run: Run, windows: pd.DataFrame) -> dict[str, str]:
    """A color per fault name (requested faults first, then those in ``results.json`` and ``windows``):
    the plot bands and the nemesis ops table share it."""
    names = list(dict.fromkeys([*(run.config.get("nemesis") or []),
                                *((run.results or {}).get("faults") or {}), *windows["fault"].tolist()]))
    return {n: FAULT_PALETTE[i % len(FAULT_PALETTE)] for i, n in enumerate(names)}


def timeline_figure(run: Run, panels: list[Panel], windows: pd.DataFrame, colors: dict[str, str]):
    """Stacked plots sharing one x-axis (seconds since test start): a fault lane (one bar per fault op,
    colored by fault when effective, grey otherwise) over ``panels``; every effective fault is a shaded
    band across all rows, at least ``MIN_BAND_S`` wide; heal moments are dashed lines."""
    # plotly: a heavy import, only when a report is drawn
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
    # plotly: a heavy import, only when a report is drawn
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


def fig_html(fig, div_id: str) -> str:
    """``fig`` as an HTML ``<div id=div_id>`` fragment that expects plotly's JS already in the page."""
    # plotly: a heavy import, only when a report is drawn
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=False, full_html=False, include_mathjax=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}})


def plotly_js() -> str:
    """Plotly's JavaScript bundle (~4.8 MB), to inline once per page or write once per results root."""
    # plotly: a heavy import, only when a report is drawn
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def plotly_version() -> str:
    """The installed plotly's version (names the shared bundle, so two versions never overwrite one)."""
    # plotly: a heavy import, only when a report is drawn
    import plotly

    return plotly.__version__
