"""The bundled Delta sinks on the real local cluster, written through Delta Lake's Spark connector
(delta-spark 4.4.0 on the PySpark 4.2.0 runtime the run builds once) and read at the table's latest
committed version with delta-rs, under ``kill-driver-in-commit-window`` (the driver killed after the
Delta commit of batch N and before Spark's ``commits/N``) and ``kill-broker``:

* ``delta`` (Delta's streaming sink, ``SetTransaction(queryId, batchId)`` per commit) is ``valid``, the
  commit window watched through ``_delta_log`` (the sink has no hook);
* ``delta-foreachbatch`` (``txnAppId``/``txnVersion``) is ``valid``: Delta skips the replayed batch;
* ``delta-no-txn`` (the same appends without the options) is ``invalid`` with ``duplicate`` rows.

``make test-extended`` (about 10 minutes on 2 cores): ``make test`` runs users' Delta jobs instead
(``tests/cluster/test_user_outputs.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli, run_table_sink

pytestmark = [pytest.mark.cluster, pytest.mark.extended]


def _txn_app_ids(table: Path) -> set[str]:
    ids = set()
    for f in (table / "_delta_log").glob("*.json"):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                ids.add(action["txn"]["appId"])
    return ids


@pytest.mark.timeout(1500)
def test_deltas_streaming_sink_is_valid_its_commit_window_watched_through_the_log(tmp_path):
    run_dir, result, ev, out = run_table_sink(tmp_path, "delta")
    assert result["verdict"] == "valid", (result["counts"], out[-3000:])
    d = result["delta"]
    assert d["rows"] == result["stats"]["input_records"] > 0, d
    assert ev["mode"] == "watch" and ev["output_end_at_kill"]["0"] > ev["output_end_at_offsets_logged"]["0"], ev
    query_id = json.loads((run_dir / "checkpoint" / "metadata").read_text().splitlines()[0])["id"]
    assert _txn_app_ids(run_dir / "delta-table") == {query_id}  # SetTransaction(queryId, batchId)
    assert d["txn_count"] == d["version"] + 1, d  # one commit per batch: the replay was skipped


@pytest.mark.timeout(2400)
def test_idempotent_foreachbatch_appends_are_valid_and_appends_without_txn_are_caught(tmp_path):
    run_dir, result, ev, out = run_table_sink(tmp_path / "ok", "delta-foreachbatch")
    assert result["verdict"] == "valid", (result["counts"], out[-3000:])
    d = result["delta"]
    assert d["rows"] == result["stats"]["input_records"] > 0 and d["txn_count"] == d["version"] + 1, d
    sink_id = json.loads((run_dir / "test.json").read_text())["sink_id"]  # txnAppId: stable across restarts
    assert _txn_app_ids(run_dir / "delta-table") == {sink_id} == set(d["txn_latest"]), d
    assert ev["mode"] == "hook", ev  # the sink's after-commit hook: killed after the Delta commit

    mut_dir, mut, _, out = run_table_sink(tmp_path / "mutant", "delta-no-txn", nemesis="kill-driver-in-commit-window",
                                          time_limit=30)
    assert mut["verdict"] == "invalid" and mut["counts"]["duplicate"] > 0, (mut["counts"], out[-3000:])
    assert mut["delta"]["rows"] > mut["stats"]["input_records"] and mut["delta"]["txn_count"] == 0, mut["delta"]
    again = run_cli(["check", str(mut_dir), "--json"], timeout=300)
    assert again.returncode == 1 and json.loads(again.stdout)["counts"]["duplicate"] == mut["counts"]["duplicate"]
