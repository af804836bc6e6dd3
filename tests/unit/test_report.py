"""The per-run report, the JUnit file and the results index, on synthetic run directories.

``make_run`` writes every file of a run directory with known content: 5 keys × 60 seqs sent at 10/s
from t=2 s, a pipeline adding 800 ms, and three planted anomalies (k1 seq 10..12 re-delivered by a
retry attempt, k2 seq 20 lost, k3 seq 999 unexpected) plus a made-up anomaly name (``aborted-read``)
that the report must show without knowing it. Two faults: kill-executor at 10 s, kill-driver at
15→18.5 s. The last test renders the page in headless Chromium and checks the plots were drawn.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from onceproof.checkers.exactly_once import Recovery, check
from onceproof.report import analysis
from onceproof.report.html import build_report
from onceproof.report.index import build_index
from onceproof.report.junit import write_junit
from onceproof.report.load import load_run
from onceproof.store.runfiles import CONTENTS

T0 = 1_800_000_000.0  # test start, epoch s
KEYS, SEQS, RATE = 5, 60, 10.0  # records per key, sends per second per key
LATENCY_MS = 800
CHROMIUM = Path("/usr/bin/chromium")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(history, input, output) frames of the synthetic run, with the planted anomalies."""
    ks, ss = np.meshgrid(np.arange(KEYS), np.arange(SEQS), indexing="ij")
    ks, ss = ks.ravel(), ss.ravel()
    send = T0 + 2.0 + ss / RATE + ks * 0.01  # wall, epoch s
    inp = pd.DataFrame({"key": [f"k{k}" for k in ks], "seq": ss, "wall": send, "partition": ks % 2})
    inp = inp.sort_values("wall", kind="stable").reset_index(drop=True)
    inp["offset"] = inp.groupby("partition").cumcount()
    inp["timestamp"] = (inp["wall"] * 1000).round().astype("int64") + 5

    def ops(typ: str, wall: pd.Series, cols: list[str]) -> pd.DataFrame:
        t = ((wall - T0) * 1e9).astype("int64")
        return inp.assign(type=typ, wall=wall, time=t)[["type", "time", "wall", *cols]]

    hist = pd.concat([ops("invoke", inp["wall"], ["key", "seq"]),
                      ops("ok", inp["wall"] + 0.004, ["key", "seq", "partition", "offset"])])
    hist = hist.sort_values("time", kind="stable").reset_index(drop=True)
    hist = hist.assign(index=np.arange(len(hist)), process=0, f="send")

    out = pd.DataFrame({"key": inp["key"], "seq": inp["seq"], "in_partition": inp["partition"],
                        "in_offset": inp["offset"], "in_ts": inp["timestamp"],
                        "timestamp": inp["timestamp"] + LATENCY_MS, "partition": inp["partition"]})
    out["op.batch"] = ((out["in_ts"] / 1000 - T0) // 1).astype(int).astype(str)
    out["op.sink_partition"] = out["partition"].astype(str)
    out["op.attempt"] = "0"
    out["op.txn_id"] = "onceproof-eos-" + out["partition"].astype(str)
    out["op.input"] = out["in_partition"].astype(str) + ":" + out["in_offset"].astype(str)
    out["op.sink"] = "eos"
    dup = out[(out["key"] == "k1") & out["seq"].between(10, 12)].assign(
        timestamp=lambda d: d["timestamp"] + 5000, **{"op.attempt": "1", "op.txn_id": "txn-retry"})
    unexpected = out[(out["key"] == "k3") & (out["seq"] == 0)].assign(seq=999, timestamp=int((T0 + 30) * 1000))
    out = out[~((out["key"] == "k2") & (out["seq"] == 20))]
    out = pd.concat([out, dup, unexpected]).sort_values("timestamp", kind="stable").reset_index(drop=True)
    out["offset"] = out.groupby("partition").cumcount()
    out["seq"] = out["seq"].astype("Int64")
    return hist, inp.drop(columns=["wall"]), out


NEMESIS = [
    {"type": "invoke", "f": "kill-executor", "at": 10.0, "planned_s": 5.0},
    {"type": "info", "f": "kill-executor", "at": 10.05, "outcome": "effective", "target": "executor 1",
     "evidence": {"pid": 4242, "executor_id": "1", "gone_after": True}},
    {"type": "invoke", "f": "kill-driver-in-commit-window", "at": 15.0, "planned_s": 10.0},
    {"type": "info", "f": "kill-driver-in-commit-window", "at": 18.5, "outcome": "effective",
     "target": "driver (batch 7)", "evidence": {"batch": 7, "pid": 5151, "commit_logged_after_kill": False}},
    {"type": "info", "f": "heal", "at": 33.0, "fault": "kill-executor"},
]


def make_run(run_dir: Path, *, verdict: str | None = None, results_extra: dict | None = None,
             drop: tuple[str, ...] = (), name: str = "eos-synthetic") -> Path:
    """Write a complete synthetic run directory; ``drop`` names files to leave out."""
    run_dir.mkdir(parents=True, exist_ok=True)
    hist, inp, out = make_frames()
    cfg = {"sink": "eos", "nemesis": ["kill-executor", "kill-driver-in-commit-window"], "time_limit": 30.0,
           "rate": 50.0, "keys": KEYS, "seed": 7}
    replay = "onceproof run --sink eos --nemesis kill-executor,kill-driver-in-commit-window --seed 7"
    test = {"config": cfg, "name": name, "replay": replay, "started": "2027-01-15T08:00:00+0000",
            "versions": {"kafka": "4.1.1", "pyspark": "4.3.0"}, "schedule": [[5.0, "kill-executor"],
                                                                           [10.0, "kill-driver-in-commit-window"]]}
    res = check(hist, inp, out, Recovery())
    res["counts"]["aborted-read"] = 2
    res["anomalies"]["aborted-read"] = [{"key": "k4", "seq": 7, "txn_id": "txn-aborted-77"}]
    res.update({"recovery": {"finished": True, "reasons": [], "seconds": 4.2}, "test": name,
                "run_dir": str(run_dir), "seed": 7, "replay": replay, "driver_restarts": 1,
                "faults": {"kill-executor": {"effective": 1}, "kill-driver-in-commit-window": {"effective": 1}},
                "timings": {"cluster_start_s": 5.0, "recovery_s": 4.2, "total_s": 50.0}})
    if verdict:
        res["verdict"] = verdict
    res.update(results_extra or {})
    files = {
        "test.json": lambda p: p.write_text(json.dumps(test)),
        "results.json": lambda p: p.write_text(json.dumps(res, default=str)),
        "history.jsonl": lambda p: hist.to_json(p, orient="records", lines=True),
        "nemesis.jsonl": lambda p: _jsonl(p, [
            {"index": i, "time": int(o["at"] * 1e9), "wall": T0 + o["at"], "process": "nemesis",
             **{k: v for k, v in o.items() if k != "at"}} for i, o in enumerate(NEMESIS)]),
        "input.parquet": lambda p: inp.to_parquet(p, index=False),
        "output.parquet": lambda p: out.to_parquet(p, index=False),
        "sink.jsonl": lambda p: _jsonl(p, [
            {"time": T0 + 3 + b, "event": "commit", "batch": b, "partition": part, "attempt": 0,
             "txn_id": f"onceproof-eos-{part}", "records": 10} for b in range(40) for part in (0, 1)]
            + [{"time": T0 + 16, "event": "abort", "batch": 12, "partition": 1, "attempt": 0,
                "txn_id": "onceproof-eos-1", "error": "fenced", "kind": "abortable"}]),
        "recovery.json": lambda p: p.write_text(json.dumps(
            {"finished": True, "reasons": [], "seconds": 4.2, "input_end": {"0": 150, "1": 150},
             "consumed": {"0": 150, "1": 150}, "output_lso": {"0": 152, "1": 150},
             "output_hw": {"0": 152, "1": 150}})),
    }
    for fname, write in files.items():
        if fname not in drop:
            write(run_dir / fname)
    return run_dir


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return make_run(tmp_path / "results" / "eos-synthetic" / "20270115T080000")


def _text(html_s: str) -> str:
    """The page's visible-ish text: scripts and tags stripped, entities kept (enough for substring checks)."""
    return re.sub(r"<[^>]+>", " ", re.sub(r"<script\b.*?</script>", " ", html_s, flags=re.S))


# ------------------------------------------------------------------------------------------- the report


def test_report_shows_verdict_anomalies_examples_faults_and_plots(run_dir):
    out = build_report(run_dir)
    assert out == run_dir / "report.html"
    page = out.read_text()
    txt = _text(page)
    assert 'id=verdict' in page and ">INVALID<" in page
    assert "onceproof run --sink eos --nemesis kill-executor,kill-driver-in-commit-window --seed 7" in page
    # every anomaly name, including one the report was never told about, with its count
    for name in ("duplicate", "duplicate-records", "lost", "unexpected", "nonmonotonic", "lost-write",
                 "aborted-read"):
        assert f'id="anomaly-{name}"' in page, name
    row = page.split('id="anomaly-duplicate"')[1].split("</tr></tbody></table></td></tr>")[0]
    assert ">3<" in row  # 3 duplicated (key, seq) pairs
    # examples with provenance: the retry attempt's transactional id, the lost and unexpected keys
    assert "txn-retry" in txt and "k1" in row
    assert re.search(r'id="anomaly-lost".*?k2.*?20', page, re.S)
    assert re.search(r'id="anomaly-unexpected".*?k3.*?999', page, re.S)
    assert "txn-aborted-77" in txt
    # faults: names, outcomes, targets and evidence
    for s in ("kill-executor", "kill-driver-in-commit-window", "executor 1", "driver (batch 7)", "4242", "5151"):
        assert s in txt, s
    # config, versions, recovery, sink aborts
    assert "pyspark" in txt and "4.3.0" in txt and "fenced" in txt
    # both plots, self-contained: plotly inlined, nothing fetched from the network
    assert 'id="plot-timeline"' in page and 'id="plot-keys"' in page
    assert len(page) > 1_000_000 and "Plotly" in page
    assert not re.search(r'<script[^>]+src=|<link[^>]+href=["\']?https?:', page)


def test_timeline_series_are_on_the_test_clock(run_dir):
    run = load_run(run_dir)
    assert run.t0 == pytest.approx(T0, abs=1e-3)
    w = analysis.fault_windows(run.nemesis, run.t0)
    assert list(w["fault"]) == ["kill-executor", "kill-driver-in-commit-window"]
    assert w["start_s"].tolist() == pytest.approx([10.0, 15.0], abs=1e-3)
    assert w["end_s"].tolist() == pytest.approx([10.05, 18.5], abs=1e-3)
    assert w["effective"].all() and w.loc[1, "evidence"]["batch"] == 7
    assert analysis.heal_times(run.nemesis, run.t0) == pytest.approx([33.0], abs=1e-3)

    panels, notes = analysis.timeline_panels(run)
    assert notes == []
    by = {p.title.split(" (")[0]: p for p in panels}
    assert set(by) == {"input rate", "output rate", "end-to-end latency", "lag"}
    ok = by["input rate"].series[0]
    assert ok.y.sum() == KEYS * SEQS  # 1-s bins: the rates add up to the ok sends
    assert ok.x.min() == 0 and ok.y[ok.x < 2].sum() == 0 and ok.y[(ok.x >= 3) & (ok.x < 7)] == pytest.approx(
        [KEYS * RATE] * 4)
    outr = by["output rate"].series[0]
    assert outr.y.sum() == len(run.output)
    lat = by["end-to-end latency"].series[0]  # p50 per bin: the planted 800 ms (- the 5 ms append)
    assert np.nanmedian(lat.y) == pytest.approx(LATENCY_MS, abs=1)
    lag = by["lag"].series
    assert lag[0].y[-1] == len(run.input) - len(run.output)  # -3 duplicates +1 lost -1 unexpected
    assert lag[1].name.startswith("input - distinct") and lag[1].y[-1] == 0  # lost and unexpected cancel


def test_key_sequences_mark_duplicates_lost_and_unexpected(run_dir):
    run = load_run(run_dir)
    keys = analysis.bad_keys(run)
    assert set(keys) == {"k1", "k2", "k3"}
    pts = analysis.key_sequences(run, keys)
    kinds = pts.groupby(["key", "kind"]).size().to_dict()
    assert kinds[("k1", "duplicate copy")] == 3 and kinds[("k1", "in order")] == SEQS
    assert pts[(pts["key"] == "k2") & (pts["kind"] == "lost")]["seq"].tolist() == [20]
    lost_x = pts[(pts["key"] == "k2") & (pts["kind"] == "lost")]["x"].iloc[0]
    assert lost_x == pytest.approx(19.5)  # just before seq 21's first copy (at position 20)
    assert pts[(pts["key"] == "k3") & (pts["kind"] == "unexpected")]["seq"].tolist() == [999]
    assert "txn-retry" in pts[pts["kind"] == "duplicate copy"]["hover"].iloc[0]


def test_output_without_timestamps_falls_back_to_sink_commits_or_says_why(tmp_path):
    d = make_run(tmp_path / "old")
    for f in ("input.parquet", "output.parquet"):
        pd.read_parquet(d / f).drop(columns=["timestamp"]).to_parquet(d / f, index=False)
    run = load_run(d)
    ms, src = analysis.output_times_ms(run)
    assert "sink.jsonl" in src
    assert ms.isna().sum() == 3  # the retry attempt (k1's duplicates) has no commit event: undated, left out
    page = build_report(d).read_text()
    assert "commit time of the record" in page and 'id="plot-timeline"' in page

    (d / "sink.jsonl").unlink()
    page = build_report(d).read_text()
    assert "no output rate: output.parquet has no timestamp column" in page
    assert 'id="plot-timeline"' in page  # the input rate and the fault lane are still drawn


def test_crashed_run_with_only_test_and_results_still_renders(tmp_path):
    d = tmp_path / "crashed"
    make_run(d, drop=("history.jsonl", "nemesis.jsonl", "input.parquet", "output.parquet", "sink.jsonl",
                      "recovery.json", "results.json"))
    (d / "results.json").write_text(json.dumps({
        "verdict": "crashed", "error": "RuntimeError('the Spark query did not start in 240s')",
        "test": "eos-synthetic", "run_dir": str(d), "seed": 7, "replay": "onceproof run --seed 7",
        "faults": {}, "driver_restarts": 0, "timings": {"cluster_start_s": 5.1, "total_s": 250.0}}))
    page = build_report(d).read_text()
    txt = _text(page)
    assert ">CRASHED<" in page
    assert "the Spark query did not start in 240s" in txt
    for f in ("history.jsonl", "nemesis.jsonl", "input.parquet", "output.parquet"):
        assert f in page.split("missing files:")[1].split("</div>")[0], f
    assert "onceproof run --seed 7" in page
    assert "Plotly" not in page  # nothing to plot: no 4.8 MB of JS either

    root = write_junit(d)
    suite = ET.parse(root).getroot().find("testsuite")
    rec = suite.find("testcase[@name='recovery']")
    assert rec.find("error") is not None and "did not start" in rec.find("error").get("message")
    assert suite.get("errors") == "1"

    empty = tmp_path / "empty"
    empty.mkdir()
    assert ">CRASHED<" in build_report(empty).read_text()
    assert ET.parse(write_junit(empty)).getroot().find("testsuite").get("errors") == "1"


@pytest.mark.parametrize("keep", [None, *CONTENTS])
def test_any_single_file_alone_or_all_empty_still_renders(tmp_path, keep):
    """A run directory holding one file only (or every file, 0 bytes long) renders and gets a junit.xml."""
    d = make_run(tmp_path / "r", drop=tuple(f for f in CONTENTS if f != keep))
    if keep is None:
        for f in CONTENTS:
            (d / f).write_bytes(b"")
    page = build_report(d).read_text()
    assert "id=verdict" in page
    assert ("missing files:" in page) if keep else ("unreadable:" in page)
    cases = ET.parse(write_junit(d)).getroot().find("testsuite").findall("testcase")
    assert [c.get("name") for c in cases][-2:] == ["recovery", "faults-took-effect"]


def test_a_pipeline_cmd_run_without_the_sink_library_is_not_missing_its_sink_log(tmp_path):
    """A --pipeline-cmd job that does not use the sink library never writes sink.jsonl: the report does not
    list it under "missing files" (issue 41); a bundled sink's run without one still does."""
    user = make_run(tmp_path / "user", drop=("sink.jsonl",))
    test = json.loads((user / "test.json").read_text())
    test["config"]["pipeline_cmd"] = "{python} job.py --bootstrap {bootstrap} --output-topic {output_topic}"
    (user / "test.json").write_text(json.dumps(test))
    (user / "history.jsonl").unlink()
    run = load_run(user)
    assert "history.jsonl" in run.missing and "sink.jsonl" not in run.missing and "sink.jsonl" in run.not_written
    page = build_report(user).read_text()
    assert "sink.jsonl" not in page.split("missing files:")[1].split("</div>")[0]
    assert "not written: a --pipeline-cmd job" in page
    bundled = make_run(tmp_path / "bundled", drop=("sink.jsonl",))
    assert "sink.jsonl" in load_run(bundled).missing and not load_run(bundled).not_written
    assert "sink.jsonl" in build_report(bundled).read_text().split("missing files:")[1].split("</div>")[0]


def test_unreadable_file_is_reported_not_fatal(run_dir):
    (run_dir / "output.parquet").write_bytes(b"not parquet")
    (run_dir / "history.jsonl").write_text((run_dir / "history.jsonl").read_text() + '{"index": 99, "ty')
    page = build_report(run_dir).read_text()
    assert "unreadable:" in page and "output.parquet" in page
    assert 'id="plot-timeline"' in page  # a torn last history line is dropped, the rest is plotted


# ---------------------------------------------------------------------------------------------- JUnit


def _cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1 and suites[0].get("name") == "onceproof"
    return {c.get("name"): c for c in suites[0].findall("testcase")}


def test_junit_one_case_per_anomaly_plus_recovery_and_faults(run_dir):
    path = write_junit(run_dir)
    assert path == run_dir / "junit.xml"
    cases = _cases(path)
    # one case per anomaly type in results.json (duplicate-records is a detail of duplicate, not a type)
    counts = json.loads((run_dir / "results.json").read_text())["counts"]
    types = [n for n in counts if not (n.endswith("-records") and n.removesuffix("-records") in counts)]
    assert "duplicate-records" not in types and {"duplicate", "lost", "unexpected", "aborted-read"} <= set(types)
    assert list(cases) == [*types, "recovery", "faults-took-effect"]
    failed = {n for n, c in cases.items() if c.find("failure") is not None}
    assert failed == {"duplicate", "lost", "unexpected", "aborted-read"}  # the planted anomalies, nothing else
    dup = cases["duplicate"].find("failure")
    assert dup.get("message") == "3 duplicate, 3 duplicate-records"
    assert "txn-retry" in dup.text and '"key": "k1"' in dup.text
    assert "k2" in cases["lost"].find("failure").text
    suite = ET.parse(path).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (str(len(types) + 2), "4", "0")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "invalid" and props["seed"] == "7"
    assert (props["kafka"], props["pyspark"]) == ("4.1.1", "4.3.0")  # what it ran on (test.json's versions)


def test_junit_unknown_verdict_fails_recovery_with_reasons(tmp_path):
    d = make_run(tmp_path / "u", verdict="unknown", results_extra={
        "unknown_reasons": ["output partition 3: last stable offset 10 < high watermark 12"],
        "recovery": {"finished": False, "reasons": ["output partition 3: last stable offset 10 < high watermark 12"],
                     "seconds": 180.0}})
    rec = _cases(write_junit(d))["recovery"]
    f = rec.find("failure")
    assert f is not None and "last stable offset 10 < high watermark 12" in f.get("message")
    assert ">UNKNOWN<" in build_report(d).read_text()


def test_junit_faults_that_never_took_effect_fail(tmp_path):
    d = make_run(tmp_path / "f", results_extra={"faults": {"kill-executor": {"effective": 1},
                                                           "kill-driver-in-commit-window": {"not-effective": 2}}})
    f = _cases(write_junit(d))["faults-took-effect"].find("failure")
    assert f is not None and "kill-driver-in-commit-window" in f.get("message")
    assert "kill-executor" not in f.get("message") and "not-effective=2" in f.text


# ---------------------------------------------------------------------------------------------- index


def test_index_lists_every_run_once_and_links_reports(tmp_path):
    root = tmp_path / "results"
    a = make_run(root / "eos-synthetic" / "20270115T080000")
    b = make_run(root / "alo-synthetic" / "20270116T090000", name="alo-synthetic", verdict="valid",
                 results_extra={"counts": {"duplicate": 0, "lost": 0}, "anomalies": {}})
    c = root / "eos-synthetic" / "20270117T100000"
    c.mkdir(parents=True)
    (c / "test.json").write_text(json.dumps({"name": "eos-synthetic", "config": {}}))  # running, or SIGKILLed
    for link, target in ((root / "latest", "eos-synthetic/20270117T100000"),
                         (root / "eos-synthetic" / "latest", "20270117T100000")):
        os.symlink(target, link)
    build_report(a)
    build_report(b)
    page = build_index(root).read_text()
    rows = page.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) == 3  # the latest symlinks are not extra runs
    assert "2027-01-17 10:00:00" in rows[0] and "NO RESULTS" in rows[0] and "not built" in rows[0]
    assert "alo-synthetic" in rows[1] and "VALID" in rows[1] and "no anomalies" in rows[1]
    assert "INVALID" in rows[2] and "duplicate=3" in rows[2] and "2027-01-15 08:00:00" in rows[2]
    hrefs = re.findall(r'href="([^"]+report\.html)"', page)
    assert sorted(hrefs) == ["alo-synthetic/20270116T090000/report.html", "eos-synthetic/20270115T080000/report.html"]
    for h in hrefs:
        assert (root / h).is_file()
    page = build_index(root, build_missing=True).read_text()
    assert "eos-synthetic/20270117T100000/report.html" in page and (c / "report.html").is_file()


