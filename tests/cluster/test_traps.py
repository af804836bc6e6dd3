"""The traps of real jobs (``traps`` package: ``nemesis/delete_records.py``, ``nemesis/lose_checkpoint.py``),
on the real local cluster, each caught with the anomaly it causes and the fix named:

* input records deleted before the query read them (KIP-107's DeleteRecords, as retention does): a user's
  job with ``failOnDataLoss=false`` (``examples/driver_txn_pipeline.py``) skips them, caught as
  ``lost-deleted``, apart from ``lost``, with the deleted range and ``failOnDataLoss`` as the fix;
* the query's checkpoint lost while its driver is down: the bundled pipeline (``startingOffsets=earliest``)
  starts a new query whose batch ids count from 0 again, and its sink's markers, which say which batch
  ids were committed, make it skip the new batches that cover data never written: ``lost`` (a sink with
  no idempotence would write the input again: ``duplicate``), the evidence giving the checkpoint's batch
  ids before and after and the sink log its skips.

About 5 minutes on 2 cores."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceproof.store.readers import read_sink
from tests.conftest import load_run, our_processes, run_cli

pytestmark = pytest.mark.cluster

JOB = ("{python} examples/driver_txn_pipeline.py --bootstrap {bootstrap} --input-topic {input_topic} "
       "--output-topic {output_topic} --checkpoint {checkpoint} --jars {jars}")


def _run(results_root, fault: str, extra: list[str], time_limit: int = 30) -> tuple[dict, dict, str]:
    p = run_cli(["run", *extra, "--nemesis", fault, "--time-limit", str(time_limit), "--seed", "1",
                 "--results", str(results_root)], timeout=900)
    out = p.stdout + p.stderr
    assert p.returncode != 254, out[-3000:]
    run_dir, result, ops = load_run(results_root)
    assert not our_processes(str(run_dir)), "processes of the run left running"
    turns = [o for o in ops if o.get("type") == "info" and o.get("f") == fault]
    assert turns and turns[0]["outcome"] == "effective" and turns[0]["exercised"], (turns, out[-3000:])
    assert p.returncode == 1 and result["verdict"] == "invalid", (result.get("verdict"), result.get("counts"),
                                                                  out[-3000:])
    return result, turns[0]["evidence"], out


@pytest.mark.timeout(1000)
def test_deleted_input_skipped_by_a_lenient_job_is_lost_deleted_with_its_fix(warm_cluster, results_root):
    result, ev, out = _run(results_root, "delete-input-records",
                           ["--pipeline-cmd", JOB + " --fail-on-data-loss false", "--output", "kafka", *warm_cluster])
    assert result["cluster"]["warm"], result["cluster"]
    lo, hi = ev["deleted_unread"]
    assert hi > lo and ev["log_start_after"] == hi and ev["query"]["went_on"] == "skipped", ev
    assert ev["lag"]["frozen"] and ev["deleted_unfetched"][1] == hi, ev  # written while the query was frozen
    c = result["counts"]
    assert c["lost-deleted"] > 0 and c["lost"] == 0 and c["lost-write"] == 0, c
    assert result["stats"]["deleted_input_records"] >= c["lost-deleted"], result["stats"]
    ex = result["anomalies"]["lost-deleted"][0]
    assert ex["input_partition"] == ev["partition"] and lo <= ex["input_offset"] < hi, (ex, ev)
    assert f"[{ev['log_start_before']}, {hi})" in ex["deleted_by"], ex
    assert "failOnDataLoss" in result["advice"]["lost-deleted"]["fix"], result["advice"]
    assert "lost-deleted: likely cause" in out


@pytest.mark.timeout(1000)
def test_a_lost_checkpoint_makes_the_bundled_pipeline_skip_new_batches_under_old_markers(warm_cluster, results_root):
    result, ev, out = _run(results_root, "lose-checkpoint", ["--sink", "eos", *warm_cluster])
    assert ev["before"]["offsets"] is not None and ev["after"]["offsets"] is not None and ev["moved_to"], ev
    assert result["counts"]["lost"] > 0, result["counts"]
    run_dir, _, _ = load_run(results_root)
    assert Path(ev["moved_to"]).is_dir() and (run_dir / "checkpoint" / "offsets").is_dir()  # old aside, new one
    skips = [e for e in read_sink(run_dir) if e.get("event") == "skip"]
    assert skips, "the new query's batches were never skipped by the old markers"
    assert "checkpoint was lost" in result["advice"]["lost"]["cause"], result["advice"]


@pytest.mark.extended  # about 3 minutes, most of it the recovery wait of a query that never comes back
@pytest.mark.timeout(1000)
def test_deleted_input_stops_a_query_that_fails_on_data_loss_and_the_verdict_quotes_it(results_root):
    """The bundled pipeline reads with failOnDataLoss=true: after the deletion its query fails at every
    restart; the output stays silent past the recovery bound (no-recovery, invalid) and the verdict quotes
    Spark's error (``query_stopped``, the recovery reasons, the console); nothing crashes."""
    result, ev, out = _run(results_root, "delete-input-records",
                           ["--sink", "eos", "--recovery-bound", "60", "--recovery-timeout", "90"])
    assert result["counts"]["no-recovery"] == 1, (result["counts"], result["stats"].get("liveness"))
    stopped = result.get("query_stopped") or ""
    assert any(w in stopped for w in ("KAFKA_DATA_LOSS", "data may have been lost", "offset was changed")), \
        (stopped, result["recovery"])
    assert any(r.startswith("the query stopped: ") for r in result["recovery"]["reasons"]), result["recovery"]
    assert "the query stopped: " in out
    assert "the query stopped" in result["advice"]["no-recovery"]["cause"], result["advice"]
