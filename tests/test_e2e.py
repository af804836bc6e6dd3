"""End to end on the real local cluster (3 KRaft brokers, Spark local-cluster[2,1,1024]): the exactly-once
sink survives executor kills and driver kills in the commit window; the at-least-once sink is caught."""

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


def test_eos_survives_executor_and_commit_window_driver_kills(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", "kill-executor,kill-driver-in-commit-window",
                 "--time-limit", "60", "--seed", "1", "--results", str(results_root)])
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "valid"
    assert all(n == 0 for n in result["counts"].values()), result["counts"]
    assert result["stats"]["input_records"] > 5000
    effective = [o for o in ops if o.get("outcome") == "effective"]
    kills = [o for o in effective if o["f"] == "kill-executor"]
    window = [o for o in effective if o["f"] == "kill-driver-in-commit-window"]
    assert kills and all(o["evidence"]["gone_after"] for o in kills)
    assert window, ops
    for o in window:  # the kill really landed between the sink commit and Spark's commit log
        ev = o["evidence"]
        assert ev["offsets_logged"] and not ev["commit_logged_after_kill"] and ev["driver_gone"]
    assert result["driver_restarts"] >= len(window)
    # the replayed batch was recognised by its marker and skipped, not rewritten
    sink_log = (run_dir / "sink.jsonl").read_text()
    assert '"event": "skip"' in sink_log
    assert not our_processes(str(run_dir))


def test_at_least_once_sink_duplicates_are_caught_with_replayed_batch(results_root):
    p = run_cli(["run", "--sink", "at-least-once", "--nemesis", "kill-driver-in-commit-window",
                 "--time-limit", "60", "--seed", "1", "--results", str(results_root)])
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "invalid"
    assert result["counts"]["duplicate"] > 0
    replayed = {str(o["evidence"]["batch"]) for o in ops if o.get("outcome") == "effective"}
    assert replayed
    example_batches = {c["batch"] for ex in result["anomalies"]["duplicate"] for c in ex["copies"]}
    assert example_batches & replayed, (example_batches, replayed)
    assert "duplicate" in p.stdout
    assert not our_processes(str(run_dir))


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
