"""The Delta output's reader (``sinks/delta_table.py``) on tables written by delta-rs itself (synthetic
rows, no Spark): the latest committed version only, the txn actions of its commits, orphans, and the
committed end the commit-window watch polls."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from onceproof.pipeline import provenance
from onceproof.sinks import delta_table
from onceproof.sinks.base import OutputError, OutputLocation
from onceproof.sinks.delta_table import DeltaLogEnds, read_output


def _rows(pairs, part=0):
    return pa.table({"key": [k for k, _ in pairs], "seq": pa.array([s for _, s in pairs], pa.int64()),
                     "in_partition": pa.array([part] * len(pairs), pa.int64()),
                     "in_offset": pa.array(range(len(pairs)), pa.int64())})


def _append(path, pairs, txn=None):
    props = CommitProperties(app_transactions=[Transaction(app_id=txn[0], version=txn[1])]) if txn else None
    write_deltalake(str(path), _rows(pairs), mode="append", commit_properties=props)


def test_the_latest_committed_version_is_read_with_its_txn_actions_and_orphans(tmp_path):
    t = tmp_path / "t"
    assert DeltaLogEnds(OutputLocation(directory=t)).read() == {0: 0}
    _append(t, [("a", 0), ("a", 1)], ("job", 0))
    _append(t, [("b", 0), ("a", 1)], ("job", 1))  # a replay wrote ("a", 1) again
    parquet = next(p for p in t.glob("*.parquet"))
    shutil.copy(parquet, t / "part-orphan-of-a-dead-write.parquet")  # written, never committed
    (t / "_delta_log" / "00000000000000000002.json.tmp").write_text("{}")  # a commit that never landed
    view = read_output(OutputLocation(directory=t))
    s = view.summary
    assert (s["version"], s["rows"], s["files"], s["orphan_files"]) == (1, 4, 2, 1), s
    assert s["txn_latest"] == {"job": 1} and [x["table_version"] for x in s["txn"]] == [0, 1], s
    f = view.committed
    assert list(zip(f["key"], f["seq"])) == [("a", 0), ("a", 1), ("b", 0), ("a", 1)], "not in commit order"
    assert s["order"] == "commit" and list(f["offset"]) == [0, 1, 2, 3]
    assert f[provenance.INPUT].notna().all()
    assert DeltaLogEnds(OutputLocation(directory=t)).read() == {0: 2}
    assert delta_table.log_versions(t) == [0, 1]


def test_no_table_and_a_table_without_seq_are_refused_naming_the_fix(tmp_path):
    with pytest.raises(OutputError, match="committed nothing"):
        read_output(OutputLocation(directory=tmp_path / "none"))
    write_deltalake(str(tmp_path / "noseq"), pa.table({"key": ["a"], "n": [1]}))
    with pytest.raises(OutputError, match="no column seq"):
        read_output(OutputLocation(directory=tmp_path / "noseq"))


def test_the_bundled_delta_sinks_run_on_the_delta_runtime_with_its_jars_and_the_mutant_targets_the_commit():
    from onceproof.sinks import delta
    from onceproof.sinks import registry as sinks

    ok = [sinks.get(n) for n in ("delta", "delta-foreachbatch")]
    mutant = sinks.get("delta-no-txn")
    for s in (*ok, mutant):
        assert s.spark_runtime == delta.RUNTIME and s.jars == ("delta",) and s.output_dir == delta.OUTPUT_DIR
        assert s.spark_conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
        assert s.result_key == "delta" and s.committed_end.endswith("DeltaLogEnds")
    assert [s.expect for s in ok] == ["valid", "valid"] and not any(s.mutant for s in ok)
    assert mutant.expect == "invalid" and mutant.mutant and mutant.targeted_by == "commit"
    assert "driver-hooks" in mutant.capabilities and not sinks.get("delta").capabilities  # the watch, no hook


def test_a_backend_with_one_pyspark_refuses_a_sink_that_needs_another(monkeypatch):
    from onceproof.backends.local.backend import LocalBackend
    from onceproof.harness.config import ConfigError, TestConfig

    TestConfig(sink="delta-foreachbatch", nemesis=["kill-driver-in-commit-window"]).validate()
    # the local backend without files shared with the harness would be refused for the directory first
    monkeypatch.setattr("onceproof.backends.capabilities.implements",
                        lambda backend, protocol: backend is not LocalBackend)
    with pytest.raises(ConfigError, match="runs on PySpark 4.2.0, and the local backend runs one PySpark only"):
        TestConfig(sink="delta-foreachbatch", nemesis=["kill-driver-in-commit-window"]).validate()


def test_rows_are_ranked_by_their_commit_or_by_a_declared_order_column(tmp_path):
    """Two commits: the rows of one commit share a rank (the version), so no order among them is judged;
    a declared timestamp column ranks the rows by its values instead; a missing one is refused."""
    from onceproof.checkers import exactly_once
    from onceproof.sinks.base import ORDER_RANK

    t0 = 1_700_000_000_000_000
    for seqs in ([2, 0, 1], [3, 4]):
        write_deltalake(str(tmp_path), pa.table({"key": ["k"] * len(seqs), "seq": seqs,
                                                 "at": pa.array([t0 + s for s in seqs], pa.timestamp("us"))}),
                        mode="append")
    view = read_output(OutputLocation(directory=tmp_path))
    assert list(view.committed[ORDER_RANK]) == [0, 0, 0, 1, 1] and view.summary["order"] == "commit"
    import pandas as pd

    inp = pd.DataFrame({"key": "k", "seq": range(5), "partition": 0, "offset": range(5)})
    assert exactly_once.check(pd.DataFrame(), inp, view.committed)["counts"]["nonmonotonic"] == 0
    declared = read_output(OutputLocation(directory=tmp_path, order_column="at"))
    assert declared.summary["order"] == "at" and list(declared.committed[ORDER_RANK]) == [t0 + 2, t0, t0 + 1,
                                                                                           t0 + 3, t0 + 4]
    with pytest.raises(OutputError, match="no column nope"):
        read_output(OutputLocation(directory=tmp_path, order_column="nope"))
