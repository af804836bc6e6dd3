"""soak/summary.py: several soaks' tables as one false-alarm rate, on synthetic rows."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "soak"))
import summary  # noqa: E402 - after the path: soak/ is a folder of scripts


def _row(seed, verdict, sink="eos", expected="valid", minutes=7.0, why=None, platform=None):
    return {"sink": sink, "seed": seed, "verdict": verdict, "expected": expected, "minutes": minutes,
            "exercised": "19/19", "why": why or [], "platform": platform or {}}


def _write(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text(json.dumps(rows))
    return p


def test_two_soaks_add_up_and_a_rerun_seed_counts_once(tmp_path):
    a = _write(tmp_path, "soak-a.json", [_row(s, "valid") for s in range(1, 9)])
    b = _write(tmp_path, "soak-b.json", [_row(8, "unknown", why=["fault-not-exercised: x"])]
               + [_row(s, "valid", minutes=6.0) for s in range(9, 13)])
    df, replaced = summary.load([a, b])
    assert replaced == 1
    (s,) = summary.summarize(df)
    assert (s["runs"], s["seeds"], s["as_expected"]) == (12, "1–12", 11)
    assert s["unknown"] == {8: ["fault-not-exercised: x"]}
    assert s["unknown_rate"] == pytest.approx(1 / 12)
    assert s["minutes"] == (7.0, 6.0, 7.0)
    assert not summary.passed([s])  # 8.3 % unknown is above the 2 % goal
    md = summary.markdown([s], replaced, 2)
    assert "eos seed 8 unknown: fault-not-exercised: x" in md and "1 re-run seed(s)" in md
    assert "| 0 | 0 | 1 (seed 8) | 0 |" in md  # false alarms, misses, unknown, crashed
    assert s["versions"] == []  # rows that name no release


def test_versions_are_listed_once_each(tmp_path):
    rows = [dict(_row(1, "valid"), kafka="4.1.1", commit="aaa"), dict(_row(2, "valid"), kafka="4.4.0", commit="bbb"),
            dict(_row(3, "valid"), kafka="4.4.0", pyspark="4.3.0", commit="bbb")]
    df, _ = summary.load([_write(tmp_path, "s.json", rows)])
    (s,) = summary.summarize(df)
    assert s["versions"] == ["Kafka 4.1.1, 4.4.0", "PySpark 4.3.0", "at aaa, bbb"]


def test_a_false_alarm_and_a_miss_fail_and_are_named(tmp_path):
    rows = [_row(1, "valid"), _row(2, "invalid"),
            _row(1, "invalid", sink="at-least-once", expected="invalid"),
            _row(2, "valid", sink="at-least-once", expected="invalid")]
    df, _ = summary.load([_write(tmp_path, "s.json", rows)])
    by = {s["sink"]: s for s in summary.summarize(df)}
    assert by["eos"]["false_alarms"] == [2] and by["eos"]["false_alarm_bound"] is None
    assert by["at-least-once"]["misses"] == [2] and by["at-least-once"]["false_alarms"] == []
    assert not summary.passed(list(by.values()))


def test_all_valid_passes_with_the_zero_event_bound(tmp_path):
    df, _ = summary.load([_write(tmp_path, "s.json", [_row(s, "valid", platform={"lso-stall": 1})
                                                      for s in range(1, 51)])])
    (s,) = summary.summarize(df)
    assert summary.passed([s])
    assert s["false_alarm_bound"] == pytest.approx(1 - 0.05 ** (1 / 50))
    assert 0.058 < s["false_alarm_bound"] < 0.060  # about 3/50, the rule of three
    assert s["platform"] == {"lso-stall": 50}
    assert "0 of 50 (≤ 5.8%)" in summary.markdown([s], 0, 1)


def test_bad_input_exits_254_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "soak-x.json"
    bad.write_text("{not json")
    assert summary.main([str(bad)]) == 254
    assert "soak-x.json" in capsys.readouterr().err
    other = _write(tmp_path, "other.json", [{"verdict": "valid"}])
    assert summary.main([str(other)]) == 254
    with pytest.raises(ValueError):
        summary.zero_events_upper_bound(0)


def test_main_writes_the_table_and_exits_by_the_goal(tmp_path):
    p = _write(tmp_path, "s.json", [_row(s, "valid") for s in range(1, 4)])
    out = tmp_path / "t.md"
    assert summary.main([str(p), "--out", str(out)]) == 0
    assert "| eos | 3 | 1–3 | 3 |" in out.read_text()