# ----------------------------------------------------------------------------- the page, in a real browser


def _chromium() -> str:
    if CHROMIUM.exists():
        return str(CHROMIUM)
    found = shutil.which("chromium")
    if found:
        return found
    pytest.fail(f"Chromium is not installed ({CHROMIUM} missing): run `make test`, which installs it "
                "(apt-get install -y chromium)")


def _chromium_args(tmp_path: Path) -> list[str]:
    return [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,3000",
            "--virtual-time-budget=10000"]


def _rooted(tmp_path, stamp: str = "20270115T080000") -> Path:
    """A synthetic run inside a results root (its ``latest`` links point at it, as a real run's do)."""
    from onceproof.store.runs import LATEST, repoint

    root = tmp_path / "results"
    d = make_run(root / "eos-synthetic" / stamp)
    repoint(root / LATEST, d.relative_to(root))
    return d


def test_reports_in_a_results_root_share_one_plotly_bundle_and_standalone_inlines_it(tmp_path):
    from onceproof.store.runs import ASSETS

    a, b = _rooted(tmp_path), _rooted(tmp_path, "20270115T090000")
    pa, pb = build_report(a).read_text(), build_report(b).read_text()
    srcs = {m for p in (pa, pb) for m in re.findall(r'"(\.\./\.\./[^"]+)"', p)}
    assert len(srcs) == 1 and next(iter(srcs)).startswith(f"../../{ASSETS}/plotly-"), srcs
    bundle = [f for f in (tmp_path / "results" / ASSETS).iterdir()]
    assert len(bundle) == 1 and bundle[0].stat().st_size > 1_000_000 and "Plotly" in bundle[0].read_text()[:5000]
    assert (a / next(iter(srcs))).resolve() == bundle[0].resolve()  # the relative URL finds it
    assert len(pa) < 1_000_000 and len(pb) < 1_000_000, (len(pa), len(pb))  # the 4.8 MB bundle is not inlined
    alone = build_report(a, standalone=True).read_text()
    assert len(alone) > 1_000_000 and not re.search(r"<script[^>]+src=", alone)


