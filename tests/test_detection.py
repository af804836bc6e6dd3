"""The harness's detection power (issue 10), on the real local cluster: mutants of the exactly-once sink
(``pipeline/mutants.py``), each run under the one fault aimed at its flaw, must come out ``invalid``
with the anomaly the flaw produces, and the fault's evidence must show why; and the upgrade finding:
the sink keyed by Spark partition index (``eos-index-keyed``, the sink before the fix) is ``invalid``
after a restart that splits a partly committed batch differently.

(``eos-no-marker`` is caught in ``tests/test_pytest_plugin.py``; ``eos-marker-first`` and the rest of
the mutants in ``make certify``, whose ``test-all`` also runs the upgrade pair: ``tests/test_detection``
keeps to the make-test budget.) About 2.5 minutes on 2 cores.
"""

from __future__ import annotations

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
def test_upgrade_finding_the_index_keyed_sink_rewrites_and_skips_a_resplit_batch(results_root):
    """The sink before issue 10's fix (marker and transactional.id keyed by Spark partition index),
    restarted with minPartitions = 12 on a partly committed batch: the replay's partition i covers other
    input ranges than the committed partition i did, so committed rows are written again and uncommitted
    ones skipped. (The fixed eos sink is valid under the same fault in ``tests/test_nemesis_all.py``'s
    all-run.)"""
    result, ev = _run(results_root, "eos-index-keyed", "upgrade:min-partitions")
    assert ev["committed_before_kill"] and ev["restarted_with"]["min_partitions"] == 12, ev
    assert result["counts"]["duplicate"] + result["counts"]["lost"] > 0, result["counts"]
