"""The sink registry (``sinks/registry.py``): every ``--sink`` is one entry that owns its writer, its
reader, its capabilities and the verdict it is expected to reach; the file sink's entry reads its
directory through ``_spark_metadata`` and supplies its own report line."""

from __future__ import annotations

import json

import pytest

from onceproof.harness.config import ConfigError, TestConfig
from onceproof.pipeline import mutants
from onceproof.sinks import registry as sinks
from onceproof.sinks import user_outputs
from onceproof.sinks.base import CAPABILITIES, COMMITTED, OutputLocation


def test_the_registry_keeps_the_sink_names_and_their_order():
    assert sinks.names() == ["eos", "at-least-once", *mutants.MUTANTS, "file", "postgres", "postgres-autocommit",
                             "delta", "delta-foreachbatch", "delta-no-txn", "iceberg", "iceberg-foreachbatch",
                             "iceberg-no-idempotence"]
    assert [s.name for s in sinks.entries()] == sinks.names() and sinks.DEFAULT == "eos"
    with pytest.raises(ValueError, match="choose one of eos, at-least-once"):
        sinks.get("nope")
    assert sinks.find("nope") is None and sinks.find(None) is None and sinks.find("file").name == "file"


def test_every_entry_owns_a_writer_a_reader_and_known_capabilities():
    for s in sinks.entries():
        assert callable(s.writer) and s.reader.count(":") == 1, s.name
        assert s.capabilities <= set(CAPABILITIES) and s.expect in ("valid", "invalid"), s.name
        assert s.reads[0] == COMMITTED and s.output_modes, s.name
        # a weak sink names what catches it (a mutant no run has caught yet names nothing: pipeline/mutants.py)
        uncaught = s.name in mutants.MUTANTS and not mutants.MUTANTS[s.name].caught
        assert (s.expect == "invalid" and not uncaught) == bool(s.targeted_by), s.name
    assert sinks.get("at-least-once").targeted_by == "process"
    assert sinks.get("file").output_dir == "file-sink" and sinks.get("eos").output_dir is None


def test_the_file_sinks_entry_reads_its_directory_and_prints_its_line(tmp_path):
    d = tmp_path / "file-sink"
    (d / "_spark_metadata").mkdir(parents=True)
    part = d / "part-00000-a.json"
    part.write_text(json.dumps({"key": "k0", "seq": 0, "in_partition": 0, "in_offset": 0}) + "\n")
    (d / "part-00001-orphan.json").write_text(json.dumps({"key": "k0", "seq": 0}) + "\n")
    entry = {"path": part.as_uri(), "size": part.stat().st_size, "isDir": False, "modificationTime": 0,
             "blockReplication": 1, "blockSize": 1, "action": "add"}
    (d / "_spark_metadata" / "0").write_text("v1\n" + json.dumps(entry))
    fs = sinks.get("file")
    view = fs.read(OutputLocation(directory=d))
    assert len(view.committed) == 1 and len(view.uncommitted) == 2 and not view.unsettled
    listing = fs.read(OutputLocation(directory=d, read="listing"))
    assert len(listing.committed) == 2
    result = view.record({"stats": {"keys": 1}})
    assert result["file_sink"]["orphan_files"] == 1 and result["stats"]["orphan_files"] == 1
    assert result["stats"]["file_sink_committed_files"] == 1 and result["stats"]["keys"] == 1
    assert user_outputs.output_lines(result) == [fs.report_line(result["file_sink"])]
    assert "orphan-files=1" in user_outputs.output_lines(result)[0]
    assert user_outputs.output_lines({"stats": {}}) == []


def test_an_entry_refuses_a_workload_or_a_read_it_cannot_take():
    with pytest.raises(ConfigError) as e:
        TestConfig(sink="file", workload="counter").validate()
    assert e.value.option == "--workload" and "update mode" in str(e.value) and "eos or at-least-once" in str(e.value)
    with pytest.raises(ConfigError) as e:
        TestConfig(sink="eos", file_read="listing").validate()
    assert e.value.option == "--file-read" and "only with --sink file" in str(e.value)
