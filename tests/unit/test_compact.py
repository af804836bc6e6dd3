"""store/compact.py: a finished run's history and large logs become ``.gz``, and every reader still finds
them (the history frame, the lost-write check's history, run-directory detection, ``onceproof check``)."""

from __future__ import annotations

import gzip
import json

import pytest

from onceproof.store import readers
from onceproof.store.compact import MIN_LOG_BYTES, compact, read_text
from onceproof.store.history import HistoryWriter
from onceproof.store.runfiles import GZ, HISTORY, RunFiles, stored
from onceproof.store.runs import RunDir, is_run_dir
from tests.conftest import run_cli
from tests.unit.test_cli_check_damaged import make_run


def _run_with_logs(tmp_path) -> RunDir:
    rd = RunDir(tmp_path / "results", "t", "20250101T000000")
    h = HistoryWriter(rd.history)
    for i in range(2000):
        h.append({"process": 0, "type": "invoke", "f": "send", "key": f"k{i % 7}", "seq": i // 7})
    h.close()
    line = "2026-11-22 10:00:00,000 INFO [ReplicaFetcher replicaId=2] Fetching from broker 1 ...\n"
    (rd.logs / "broker-1.log").write_text(line * (MIN_LOG_BYTES // len(line) + 10))
    (rd.logs / "executors" / "app-1" / "0").mkdir(parents=True)
    (rd.logs / "executors" / "app-1" / "0" / "stderr").write_text(line * (MIN_LOG_BYTES // len(line) + 10))
    (rd.logs / "clients.log").write_text("small\n")
    (rd.logs / "harness.log").write_text(line * (MIN_LOG_BYTES // len(line) + 10))  # still open: stays plain
    return rd


def test_compact_gzips_the_history_and_large_logs_and_readers_see_the_same(tmp_path):
    rd = _run_with_logs(tmp_path)
    before = readers.read_history(rd.path)
    broker = (rd.logs / "broker-1.log").read_text()
    done = {name: (b, a) for name, b, a in compact(rd.path)}
    assert set(done) == {HISTORY + GZ, "logs/broker-1.log.gz", "logs/executors/app-1/0/stderr.gz"}
    assert all(a * 4 < b for b, a in done.values()), done  # text compresses, or this was pointless
    assert not rd.history.exists() and stored(rd.history) == rd.path / (HISTORY + GZ)
    assert (rd.logs / "clients.log").exists() and (rd.logs / "harness.log").exists()
    pd_after = readers.read_history(rd.path)
    assert pd_after.equals(before) and len(pd_after) == 2000
    assert read_text(rd.logs / "broker-1.log") == broker  # by its plain name, or by the .gz's
    assert read_text(rd.logs / "broker-1.log.gz") == broker
    assert is_run_dir(rd.path) and not (rd.path / "test.json").exists()  # found by the .gz alone
    assert compact(rd.path) == []  # nothing left to do


def test_a_truncated_compressed_history_is_a_damaged_file_naming_it(tmp_path):
    rd = _run_with_logs(tmp_path)
    compact(rd.path)
    gz = stored(rd.history)
    gz.write_bytes(gz.read_bytes()[:200])
    with pytest.raises(readers.DamagedFile, match=str(gz)):
        readers.read_history(rd.path)


@pytest.mark.parametrize("cut", [0, 6])
def test_a_compacted_stored_run_checks_as_before(tmp_path, cut):
    d = make_run(tmp_path / "results" / "t" / "20250101T000000")
    h = RunFiles(d).history
    if cut:  # the last three sends missing: unknown, and only if the compressed history was really read
        h.write_text("".join(h.read_text().splitlines(keepends=True)[:-cut]))
    compact(d)
    assert not h.exists() and gzip.decompress(stored(h).read_bytes())
    p = run_cli(["check", str(d), "--json"], timeout=120)
    r = json.loads(p.stdout[p.stdout.index("{"):])
    if cut:
        assert p.returncode == 2 and any("ends before the input" in x for x in r["unknown_reasons"]), r
        assert any(HISTORY + GZ in x for x in r["unknown_reasons"]), r["unknown_reasons"]
    else:
        assert p.returncode == 0 and r["verdict"] == "valid", p.stdout + p.stderr
