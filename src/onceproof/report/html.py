"""The report page (``report.html``): one self-contained HTML file per run, no network needed.

Sections, in order: header (verdict, summary, notices, replay command), anomalies with examples and
bad keys, the timeline and per-key plots (:mod:`onceproof.report.figures`), faults and coverage, recovery, sink
events, config and versions, and the run's files. Every input is optional (:mod:`onceproof.report.load`): a
section whose data is missing is left out or says why, so a crashed run with only ``test.json`` and
``results.json`` still renders.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from onceproof.checkers import advice
from onceproof.checkers.exactly_once import order_unjudged
from onceproof.checkers.examples import isna
from onceproof.checkers.platform import platform_lines
from onceproof.report.analysis import anomaly_names, bad_keys, fault_windows, heal_times, key_sequences, timeline_panels
from onceproof.report.figures import (
    MIN_BAND_S,
    NOT_EFFECTIVE_COLOR,
    fault_colors,
    fig_html,
    keys_figure,
    plotly_js,
    plotly_version,
    timeline_figure,
)
from onceproof.report.load import Run, load_run
from onceproof.sinks import user_outputs
from onceproof.store.runfiles import CONTENTS, NEMESIS, OUTPUT, RECOVERY, RESULTS, SINK, TEST, RunFiles, stored
from onceproof.store.runs import ASSETS, INDEX, LATEST

MAX_EXAMPLES = 10  # examples shown per anomaly
VERDICT_COLORS = {"valid": "#1a7f37", "invalid": "#cf222e", "unknown": "#9a6700", "crashed": "#8250df"}
# provenance fields first in example tables, then whatever else the examples carry
EXAMPLE_FIELD_ORDER = ["key", "seq", "partition", "offset", "batch", "sink_partition", "attempt", "txn_id",
                       "input", "sink"]


def esc(v: Any, quote: bool = True) -> str:
    """``v`` as HTML-escaped text (``None`` → empty); ``quote=False`` leaves ``"`` and ``'`` as they are."""
    return html.escape("" if v is None else str(v), quote=quote)


def _fmt(v: Any) -> str:
    """A JSON value for a table cell (escaped)."""
    if isinstance(v, (list, tuple)):
        if all(not isinstance(x, (dict, list)) for x in v):
            return esc(", ".join(str(x) for x in v))
        return f"<code>{esc(json.dumps(v, default=str))}</code>"
    if isinstance(v, dict):
        return f"<code>{esc(json.dumps(v, default=str))}</code>"
    if isinstance(v, float):
        return esc(f"{v:g}")
    return esc(v)


def _kv_table(d: dict, cls: str = "kv") -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_fmt(v)}</td></tr>" for k, v in d.items())
    return f'<table class="{cls}">{rows}</table>'


def _table(records: list[dict], cols: list[str] | None = None, cls: str = "data") -> str:
    """An HTML table of flat-ish dicts; columns = ``cols`` or the union of keys in a stable order."""
    if not records:
        return "<p class=muted>none</p>"
    cols = cols or _columns(records)
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
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
    head = "".join(f"<th>{esc(c)}</th>" for c in flat_cols)
    if nested_keys:
        head += f"<th>{esc('/'.join(nested_keys))} #</th>" + "".join(f"<th>{esc(c)}</th>" for c in sub_cols)
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


