"""The counter workload on the real local cluster (issue 9): a running count and sum per key in Spark
state (RocksDB, changelog checkpointing, update mode), checked as Kafka Streams' EosTestDriver checks
its aggregates (``checkers/counter.py``).

* Through the exactly-once sink it stays ``valid`` under executor kills, a driver kill in the commit
  window and a broker kill: every aggregate is that of an input prefix, none goes back, none is emitted
  twice, and each key's last aggregate is its whole input.
* Through the at-least-once sink a driver kill in the commit window is caught: the replayed micro-batch's
  aggregates are emitted again (``duplicate``) or counted twice (``state-*``).
"""

from __future__ import annotations

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


def _done(ops: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for o in ops:
        if o.get("type") == "info" and o.get("f") != "heal" and "outcome" in o:
            out.setdefault(o["f"].partition(":")[0], []).append(o)
    return out


@pytest.mark.timeout(900)
def test_counter_through_the_eos_sink_is_valid_under_executor_driver_and_broker_kills(results_root):
    p = run_cli(["run", "--workload", "counter", "--sink", "eos", "--nemesis",
                 "kill-executor,kill-driver-in-commit-window,kill-broker", "--seed", "1",
                 "--results", str(results_root)], timeout=840)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert result["verdict"] == "valid" and result["workload"] == "counter", result
    assert all(n == 0 for n in result["counts"].values()), result["counts"]
    st = result["stats"]
    assert st["input_records"] > 1000 and st["output_records"] > 0, st
    done = _done(ops)
    for f in ("kill-executor", "kill-driver-in-commit-window", "kill-broker"):
        assert any(o["outcome"] == "effective" for o in done.get(f, [])), (f, done.get(f))
    assert not our_processes(str(run_dir))


@pytest.mark.timeout(900)
def test_counter_through_the_at_least_once_sink_is_caught_after_a_commit_window_kill(results_root):
    p = run_cli(["run", "--workload", "counter", "--sink", "at-least-once", "--nemesis",
                 "kill-driver-in-commit-window", "--seed", "1", "--results", str(results_root)], timeout=840)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-4000:]
    named = {a for a, n in result["counts"].items() if n and (a == "duplicate" or a.startswith("state-"))}
    assert result["verdict"] == "invalid" and named, result["counts"]
    window = [o for o in _done(ops)["kill-driver-in-commit-window"] if o["outcome"] == "effective"]
    assert window, ops
    replayed = {str(o["evidence"]["batch"]) for o in window}
    if "duplicate" in named:  # the second emission is the replayed batch's
        batches = {str(ex.get("batch")) for ex in result["anomalies"]["duplicate"]}
        assert batches & replayed, (batches, replayed)
    assert not our_processes(str(run_dir))
