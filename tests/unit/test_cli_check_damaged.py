"""`onceproof check RUN_DIR` and `onceproof report RUN_DIR` on damaged or wrong directories (hand-made,
synthetic parquet written with pandas): a damaged run never yields a quiet VALID; a damaged file is a
one-line crash naming it; a directory that is not a run is a usage error and is left untouched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

KEYS, SEQS = 3, 5
REPLAY = "onceproof run --sink eos --nemesis kill-executor --seed 7"


def make_run(d: Path, *, test_json: bool = True, history: bool = True, duplicate: bool = False) -> Path:
    """A stored run of KEYS × SEQS records, all delivered once (valid), with its history and test.json."""
    d.mkdir(parents=True)
    rows = [(f"k{k}", s) for s in range(SEQS) for k in range(KEYS)]
    inp = pd.DataFrame({"key": [k for k, _ in rows], "seq": [s for _, s in rows],
                        "partition": [int(k[1:]) % 2 for k, _ in rows]})
    inp["offset"] = inp.groupby("partition").cumcount()
    out = inp.copy()
    if duplicate:
        out = pd.concat([out, out.iloc[[0]]], ignore_index=True)
        out["offset"] = out.groupby("partition").cumcount()
    inp.to_parquet(d / "input.parquet", index=False)
    out.to_parquet(d / "output.parquet", index=False)
    (d / "recovery.json").write_text(json.dumps({"finished": True, "reasons": [], "output_lso": {}, "output_hw": {}}))
    if history:
        ops = []
        for _, r in inp.iterrows():
            ops.append({"type": "invoke", "f": "send", "key": r["key"], "seq": int(r["seq"])})
            ops.append({"type": "ok", "f": "send", "key": r["key"], "seq": int(r["seq"]),
                        "partition": int(r["partition"]), "offset": int(r["offset"])})
        (d / "history.jsonl").write_text("".join(json.dumps({"index": i, **op}) + "\n" for i, op in enumerate(ops)))
    if test_json:
        (d / "test.json").write_text(json.dumps({"name": "t", "replay": REPLAY, "config": {"nemesis": []}}))
    return d


def check(d: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    p = run_cli(["check", str(d), "--json"], timeout=120)
    try:
        return p, json.loads(p.stdout[p.stdout.index("{"):])
    except ValueError:
        return p, None


def one_line(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.strip()
    assert "Traceback" not in p.stdout + p.stderr and err and "\n" not in err, p.stdout + p.stderr
    return err


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "results" / "t" / "20250101T000000")


def test_intact_run_is_valid(run):
    p, r = check(run)
    assert p.returncode == 0 and r["verdict"] == "valid", p.stdout + p.stderr


def test_torn_last_history_line_is_dropped_with_a_warning(run):
    with open(run / "history.jsonl", "a") as f:
        f.write('{"index": 999, "type": "inv')
    p, r = check(run)
    assert p.returncode == 0 and r["verdict"] == "valid", p.stderr
    assert any("torn" in w for w in r["warnings"]), r.get("warnings")
    p = run_cli(["check", str(run)], timeout=120)  # the human view says so too
    assert p.returncode == 0 and "torn" in p.stdout


@pytest.mark.parametrize("damage", ["missing", "empty", "blank-lines"])
def test_missing_or_empty_history_makes_the_verdict_unknown(run, damage):
    h = run / "history.jsonl"
    if damage == "missing":
        h.unlink()
    else:
        h.write_text("" if damage == "empty" else "\n\n")
    p, r = check(run)
    assert p.returncode == 2 and r["verdict"] == "unknown", p.stdout + p.stderr
    assert any("history.jsonl" in x and "lost-write" in x for x in r["unknown_reasons"]), r["unknown_reasons"]


def test_history_cut_short_makes_the_verdict_unknown(run):
    h = run / "history.jsonl"
    lines = h.read_text().splitlines(keepends=True)
    h.write_text("".join(lines[: len(lines) - 6]))  # the last three sends: cleanly cut, no torn line
    p, r = check(run)
    assert p.returncode == 2 and r["verdict"] == "unknown"
    assert any("ends before the input" in x and "3 input records" in x for x in r["unknown_reasons"]), r


def test_missing_history_does_not_hide_a_definite_anomaly(tmp_path):
    d = make_run(tmp_path / "run", duplicate=True, history=False)
    p, r = check(d)
    assert p.returncode == 1 and r["verdict"] == "invalid" and r["counts"]["duplicate"] == 1


def test_history_not_owed_without_test_json(tmp_path):
    d = make_run(tmp_path / "run", test_json=False, history=False)  # hand-made topic snapshots only
    p, r = check(d)
    assert p.returncode == 0 and r["verdict"] == "valid", p.stdout + p.stderr


@pytest.mark.parametrize("name,content", [
    ("output.parquet", b"PAR1 garbage, not a parquet file"),
    ("input.parquet", b""),
    ("live.parquet", b"\x00" * 64),
    ("recovery.json", b'{"finished": tr'),
    ("recovery.json", b'{"reasons": []}'),
    ("test.json", b"[1, 2"),
])
def test_damaged_file_is_a_one_line_crash_naming_it(run, name, content):
    (run / name).write_bytes(content)
    p, _ = check(run)
    assert p.returncode == 255, p.stdout + p.stderr
    line = one_line(p)
    assert name in line and "check-error.log" in line
    assert "Traceback" in (run / "logs" / "check-error.log").read_text()


def test_corrupt_history_line_in_the_middle_names_the_line(run):
    lines = (run / "history.jsonl").read_text().splitlines(keepends=True)
    lines[3] = "not json at all\n"
    (run / "history.jsonl").write_text("".join(lines))
    p, _ = check(run)
    assert p.returncode == 255 and "history.jsonl:4" in one_line(p)


def test_empty_directory_is_not_a_run_directory(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    p = run_cli(["check", str(d)], timeout=60)
    assert p.returncode == 254 and "not a run directory" in one_line(p)
    assert list(d.iterdir()) == []


def test_results_root_hints_at_latest(run):
    root = run.parent.parent
    (root / "latest").symlink_to(run.relative_to(root))
    p = run_cli(["check", str(root)], timeout=60)
    assert p.returncode == 254 and "did you mean" in one_line(p) and "latest" in p.stderr


def test_missing_run_dir_is_a_usage_error(tmp_path):
    p = run_cli(["check", str(tmp_path / "nope")], timeout=60)
    assert p.returncode == 254 and "does not exist" in one_line(p)


def test_report_refuses_a_non_run_directory_and_writes_nothing(tmp_path):
    d = tmp_path / "somewhere"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    p = run_cli(["report", str(d)], timeout=60)
    assert p.returncode == 254 and "not a run directory" in one_line(p)
    assert [x.name for x in d.iterdir()] == ["notes.txt"]


def test_report_on_a_run_directory_writes_the_report(run):
    p = run_cli(["report", str(run)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (run / "report.html").exists() and (run / "junit.xml").exists()


def test_crashed_run_advice_is_to_replay_it(tmp_path):
    d = tmp_path / "crashed"
    d.mkdir()
    (d / "test.json").write_text(json.dumps({"name": "t", "replay": REPLAY}))
    (d / "results.json").write_text(json.dumps({"verdict": "crashed", "error": "ClusterError('boom')"}))
    (d / "history.jsonl").write_text(json.dumps({"type": "invoke", "f": "send", "key": "k", "seq": 0}) + "\n")
    p = run_cli(["check", str(d)], timeout=60)
    assert p.returncode == 255
    line = one_line(p)
    assert REPLAY in line and "boom" in line and "--bootstrap" not in line
