"""``upgrade:spark-version`` (``nemesis/upgrade.py``) on the real local cluster: the bundled eos pipeline starts
on the oldest Spark line (``--spark-version 3.5``), and mid-run its driver is killed while one sink partition
of a micro-batch is parked before its commit and the others have committed; the query restarts from the same
checkpoint on the next line's release (4.0), as a team moving a job would. The run must stay valid, the
turn exercised, the new driver's Spark must report the new release, and the replayed batch must skip what the
old driver committed and commit the parked partition.

About 4 minutes on 2 cores (91 s more the first time, to build the 4.0 runtime); ``make test-extended``. In
``make test``: the 3.5 start side is ``test_fault_families.py``'s eos run, and the turn's logic (one line per
turn, the rollback with Spark's error) is ``unit/test_upgrade.py``'s.
"""

import pytest

from tests.conftest import load_run, our_processes, run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.extended]


@pytest.mark.timeout(1500)
def test_eos_stays_valid_when_its_query_moves_from_spark_3_5_to_4_0_mid_batch(results_root):
    p = run_cli(["run", "--sink", "eos", "--spark-version", "3.5", "--nemesis", "upgrade:spark-version",
                 "--time-limit", "60", "--seed", "1", "--results", str(results_root)], timeout=1400)
    assert p.returncode != 254, p.stderr
    run_dir, result, ops = load_run(results_root)
    assert p.returncode == 0 and result["verdict"] == "valid", (result.get("unknown_reasons"), result["counts"],
                                                                p.stdout[-3000:])
    turns = [o for o in ops if o["type"] == "info" and o.get("f") == "upgrade:spark-version"]
    assert turns and turns[0]["outcome"] == "effective" and turns[0]["exercised"], turns
    ev = turns[0]["evidence"]
    start = result["versions"]["pyspark"]
    assert start.startswith("3.5.") and ev["runtime"]["from"] == start, (result["versions"], ev["runtime"])
    assert ev["runtime"]["version"].startswith("4.0.") and ev["restarted_with"]["pyspark"] == ev["runtime"]["version"]
    assert ev["committed_before_kill"] and sorted(set(ev["replay"].values())) == ["commit", "skip"], ev
    assert result["stats"]["input_records"] == result["stats"]["output_records"] > 1000, result["stats"]
    assert not our_processes(str(run_dir)), "processes of the run left running"