def _anomalies_html(run: Run) -> str:
    r = run.results or {}
    names = anomaly_names(r)
    if not names:
        return f"<p class=muted>no anomaly counts in {RESULTS} (the check did not run)</p>"
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
        if (r.get("advice") or {}).get(a):
            shown = f"<p class=advice>{esc(advice.line(r['advice'][a]))}</p>{shown}"
        if a == "nonmonotonic" and order_unjudged(r):
            n, shown = None, f"<span class=muted>order per key: {esc(order_unjudged(r))}</span>"
        rows.append(f'<tr class="{"bad" if bad else "ok"}" id="anomaly-{esc(a)}"><th>{esc(a)}</th>'
                    f'<td class=num>{esc("-" if n is None else n)}</td><td>{shown}{more}</td></tr>')
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
    requested = run.config.get("nemesis") or []
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
        parts.extend(f"<div class=notice>{esc(w)}</div>" for w in (run.results or {}).get("coverage_warnings") or [])
    elif faults or requested:
        recs = []
        for f in dict.fromkeys([*requested, *faults]):
            d = faults.get(f, {})
            recs.append({"fault": f, **{o: d.get(o, 0) for o in outcomes}})
        parts.append(_table(recs, ["fault", *outcomes]))
    elif run.results is not None:
        parts.append(f"<p class=muted>no faults in {RESULTS}</p>")
    if len(windows):
        parts.append("<h3>nemesis ops</h3><p class=muted>invoke / done: seconds since test start; planned: seconds "
                     "after the nemesis started (it waits for the first committed batch)</p>" +
                     _nemesis_ops_table(windows, colors))
    elif run.nemesis is None:
        parts.append(f"<p class=muted>{NEMESIS} is missing: no per-op detail</p>")
    heals = heal_times(run.nemesis, run.t0)
    if heals:
        parts.append(f"<p>heal at {', '.join(f'{t:.1f} s' for t in heals)}</p>")
    sched = (run.test or {}).get("schedule")
    if sched:
        parts.append(f"<details><summary>planned schedule ({TEST})</summary>" +
                     _table([{"at (s)": s[0], "fault": s[1]} for s in sched if isinstance(s, list) and len(s) >= 2])
                     + "</details>")
    return "".join(parts) or "<p class=muted>no fault data</p>"


def _nemesis_ops_table(windows: pd.DataFrame, colors: dict[str, str]) -> str:
    """One row per fault op of :func:`fault_windows`, with a color swatch matching its plot band."""
    cols = ["fault", "#", "planned (s)", "invoke (s)", "done (s)", "took (s)", "outcome", "target", "evidence"]
    rows = []
    for w in windows.to_dict("records"):
        color = colors.get(w["fault"], "#999") if w["effective"] else NOT_EFFECTIVE_COLOR
        cells = [f'<span class=swatch style="background:{color}"></span>{esc(w["fault"])}',
                 str(w["op"]), *(_r(w[c]) for c in ("planned_s", "start_s", "end_s",
                                                                           "duration_s")),
                 esc(w["outcome"]), esc(w["target"]), _evidence(w["evidence"])]
        tds = "".join(f"<td class=num>{c}</td>" if 1 <= i <= 5 else f"<td class=nowrap>{c}</td>" if i == 0
                      else f"<td>{c}</td>" for i, c in enumerate(cells))
        rows.append(f'<tr class="{"eff" if w["effective"] else "noeff"}">{tds}</tr>')
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _evidence(ev: dict) -> str:
    if not ev:
        return ""
    return "".join(f"<div class=ev><b>{esc(k)}</b>: {_fmt(v)}</div>" for k, v in ev.items())


def _r(v) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{float(v):.2f}"


def _recovery_html(run: Run) -> str:
    r = run.results or {}
    parts = []
    if r.get("recovery"):
        parts.append(_kv_table(r["recovery"]))
    if r.get("unknown_reasons"):
        parts.append("<p><b>unknown because:</b></p><ul>" + "".join(f"<li>{esc(x)}</li>" for x in r["unknown_reasons"])
                     + "</ul>")
    rec = run.recovery
    if rec:
        per = [k for k in ("input_end", "consumed", "output_lso", "output_hw") if isinstance(rec.get(k), dict)]
        if per:
            parts_ = sorted({p for k in per for p in rec[k]}, key=lambda p: (len(str(p)), str(p)))
            recs = [{"partition": p, **{k: rec[k].get(p, "") for k in per}} for p in parts_]
            parts.append(f"<details><summary>{RECOVERY}: offsets per partition</summary>" + _table(recs) +
                         "</details>")
    return "".join(parts) or "<p class=muted>no recovery data</p>"


