"""``test-all`` and ``shrink`` on real runs (issue 25 item 7), both in ``make test-extended`` (marker
``extended``): each is several cluster runs.

* ``test-all --sink eos,at-least-once --nemesis-package commit``: two cells, each a real ``onceproof run``;
  the eos cell is valid, the at-least-once cell is caught (``duplicate``), so the certificate passes and
  the suite exits 0; suite.json, certificate.md and junit.xml name both cells.
* ``shrink`` on a failing at-least-once run under ``kill-broker,kill-driver-in-commit-window``: every
  candidate is a real replay; it ends at a 1-minimal schedule whose own replay fails with the same
  anomaly class.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_run, load_run_dir, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended]


@pytest.mark.timeout(1500)
def test_a_two_cell_test_all_runs_both_cells_and_passes_when_the_weak_sink_is_caught(tmp_path):
    p = run_cli(["test-all", "--sink", "eos,at-least-once", "--nemesis-package", "commit", "--test-count", "1",
                 "--results", str(tmp_path)], timeout=1400)
    (suite_dir,) = [d for d in (tmp_path / "test-all").iterdir() if d.name != "latest"]
    doc = json.loads((suite_dir / "suite.json").read_text())
    cells = {c["sink"]: c for c in doc["cells"]}
    assert set(cells) == {"eos", "at-least-once"}, doc["cells"]
    assert cells["eos"]["verdict"] == "valid" and cells["eos"]["passed"], cells["eos"]
    weak = cells["at-least-once"]
    assert weak["verdict"] == "invalid" and weak["passed"] and weak["anomalies"].get("duplicate", 0) > 0, weak
    assert p.returncode == 0, p.stdout[-3000:]
    # each cell is a real run with its own directory, results and no process left behind
    runs = [d for d in (suite_dir / "runs").iterdir() if d.is_dir() and d.name != "latest"]
    assert len(runs) >= 2, runs
    for c in doc["cells"]:
        run_dir, result, ops = load_run_dir(suite_dir / c["run_dir"])  # relative to the suite directory
        assert result["verdict"] == c["verdict"], (c, result["verdict"])
        assert any(o.get("type") == "info" and o.get("exercised") for o in ops), ops
        assert not our_processes(str(run_dir))
    md = (suite_dir / "certificate.md").read_text()
    assert "PASS" in md and "at-least-once" in md and "eos" in md
    assert (suite_dir / "junit.xml").read_text().count("<testcase") == 2


@pytest.mark.timeout(1500)
def test_shrink_cuts_a_real_failing_run_to_a_one_minimal_schedule_that_still_fails(tmp_path):
    root = tmp_path / "results"
    p = run_cli(["run", "--sink", "at-least-once", "--nemesis", "kill-broker,kill-driver-in-commit-window",
                 "--seed", "1", "--time-limit", "30", "--results", str(root)], timeout=600)
    run_dir, result, ops = load_run(root)
    assert p.returncode == 1 and result["verdict"] == "invalid", (result.get("verdict"), p.stdout[-3000:])
    invokes = [o for o in ops if o.get("type") == "invoke" and o.get("f") != "heal"]
    assert len(invokes) == 2, invokes

    s = run_cli(["shrink", str(run_dir), "--max-runs", "4"], timeout=1300)
    assert s.returncode == 0, s.stdout[-3000:] + s.stderr[-3000:]
    doc = json.loads((run_dir / "shrink" / "shrink.json").read_text())
    assert doc["one_minimal"] and len(doc["minimal"]) == 1, doc
    assert 1 <= doc["runs"] <= 2 and len(doc["candidates"]) == doc["runs"], doc["candidates"]
    # the minimal schedule's own replay is among the candidates, a real run that failed the same way
    (proof,) = [c for c in doc["candidates"] if c["faults"] == doc["minimal"]]
    assert proof["fails"] and proof["verdict"] == "invalid" and proof["run_dir"], proof
    _, replayed, replay_ops = load_run_dir(Path(proof["run_dir"]))
    assert set(doc["failure_class"]) & {a for a, n in replayed["counts"].items() if n}, (doc, replayed["counts"])
    assert [o["f"] for o in replay_ops if o.get("type") == "invoke" and o.get("f") != "heal"] == \
        [f["f"] for f in doc["minimal"]]
    # every other candidate (a schedule without the minimal one's fault) passed
    assert all(not c["fails"] for c in doc["candidates"] if c is not proof), doc["candidates"]
    assert "--schedule" in doc["replay"] and (run_dir / "shrink" / "minimal-schedule.json").exists()
