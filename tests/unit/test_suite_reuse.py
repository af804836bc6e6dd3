"""``test-all --reuse``: a cell an earlier suite ran and passed with the same run options is taken from it,
not run again; a failed one, or one whose options differ, runs (synthetic suites and run directories; the
one suite that runs here has only reused cells, so no ``onceproof run`` starts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from onceproof.harness import reuse
from onceproof.harness.suite import Cell, Suite, run_command
from tests.conftest import run_cli

PROCESS = Cell("eos", "keyed", "process", 1, "valid", 62.0)
UPGRADE = Cell("eos", "keyed", "upgrade", 1, "valid", 83.0)


def test_the_key_is_what_the_run_does_not_where_it_writes():
    a = ["--sink", "eos", "--nemesis", "kill-broker", "--seed", "1", "--time-limit", "62", "--test-name", "x",
         "--results", "/a/runs", "--warm-cluster", "/a/warm-cluster", "--rate", "500"]
    b = ["--sink", "eos", "--nemesis", "kill-broker", "--seed", "1", "--time-limit", "62", "--test-name=y",
         "--results=/b/runs", "--rate", "500"]
    assert reuse.run_key(a, "valid") == reuse.run_key(b, "valid")
    assert json.loads(reuse.run_key(a, "valid"))["run"] == ["--sink", "eos", "--nemesis", "kill-broker", "--seed",
                                                             "1", "--time-limit", "62", "--rate", "500"]
    assert reuse.run_key(a, "valid") != reuse.run_key(a, "invalid")
    other_limit = [x if x != "62" else "60" for x in a]
    other_option = [x if x != "500" else "900" for x in a]
    assert reuse.run_key(other_limit, "valid") != reuse.run_key(a, "valid")
    assert reuse.run_key(other_option, "valid") != reuse.run_key(a, "valid")


def _earlier_suite(root: Path, cells: list[tuple[Cell, str]]) -> Path:
    """A finished suite under ``root`` (``results/mutants/<time>``) whose cells ran with ``(cell, verdict)``:
    each with a run directory holding ``results.json`` and a report, and the record ``Suite`` writes."""
    d = root / "mutants" / "20301010T000000"
    records = []
    for cell, verdict in cells:
        run = d / "runs" / cell.name / f"2030101{cell.seed}T000000"
        run.mkdir(parents=True)
        (run / "results.json").write_text(json.dumps({"verdict": verdict, "counts": {}, "coverage": [
            {"fault": "kill-broker", "target": "leader", "planned": 1, "invoked": 1, "effective": 1,
             "exercised": 1, "other": {}}]}))
        (run / "report.html").write_text("<html></html>")
        passed = verdict == cell.expect
        records.append({"sink": cell.label, "workload": cell.workload, "package": cell.package,
                        "seed": cell.seed, "expect": cell.expect, "verdict": verdict, "passed": passed,
                        "exit_code": 0 if passed else 1, "elapsed_s": 201.5,
                        "run_dir": str(run.relative_to(d)), "log": f"cells/{cell.name}.log",
                        "run_key": reuse.run_key(run_command(cell, d / "runs", [])[3:], cell.expect)})
    (d / "cells").mkdir(parents=True)
    (d / "suite.json").write_text(json.dumps({"suite": "mutants", "cells": records}))
    return d


def test_a_suite_whose_cells_all_passed_before_runs_none_and_links_the_earlier_runs(tmp_path):
    earlier = _earlier_suite(tmp_path / "results", [(PROCESS, "valid"), (UPGRADE, "valid")])
    found = reuse.passed_cells([earlier])
    assert len(found) == 2
    console = Console(file=open(tmp_path / "console.txt", "w"), width=200)
    s = Suite("test-all", [PROCESS, UPGRADE], tmp_path / "results", "onceproof test-all", "local", [], console,
              fresh_cluster=True, reused=found)
    assert s.run() == 0  # no `onceproof run` started: it would have needed a cluster and minutes
    console.file.close()
    doc = json.loads((s.dir / "suite.json").read_text())
    assert [c["verdict"] for c in doc["cells"]] == ["valid", "valid"]
    for c in doc["cells"]:
        assert (s.dir / c["reused_from"]).resolve() == earlier.resolve()
        assert (s.dir / c["report"]).is_file() and c["elapsed_s"] == 201.5 and c["faults_exercised"]
    assert not (s.dir / "runs").exists() or not any((s.dir / "runs").iterdir())
    md = (s.dir / "certificate.md").read_text()
    assert "(reused)" in md and "2 cells were not run again" in md
    assert "reused from" in (tmp_path / "console.txt").read_text()


def test_only_passed_cells_with_a_key_are_offered(tmp_path):
    earlier = _earlier_suite(tmp_path / "results", [(PROCESS, "valid"), (UPGRADE, "invalid")])
    doc = json.loads((earlier / "suite.json").read_text())
    doc["cells"].append({**doc["cells"][0], "seed": 2, "run_key": None})  # a record from before run_key
    (earlier / "suite.json").write_text(json.dumps(doc))
    found = reuse.passed_cells([earlier])
    assert [d.record["package"] for d in found.values()] == ["process"]
    with pytest.raises(ValueError, match="--reuse .*suite.json"):
        reuse.passed_cells([tmp_path / "nowhere"])


def test_the_dry_run_shows_which_cells_an_earlier_suite_answers(tmp_path):
    # the detection table's eos × process control, seeds 1–3 at the raised limits 62, 60, 60 s; the
    # certificate asks for seeds 1–2 at --time-limit 60: the same runs. Its seed 2 failed: it runs again.
    cells = [(Cell("eos", "keyed", "process", 1, "valid", 62.0), "valid"),
             (Cell("eos", "keyed", "process", 2, "valid", 60.0), "unknown")]
    earlier = _earlier_suite(tmp_path / "results", cells)
    p = run_cli(["test-all", "--sink", "eos", "--nemesis-package", "process,commit", "--test-count", "2",
                 "--time-limit", "60", "--reuse", str(earlier), "--dry-run"], timeout=120)
    assert p.returncode == 0, p.stderr
    lines = {ln.split(":")[0]: ln for ln in p.stdout.splitlines() if " expect " in ln}
    assert "reused from" in lines["eos-process seed 1 expect valid time-limit 62s"]
    assert "--sink eos" in lines["eos-process seed 2 expect valid time-limit 60s"]  # failed before: runs
    assert "--sink eos" in lines["eos-commit seed 1 expect valid time-limit 60s"]  # never ran
    bad = run_cli(["test-all", "--reuse", str(tmp_path / "nowhere"), "--dry-run"], timeout=120)
    assert bad.returncode == 254 and "results/mutants/latest" in bad.stdout + bad.stderr