def _liveness_html(run: Run) -> str:
    """The liveness checker's figures (``checkers/liveness.py``): its bounds, the recovery time after each
    effective fault, the visibility latency p50/p99/max and the longest LSO pin per output partition."""
    st = (run.results or {}).get("stats") or {}
    lv = st.get("liveness")
    if not lv:
        return "<p class=muted>not judged: this run was checked before the liveness checker existed</p>"
    t0 = run.t0 or 0.0
    parts = [_kv_table({"bounds": ", ".join(f"{k} {v:g}" for k, v in lv.get("bounds", {}).items()),
                        "recovery after the last heal (s)": lv.get("last_heal_recovery_s"),
                        "visibility latency (ms)": ", ".join(f"{k} {v:,.0f}" for k, v in
                                                             (st.get("visibility_latency_ms") or {}).items()),
                        "longest LSO pin per partition (s)": lv.get("lso_pin_max_s") or "none",
                        "LSO samples": lv.get("lso_samples")})]
    recs = [{"fault": x["f"], "target": x.get("target"), "healed at (s)": round(x["healed_s"] - t0, 2),
             "recovery (s)": x["recovery_s"] if x["recovery_s"] is not None else "no later output"}
            for x in lv.get("recoveries") or []]
    if recs:
        parts.append("<h3>recovery time per fault (from its heal until every record appended before it was "
                     "visible)</h3>" + _table(recs))
    if lv.get("not_judged"):
        parts.append("<p><b>not judged:</b></p><ul>" + "".join(f"<li>{esc(x)}</li>" for x in lv["not_judged"])
                     + "</ul>")
    return "".join(parts)


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
        rows = [{k: v for k, v in x.items() if not isna(v)} for x in recs.to_dict("records")]
        parts.append("<h3>aborts, unknown commit outcomes and errors</h3>" + _table(rows))
    return f"<section><h2>sink events ({SINK})</h2>" + "".join(parts) + "</section>"


def _output_html(run: Run) -> str:
    """The sink entries' tables about the output (an Iceberg table's snapshots), or ""."""
    tables = user_outputs.output_tables(run.results or {})
    if not tables:
        return ""
    return ("<section><h2>output</h2>" + "".join(f"<h3>{esc(title)}</h3>{_table(rows)}" for title, rows in tables)
            + "</section>")


def _files_html(run: Run) -> str:
    recs = []
    for name, what in CONTENTS.items():
        p = stored(run.run_dir / name)  # history.jsonl.gz once the run is compacted
        state = "present" if p.exists() else (f"not written: {run.not_written[name]}" if name in run.not_written
                                               else "missing")
        if any(x.startswith(name + ":") for x in run.problems):  # report/load.py names the file as in CONTENTS
            state = "unreadable"
        recs.append({"file": p.name, "state": state, "size": _size(p) if p.exists() else "", "content": what})
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


