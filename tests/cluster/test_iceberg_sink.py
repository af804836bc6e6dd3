"""The bundled Apache Iceberg sinks on the real local cluster, written through Iceberg's Spark runtime
(iceberg-spark-runtime-4.1_2.13 1.12.0 on the PySpark 4.1 runtime the run builds once) into a Hadoop
catalog in the run directory, and read at the table's current snapshot with pyiceberg, under
``kill-driver-in-commit-window`` (the driver killed after batch N's snapshot and before Spark's
``commits/N``) and ``kill-broker``:

* ``iceberg`` (Iceberg's streaming write: the query id and epoch id in each snapshot's summary) is
  ``valid``, its commit window watched through the table's metadata files (the sink has no hook), and no
  epoch is in two snapshots: Iceberg skipped the replayed one;
* ``iceberg-no-idempotence`` (``foreachBatch`` appends, never checked) is ``invalid`` with ``duplicate``
  rows, and a stored-run ``check`` agrees.

Both lease the session's warm cluster and are in ``make test``; ``iceberg-foreachbatch`` (the batch-id
snapshot property) is in ``make test-extended``.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, run_table_sink

pytestmark = pytest.mark.cluster


def _epochs(summaries: list[dict]) -> list[str]:
    return [s["epoch_id"] for s in summaries if "epoch_id" in s]


@pytest.mark.timeout(1500)
def test_icebergs_streaming_write_is_valid_and_skips_the_replayed_epoch(warm_cluster, tmp_path):
    run_dir, result, ev, out = run_table_sink(tmp_path / "ok", "iceberg", warm_cluster)
    assert result["verdict"] == "valid", (result["counts"], out[-3000:])
    ic = result["iceberg"]
    assert ic["rows"] == result["stats"]["input_records"] > 0 and ic["order"] == "commit", ic
    assert ev["mode"] == "watch" and ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev
    query_id = json.loads((run_dir / "checkpoint" / "metadata").read_text().splitlines()[0])["id"]
    shown = ic["snapshot_summaries"]
    assert {s.get("query_id") for s in shown if "epoch_id" in s} == {query_id}, shown
    assert len(_epochs(shown)) == len(set(_epochs(shown))), shown  # the replayed epoch was skipped
    assert "iceberg table read at snapshot" in out and result["cluster"]["warm"] is True, result["cluster"]


@pytest.mark.timeout(1500)
def test_iceberg_appends_without_a_check_are_caught_with_their_replayed_batch(warm_cluster, tmp_path):
    mut_dir, mut, _, out = run_table_sink(tmp_path / "mutant", "iceberg-no-idempotence", warm_cluster)
    assert mut["verdict"] == "invalid" and mut["counts"]["duplicate"] > 0, (mut["counts"], out[-3000:])
    assert mut["iceberg"]["rows"] > mut["stats"]["input_records"], mut["iceberg"]
    batches = [s["batch_id"] for s in mut["iceberg"]["snapshot_summaries"] if "batch_id" in s]
    assert len(batches) > len(set(batches)), batches  # the replayed batch's second snapshot
    again = run_cli(["check", str(mut_dir), "--json"], timeout=300)
    assert again.returncode == 1 and json.loads(again.stdout)["counts"]["duplicate"] == mut["counts"]["duplicate"]


@pytest.mark.extended  # 117 s; make test's 50 minutes: the streaming write's idempotence is judged there
@pytest.mark.timeout(1500)
def test_foreachbatch_appends_that_check_the_batch_property_are_valid(tmp_path):
    run_dir, result, ev, out = run_table_sink(tmp_path, "iceberg-foreachbatch")
    assert result["verdict"] == "valid", (result["counts"], out[-3000:])
    ic = result["iceberg"]
    assert ic["rows"] == result["stats"]["input_records"] > 0, ic
    assert ev["mode"] == "hook", ev  # the sink's after-commit hook: killed after the snapshot
    skips = [json.loads(line) for line in (run_dir / "sink.jsonl").read_text().splitlines()]
    assert any(e["event"] == "skip" for e in skips), "the replayed batch was not skipped"
    sink_id = json.loads((run_dir / "test.json").read_text())["sink_id"]
    assert {s.get("sink_id") for s in ic["snapshot_summaries"] if "batch_id" in s} == {sink_id}, ic
