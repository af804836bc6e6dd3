"""The Iceberg output's reader (``sinks/iceberg_table.py``) on tables written by pyiceberg itself (synthetic
rows, no Spark) in a Hadoop catalog's layout: ``<warehouse>/db/output/metadata/v<N>.metadata.json``, each
commit's metadata file copied to the next ``v<N>`` as Iceberg's ``HadoopTableOperations`` renames it. The
current snapshot only, its summaries, orphans, the commit order, and the committed end the commit-window
watch polls; and the ``--output iceberg`` contract (placeholders, refusals)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from onceproof.backends.common import interpreter
from onceproof.sinks import iceberg_table
from onceproof.sinks.base import JobPlace, OutputError, OutputLocation
from onceproof.sinks.iceberg_table import MetadataEnds, read_output


class _Hadoop:
    """A table written through pyiceberg's SQL catalog (SQLite) at the Hadoop layout's location, whose
    every metadata file is published as the next ``v<N>.metadata.json``."""

    def __init__(self, warehouse, schema: pa.Schema, version: int = 2):
        self.warehouse = warehouse
        self.catalog = SqlCatalog("t", uri=f"sqlite:///{warehouse.parent / (warehouse.name + '.db')}",
                                  warehouse=f"file://{warehouse}")
        self.catalog.create_namespace("db")
        self.table = self.catalog.create_table("db.output", schema=schema,
                                               location=str(iceberg_table.table_dir(warehouse)),
                                               properties={"format-version": str(version)})
        self.version = 0
        self._publish()

    def _publish(self) -> None:
        self.version += 1
        src = self.table.metadata_location.removeprefix("file://")
        shutil.copy(src, iceberg_table.table_dir(self.warehouse) / "metadata" / f"v{self.version}.metadata.json")

    def append(self, rows: pa.Table, **props: str) -> None:
        self.table.append(rows, snapshot_properties=props)
        self._publish()

    def delete(self, expr: str) -> None:
        self.table.delete(expr)
        self._publish()


def _rows(pairs, offsets=None) -> pa.Table:
    return pa.table({"key": [k for k, _ in pairs], "seq": pa.array([s for _, s in pairs], pa.int64()),
                     "in_partition": pa.array([0] * len(pairs), pa.int64()),
                     "in_offset": pa.array(offsets if offsets is not None else range(len(pairs)), pa.int64())})


def test_the_current_snapshot_is_read_in_commit_order_with_its_summaries_and_orphans(tmp_path):
    wh = tmp_path / "wh"
    loc = OutputLocation(directory=wh)
    assert MetadataEnds(loc).read() == {0: 0}
    t = _Hadoop(wh, _rows([("a", 0)]).schema)
    t.append(_rows([("b", 0), ("b", 1)]), **{"onceproof.sink-id": "s", "onceproof.batch-id": "0"})
    t.append(_rows([("a", 0), ("b", 1)], [5, 6]), **{"onceproof.sink-id": "s", "onceproof.batch-id": "1"})
    t.append(_rows([("b", 1)], [6]), **{"onceproof.sink-id": "s", "onceproof.batch-id": "1"})  # a replay
    data = iceberg_table.table_dir(wh) / "data"
    shutil.copy(next(data.glob("*.parquet")), data / "00000-orphan-of-a-dead-write.parquet")
    (iceberg_table.table_dir(wh) / "metadata" / "5ab1-uncommitted.metadata.json").write_text("{}")
    view = read_output(loc)
    s = view.summary
    assert (s["metadata"], s["snapshots"], s["rows"], s["files"], s["orphan_files"]) == \
        ("v4.metadata.json", 3, 5, 3, 1), s
    assert s["snapshot_id"] == t.table.current_snapshot().snapshot_id and s["order"] == "commit"
    assert [x["batch_id"] for x in s["snapshot_summaries"]] == ["0", "1", "1"], s["snapshot_summaries"]
    assert [x["added_records"] for x in s["snapshot_summaries"]] == ["2", "2", "1"]
    f = view.committed
    assert list(zip(f["key"], f["seq"])) == [("b", 0), ("b", 1), ("a", 0), ("b", 1), ("b", 1)], "not in commit order"
    assert list(f["order_rank"]) == [1, 1, 2, 2, 3]
    assert MetadataEnds(loc).read() == {0: 4} and iceberg_table.metadata_versions(wh) == [1, 2, 3, 4]


def test_a_rewrite_leaves_no_commit_order_and_a_declared_column_ranks_the_rows(tmp_path):
    wh = tmp_path / "wh"
    t = _Hadoop(wh, _rows([("a", 0)]).schema)
    t.append(_rows([("a", 0), ("a", 1), ("b", 0)], [7, 3, 5]))
    t.append(_rows([("a", 2)], [9]))
    declared = read_output(OutputLocation(directory=wh, order_column="in_offset")).committed
    ranks = dict(zip(zip(declared["key"], declared["seq"]), declared["order_rank"], strict=True))
    assert ranks == {("a", 0): 7, ("a", 1): 3, ("b", 0): 5, ("a", 2): 9}
    t.delete("key == 'b'")  # a delete rewrites the file that held ("b", 0)
    view = read_output(OutputLocation(directory=wh))
    assert view.summary["order"] == "scan" and view.committed["order_rank"].isna().all(), view.summary
    assert sorted(zip(view.committed["key"], view.committed["seq"])) == [("a", 0), ("a", 1), ("a", 2)]


def test_no_table_and_a_table_without_seq_are_refused_naming_the_fix(tmp_path):
    with pytest.raises(OutputError, match="committed no metadata"):
        read_output(OutputLocation(directory=tmp_path / "none"))
    wh = tmp_path / "noseq"
    _Hadoop(wh, pa.schema([("key", pa.string()), ("n", pa.int64())]))
    with pytest.raises(OutputError, match="no column seq"):
        read_output(OutputLocation(directory=wh))
    with pytest.raises(OutputError, match="has no column at.*name one of"):
        _Hadoop(tmp_path / "w2", _rows([("a", 0)]).schema)
        read_output(OutputLocation(directory=tmp_path / "w2", order_column="at"))


def test_a_users_job_gets_the_catalog_as_json_and_the_table_name():
    from onceproof.pipeline import iceberg_sink
    from onceproof.sinks import iceberg, user_outputs

    entry = user_outputs.get("iceberg").entry()
    values = entry.job_values(JobPlace(directory=Path("/runs/x/iceberg-warehouse"), output_topic="output"))
    conf = json.loads(values["iceberg_conf"])
    assert conf["spark.sql.catalog.onceproof.warehouse"] == "/runs/x/iceberg-warehouse"
    assert conf["spark.sql.catalog.onceproof.type"] == "hadoop"
    assert conf["spark.sql.extensions"] == iceberg_sink.EXTENSIONS
    assert values["output_table"] == "onceproof.db.output" and entry.output_dir == iceberg.OUTPUT_DIR
    assert user_outputs.misplaced("iceberg", {"iceberg_conf", "output_table"}) == {}
    assert user_outputs.misplaced("postgres", {"iceberg_conf"}) == {"iceberg_conf": "iceberg"}


def test_a_job_on_a_spark_line_iceberg_does_not_build_for_is_refused_naming_the_lines():
    why = interpreter.jars_only_refusal("/venv/bin/python", "4.3.0", ("iceberg",))
    assert "built for Spark 3.5, 4.0, 4.1 only" in why and "pyspark 4.1.x" in why, why
    assert interpreter.jars_only_refusal("/venv/bin/python", "3.5.9", ("iceberg",)) is None
    assert interpreter.jars_only_refusal("/venv/bin/python", "4.3.0", ("delta",)) is None  # a package decides


def test_the_bundled_sinks_run_on_the_iceberg_runtime_and_the_mutant_targets_the_commit():
    from onceproof.backends.common import jars
    from onceproof.sinks import iceberg
    from onceproof.sinks import registry as sinks

    for name in ("iceberg", "iceberg-foreachbatch", "iceberg-no-idempotence"):
        s = sinks.get(name)
        assert s.spark_runtime == iceberg.RUNTIME and s.jars == ("iceberg",) and s.result_key == "iceberg", name
    assert jars.spark_line("iceberg", iceberg.RUNTIME) == "4.1"
    mutant = sinks.get("iceberg-no-idempotence")
    assert mutant.mutant and mutant.expect == "invalid" and mutant.targeted_by == "commit"
    assert sinks.get("iceberg").expect == sinks.get("iceberg-foreachbatch").expect == "valid"


def test_the_report_lists_the_snapshots_read_and_names_the_latest_marker():
    from onceproof.sinks import iceberg, user_outputs

    summary = {"snapshot_id": 9, "metadata": "v3.metadata.json", "snapshots": 2, "rows": 5, "files": 2,
               "orphan_files": 1, "snapshot_summaries": [
                   {"snapshot_id": 8, "sequence_number": 1, "timestamp_ms": 1, "operation": "append",
                    "added_records": "3", "query_id": "q", "epoch_id": "0"},
                   {"snapshot_id": 9, "sequence_number": 2, "timestamp_ms": 2, "operation": "append",
                    "added_records": "2", "query_id": "q", "epoch_id": "1"}]}
    line = iceberg.report_line(summary)
    assert "snapshot 9 (v3.metadata.json, 2 snapshots): 5 rows in 2 files, orphan-files=1" in line, line
    assert line.endswith("latest snapshot: epoch 1 of query q"), line
    [(title, rows)] = user_outputs.output_tables({"iceberg": summary})
    assert "the latest 2 of 2; current 9" in title
    assert [list(r) for r in rows] == [["snapshot_id", "sequence_number", "operation", "added_records", "query_id",
                                        "epoch_id"]] * 2 and [r["epoch_id"] for r in rows] == ["0", "1"]
    assert user_outputs.output_tables({"delta": {"version": 1}}) == []


def test_a_table_with_no_snapshot_yet_reads_as_no_rows(tmp_path):
    wh = tmp_path / "wh"
    _Hadoop(wh, _rows([("a", 0)]).schema)  # created by the job, no batch committed
    view = read_output(OutputLocation(directory=wh))
    assert view.committed.empty and view.summary["snapshot_id"] is None and view.summary["rows"] == 0, view.summary
    assert view.summary["files"] == view.summary["orphan_files"] == 0


@pytest.mark.parametrize("version", [1, 2])
def test_commit_order_holds_in_both_format_versions_and_an_id_column_is_no_order(tmp_path, version):
    """A format-v1 table's sequence numbers are all 0: the snapshots' commit order ranks the rows. An
    ``id`` column is not read as the order (Iceberg numbers no rows as committed)."""
    wh = tmp_path / "wh"
    schema = _rows([("a", 0)]).append_column("id", pa.array([0], pa.int64())).schema
    t = _Hadoop(wh, schema, version)
    t.append(_rows([("a", 1)]).append_column("id", pa.array([1], pa.int64())))
    t.append(_rows([("a", 0)]).append_column("id", pa.array([0], pa.int64())))  # seq going back: nonmonotonic
    f = read_output(OutputLocation(directory=wh)).committed
    assert list(zip(f["key"], f["seq"])) == [("a", 1), ("a", 0)] and list(f["order_rank"]) == [1, 2], f


def test_files_count_the_live_ones_and_a_deleted_file_an_older_snapshot_holds_is_no_orphan(tmp_path):
    wh = tmp_path / "wh"
    t = _Hadoop(wh, _rows([("a", 0)]).schema)
    t.append(_rows([("a", 0)]))
    t.append(_rows([("b", 0)]))
    t.delete("key == 'a'")
    t.append(_rows([("c", 0)]))
    s = read_output(OutputLocation(directory=wh)).summary
    assert (s["files"], s["orphan_files"], s["rows"]) == (2, 0, 2), s


def test_a_job_on_onceproofs_own_pyspark_is_refused_for_iceberg_before_anything_starts():
    from onceproof.harness.config import ConfigError, TestConfig

    job = ("{python} job.py --bootstrap {bootstrap} --input-topic {input_topic} --checkpoint {checkpoint} "
           "--table {output_table} --iceberg-conf {iceberg_conf} --jars {jars}")
    with pytest.raises(ConfigError) as e:
        TestConfig(pipeline_cmd=job, output="iceberg", nemesis=["kill-driver"]).validate()
    assert e.value.option == "--output" and "built for Spark 3.5, 4.0, 4.1 only" in str(e.value), str(e.value)
    assert "--pipeline-python" in str(e.value) and "--spark-version" in str(e.value)
    with pytest.raises(ConfigError, match="is for --output iceberg"):
        TestConfig(pipeline_cmd=job, output="postgres", nemesis=["kill-driver"]).validate()
