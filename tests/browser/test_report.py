"""The browser half of ``tests/unit/test_report.py``: tests that need headless Chromium."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from onceproof.report.html import build_report
from tests.unit.test_report import _chromium_args, _rooted, run_dir  # noqa: F401 (fixtures are used by name)


@pytest.mark.parametrize("layout", ["standalone", "results-root"])
def test_report_renders_plots_in_headless_chromium(run_dir, tmp_path, layout):
    """Both ways of loading plotly draw the plots: inlined, and the results root's shared bundle."""
    if layout == "results-root":
        run_dir = _rooted(tmp_path / "rooted")
    page = build_report(run_dir)
    assert ('assets/plotly-' in page.read_text()) == (layout == "results-root")
    url = page.resolve().as_uri()
    # 1. the DOM after the page's JS ran: plotly drew both figures (its SVG roots and scatter traces)
    dom = subprocess.run([*_chromium_args(tmp_path), "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout
    assert 'id="verdict"' in dom or "id=verdict" in dom, dom[:500]
    for plot in ("plot-timeline", "plot-keys"):
        after = dom.split(f'id="{plot}"', 1)[1][:400_000]
        assert 'class="main-svg"' in after, f"{plot}: plotly did not render"
    assert dom.count('class="main-svg"') >= 4
    assert dom.count("trace scatter") >= 5 and "trace bars" in dom  # series + the fault lane

    # 2. a screenshot: exists, is large and shows the plot colors (a blank or text-only page would not)
    png = tmp_path / "report.png"
    subprocess.run([*_chromium_args(tmp_path), f"--screenshot={png}", url], capture_output=True, timeout=120)
    assert png.is_file() and png.stat().st_size > 60_000, "screenshot missing or nearly blank"
    try:
        from PIL import Image
    except ImportError:  # the DOM check above already proved the plots rendered
        return
    img = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert img.shape[:2] == (3000, 1400)
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 200  # charts, not a flat page
    trace_blue = (np.abs(img - [31, 119, 180]).sum(axis=2) < 30).sum()  # the series' line color
    verdict_red = (np.abs(img - [207, 34, 46]).sum(axis=2) < 30).sum()  # the INVALID badge
    assert trace_blue > 500, f"only {trace_blue} pixels of the plot line color: plots not drawn"
    assert verdict_red > 2000


def test_a_report_copied_without_the_shared_bundle_says_how_to_rebuild_it(tmp_path):
    from onceproof.store.runs import ASSETS

    d = _rooted(tmp_path)
    page = build_report(d)
    shutil.rmtree(tmp_path / "results" / ASSETS)
    dom = subprocess.run([*_chromium_args(tmp_path), "--dump-dom", page.resolve().as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    body = dom.split("<body", 1)[1]  # (the head's script holds the note's text once more)
    assert body.count("plot not drawn") == 2 and "onceproof report --standalone" in body, body[-3000:]
    assert 'class="main-svg"' not in body




@pytest.mark.parametrize("via", ["root-latest", "test-latest"])
def test_a_compacted_run_opened_through_latest_draws_its_plots(tmp_path, via):
    """The report of a compacted run (history.jsonl.gz), opened through ``<root>/latest/report.html`` (one
    directory level higher for the browser than the run itself) and ``<root>/<test>/latest/report.html``:
    plotly's shared bundle is found and both figures, the history-based timeline included, are drawn."""
    from onceproof.store.compact import compact
    from onceproof.store.runs import LATEST, repoint

    d = _rooted(tmp_path)
    repoint(d.parent / LATEST, d.relative_to(d.parent))
    compact(d, min_log_bytes=1 << 40)
    assert not (d / "history.jsonl").exists() and (d / "history.jsonl.gz").is_file()
    build_report(d)
    link = tmp_path / "results" / LATEST if via == "root-latest" else d.parent / LATEST
    url = (link / "report.html").absolute().as_uri()  # the link's path, not the resolved one
    assert LATEST in url
    dom = subprocess.run([*_chromium_args(tmp_path), "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout
    body = dom.split("<body", 1)[1]
    assert "plot not drawn" not in body, body[-3000:]
    for plot in ("plot-timeline", "plot-keys"):
        after = body.split(f'id="{plot}"', 1)[1][:400_000]
        assert 'class="main-svg"' in after, f"{plot}: plotly did not render via {via}"
