"""The harness's detection power (issue 10), on the real local cluster: mutants of the exactly-once sink
(``pipeline/mutants.py``), each run under the one fault aimed at its flaw, must come out ``invalid``
with the anomaly the flaw produces, and the fault's evidence must show why; and the upgrade finding:
the sink keyed by Spark partition index (``eos-index-keyed``, the sink before the fix) is ``invalid``
after a restart that splits a partly committed batch differently.

``make test`` catches four mutants: ``eos-no-marker`` in ``tests/test_pytest_plugin.py``, Spark's
``at-least-once`` sink in ``tests/test_docker_backend.py``, ``eos-index-keyed`` and (a liveness anomaly)
``eos-no-abort-on-start`` here; the other mutants
(``eos-no-fencing`` under ``zombie-task:precommit``, ``eos-marker-first`` under ``kill-executor``, ...) are
caught by ``make certify``'s ``test-all --mutants``, to keep ``make test`` under its 35 minutes. About
3 minutes on 2 cores.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster


def _run(results_root, sink: str, fault: str, time_limit: int = 15, expect: int = 1,
         extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    p = run_cli(["run", "--sink", sink, "--nemesis", fault, "--time-limit", str(time_limit), "--seed", "1",
                 "--results", str(results_root), *extra], timeout=600)
    assert p.returncode != 254, p.stderr  # a usage error: nothing ran
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == expect, (result.get("verdict"), p.stdout[-3000:], p.stderr[-3000:])
    done = [o for o in ops if o.get("type") == "info" and o.get("f") == fault]
    assert done and done[0]["outcome"] == "effective" and done[0]["exercised"], done
    assert not our_processes(str(run_dir)), "processes of the run left running"
    return result, done[0]["evidence"]


@pytest.mark.extended
@pytest.mark.timeout(700)
def test_upgrade_finding_the_index_keyed_sink_rewrites_and_skips_a_resplit_batch(results_root):
    """The sink before issue 10's fix (marker and transactional.id keyed by Spark partition index),
    restarted with minPartitions = 12 on a partly committed batch: the replay's partition i covers other
    input ranges than the committed partition i did, so committed rows are written again and uncommitted
    ones skipped. (The fixed sink's run follows.)"""
    result, ev = _run(results_root, "eos-index-keyed", "upgrade:min-partitions", time_limit=20)  # ≥ 17: one turn
    assert ev["committed_before_kill"] and ev["restarted_with"]["min_partitions"] == 12, ev
    assert result["counts"]["duplicate"] + result["counts"]["lost"] > 0, result["counts"]
    # issue 11: the Spark engine, re-checking this real run from its snapshots, finds what the run's own
    # (pandas) check found: the same verdict, exit code, counts and examples
    run_dir, _, _ = load_run(results_root)
    p = run_cli(["check", str(run_dir), "--json", "--engine", "spark"], timeout=300)
    spark = json.loads(p.stdout[p.stdout.index("{"):])
    assert p.returncode == 1 and spark["verdict"] == result["verdict"] == "invalid", (p.returncode, p.stderr[-2000:])
    assert spark["counts"] == result["counts"]
    for cls, examples in result["anomalies"].items():
        assert [_example_id(e) for e in spark["anomalies"].get(cls, [])] == [_example_id(e) for e in examples], cls


def _example_id(e: dict) -> tuple:
    """What names an anomaly example: its key and seq, the input record, the output copies' places."""
    copies = [(c.get("partition"), c.get("offset")) for c in e.get("copies") or []]
    return (e.get("key"), e.get("seq"), e.get("input_partition"), e.get("input_offset"), copies)


@pytest.mark.extended
@pytest.mark.timeout(700)
def test_upgrade_fix_the_eos_sink_stays_valid_under_the_same_restart(results_root):
    """The fixed sink (marker and transactional.id keyed by input topic-partition), same fault, same
    seed: the replay at minPartitions = 12 skips exactly the input partitions committed before the kill
    and commits the rest, so the verdict is valid."""
    result, ev = _run(results_root, "eos", "upgrade:min-partitions", time_limit=20, expect=0)
    assert ev["committed_before_kill"] and ev["restarted_with"]["min_partitions"] == 12, ev
    assert {int(p) for p, what in ev["replay"].items() if what == "skip"} >= set(ev["committed_before_kill"]), ev
    assert result["verdict"] == "valid" and all(n == 0 for n in result["counts"].values()), result["counts"]


@pytest.mark.timeout(700)
@pytest.mark.parametrize("sink,expect", [("eos-no-abort-on-start", 1),
                                         pytest.param("eos", 0, marks=pytest.mark.extended)])
def test_liveness_a_leftover_transaction_is_caught_only_without_abort_on_start(results_root, sink, expect):
    """``restart-mid-txn``: the driver killed while a task holds an open transaction, the restarted query's
    task of that partition held 30 s. The sink that settles leftovers at start (``eos``) frees the output
    at once and is valid; the mutant that leaves it to the replayed task keeps the LSO pinned for the hold:
    invalid with ``leftover-transaction`` and nothing else (no record is lost or duplicated)."""
    result, ev = _run(results_root, sink, "restart-mid-txn", time_limit=25, expect=expect,
                      extra=("--txn-timeout-ms", "120000"))
    assert ev["held_s"] >= 27 and ev["outcome"], ev
    bad = {a: n for a, n in result["counts"].items() if n}
    if sink == "eos":
        assert ev["settled_at_start"] and not bad and result["verdict"] == "valid", (ev, bad)
        return
    assert not ev["settled_at_start"], ev
    assert set(bad) == {"leftover-transaction"}, bad
    ex = result["anomalies"]["leftover-transaction"][0]
    assert ex["pinned_after_start_s"] > 5 and ex["killed_at"] == pytest.approx(ev["killed_at"]), ex