def test_report_carries_the_coverage_table_and_not_exercised_rows(tmp_path):
    cov = [{"fault": "kill-executor", "target": "-", "planned": 2, "invoked": 2, "effective": 2, "exercised": 1,
            "other": {}},
           {"fault": "kill-broker", "target": "leader", "planned": 1, "invoked": 1, "effective": 1,
            "exercised": 0, "other": {}}]
    d = make_run(tmp_path / "run", verdict="unknown",
                 results_extra={"coverage": cov, "unknown_reasons": ["fault-not-exercised: kill-broker:leader"]})
    html_s = build_report(d).read_text()
    assert "id=coverage" in html_s
    text = _text(html_s)
    assert "kill-broker" in text and "leader" in text and "fault-not-exercised: kill-broker:leader" in text


def test_a_compacted_run_renders_every_section_and_the_latest_link_finds_the_bundle(tmp_path):
    """A finished run's history.jsonl is stored as history.jsonl.gz (store/compact.py): the report still
    reads it (no "missing files") and draws the history-based sections as from the plain file. Opened
    through ``<root>/latest`` (one level higher for the browser), the page loads the bundle from
    ``../assets/``; through ``<root>/<test>/latest`` or the real directory, from ``../../assets/``."""
    from onceproof.store.compact import compact
    from onceproof.store.runs import ASSETS

    d = _rooted(tmp_path)
    def sections(page: str) -> str:  # all but the files section (it shows each file's stored name and size)
        return _text(page.split("<section id=files>")[0])

    plain = sections(build_report(d).read_text())
    assert "history" in plain and "plot-timeline" in build_report(d).read_text()
    assert [p for p, _, _ in compact(d, min_log_bytes=1 << 40)] == ["history.jsonl.gz"]
    page = build_report(d).read_text()
    assert "history.jsonl" not in load_run(d).missing
    assert sections(page) == plain  # every section, the history-based ones included, as before compaction
    assert f'"../{ASSETS}/plotly-' in page and f'"../../{ASSETS}/plotly-' in page
