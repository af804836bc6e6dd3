"""The result store: each run file read back by its one reader exactly as its writer wrote it; torn and
damaged files handled per file (a history's torn last line dropped with a warning, a bad line before it
an error naming the line; sink.jsonl's torn lines dropped wherever they are); and no module outside
``store/`` names a run file by a string literal."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pandas as pd
import pytest

from onceproof.nemesis.fault import sink_events
from onceproof.pipeline.transactional_sink import SinkConfig, log_event
from onceproof.store import readers, runfiles
from onceproof.store.history import HistoryWriter
from onceproof.store.runs import LATEST, RunDir
from tests.conftest import REPO, SRC

SINK_EVENTS = [("fence", {"partition": 0, "txn_id": "s-0"}),
               ("commit", {"batch": 3, "partition": 0, "attempt": 1, "records": 7}),
               ("abort", {"batch": 4, "partition": 1, "attempt": 0, "error": "fenced", "kind": "abortable"})]


@pytest.fixture
def rd(tmp_path) -> RunDir:
    return RunDir(tmp_path / "results", "t", "20250101T000000")


def _write_sink(rd: RunDir) -> None:
    cfg = SinkConfig("localhost:1", "output", "output-progress", "s", log_path=str(rd.sink), incarnation="2")
    for event, fields in SINK_EVENTS:
        log_event(cfg, event, **fields)


def test_run_dir_layout_and_latest_links(rd, tmp_path):
    root = tmp_path / "results"
    assert rd.path == (root / "t" / "20250101T000000").resolve() and rd.logs.is_dir() and rd.control.is_dir()
    assert (root / LATEST).resolve() == rd.path and (root / "t" / LATEST).resolve() == rd.path
    again = RunDir(root, "t", "20250101T000000")  # same second: a suffix, not the same directory
    assert again.path.name == "20250101T000000-1" and (root / LATEST).resolve() == again.path
    assert rd.sink == rd.path / "sink.jsonl" and rd.error_log("check") == rd.path / "logs" / "check-error.log"


def test_every_reader_returns_what_its_writer_wrote(rd):
    test = {"name": "t", "config": {"seed": 7, "nemesis": ["kill-executor"]}, "replay": "onceproof run --seed 7"}
    results = {"verdict": "invalid", "counts": {"duplicate": 2}, "anomalies": {"duplicate": [{"key": "k1"}]}}
    recovery = {"finished": True, "reasons": [], "output_lso": {"0": 5}, "output_hw": {"0": 5}}
    for name, obj in ((runfiles.TEST, test), (runfiles.RESULTS, results), (runfiles.RECOVERY, recovery)):
        rd.write_json(name, obj)
    assert (readers.read_test(rd.path), readers.read_results(rd.path), readers.read_recovery(rd.path)) == (
        test, results, recovery)

    hist, nem = HistoryWriter(rd.history), HistoryWriter(rd.nemesis)
    ops = [hist.append({"process": 0, "type": t, "f": "send", "key": "k1", "seq": 0}) for t in ("invoke", "ok")]
    faults = [nem.append({"process": "nemesis", "type": "info", "f": "kill-executor", "outcome": "effective",
                          "evidence": {"pid": 42}})]
    hist.close()
    nem.close()
    assert readers.read_history(rd.path).to_dict("records") == ops
    assert readers.read_nemesis(rd.path).to_dict("records") == faults

    _write_sink(rd)
    events = readers.read_sink(rd.path)
    assert [(e["event"], {k: e[k] for k in f}) for e, (_, f) in zip(events, SINK_EVENTS)] == SINK_EVENTS
    assert len(events) == 3 and all(e["incarnation"] == "2" and e["time"] > 0 for e in events)

    frame = pd.DataFrame({"partition": [0, 1], "offset": [0, 0], "key": ["k1", "k2"], "seq": [0, 0]})
    for name, reader in ((runfiles.INPUT, readers.read_input), (runfiles.OUTPUT, readers.read_output),
                         (runfiles.OUTPUT_UNCOMMITTED, readers.read_output_uncommitted),
                         (runfiles.LIVE, readers.read_live)):
        frame.to_parquet(rd / name, index=False)
        pd.testing.assert_frame_equal(reader(rd.path), frame)


def test_absent_files_read_as_nothing(rd):
    for reader in (readers.read_test, readers.read_results, readers.read_recovery, readers.read_input,
                   readers.read_output, readers.read_output_uncommitted, readers.read_live):
        assert reader(rd.path) is None, reader.__name__
    assert readers.read_history(rd.path).empty and readers.read_nemesis(rd.path).empty
    assert readers.read_sink(rd.path) == []


def test_history_torn_last_line_is_dropped_with_a_warning(rd, caplog):
    w = HistoryWriter(rd.history)
    w.append({"type": "invoke", "f": "send", "key": "k1", "seq": 0})
    w.close()
    with open(rd.history, "a") as f:
        f.write('{"index": 1, "type": "o')  # the writer died mid-line
    with caplog.at_level(logging.WARNING, logger="onceproof.store"):
        assert len(readers.read_history(rd.path)) == 1
    assert "torn last line (2)" in caplog.text
    problems: list[str] = []
    assert len(readers.read_history(rd.path, problems)) == 1 and problems == [
        f"{rd.history}: dropped a torn last line (2)"]


def test_history_bad_line_before_the_last_is_an_error_naming_it(rd):
    rd.nemesis.write_text('{"f": "heal"}\nnot json\n{"f": "heal"}\n')
    with pytest.raises(readers.DamagedFile, match=r"nemesis\.jsonl:2 is not a JSON object"):
        readers.read_nemesis(rd.path)


def test_sink_torn_lines_are_dropped_anywhere_and_reported(rd, caplog):
    _write_sink(rd)
    lines = rd.sink.read_text().splitlines(keepends=True)
    # a task killed mid-line, followed by other processes' lines; then a line still being written
    rd.sink.write_text(lines[0] + '{"time": 1, "eve\n' + "".join(lines[1:]) + '{"time": 2, "event": "com')
    problems: list[str] = []
    assert [e["event"] for e in readers.read_sink(rd.path, problems)] == ["fence", "commit", "abort"]
    assert problems == [f"{rd.sink}: dropped a torn line (2)", f"{rd.sink}: dropped a torn last line (5)"]
    with caplog.at_level(logging.WARNING, logger="onceproof.store"):
        readers.read_sink(rd.path)
    assert caplog.text.count("dropped a torn") == 2
    caplog.clear()
    rd.sink.write_text('{"time": 10, "event": "fence"}\n{"time": 20, "event": "commit"}\n{"time": 30, "ev')
    with caplog.at_level(logging.WARNING, logger="onceproof.store"):  # the nemesis polls: no warnings
        assert [e["event"] for e in sink_events(rd.path, 20)] == ["commit"]
    assert caplog.text == ""


@pytest.mark.parametrize("name,content,reader", [
    (runfiles.TEST, b"[1, 2", readers.read_test),
    (runfiles.RESULTS, b"[1, 2]", readers.read_results),  # JSON, but not an object
    (runfiles.RECOVERY, b"", readers.read_recovery),
    (runfiles.OUTPUT, b"PAR1 garbage", readers.read_output),
])
def test_damaged_file_raises_naming_it(rd, name, content, reader):
    (rd / name).write_bytes(content)
    with pytest.raises(readers.DamagedFile) as e:
        reader(rd.path)
    assert str(e.value).startswith(str(rd / name))
    assert readers.read_or_none(reader, rd.path) is None


def _literal_names(path: Path, names: set[str]) -> list[str]:
    """``file:line: 'name'`` for each string constant in ``path`` that is exactly a run-file name."""
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(REPO)}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in names]


def test_no_module_outside_the_store_names_a_run_file():
    names = {runfiles.TEST, runfiles.HISTORY, runfiles.NEMESIS, runfiles.SINK, runfiles.RECOVERY,
             runfiles.RESULTS, runfiles.INPUT, runfiles.OUTPUT, runfiles.OUTPUT_UNCOMMITTED, runfiles.LIVE,
             runfiles.REPORT, runfiles.JUNIT}
    packages = sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").is_file())
    assert "store" in packages and "report" in packages
    found = [hit for pkg in packages if pkg != "store" for p in sorted((SRC / pkg).rglob("*.py"))
             for hit in _literal_names(p, names)]
    assert found == [], "use onceproof.store.runfiles instead of:\n" + "\n".join(found)
