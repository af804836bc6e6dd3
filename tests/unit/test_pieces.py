"""Pure pieces: the generator, the history file, the offset log reader, the commit-window hook, the
marker arithmetic."""

import json
import time
from itertools import islice

import pytest

from onceproof.pipeline import hooks, marker
from onceproof.store import checkpoint, history, readers
from onceproof.workloads.keyed import sequences


def test_sequences_are_contiguous_per_key_and_seeded():
    ops = list(islice(sequences(5, seed=3), 1000))
    assert ops == list(islice(sequences(5, seed=3), 1000))
    per = {}
    for k, s in ops:
        assert s == per.get(k, -1) + 1
        per[k] = s
    assert set(per) == {f"k{i}" for i in range(5)}


def test_history_roundtrip_and_torn_last_line(tmp_path):
    p = tmp_path / "history.jsonl"
    w = history.HistoryWriter(p)
    w.append({"process": 0, "type": "invoke", "f": "send", "key": "k1", "seq": 0})
    w.append({"process": 0, "type": "ok", "f": "send", "key": "k1", "seq": 0})
    w.close()
    with open(p, "a") as f:
        f.write('{"index": 2, "type": "inv')  # crash mid-line
    df = readers.read_history(tmp_path)
    assert list(df["type"]) == ["invoke", "ok"] and list(df["index"]) == [0, 1]
    assert (df["time"].diff().dropna() >= 0).all()
    p.write_text('{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(readers.DamagedFile, match="corrupt"):
        readers.read_history(tmp_path)


def test_offset_log_parsing(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"input":{"0":5,"1":7}}\n')
    (tmp_path / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n{"input":{"0":9,"1":7}}\n')
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    assert checkpoint.latest_offset_batch(tmp_path) == 1
    assert checkpoint.latest_commit(tmp_path) == 0
    assert checkpoint.committed_offsets(tmp_path) == {"input": {0: 5, 1: 7}}
    assert checkpoint.has_offsets(tmp_path, 1) and not checkpoint.has_commit(tmp_path, 1)
    (tmp_path / "offsets" / "2").write_text("garbage")
    with pytest.raises(ValueError):
        checkpoint.source_offsets(tmp_path, 2)


def test_commit_window_hook_holds_only_when_armed(tmp_path):
    c = hooks.ControlDir(tmp_path, hold_s=0.3)
    t = time.monotonic()
    c.after_sink_commit(4)
    assert time.monotonic() - t < 0.1
    assert not (tmp_path / hooks.OPEN).exists() and not (tmp_path / hooks.MISSED).exists()
    (tmp_path / hooks.ARMED).write_text("{}")
    t = time.monotonic()
    c.after_sink_commit(5)
    assert time.monotonic() - t >= 0.3
    # nobody killed it: the announcement (batch, pid) is kept as the "missed" file, no watcher race
    seen = json.loads((tmp_path / hooks.MISSED).read_text())
    assert seen["batch"] == 5 and "pid" in seen
    assert not (tmp_path / hooks.ARMED).exists() and not (tmp_path / hooks.OPEN).exists()


def test_ready_creates_a_missing_control_dir_and_logs_every_incarnation(tmp_path):
    d = tmp_path / "not" / "made"  # a driver started by hand (docker-compose.yml): nobody made the directory
    c = hooks.ControlDir(d)
    c.mark_ready({"query_id": "q", "run_id": "r1"})
    c.mark_ready({"query_id": "q", "run_id": "r2"})
    assert json.loads((d / hooks.READY).read_text())["run_id"] == "r2"
    assert [json.loads(line)["run_id"] for line in (d / hooks.APPS).read_text().splitlines()] == ["r1", "r2"]


def test_precommit_hold_is_claimed_only_by_its_sink_partition(tmp_path):
    logged = []
    (tmp_path / hooks.PRECOMMIT_HOLD).write_text(json.dumps({"ms": 50, "partition": 3}))
    assert hooks.precommit_delay(str(tmp_path), {"partition": 1}, lambda **f: logged.append(f)) == 0
    assert (tmp_path / hooks.PRECOMMIT_HOLD).exists() and not logged
    assert hooks.precommit_delay(str(tmp_path), {"partition": 3}, lambda **f: logged.append(f)) == 50
    assert not (tmp_path / hooks.PRECOMMIT_HOLD).exists() and logged == [{"hold_ms": 50, "partition": 3}]
    (tmp_path / hooks.PRECOMMIT_HOLD).write_text("40")  # plain ms: any partition (txn-timeout)
    assert hooks.precommit_delay(str(tmp_path), {"partition": 0}, lambda **f: None) == 40


def test_marker_encodes_batch_plus_one():
    tp = marker.offsets_for("progress", 0)[0]
    assert (tp.topic, tp.partition, tp.offset) == ("progress", 0, 1)
    assert marker.group_id("s", 3) == "s-marker-3"


def test_decode_values_fast_path_and_fallback_agree():
    import pandas as pd

    from onceproof.clients.topics import decode_values

    vals = [json.dumps({"key": f"k{i % 3}", "seq": i // 3, "in_offset": i}).encode() for i in range(30)]
    frame = pd.DataFrame({"partition": [0] * 30, "offset": range(30), "key": [None] * 30, "value": vals})
    fast = decode_values(frame)
    broken = frame.copy()
    broken.loc[7, "value"] = b"not json"
    slow = decode_values(broken)
    assert list(fast["seq"]) == [i // 3 for i in range(30)]
    assert slow["seq"].isna().sum() == 1 and pd.isna(slow.loc[7, "seq"])
    keep = [i for i in range(30) if i != 7]
    assert list(slow.loc[keep, "seq"]) == list(fast.loc[keep, "seq"])
    assert list(slow.loc[keep, "key"]) == list(fast.loc[keep, "key"])


def test_the_pipeline_imports_without_pandas_or_pyarrow():
    """The driver container of the Docker backend has pyspark and confluent-kafka, not pandas: what
    ``onceproof.job`` imports (the workloads' transforms included) must not need them (seen: the counter
    workload's first Docker run restarted its driver 121 times on ``No module named 'pandas'``)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.modules['pandas'] = None; sys.modules['pyarrow'] = None; sys.modules['numpy'] = None\n"
            "import onceproof.job, onceproof.pipeline.eos_sink, onceproof.pipeline.file_sink\n"
            "from onceproof.workloads import registry\n"
            "[registry.get(n) for n in registry.names()]\n"
            "from onceproof.sinks import registry as sinks\n"
            "assert all(s.writer for s in sinks.entries())")
    p = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
