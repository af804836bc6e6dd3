"""The suite certificate (``report/certificate.py``) on synthetic run directories: no cluster, no docker.

``_run`` writes a run directory with a ``results.json`` (and optionally ``nemesis.jsonl``, ``report.html``
and the topic snapshots) under ``tmp_path/results/<test>/<ts>``; the suite directory is
``tmp_path/results/suite/<ts>``, so cell paths are ``../../<test>/<ts>``. The test starts at :data:`T0`.

Runs: an eos run that is valid (coverage rows, an ``input-duplicate`` that is not the pipeline's); a
mutant that is caught (no ``coverage``: faults counted from ``nemesis.jsonl``; anomaly examples dated by
an own ``seen_ms``, by output and input Kafka timestamps); a mutant that escaped (valid); an eos run
that is unknown; a run without ``results.json``; and a run that never made a directory.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from onceproof.report.certificate import (
    RULE,
    cell_from_run,
    detection_table,
    suite_exit_code,
    suite_result,
    write_certificate,
)

T0 = 1_800_000_000.0  # test start, epoch s
MS = 1000


def _ms(s: float) -> int:
    """Epoch ms of ``s`` seconds after the test start."""
    return int(round((T0 + s) * MS))


def _nemesis(at_s: float, **op) -> dict:
    return {"time": int(at_s * 1e9), "wall": T0 + at_s, "process": "nemesis", **op}


def _run(tmp_path: Path, test: str, results: dict | None, nemesis: list[dict] | None = None,
         report: bool = False, output: pd.DataFrame | None = None, input: pd.DataFrame | None = None) -> Path:
    d = tmp_path / "results" / test / "20300101T000000"
    d.mkdir(parents=True)
    if results is not None:
        (d / "results.json").write_text(json.dumps(results))
    if nemesis is not None:
        (d / "nemesis.jsonl").write_text("".join(json.dumps(op) + "\n" for op in nemesis))
    if report:
        (d / "report.html").write_text("<html></html>")
    if output is not None:
        output.to_parquet(d / "output.parquet")
    if input is not None:
        input.to_parquet(d / "input.parquet")
    return d


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    d = tmp_path / "results" / "suite" / "20300101T000000"
    d.mkdir(parents=True)
    return d


def _cell(run_dir, suite_dir, *, sink="eos", package="kill-executor", seed=1, expect="valid", exit_code=0,
          elapsed_s=61.5) -> dict:
    return cell_from_run(run_dir, sink=sink, workload="keyed", package=package, seed=seed, expect=expect,
                         exit_code=exit_code, elapsed_s=elapsed_s, suite_dir=suite_dir)


def valid_eos(tmp_path: Path) -> Path:
    return _run(tmp_path, "eos-valid", {
        "verdict": "valid", "valid": True,
        "counts": {"duplicate": 0, "duplicate-records": 0, "lost": 0, "input-duplicate": 2,
                   "input-duplicate-records": 2},
        "anomalies": {"duplicate": [], "lost": [], "input-duplicate": [{"key": "k1", "seq": 3}]},
        "coverage": [{"fault": "kill-executor", "target": "-", "planned": 2, "invoked": 2, "effective": 2,
                      "exercised": 2, "other": {}},
                     {"fault": "kill-broker", "target": "leader", "planned": 1, "invoked": 1, "effective": 1,
                      "exercised": 1, "other": {}}],
        "unknown_reasons": []},
        nemesis=[_nemesis(5, type="invoke", f="kill-executor")], report=True)


def caught_mutant(tmp_path: Path) -> Path:
    # output: k1 seq 7 copies at +8 s (first) and +12.5 s (the extra copy, when the duplicate appears) and
    # +30 s; input: the lost record was sent at +15 s; a live-duplicate copy carries seen_ms +14 s.
    # An "unexpected" example has a "time" in ns since the start (not epoch ms: ignored) and an output
    # position absent from the snapshot. The first anomaly is therefore at 12.5 s.
    output = pd.DataFrame({"partition": [0, 1, 1, 2], "offset": [10, 4, 5, 0],
                           "timestamp": [_ms(8), _ms(12.5), _ms(30), _ms(40)]})
    input = pd.DataFrame({"partition": [3], "offset": [99], "timestamp": [_ms(15)]})
    results = {
        "verdict": "invalid", "valid": False,
        "counts": {"duplicate": 3, "duplicate-records": 4, "lost": 1, "unexpected": 1, "nonmonotonic": 0,
                   "input-duplicate": 5, "live-duplicate": 1},
        "anomalies": {
            "duplicate": [{"key": "k1", "seq": 7, "copies": [{"partition": 0, "offset": 10, "batch": "3"},
                                                              {"partition": 1, "offset": 30},  # not in the snapshot
                                                              {"partition": 1, "offset": 5},
                                                              {"partition": 1, "offset": 4, "attempt": "1"}]}],
            "lost": [{"key": "k2", "seq": 20, "input_partition": 3, "input_offset": 99}],
            "unexpected": [{"key": "k9", "seq": 1, "partition": 7, "offset": 7, "time": 3_000_000_000}],
            "live-duplicate": [{"key": "k3", "seq": 1, "copies": [{"partition": 5, "offset": 1, "seen_ms": _ms(13)},
                                                                   {"partition": 5, "offset": 2,
                                                                    "seen_ms": _ms(14)}]}],
            "input-duplicate": [{"key": "k0", "seq": 0, "input_partition": 3, "input_offset": 1}]},
        "unknown_reasons": []}
    nemesis = [_nemesis(5, type="invoke", f="kill-executor"),
               _nemesis(6, type="info", f="kill-executor", outcome="effective", target="executor 1", exercised=True),
               _nemesis(9, type="invoke", f="kill-executor"),
               _nemesis(10, type="info", f="kill-executor", outcome="effective", target="executor 2",
                        exercised=False),
               _nemesis(11, type="invoke", f="kill-broker:leader"),
               _nemesis(12, type="info", f="kill-broker:leader", outcome="effective", target="broker 2",
                        exercised=True),
               _nemesis(50, type="info", f="heal", fault="kill-executor")]
    return _run(tmp_path, "mutant-caught", results, nemesis=nemesis, report=True, output=output, input=input)


def escaped_mutant(tmp_path: Path) -> Path:
    return _run(tmp_path, "mutant-escaped", {"verdict": "valid", "valid": True,
                                             "counts": {"duplicate": 0, "lost": 0}, "anomalies": {}})


def unknown_eos(tmp_path: Path) -> Path:
    return _run(tmp_path, "eos-unknown", {"verdict": "unknown", "valid": "unknown", "counts": {"lost": 4},
                                          "anomalies": {"lost": [{"key": "k1", "seq": 1}]},
                                          "unknown_reasons": ["pipeline behind input by 4 records on partitions [2]"]})


# -------------------------------------------------------------------------------------------- cell_from_run


def test_valid_eos_cell(tmp_path, suite_dir):
    c = _cell(valid_eos(tmp_path), suite_dir, seed=7)
    assert c["verdict"] == "valid" and c["expect"] == "valid" and c["passed"] and not c["caught"]
    assert (c["sink"], c["workload"], c["package"], c["seed"]) == ("eos", "keyed", "kill-executor", 7)
    assert c["run_dir"] == "../../eos-valid/20300101T000000"
    assert c["report"] == "../../eos-valid/20300101T000000/report.html"
    assert (suite_dir / c["report"]).is_file()
    assert c["faults_exercised"] == {"kill-executor": 2, "kill-broker:leader": 1}
    assert c["anomalies"] == {}  # zeros, -records and the input's own duplicates are not anomalies
    assert c["first_anomaly_s"] is None
    assert c["unknown_reasons"] == [] and c["exit_code"] == 0 and c["elapsed_s"] == 61.5


def test_caught_mutant_cell(tmp_path, suite_dir):
    c = _cell(caught_mutant(tmp_path), suite_dir, sink="mutant-dup", expect="invalid", exit_code=1)
    assert c["verdict"] == "invalid" and c["caught"] and c["passed"]
    assert c["anomalies"] == {"duplicate": 3, "lost": 1, "unexpected": 1, "live-duplicate": 1}
    # no coverage in results.json: exercised completions from nemesis.jsonl (not the exercised=False one)
    assert c["faults_exercised"] == {"kill-executor": 1, "kill-broker:leader": 1}
    # duplicate: second-earliest dated copy (8 s, 12.5 s, 30 s) → 12.5; live-duplicate 14; lost 15
    assert c["first_anomaly_s"] == pytest.approx(12.5, abs=1e-3)


def test_first_anomaly_from_own_fields_and_input(tmp_path, suite_dir):
    d = caught_mutant(tmp_path)
    (d / "output.parquet").unlink()  # only the live-duplicate's seen_ms (14 s) and the input (15 s) remain
    assert _cell(d, suite_dir, expect="invalid")["first_anomaly_s"] == pytest.approx(14.0, abs=1e-3)


def test_first_anomaly_needs_a_test_start(tmp_path, suite_dir):
    d = caught_mutant(tmp_path)
    (d / "nemesis.jsonl").unlink()  # no nemesis, no history, no test.json: nothing dates the start
    c = _cell(d, suite_dir, expect="invalid")
    assert c["first_anomaly_s"] is None and c["faults_exercised"] == {}
    (d / "history.jsonl").write_text(json.dumps({"index": 0, "time": int(2e9), "wall": T0 + 2}) + "\n")
    assert _cell(d, suite_dir, expect="invalid")["first_anomaly_s"] == pytest.approx(12.5, abs=1e-3)


def test_crashed_cells(tmp_path, suite_dir):
    c = _cell(None, suite_dir, exit_code=255, elapsed_s=3)
    assert c["verdict"] == "crashed" and not c["passed"] and not c["caught"]
    assert c["run_dir"] is None and c["report"] is None and c["faults_exercised"] == {} and c["anomalies"] == {}
    nemesis = [_nemesis(1, type="invoke", f="kill-driver"),
               _nemesis(2, type="info", f="kill-driver", outcome="effective", target="driver", exercised=True)]
    d = _run(tmp_path, "no-results", None, nemesis=nemesis)
    c = _cell(d, suite_dir, expect="invalid", exit_code=255)
    assert c["verdict"] == "crashed" and not c["passed"] and "results.json" in c["error"]
    assert c["run_dir"] == "../../no-results/20300101T000000" and c["faults_exercised"] == {"kill-driver": 1}


def test_unknown_and_escaped_cells(tmp_path, suite_dir):
    u = _cell(unknown_eos(tmp_path), suite_dir, exit_code=2)
    assert u["verdict"] == "unknown" and not u["passed"] and not u["caught"] and u["anomalies"] == {"lost": 4}
    assert u["unknown_reasons"] == ["pipeline behind input by 4 records on partitions [2]"]
    e = _cell(escaped_mutant(tmp_path), suite_dir, sink="mutant-dup", expect="invalid")
    assert e["verdict"] == "valid" and not e["passed"] and not e["caught"]


def test_expect_must_be_valid_or_invalid(tmp_path, suite_dir):
    with pytest.raises(ValueError, match="expect"):
        _cell(None, suite_dir, expect="caught")


# ---------------------------------------------------------------------------------------- suite verdicts


def _c(expect: str, verdict: str, sink="eos", package="p", seed=1, anomalies=None, first=None) -> dict:
    return {"sink": sink, "workload": "keyed", "package": package, "seed": seed, "expect": expect,
            "verdict": verdict, "caught": verdict == "invalid", "passed": verdict == expect,
            "anomalies": anomalies or {}, "first_anomaly_s": first}


def test_suite_result_and_exit_code():
    ok = [_c("valid", "valid"), _c("invalid", "invalid", sink="mutant")]
    assert suite_result(ok) == "PASS" and suite_exit_code(ok) == 0  # a caught mutant is a pass
    assert suite_result([*ok, _c("valid", "invalid")]) == "FAIL"
    assert suite_exit_code([*ok, _c("valid", "invalid")]) == 1
    assert suite_exit_code([*ok, _c("invalid", "valid", sink="mutant")]) == 1  # escaped mutant
    assert suite_exit_code([*ok, _c("invalid", "valid"), _c("valid", "unknown")]) == 2
    assert suite_exit_code([_c("valid", "crashed"), _c("valid", "unknown"), _c("valid", "invalid")]) == 255
    assert suite_exit_code([_c("invalid", "crashed")]) == 255
    assert suite_result([]) == "FAIL" and suite_exit_code([]) != 0  # nothing tested certifies nothing


def test_detection_table():
    cells = [_c("valid", "valid"),
             _c("invalid", "invalid", sink="dup", package="kill-executor", seed=1,
                anomalies={"duplicate": 3}, first=10.0),
             _c("invalid", "invalid", sink="dup", package="kill-executor", seed=2,
                anomalies={"duplicate": 5, "lost": 1}, first=20.0),
             _c("invalid", "valid", sink="dup", package="kill-executor", seed=3),
             _c("invalid", "invalid", sink="dup", package="kill-broker", seed=1, anomalies={"lost": 2}, first=4.0),
             _c("invalid", "crashed", sink="lose", package="kill-executor", seed=1)]
    rows = detection_table(cells)
    assert [(r["mutant"], r["package"], r["caught"], r["runs"]) for r in rows] == [
        ("dup", "kill-executor", 2, 3), ("dup", "kill-broker", 1, 1), ("lose", "kill-executor", 0, 1)]
    assert rows[0]["anomalies"] == {"duplicate": 8, "lost": 1}
    assert rows[0]["first_anomaly_s_median"] == pytest.approx(15.0)
    assert rows[0]["verdicts"] == ["invalid", "invalid", "valid"] and rows[0]["seeds"] == [1, 2, 3]
    assert rows[2]["anomalies"] == {} and rows[2]["first_anomaly_s_median"] is None
    assert detection_table([_c("valid", "valid")]) == []


# --------------------------------------------------------------------------------------------- the files


class _Strict(HTMLParser):
    """Checks tags close in order (void elements aside) and collects hrefs."""

    VOID = {"meta", "br", "hr", "img", "input", "link"}

    def __init__(self):
        super().__init__()
        self.stack, self.hrefs = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs)["href"])
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def test_write_certificate(tmp_path, suite_dir):
    cells = [_cell(valid_eos(tmp_path), suite_dir, seed=1),
             _cell(caught_mutant(tmp_path), suite_dir, sink="mutant-dup", seed=1, expect="invalid", exit_code=1),
             _cell(escaped_mutant(tmp_path), suite_dir, sink="mutant-dup", seed=2, expect="invalid"),
             _cell(unknown_eos(tmp_path), suite_dir, seed=2, exit_code=2),
             _cell(None, suite_dir, package="kill-broker", seed=3, exit_code=255)]
    suite = {"suite": "release-<1.0>", "started": "2030-01-01T00:00:00+0000", "finished": "2030-01-01T01:00:00+0000",
             "command": "onceproof test-all --sinks eos,mutant-dup --seeds 1,2 | tee log\x07",
             "versions": {"pyspark": "3.5.1", "kafka": "3.7.0", "python": "3.11.7"}, "cells": cells,
             "left_out": [{"sut": "user:orders", "package": "commit", "spec": "commit-delay:notify",
                           "why": "needs after-commit hook"}]}
    paths = write_certificate(suite, suite_dir)
    assert set(paths) == {"md", "html", "junit"} and all(p.parent == suite_dir and p.is_file() for p in paths.values())

    root = ET.parse(paths["junit"]).getroot()
    assert root.tag == "testsuites" and root.get("name") == "onceproof-suite"
    (ts,) = root.findall("testsuite")
    assert ts.get("name") == "release-<1.0>"
    cases = ts.findall("testcase")
    assert len(cases) == 5 and root.get("tests") == "5"
    assert [(c.get("classname"), c.get("name")) for c in cases][:2] == [
        ("onceproof.eos.keyed.kill-executor", "seed-1"), ("onceproof.mutant-dup.keyed.kill-executor", "seed-1")]
    assert [c.find("failure") is not None for c in cases] == [False, False, True, True, False]
    assert cases[2].find("failure").get("message") == "expected invalid, got valid"
    assert "pipeline behind input" in cases[3].find("failure").text
    assert cases[4].find("error").get("message") == "expected valid, got crashed"
    assert (ts.get("failures"), ts.get("errors")) == ("2", "1")
    props = {p.get("name"): p.get("value") for p in ts.iter("property")}
    assert props["result"] == "FAIL" and props["version.pyspark"] == "3.5.1" and "\x07" not in props["command"]

    md = paths["md"].read_text()
    assert "**Result: FAIL**" in md and RULE in md and "onceproof test-all --sinks" in md
    for v in ("valid", "invalid", "unknown", "crashed"):
        assert f"**{v}**" in md
    assert "[report](../../eos-valid/20300101T000000/report.html)" in md
    assert "kill-executor×2, kill-broker:leader×1" in md and "duplicate 3, lost 1, unexpected 1, live-duplicate 1" in md
    assert "```sh\nonceproof test-all --sinks eos,mutant-dup --seeds 1,2 | tee log\n```" in md  # verbatim, \x07 dropped
    assert "| mutant-dup | kill-executor | 1/2 |" in md and "12.5 s" in md
    assert md.index("## Versions") < md.index("pyspark") < md.index("kafka") < md.index("python")
    assert "## Faults left out" in md
    assert "| user:orders | commit | commit-delay:notify | needs after-commit hook |" in md

    html = paths["html"].read_text()
    p = _Strict()
    p.feed(html)
    p.close()
    assert p.stack == []
    assert "<script" not in html and "http" not in html.split("</style>")[0] and "\x07" not in html
    assert "release-&lt;1.0&gt;" in html and "release-<1.0>" not in html
    assert "class=pass>PASS<" in html and "class=fail>FAIL<" in html and ">FAIL</b>" in html
    assert "../../eos-valid/20300101T000000/report.html" in p.hrefs
    assert "../../mutant-caught/20300101T000000/report.html" in p.hrefs
    assert "<h2>Faults left out</h2>" in html and "<td>commit-delay:notify</td>" in html


def test_certificate_passes_when_every_cell_passes(tmp_path, suite_dir):
    cells = [_cell(valid_eos(tmp_path), suite_dir),
             _cell(caught_mutant(tmp_path), suite_dir, sink="mutant-dup", expect="invalid", exit_code=1)]
    paths = write_certificate({"suite": "s", "started": "a", "finished": "b", "command": "c", "versions": {},
                               "cells": cells}, tmp_path / "out")
    assert "**Result: PASS**" in paths["md"].read_text() and "Failed cells" not in paths["md"].read_text()
    assert ">PASS</b>" in paths["html"].read_text()
    root = ET.parse(paths["junit"]).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "0", "0")


def test_a_version_axis_gives_a_matrix_per_release(tmp_path, suite_dir):
    """``test-all --kafka-versions``: the same cells on two releases; the certificate compares them, and
    each release's cell is a JUnit case of its own."""
    from onceproof.report.certificate import version_matrix

    old = _cell(valid_eos(tmp_path), suite_dir, seed=1) | {"kafka": "3.5.2", "pyspark": "4.3.0"}
    new = _cell(unknown_eos(tmp_path), suite_dir, seed=1, exit_code=2) | {"kafka": "4.4.0", "pyspark": "4.3.0",
                                                                          "elapsed_s": 10.0}
    spark35 = old | {"pyspark": "3.5.7"}
    assert version_matrix([old, old]) == []  # one pair: nothing to compare
    m = version_matrix([old, new, spark35])
    assert [(r["kafka"], r["pyspark"], r["cells"], r["passed"], r["failed"]) for r in m] == \
        [("3.5.2", "4.3.0", 1, 1, 0), ("4.4.0", "4.3.0", 1, 0, 1), ("3.5.2", "3.5.7", 1, 1, 0)]
    assert m[1]["verdicts"] == {"unknown": 1} and m[1]["elapsed_s"] == 10.0
    paths = write_certificate({"suite": "axis", "cells": [old, new, spark35], "versions": {}}, suite_dir)
    md = paths["md"].read_text()
    assert "## Per version pair" in md and "| 3.5.2 | 4.3.0 | 1 | 1 | 0 | valid 1 |" in md
    assert "kill-executor on Kafka 4.4.0, PySpark 4.3.0" in md and "| 3.5.2 | 3.5.7 | 1 | 1 | 0 |" in md
    assert "Per version pair" in paths["html"].read_text()
    names = [c.get("classname") for c in ET.parse(paths["junit"]).getroot().iter("testcase")]
    assert names == ["onceproof.eos.keyed.kill-executor.kafka-3_5_2.spark-4_3_0",
                     "onceproof.eos.keyed.kill-executor.kafka-4_4_0.spark-4_3_0",
                     "onceproof.eos.keyed.kill-executor.kafka-3_5_2.spark-3_5_7"]
