"""End to end on the real local cluster (3 KRaft brokers, Spark local-cluster[2,1,1024]): the mutant sink
without its replay marker is caught.

The exactly-once sink surviving executor kills and commit-window driver kills (with the replayed batch
skipped by its marker) is checked by ``tests/test_nemesis_all.py`` on its ``--nemesis all`` run, and the
at-least-once sink caught with the replayed batch named by
``tests/test_pytest_plugin.py::test_a_real_at_least_once_run_killed_in_its_commit_window_passes_a_test_that_expects_invalid``:
one cluster run each instead of two."""

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


def test_mutant_without_marker_is_caught(results_root):
    """The transactional sink minus its replay marker: fencing alone does not stop a replayed batch
    from being committed twice, and the checker must say so."""
    p = run_cli(["run", "--sink", "eos-no-marker", "--nemesis", "kill-driver-in-commit-window",
                 "--time-limit", "45", "--seed", "3", "--results", str(results_root)])
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["counts"]["duplicate"] > 0
    replayed = {str(o["evidence"]["batch"]) for o in ops if o.get("outcome") == "effective"}
    copies = [c for ex in result["anomalies"]["duplicate"] for c in ex["copies"]]
    assert {c["batch"] for c in copies} & replayed
    assert all(c.get("sink") == "eos" and c.get("txn_id") for c in copies)  # committed transactions, both
    assert not our_processes(str(run_dir))
