"""Operators' restarts (``nemesis/operator.py``, the ``operator`` package) on the real local cluster, one
run carrying every assertion: under ``bounce-broker:leader,rolling-restart,elect-leaders``, both
``reassign-partitions`` targets and ``add-input-partitions`` the eos sink is valid, each fault effective
with its evidence (a clean stop that the broker's own log shows as a controlled shutdown, every broker
back in every ISR before the next one went down, the election's answer, both reassignments completed and
every leader of the topic moved, the input grown from 6 to 8 partitions and both the workload and the
pipeline using the new ones), the leader move that exercised the bounce, and the cluster healthy
afterwards.

About 5 minutes on 2 cores; ``make test-extended``.
"""

import pandas as pd
import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended]


@pytest.mark.timeout(1200)
def test_eos_is_valid_under_an_operators_restarts_with_evidence(results_root):
    p = run_cli(["run", "--sink", "eos", "--nemesis", "bounce-broker:leader,rolling-restart,elect-leaders,"
                 "reassign-partitions:output,reassign-partitions:input,add-input-partitions",
                 # seed 3 plans add-input-partitions first (so the input's reassignment moves 8 partitions)
                 # and elect-leaders last, after the output's reassignment left leaders off their preferred
                 # replicas (seeds 1 and 4 plan it first, when there is nothing to elect: an honest
                 # not-exercised, so unknown)
                 "--time-limit", "90", "--seed", "3", "--results", str(results_root)], timeout=1100)
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    done = {o["f"]: o for o in ops if o["type"] == "info" and o.get("f") != "heal"}
    assert set(done) == {"bounce-broker:leader", "rolling-restart", "elect-leaders", "reassign-partitions:output",
                         "reassign-partitions:input", "add-input-partitions"}, list(done)
    assert all(o["outcome"] == "effective" for o in done.values()), done

    b = done["bounce-broker:leader"]["evidence"]
    assert b["gone"] and b["clean"], b
    assert b["moved_after_s"] is not None and b["rejoined_after_s"] is not None, b
    assert b["shutdown_log"], f"the bounced broker's log shows no controlled shutdown: {b}"

    r = done["rolling-restart"]["evidence"]
    assert sorted(r["order"]) == [1, 2, 3] and len(r["brokers"]) == 3, r
    for node, e in r["brokers"].items():
        assert e["clean"] and e["in_sync_after_s"] is not None and e["shutdown_log"], (node, e)

    e = done["elect-leaders"]["evidence"]
    assert e["elected_count"] + e["not_needed"] > 0 and not e["errors"], e
    for which in ("output", "input"):
        e = done[f"reassign-partitions:{which}"]
        ev = e["evidence"]
        assert e["exercised"] and ev["topic"] == which and ev["partitions"] == (8 if which == "input" else 6), ev
        assert ev["shrink_s"] is not None and ev["restore_s"] is not None, ev
        for p, replicas in ev["shrink"].items():  # the leader left each partition's replicas, then came back
            assert ev["leaders_before"][p] not in replicas and ev["leaders_before"][p] in ev["original"][p], ev
        assert sorted(ev["leaders_moved"]) == list(range(ev["partitions"])), ev
    g = done["add-input-partitions"]
    ev = g["evidence"]
    assert g["exercised"] and (ev["partitions_before"], ev["partitions_after"], ev["new"]) == (6, 8, [6, 7]), ev
    assert ev["new_written"] and ev["new_planned"], ev  # the producer wrote there, Spark planned a batch from them
    # the checker read all 8 partitions, and output copies name input records of the new ones
    inp = pd.read_parquet(run_dir / "input.parquet", columns=["partition"])
    out = pd.read_parquet(run_dir / "output.parquet", columns=["op.input"])
    # (murmur2 maps none of k0..k49 to partition 7 of 8: 6 is the one that fills)
    assert inp["partition"].isin([6, 7]).any(), inp["partition"].value_counts()
    assert out["op.input"].str.split(":").str[0].isin(["6", "7"]).any()
    assert result["stats"]["input_records"] == result["stats"]["output_records"] > 1000, result["stats"]
    assert not our_processes(str(run_dir))
