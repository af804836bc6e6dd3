"""The PostgreSQL output's pure parts, on synthetic rows: the table's rows as the checker's output frame,
where the server's binaries are looked up, and which backends can take ``--sink postgres``. The server,
the sinks and the REPEATABLE READ read run for real in ``tests/cluster/test_postgres_sink.py``."""

from __future__ import annotations

import pyarrow as pa
import pytest

from onceproof.backends.common import postgres
from onceproof.checkers import exactly_once
from onceproof.harness.config import ConfigError, TestConfig
from onceproof.pipeline import provenance
from onceproof.sinks import postgres_table, table_rows
from onceproof.sinks import registry as sinks

COLUMNS = ["id", "key", "seq", "in_partition", "in_offset", "in_ts", "batch_id", "incarnation"]


def _table(columns, rows) -> pa.Table:
    """A read of the table as ``COPY ... TO STDOUT`` gives it to the reader (postgres_table._copy_out)."""
    return pa.table({c: pa.array([r[i] for r in rows], type=table_rows.TYPES[c]) for i, c in enumerate(columns)})


def _rows():
    # (id, key, seq, in_partition, in_offset, in_ts, batch_id, incarnation); k1/2 written twice (a replay)
    return [(1, "k1", 1, 0, 10, 1000, "0", "1"), (2, "k1", 2, 0, 11, 1001, "0", "1"),
            (3, "k2", 1, 1, 5, 1002, "0", "1"), (4, "k1", 2, 0, 11, 1001, "0", "2")]


def test_table_rows_become_the_checkers_output_frame_in_insertion_order():
    f = table_rows.frame(_table(COLUMNS, _rows()))
    assert list(f["offset"]) == [1, 2, 3, 4] and set(f["partition"]) == {0}
    assert list(f["key"]) == ["k1", "k1", "k2", "k1"] and list(f["seq"]) == [1, 2, 1, 2]
    assert list(f[provenance.INPUT]) == ["0:10", "0:11", "1:5", "0:11"]
    assert list(f[provenance.BATCH]) == ["0", "0", "0", "0"] and list(f[provenance.INCARNATION])[-1] == "2"
    dup = f[f.duplicated(["key", "seq"], keep=False)]
    assert len(dup) == 2 and set(dup["offset"]) == {2, 4}
    assert exactly_once.INPUT_REF == provenance.INPUT  # the column the checker pairs copies by


def test_an_empty_table_is_an_empty_frame_with_the_checkers_columns():
    f = table_rows.frame(_table(COLUMNS, []))
    assert len(f) == 0 and {"partition", "offset", "key", "seq"} <= set(f.columns)


def test_a_users_table_with_only_key_and_seq_is_read_in_its_order():
    f = table_rows.frame(_table(["key", "seq"], [("a", 0), ("a", 1), ("a", 1)]))
    assert list(f["offset"]) == [0, 1, 2] and list(f["seq"]) == [0, 1, 1]
    assert provenance.INPUT not in f.columns and provenance.BATCH not in f.columns


def test_a_read_without_a_database_names_how_to_recheck():
    with pytest.raises(postgres_table.OutputError, match="onceproof check RUN_DIR"):
        postgres_table.read_output(postgres_table.OutputLocation(topic="output"))


def test_the_server_binaries_come_from_the_env_first_and_their_absence_names_the_install(tmp_path, monkeypatch):
    for name in ("postgres", "initdb"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    monkeypatch.setenv("ONCEPROOF_PG_BIN", str(tmp_path))
    assert postgres.find_bin() == tmp_path
    monkeypatch.setenv("ONCEPROOF_PG_BIN", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr(postgres.glob, "glob", lambda pattern: [])
    with pytest.raises(postgres.PostgresError, match="apt-get install -y postgresql-15"):
        postgres.find_bin()


def test_the_postgres_sinks_are_entries_with_a_database_and_the_mutant_targets_the_commit_window():
    ok, mutant = sinks.get("postgres"), sinks.get("postgres-autocommit")
    assert ok.database == mutant.database == "postgres"
    assert ok.expect == "valid" and not ok.mutant
    assert mutant.expect == "invalid" and mutant.mutant and mutant.targeted_by == "commit"


def test_a_backend_that_starts_no_postgres_refuses_the_sink_naming_one_that_does(monkeypatch):
    from onceproof.backends import registry
    from onceproof.backends.docker.backend import DockerBackend

    for backend in ("local", "docker"):  # both start one (a process, a container)
        TestConfig(sink="postgres", backend=backend, nemesis=["kill-driver-in-commit-window"]).validate()
    without = DockerBackend()  # nothing starts until it is used
    without.databases = frozenset()
    monkeypatch.setitem(registry._made, "docker", without)
    with pytest.raises(ConfigError) as e:
        TestConfig(sink="postgres", backend="docker", nemesis=["kill-driver-in-commit-window"]).validate()
    assert e.value.option == "--sink" and "--backend local" in str(e.value), str(e.value)


JOB = ("{python} tests/jobs/postgres_job.py --bootstrap {bootstrap} --input-topic {input_topic} "
       "--checkpoint {checkpoint} --jars {jars} --dsn {postgres_dsn} --table {output_table}")


def test_a_users_job_declares_its_output_and_may_use_only_that_outputs_placeholders():
    cfg = TestConfig(pipeline_cmd=JOB, output="postgres", nemesis=["kill-driver-in-commit-window"]).validate()
    entry = cfg.sink_entry
    assert entry.database == "postgres" and entry.writer is None and not entry.capabilities
    with pytest.raises(ConfigError) as e:
        TestConfig(pipeline_cmd=JOB, nemesis=["kill-driver-in-commit-window"]).validate()
    assert e.value.option == "--pipeline-cmd" and "{postgres_dsn} is for --output postgres" in str(e.value)
    with pytest.raises(ConfigError) as e:
        TestConfig(pipeline_cmd=JOB.replace("{postgres_dsn}", "{output_path}"), output="postgres",
                   nemesis=["kill-driver-in-commit-window"]).validate()
    assert "{output_path} is for --output files or delta" in str(e.value)


def test_output_belongs_to_a_users_job_and_the_bundled_pipeline_is_told_to_use_sink():
    with pytest.raises(ConfigError) as e:
        TestConfig(output="postgres", nemesis=["kill-driver-in-commit-window"]).validate()
    assert e.value.option == "--output" and "--sink postgres" in str(e.value)
    with pytest.raises(ConfigError) as e:
        TestConfig(output="delta-lake", nemesis=["kill-driver-in-commit-window"]).validate()
    assert "kafka, files, delta, postgres" in str(e.value)


def test_an_order_column_is_for_a_table_output_and_must_be_a_column_name():
    cfg = TestConfig(pipeline_cmd=JOB, output="postgres", order_column="committed_at",
                     nemesis=["kill-driver-in-commit-window"]).validate()
    assert cfg.order_column == "committed_at" and "--order-column committed_at" in cfg.replay_command()
    with pytest.raises(ConfigError) as e:
        TestConfig(order_column="committed_at", nemesis=["kill-driver"]).validate()
    assert e.value.option == "--order-column" and "--output postgres or delta or iceberg" in str(e.value)
    with pytest.raises(ConfigError, match="not a column name"):
        TestConfig(pipeline_cmd=JOB, output="postgres", order_column="a; drop", nemesis=["kill-driver"]).validate()
