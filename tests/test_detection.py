"""The harness's detection power (issue 10), on the real local cluster: mutants of the exactly-once sink
(``pipeline/mutants.py``), each run under the one fault aimed at its flaw, must come out ``invalid``
with the anomaly the flaw produces, and the fault's evidence must show why; and the upgrade finding:
the sink keyed by Spark partition index (``eos-index-keyed``, the sink before the fix) is ``invalid``
after a restart that splits a partly committed batch differently, while the fixed ``eos`` sink is
``valid`` under the same seed — both through ``onceproof test-all``, which must write its certificate.

(``eos-no-marker`` is caught in ``tests/test_pytest_plugin.py``.) About 6 minutes on 2 cores.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


def _run(results_root, sink: str, fault: str) -> tuple[dict, dict]:
    p = run_cli(["run", "--sink", sink, "--nemesis", fault, "--time-limit", "15", "--seed", "1",
                 "--results", str(results_root)], timeout=600)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 1, (result.get("verdict"), p.stdout[-3000:], p.stderr[-3000:])
    done = [o for o in ops if o.get("type") == "info" and o.get("f") == fault]
    assert done and done[0]["outcome"] == "effective" and done[0]["exercised"], done
    assert not our_processes(str(run_dir)), "processes of the run left running"
    return result, done[0]["evidence"]


@pytest.mark.timeout(700)
def test_no_fencing_lets_a_zombie_commit_twice(results_root):
    """A fresh transactional.id per attempt: the zombie's commit succeeds after its retry committed."""
    result, ev = _run(results_root, "eos-no-fencing", "zombie-task:precommit")
    assert ev["zombie_outcome"]["event"] == "commit", ev
    assert ev["retried_by"]["event"] == "commit", ev
    assert result["counts"]["duplicate"] > 0, result["counts"]


@pytest.mark.timeout(700)
def test_marker_first_loses_a_killed_tasks_rows(results_root):
    """The marker committed before the data: a task killed after it leaves its rows to nobody."""
    result, ev = _run(results_root, "eos-marker-first", "kill-executor")
    assert ev["aim"] == "executor holding a sink task" and ev["retried_by"]["event"] == "skip", ev
    assert result["counts"]["lost"] > 0, result["counts"]


@pytest.mark.timeout(1200)
def test_upgrade_finding_index_keyed_sink_is_caught_and_the_fix_is_valid(tmp_path):
    """``test-all`` of eos and eos-index-keyed under the upgrade package, seed 1: a PASS certificate
    (the fixed eos valid, the index-keyed sink caught with duplicates or losses)."""
    root = tmp_path / "results"
    p = run_cli(["test-all", "--sink", "eos,eos-index-keyed", "--nemesis-package", "upgrade", "--test-count", "1",
                 "--time-limit", "20", "--results", str(root), "--suite-name", "upgrade"], timeout=1150)
    suite_dir = (root / "upgrade" / "latest").resolve()
    doc = json.loads((suite_dir / "suite.json").read_text())
    cells = {c["sink"]: c for c in doc["cells"]}
    assert p.returncode == 0 and doc["result"] == "PASS", (p.stdout[-4000:], p.stderr[-3000:], cells)
    assert cells["eos"]["verdict"] == "valid" and cells["eos-index-keyed"]["verdict"] == "invalid", cells
    bad = cells["eos-index-keyed"]["anomalies"]
    assert bad.get("duplicate", 0) + bad.get("lost", 0) > 0, bad
    assert cells["eos"]["faults_exercised"].get("upgrade:min-partitions", 0) >= 1, cells["eos"]
    for sink in cells:  # both replays ran under the new split, on a partly committed batch
        run_dir = suite_dir / cells[sink]["run_dir"]
        ops = [json.loads(x) for x in (run_dir / "nemesis.jsonl").read_text().splitlines()]
        up = next(o for o in ops if o.get("type") == "info" and o.get("f") == "upgrade:min-partitions")
        assert up["exercised"] and up["evidence"]["committed_before_kill"], up
        assert up["evidence"]["restarted_with"]["min_partitions"] == 12, up
    md = (suite_dir / "certificate.md").read_text()
    assert "PASS" in md and "eos-index-keyed" in md
    cases = ET.parse(suite_dir / "junit.xml").getroot().iter("testcase")
    assert sum(1 for _ in cases) == 2
