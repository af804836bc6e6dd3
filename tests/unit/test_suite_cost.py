"""Where a suite's time went (``report/cost.py``) and its section in the certificate, on synthetic cells."""

from __future__ import annotations

import json

import pytest

from onceproof.report import cost
from onceproof.report.certificate import cell_from_run, certificate_html, certificate_md

TIMINGS = {"setup_s": 21.0, "recovery_s": 9.5, "check_s": 2.0, "teardown_s": 3.5, "total_s": 96.0,
           "spark_start_s": 20.1}


def test_a_cells_wall_time_is_split_into_the_runs_own_phases():
    ph = cost.cell_phases(TIMINGS, 104.0)
    assert ph == {"setup": 21.0, "run": 60.0, "recovery": 9.5, "check": 2.0, "teardown": 3.5, "launch": 8.0}
    assert sum(ph.values()) == pytest.approx(104.0)
    # a crashed run recorded no timings: its whole wall time is launch
    assert cost.cell_phases(None, 12.5) == {**dict.fromkeys(cost.PHASES, 0.0), "launch": 12.5}
    assert cost.cell_phases({"total_s": 50.0}, 49.9)["launch"] == 0.0  # rounding never goes negative


def _cell(package: str, elapsed: float, timings: dict | None, limit: float | None = 30.0, **kw) -> dict:
    return {"package": package, "elapsed_s": elapsed, "timings": timings, "time_limit_s": limit, **kw}


def test_the_suite_sums_per_package_longest_first_and_counts_reused_cells_apart():
    cells = [_cell("commit", 104.0, TIMINGS), _cell("process", 200.0, {**TIMINGS, "total_s": 190.0}, 60.0),
             _cell("commit", 50.0, None), _cell("process", 300.0, TIMINGS, reused_from="../earlier")]
    c = cost.suite_cost(cells)
    assert (c["cells"], c["elapsed_s"], c["reused"], c["reused_elapsed_s"]) == (3, 354.0, 1, 300.0)
    assert [p["package"] for p in c["packages"]] == ["process", "commit"]
    proc, commit = c["packages"]
    assert proc["phases"]["run"] == 154.0 and proc["over_limit_s"] == 94.0  # 154 s run against a 60-s limit
    assert commit["cells"] == 2 and commit["phases"]["launch"] == 58.0 and commit["over_limit_s"] == 30.0
    assert sum(c["phases"].values()) == pytest.approx(c["elapsed_s"])
    head, rows = cost.cost_table(c)
    assert head[0] == "package" and len(rows) == 3 and rows[-1][0] == "all" and rows[-1][1] == "3"
    assert rows[0][3] == "0.3 min (10 %)"  # process setup: 21 s of 200 s
    assert "1 cells were taken from an earlier suite" in cost.cost_note(c) and "5.0 min" in cost.cost_note(c)
    assert cost.cost_line(c).startswith("3 cells ran in 5.9 min: setup")


def test_the_certificate_shows_where_the_time_went(tmp_path):
    run = tmp_path / "runs" / "eos-commit" / "20300101T000000"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"verdict": "valid", "counts": {}, "timings": {**TIMINGS,
                                                                                               "note": "x"}}))
    c = cell_from_run(run, sink="eos", workload="keyed", package="commit", seed=1, expect="valid", exit_code=0,
                      elapsed_s=104.0, suite_dir=tmp_path)
    assert c["timings"] == TIMINGS  # numbers only
    suite = {"suite": "s", "cells": [{**c, "time_limit_s": 30.0}]}
    md = certificate_md(suite)
    assert "## Where the time went" in md and "| commit | 1 | 1.7 min | 0.3 min (20 %) | 1.0 min (58 %)" in md
    assert "the run process's start" in md and "&#x27;" not in md  # markdown, not HTML entities, for quotes
    html = certificate_html(suite)
    assert "<h2>Where the time went</h2>" in html and "1.0 min (58 %)" in html
    # every cell reused: nothing ran here, so no section
    assert "Where the time went" not in certificate_md({"suite": "s", "cells": [{**c, "reused_from": "x"}]})