def page(title: str, body: str, head_extra: str = "") -> str:
    """A whole HTML document: ``title``, the shared :data:`CSS`, ``head_extra`` in ``<head>``, ``body`` in
    ``<main>``."""
    return (f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
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
    if r.get("workload") and r["workload"] != "keyed":
        bits.append(f"workload {r['workload']}")
    bits += user_outputs.output_lines(r)  # e.g. the file sink's files and orphans (its entry's report line)
    rec = r.get("recovery") or {}
    if rec:
        bits.append(f"recovery {'finished' if rec.get('finished') else 'DID NOT FINISH'}"
                    + (f" in {rec['seconds']} s" if rec.get("seconds") is not None else ""))
    return esc(" · ".join(bits))


SECTIONS = ("anomalies", "timeline", "keys", "faults", "recovery", "liveness", "config", "files")


def _header_html(run: Run) -> str:
    """Title, the big verdict, the summary line, notices (error, unknown reasons, missing files) and the
    replay command."""
    r, v = run.results or {}, run.verdict
    color = VERDICT_COLORS.get(v, VERDICT_COLORS["crashed"])
    meta = [f"run directory: {esc(run.run_dir)}"]
    if run.test and run.test.get("started"):
        meta.append(f"started {esc(run.test['started'])}")
    seed = r.get("seed", run.config.get("seed"))
    if seed is not None:
        meta.append(f"seed {esc(seed)}")
    out = [f"<h1>{esc(run.name)}</h1>",
           f'<div class=verdict id=verdict style="background:{color}">{esc(v.upper())}</div>',
           f"<p class=summary>{_summary_line(r)}</p>", f"<p class=muted>{' · '.join(meta)}</p>",
           "<nav>" + "".join(f'<a href="#{n}">{n}</a>' for n in SECTIONS) + "</nav>"]
    if r.get("error"):  # usually an exception's repr(): show its escaped newlines as lines
        err = str(r["error"]).replace("\\n", "\n")
        out.append(f"<div class=error><b>error:</b><pre class=err>{esc(err)}</pre></div>")
    if run.results is None:
        out.append(f"<div class=error><b>{RESULTS} is missing or unreadable</b>: the run is still going, or "
                   "it was killed before writing it; shown as CRASHED.</div>")
    out += [f"<div class=notice><b>platform finding:</b> {esc(x.strip())}</div>" for x in platform_lines(r)]
    out += [f"<div class=notice><b>unknown because:</b> {esc(x)}</div>" for x in r.get("unknown_reasons") or []]
    if run.missing:
        out.append("<div class=notice><b>missing files:</b> " + ", ".join(esc(m) for m in run.missing) +
                   " — the sections that need them are left out or marked.</div>")
    out += [f"<div class=error><b>unreadable:</b> {esc(p)}</div>" for p in run.problems]
    if run.replay:
        out.append(f"<h2>replay</h2><pre id=replay>{esc(run.replay)}</pre>")
    return "".join(out)


def _timeline_section(run: Run, windows: pd.DataFrame, colors: dict[str, str]) -> tuple[str, int]:
    """The "over time" section and the number of plotly figures in it (0 or 1)."""
    panels, notes = timeline_panels(run)
    out, plots = ["<section id=timeline><h2>over time</h2>"], 0
    if panels or len(windows):
        out.append(fig_html(timeline_figure(run, panels, windows, colors), "plot-timeline"))
        plots = 1
        legend = " ".join(f'<span class=kvp><span class=swatch style="background:{c};opacity:.5"></span>'
                          f"{esc(f)}</span>" for f, c in colors.items())
        out.append(f"<p class=muted>Shaded bands: effective faults, from nemesis invoke to completion (at least "
                   f"{MIN_BAND_S:g} s wide; a solid line at a long band's end marks when the fault landed): "
                   f"{legend}. Grey bars in the fault lane: faults that did not take effect. Time origin: "
                   f"{esc(run.t0_source)}. Drag to zoom (all rows zoom together), double-click to reset.</p>")
        srcs = "".join(f"<li>{esc(p.title)}: {esc(p.source)}</li>" for p in panels if p.source)
        if srcs:
            out.append(f"<details><summary>data sources</summary><ul>{srcs}</ul></details>")
    out += [f"<div class=notice>{esc(n)}</div>" for n in notes]
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
            out.append(fig_html(keys_figure(run, keys, pts), "plot-keys"))
            plots = 1
        else:
            why = f"{OUTPUT} is missing" if run.output is None else f"the bad keys are not in {OUTPUT}"
            out.append(f"<div class=notice>no sequence plots: {why}</div>")
    out.append("</section>")
    return "".join(out), plots


def _config_section(run: Run) -> str:
    cfg, ver = run.config, (run.test or {}).get("versions") or {}
    tim = (run.results or {}).get("timings") or {}
    return ("<section id=config><h2>config &amp; versions</h2><div class=cols>"
            + (f"<div><h3>config</h3>{_kv_table(cfg)}</div>" if cfg else f"<p class=muted>no {TEST} config</p>")
            + (f"<div><h3>versions</h3>{_kv_table(ver)}</div>" if ver else "")
            + (f"<div><h3>timings (s)</h3>{_kv_table(tim)}</div>" if tim else "")
            + "</div></section>")


def render_report(run: Run, plotly_src: str | None = None, latest_src: str | None = None) -> str:
    """The report page for a loaded run (a pure function of ``run``: no files written). When the page has
    at least one figure, plotly's JS is loaded once in ``<head>``: from ``plotly_src`` (a URL relative to
    the run directory, see :func:`shared_plotly`), or inlined when it is ``None``. ``latest_src`` is the same
    file relative to ``<root>/latest``: a page opened through that symlink is one level higher for the
    browser, which resolves ``..`` in the URL, not on disk; the page picks the URL by its own location
    (:func:`_plotly_loader`). A page whose shared bundle is missing (a run directory copied on its own) shows,
    in place of each plot, how to rebuild it standalone."""
    windows = fault_windows(run.nemesis, run.t0)
    colors = fault_colors(run, windows)
    timeline, n1 = _timeline_section(run, windows, colors)
    keys, n2 = _keys_section(run)
    body = [
        _header_html(run),
        f"<section id=anomalies><h2>anomalies</h2>{_anomalies_html(run)}{_bad_keys_html(run)}</section>",
        timeline,
        keys,
        f"<section id=faults><h2>faults</h2>{_faults_html(run, windows, colors)}</section>",
        f"<section id=recovery><h2>recovery</h2>{_recovery_html(run)}</section>",
        f"<section id=liveness><h2>liveness</h2>{_liveness_html(run)}</section>",
        _sink_html(run),
        _output_html(run),
        _config_section(run),
        f"<section id=files><h2>files</h2>{_files_html(run)}</section>",
    ]
    head = ""
    if n1 + n2 and plotly_src is None:
        head = f"<script>{plotly_js()}</script>"
    elif n1 + n2:
        fallback = _MISSING_PLOTLY_JS % json.dumps(_missing_note(run, plotly_src))
        head = f"{_plotly_loader(run, plotly_src, latest_src)}<script>{fallback}</script>"
    return page(f"{run.name}: {run.verdict}", "".join(body), head)


_MISSING_PLOTLY_JS = ("if(typeof Plotly==='undefined'){window.Plotly={newPlot:function(d){"
                      "(typeof d==='string'?document.getElementById(d):d).innerHTML=%s;return Promise.resolve()}}}")


def _plotly_loader(run: Run, src: str, latest_src: str | None) -> str:
    """``<script>`` loading plotly's shared JS from ``src``, or from ``latest_src`` when the page's URL is
    ``<root>/latest/report.html`` (its parent is ``latest`` and the one above is not the run's test, whose
    ``<root>/<test>/latest`` has the real directory's depth). The choice is made while the page is parsed
    (``document.write`` of a parser-blocking script), so the figures below find ``Plotly`` defined."""
    if not latest_src or latest_src == src:
        return f"<script src=\"{esc(src)}\"></script>"
    test = Path(run.run_dir).resolve().parent.name
    js = ("(function(){var p=location.pathname.split('/');"
          f"var s=(p[p.length-2]==='{LATEST}'&&decodeURIComponent(p[p.length-3])!=={json.dumps(test)})"
          f"?{json.dumps(latest_src)}:{json.dumps(src)};"
          "document.write('<script src=\"'+s+'\"><\\/script>')})()")
    return f"<script>{js}</script>"


def _missing_note(run: Run, src: str) -> str:
    return (f"<p class=notice>plot not drawn: plotly's JavaScript ({esc(src)}, shared by the runs of a results "
            f"directory) is missing here. Rebuild this report standalone: <code>onceproof report --standalone "
            f"{esc(str(run.run_dir))}</code></p>")


def results_root_of(run_dir: Path) -> Path | None:
    """The results root holding ``run_dir`` (``<root>/<test>/<stamp>``): its grandparent when that holds a
    ``latest`` link or ``index.html``; ``None`` for a run directory anywhere else."""
    root = Path(run_dir).resolve().parent.parent
    return root if (root / LATEST).is_symlink() or (root / INDEX).is_file() else None


def shared_plotly(root: Path) -> Path:
    """``<root>/assets/plotly-<version>.min.js``, written (atomically) when missing; its path.

    Raises: ``OSError`` when it cannot be written.
    """
    out = root / ASSETS / f"plotly-{plotly_version()}.min.js"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        tmp.write_text(plotly_js(), encoding="utf-8")
        os.replace(tmp, out)
    return out


def build_report(run_dir: Path, *, standalone: bool = False) -> Path:
    """Write ``run_dir/report.html`` and return its path. It needs no network. Inside a results root
    (:func:`results_root_of`) the page loads plotly's JS from the root's one shared copy
    (:func:`shared_plotly`, ~4.8 MB once instead of per run); ``standalone`` (or a run directory outside a
    results root) inlines it, for a report that is copied or uploaded on its own.

    Raises: ``OSError`` when a file cannot be written; loading errors are listed in the report itself.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    out = RunFiles(run_dir).report
    root = None if standalone else results_root_of(run_dir)
    src = latest_src = None
    if root is not None:
        shared = shared_plotly(root)
        src = os.path.relpath(shared, run_dir.resolve())
        latest_src = os.path.relpath(shared, root / LATEST)  # lexical: the URL of <root>/latest/report.html
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(render_report(run, src, latest_src), encoding="utf-8")
    os.replace(tmp, out)
    return out
