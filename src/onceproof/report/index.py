"""The results index (``<root>/index.html``): a static table of every run under the results root, newest
first, each row linking to the run's ``report.html`` and ``junit.xml``. No JavaScript."""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path

from onceproof.report.html import VERDICT_COLORS, build_report, esc, page
from onceproof.store import readers
from onceproof.store.runfiles import JUNIT, REPORT, RunFiles
from onceproof.store.runs import INDEX, find_runs

log = logging.getLogger("onceproof.report")


def _index_row(d: Path, root: Path) -> str:
    r = readers.read_or_none(readers.read_results, d) or {}
    t = readers.read_or_none(readers.read_test, d) or {}
    v = str(r.get("verdict") or "crashed") if r else "no results"  # running, or killed before results.json
    counts = r.get("counts") or {}
    nz = ", ".join(f"{a}={n}" for a, n in counts.items() if n)
    if nz:
        csum = esc(nz)
    elif counts:
        csum = "no anomalies"
    elif r.get("error"):
        csum = esc(str(r["error"])[:120])
    else:
        csum = "<span class=muted>not checked</span>"
    faults = r.get("faults") or {}
    fsum = ", ".join(f"{f} {d_.get('effective', 0)}/{sum(d_.values())}" for f, d_ in faults.items())
    try:
        when = dt.datetime.strptime(d.name[:15], "%Y%m%dT%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        when = t.get("started", d.name)
    rel = os.path.relpath(d, root)
    files = RunFiles(d)
    link = (f'<a href="{esc(rel)}/{REPORT}">report</a>' if files.report.exists()
            else "<span class=muted>not built</span>")
    if files.junit.exists():
        link += f' · <a href="{esc(rel)}/{JUNIT}">junit</a>'
    color = VERDICT_COLORS.get(v, "#656d76")
    total = (r.get("timings") or {}).get("total_s", "")
    return (f"<tr><td>{esc(r.get('test') or t.get('name') or d.parent.name)}</td><td>{esc(when)}</td>"
            f'<td><b style="color:{color}">{esc(v.upper())}</b></td><td>{csum}</td><td>{esc(fsum)}</td>'
            f"<td class=num>{esc(total)}</td><td>{link}</td></tr>")


def build_index(results_root: Path, build_missing: bool = False) -> Path:
    """Write ``results_root/index.html``: one row per run (test, time, verdict, non-zero anomaly counts,
    effective/total faults, duration, link to its ``report.html``), newest first. No JS.
    ``build_missing`` first builds the report of every run that has none."""
    root = Path(results_root)
    runs = find_runs(root)
    if build_missing:
        for d in runs:
            if not RunFiles(d).report.exists():
                try:
                    build_report(d)
                except Exception:  # noqa: BLE001 - one bad run must not hide the others
                    log.exception("report for %s failed", d)
    rows = "".join(_index_row(d, root) for d in runs)
    body = (f"<h1>onceproof runs</h1><p class=muted>{len(runs)} runs under {esc(root.resolve())}; newest first.</p>"
            "<table class=data><thead><tr><th>test</th><th>time</th><th>verdict</th><th>anomalies</th>"
            "<th>faults effective/total</th><th>total (s)</th><th>report</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>" if runs else "<h1>onceproof runs</h1><p>no runs yet</p>")
    out = root / INDEX
    root.mkdir(parents=True, exist_ok=True)
    out.write_text(page("onceproof runs", body), encoding="utf-8")
    return out

