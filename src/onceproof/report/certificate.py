"""The certificate of a ``onceproof test-all`` suite: ``certificate.md``, ``certificate.html``, ``junit.xml``.

A suite is a matrix of **cells**, each one ``onceproof run`` (sink × workload × fault package × seed).
A cell expects ``valid`` (an exactly-once sink: every run must come out valid) or ``invalid`` (a
**mutant**, a sink broken on purpose: the harness must catch it). The suite runner
(``harness/suite.py``) runs the cells and writes ``results/<suite>/<timestamp>/suite.json``; this
module is the pure part after that:

* :func:`cell_from_run` — one finished (or crashed) run directory → one cell record (the dict below);
* :func:`suite_result` / :func:`suite_exit_code` — the suite's overall PASS/FAIL and its exit code;
* :func:`detection_table` — per mutant × fault package: how many seeds caught it, with what;
* :func:`write_certificate` — the three files, for a release manager (md, html) and for CI (junit).

The rule: **PASS requires every exactly-once cell to be valid and every mutant cell to be caught**
(:data:`RULE`). A cell record::

    {"sink", "workload", "package": str, "seed": int, "expect": "valid" | "invalid",
     "verdict": "valid" | "invalid" | "unknown" | "crashed", "exit_code": int, "elapsed_s": float,
     "run_dir": str | None, "report": str | None,        # POSIX paths relative to the suite directory
     "faults_exercised": {"<fault>[:<target>]": int},    # exercised fault turns per planned spec
     "anomalies": {name: int},                           # non-zero counts (no "-records", no input-duplicate)
     "advice": {name: str},                              # "likely cause: … → fix: … (source)" per anomaly
     "first_anomaly_s": float | None,                    # s after the test started
     "caught": bool, "passed": bool, "unknown_reasons": [str], "error": str | None,
     "timings": {"setup_s": s, ...},                     # results.json timings (report/cost.py)
     "time_limit_s": float,                              # the cell's time limit, set by the suite
     "run_key": str,                                     # what the run did (harness/reuse.py)
     "reused_from": str}                                 # only on a cell taken from an earlier suite

Run files are read only through :mod:`store` (``docs/results-schema.md`` has their shapes). The
certificate's links are relative to the suite directory, so write it there (``out_dir`` = the directory
of ``suite.json``). The HTML is one self-contained file: inline CSS (:data:`onceproof.report.html.CSS`), no
JavaScript, no external assets.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import statistics
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from urllib.parse import quote

from onceproof.checkers import advice, liveness, platform
from onceproof.checkers.examples import isna
from onceproof.checkers.nearby import _ts_index
from onceproof.report import cost
from onceproof.report.html import VERDICT_COLORS, esc, page
from onceproof.report.junit import _clean
from onceproof.store import readers, runfiles
from onceproof.store.compact import read_text
from onceproof.store.runfiles import RESULTS, RunFiles

SUITE_NAME = "onceproof-suite"
RULE = "PASS requires every exactly-once cell to be valid and every mutant cell to be caught"
EXPECTS = ("valid", "invalid")
MD, HTML = "certificate.md", "certificate.html"
JUNIT = runfiles.JUNIT  # the suite's junit.xml: the same name as a run's

# a failed cell's exit code by verdict; a passed cell's is 0. The numbers are the run's own exit codes,
# so the max is also the worst: crashed (255) > unknown (2) > invalid, or a mutant that came out valid (1)
FAILED_EXIT = {"crashed": 255, "unknown": 2, "invalid": 1, "valid": 1}
EMPTY_SUITE_EXIT = 2  # a suite without cells tested nothing: "unknown", never a PASS

NOT_ANOMALIES = platform.PLATFORM  # the input log's own anomalies: platform findings, shown apart
# example fields holding an epoch-ms time (docs/results-schema.md: live-duplicate copies carry seen_ms)
TIME_FIELDS = ("timestamp", "append_ms", "seen_ms", "time")
# an example time is believed only this close to the test start (s): a "time" in ns since the start, or a
# duration, is not an epoch-ms date
TIME_BEFORE_START_S, TIME_AFTER_START_S = 3600.0, 30 * 86400.0
DASH = "—"


# ------------------------------------------------------------------------------------------------ cells


def cell_from_run(run_dir: Path | None, *, sink: str, workload: str, package: str, seed: int, expect: str,
                  exit_code: int, elapsed_s: float, suite_dir: Path) -> dict:
    """The cell record (module docstring) of one ``onceproof run`` of the suite.

    Reads ``results.json`` and ``nemesis.jsonl`` of ``run_dir``; to date anomaly examples also the
    history's first line (when ``nemesis.jsonl`` has none) and ``output.parquet`` / ``input.parquet``
    (only for examples that carry no time of their own). ``run_dir`` ``None`` (the run crashed before
    it made a directory) or a missing / unreadable ``results.json`` → verdict ``crashed``.

    * ``faults_exercised``: ``results.json`` ``coverage`` rows (``fault[:target]`` → ``exercised``, zero
      rows kept: a planned fault that never hit the pipeline shows as ×0); without ``coverage`` (a crashed
      or older run), ``nemesis.jsonl`` completions that were exercised, by ``f`` (the rule of
      :func:`onceproof.nemesis.coverage.table`: an op from before the ``exercised`` field counts when effective).
    * ``anomalies``: ``counts`` > 0, without ``<name>-records`` (a detail of ``<name>``) and
      ``input-duplicate`` (the input log's own, not the pipeline's).
    * ``first_anomaly_s``: seconds from the test start (``wall - time/1e9`` of a ``nemesis.jsonl`` or
      history line, else ``test.json`` ``started``) to the earliest time among the recorded examples of
      those anomalies. An example's time (epoch ms) is one of its :data:`TIME_FIELDS`, else the Kafka
      timestamp of the record it names (``partition``/``offset`` in the output, ``input_partition``/
      ``input_offset`` in the input; ``lost-write`` names no stored record); a ``duplicate``'s time is
      its second-earliest copy's (when the extra copy appeared). Examples are at most 10 per anomaly,
      in output order, so this is an upper bound on the true first anomaly. ``None`` when nothing dates it.
    * ``caught``: verdict ``invalid``; ``passed``: the verdict is the one expected.

    Args: ``seed`` the cell's seed; ``expect`` ``"valid"`` or ``"invalid"``; ``exit_code`` the run's exit
    code; ``elapsed_s`` its wall time (s); ``suite_dir`` the directory paths are made relative to.
    Raises: ``ValueError`` when ``expect`` is neither ``"valid"`` nor ``"invalid"``.
    """
    if expect not in EXPECTS:
        raise ValueError(f"expect must be one of {EXPECTS}, not {expect!r}")
    run = Path(run_dir) if run_dir is not None else None
    results = readers.read_or_none(readers.read_results, run) if run is not None else None
    ops = _nemesis_ops(run) if run is not None else []
    r = results or {}
    verdict = str(r.get("verdict") or "crashed") if results is not None else "crashed"
    if run is None:
        error = "the run crashed before it made a run directory"
    elif results is None:
        error = f"{RESULTS} is missing or unreadable"
    else:
        error = r.get("error")
    anomalies = {}
    for name, n in (r.get("counts") or {}).items():
        if (isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0 and not name.endswith("-records")
                and name not in NOT_ANOMALIES):
            anomalies[name] = int(n)
    report = RunFiles(run).report if run is not None else None
    fixes = {a: advice.line(e) for a, e in (r.get("advice") or {}).items() if a in anomalies}
    return {
        "sink": sink, "workload": workload, "package": package, "seed": int(seed), "expect": expect,
        "verdict": verdict, "exit_code": int(exit_code), "elapsed_s": float(elapsed_s),
        "run_dir": _rel(run, suite_dir) if run is not None else None,
        "report": _rel(report, suite_dir) if report is not None and report.is_file() else None,
        "faults_exercised": _faults_exercised(r, ops),
        "anomalies": anomalies,
        "advice": fixes,
        "first_anomaly_s": _first_anomaly_s(run, r, list(anomalies), ops) if run is not None and anomalies else None,
        "platform_findings": {a: int(n) for a, n in ((r.get("platform_findings") or {}).get("counts") or {}).items()},
        "kafka": (r.get("versions") or {}).get("kafka"),
        "pyspark": (r.get("versions") or {}).get("pyspark"),
        "cluster": _cluster_kind(r.get("cluster")),
        "timings": {k: v for k, v in (r.get("timings") or {}).items() if _number(v)},
        "caught": verdict == "invalid",
        "passed": verdict == expect,
        "unknown_reasons": [str(x) for x in (r.get("unknown_reasons") or [])],
        "error": None if error is None else str(error),
    }


def _cluster_kind(cluster: dict | None) -> str | None:
    """``warm`` or ``fresh`` (with why, when a warm cluster was offered: ``fresh: <why>``) from ``results.json``'s
    ``cluster``; ``None`` for runs that predate it."""
    if not isinstance(cluster, dict) or "warm" not in cluster:
        return None
    if cluster["warm"]:
        return "warm"
    return f"fresh: {cluster['fresh_because']}" if cluster.get("fresh_because") else "fresh"


def _rel(path: Path, base: Path) -> str:
    return Path(os.path.relpath(Path(path).absolute(), Path(base).absolute())).as_posix()


def _nemesis_ops(run_dir: Path) -> list[dict]:
    """``nemesis.jsonl`` as dicts without NA fields; ``[]`` when absent or damaged."""
    try:
        df = readers.read_nemesis(run_dir, problems=[])
    except (OSError, readers.DamagedFile):
        return []
    return [{k: v for k, v in op.items() if not isna(v)} for op in df.to_dict("records")]


def _faults_exercised(results: dict, ops: list[dict]) -> dict[str, int]:
    if isinstance(results.get("coverage"), list):
        out: dict[str, int] = {}
        for row in results["coverage"]:
            target = row.get("target")
            spec = str(row.get("fault")) + ("" if target in (None, "", "-") else f":{target}")
            out[spec] = out.get(spec, 0) + int(row.get("exercised") or 0)
        return out
    out = {}
    for op in ops:
        if (op.get("type") == "info" and op.get("f") not in (None, "heal") and op.get("outcome") == "effective"
                and bool(op.get("exercised", True))):
            out[str(op["f"])] = out.get(str(op["f"]), 0) + 1
    return out


def _test_start(run_dir: Path, ops: list[dict]) -> float | None:
    """The test's start as epoch seconds (``docs/results-schema.md``), or ``None``."""
    starts = [float(op["wall"]) - float(op["time"]) / 1e9 for op in ops
              if _number(op.get("wall")) and _number(op.get("time"))]
    if starts:
        return statistics.median(starts)
    try:
        text = read_text(RunFiles(run_dir).history)
    except (OSError, EOFError, zlib.error):
        text = ""
    for line in text.splitlines():
        try:
            op = json.loads(line)
        except ValueError:
            continue
        if isinstance(op, dict) and _number(op.get("wall")) and _number(op.get("time")):
            return float(op["wall"]) - float(op["time"]) / 1e9
    started = (readers.read_or_none(readers.read_test, run_dir) or {}).get("started")
    try:
        return dt.datetime.strptime(str(started), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _first_anomaly_s(run_dir: Path, results: dict, names: list[str], ops: list[dict]) -> float | None:
    t0 = _test_start(run_dir, ops)
    if t0 is None:
        return None

    def own_ms(d: dict) -> float | None:  # the first plausible epoch-ms field
        for f in TIME_FIELDS:
            v = d.get(f)
            if _number(v) and t0 - TIME_BEFORE_START_S <= v / 1000.0 <= t0 + TIME_AFTER_START_S:
                return float(v)
        return None

    # per example: [(own ms or None, ("out" | "in", (partition, offset)) or None)], one entry per copy
    # for a duplicate-shaped example (a list of copies), else one
    examples = []
    for name in names:
        for ex in (results.get("anomalies") or {}).get(name) or []:
            if not isinstance(ex, dict):
                continue
            copies = ex.get("copies")
            if isinstance(copies, list) and copies and all(isinstance(c, dict) for c in copies):
                examples.append([(own_ms(c), _position(c, "out")) for c in copies])
            elif "input_partition" in ex:
                examples.append([(own_ms(ex), _position(ex, "in"))])
            else:
                examples.append([(own_ms(ex), _position(ex, "out") if name != "lost-write" else None)])
    need: dict[str, list[tuple[int, int]]] = {"out": [], "in": []}
    for ex in examples:
        for ms, ref in ex:
            if ms is None and ref is not None:
                need[ref[0]].append(ref[1])
    ts = {"out": _timestamps(run_dir, readers.read_output, need["out"]),
          "in": _timestamps(run_dir, readers.read_input, need["in"])}
    times = []
    for ex in examples:
        got = sorted(t for t in (ms if ms is not None else ts[ref[0]].get(ref[1]) if ref else None for ms, ref in ex)
                     if t is not None)
        if got:  # a duplicate exists from its second copy on
            times.append(got[1] if len(got) > 1 else got[0])
    return round(min(times) / 1000.0 - t0, 3) if times else None


def _position(d: dict, side: str) -> tuple[str, tuple[int, int]] | None:
    p, o = ("input_partition", "input_offset") if side == "in" else ("partition", "offset")
    try:
        return side, (int(d[p]), int(d[o]))
    except (KeyError, TypeError, ValueError):
        return None


def _timestamps(run_dir: Path, reader, keys: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """``{(partition, offset): Kafka timestamp, epoch ms}`` for ``keys`` from a topic snapshot; ``{}`` when
    nothing is asked, the file is absent or damaged, or it has no ``timestamp`` column (older runs)."""
    if not keys:
        return {}
    found = _ts_index(readers.read_or_none(reader, run_dir), keys)
    return {k: t for k, t in found.items() if math.isfinite(t)}


# ------------------------------------------------------------------------------------------------ suite


def suite_result(cells: list[dict]) -> str:
    """``"PASS"`` when every cell passed (``cell["passed"]``), else ``"FAIL"``; no cells → ``"FAIL"``
    (a suite that ran nothing certifies nothing)."""
    return "PASS" if cells and all(c.get("passed") for c in cells) else "FAIL"


def suite_exit_code(cells: list[dict]) -> int:
    """The suite's exit code: the worst cell's, where a passed cell counts 0 (a caught mutant too) and a
    failed one its verdict's :data:`FAILED_EXIT` (crashed 255 > unknown 2 > invalid, or a mutant that came
    out valid, 1; an unrecognised verdict counts as crashed). No cells → 2 (nothing was tested).
    0 exactly when :func:`suite_result` is ``"PASS"``."""
    if not cells:
        return EMPTY_SUITE_EXIT
    return max(0 if c.get("passed") else FAILED_EXIT.get(str(c.get("verdict")), 255) for c in cells)


NOT_NEEDED_NOTE = "Seeds not run once a seed had caught the mutant (`--stop-when-caught`):"


def not_needed_text(skipped: list[dict]) -> str:
    """``"eos-no-marker × commit: seeds 2, 3 (caught at seed 1); ..."`` for a suite's ``not_needed`` records."""
    groups: dict[tuple, list] = {}
    for d in skipped:
        groups.setdefault((d.get("sink"), d.get("package"), d.get("caught_at_seed")), []).append(d.get("seed"))
    return "; ".join(f"{s} × {p}: seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} "
                     f"(caught at seed {at})" for (s, p, at), seeds in groups.items())


def version_matrix(cells: list[dict]) -> list[dict]:
    """The suite per version pair its cells ran on (``test-all --kafka-versions``/``--spark-versions``): the
    Kafka release and the PySpark release, in first-seen order::

        {"kafka": "3.5.2", "pyspark": "3.5.7", "cells": N, "passed": k, "failed": N - k,
         "verdicts": {"valid": n, ...}, "elapsed_s": total s}

    ``[]`` when every cell ran on one pair (or none recorded one): nothing to compare. Pure."""
    rows: dict[tuple[str, str], dict] = {}
    for c in cells:
        k = (str(c.get("kafka") or "?"), str(c.get("pyspark") or "?"))
        row = rows.setdefault(k, {"kafka": k[0], "pyspark": k[1], "cells": 0, "passed": 0, "failed": 0,
                                  "verdicts": {}, "elapsed_s": 0.0})
        row["cells"] += 1
        row["passed" if c.get("passed") else "failed"] += 1
        v = str(c.get("verdict"))
        row["verdicts"][v] = row["verdicts"].get(v, 0) + 1
        row["elapsed_s"] += float(c.get("elapsed_s") or 0.0)
    return list(rows.values()) if len(rows) > 1 else []


def detection_table(cells: list[dict]) -> list[dict]:
    """How well the harness catches each mutant: the cells expecting ``invalid``, one row per (sink,
    fault package) in first-seen order::

        {"mutant": sink, "package": str, "caught": k, "runs": N, "seeds": [int], "verdicts": [str],
         "anomalies": {name: total count over the caught runs}, "first_anomaly_s_median": float | None,
         "advice": {name: the first caught run's "likely cause → fix" line}}

    ``seeds`` / ``verdicts`` are per cell, in cell order; the median (s) is over the caught runs that
    dated their first anomaly (``None`` when none did).
    """
    rows: dict[tuple[str, str], dict] = {}
    firsts: dict[tuple[str, str], list[float]] = {}
    for c in cells:
        if c.get("expect") != "invalid":
            continue
        k = (str(c.get("sink")), str(c.get("package")))
        row = rows.setdefault(k, {"mutant": k[0], "package": k[1], "caught": 0, "runs": 0, "seeds": [],
                                  "verdicts": [], "anomalies": {}, "first_anomaly_s_median": None,
                                  "advice": {}})
        row["runs"] += 1
        row["seeds"].append(c.get("seed"))
        row["verdicts"].append(c.get("verdict"))
        if c.get("caught"):
            row["caught"] += 1
            for name, n in (c.get("anomalies") or {}).items():
                row["anomalies"][name] = row["anomalies"].get(name, 0) + int(n)
            for name, text in (c.get("advice") or {}).items():
                row["advice"].setdefault(name, text)
            if c.get("first_anomaly_s") is not None:
                firsts.setdefault(k, []).append(float(c["first_anomaly_s"]))
    for k, xs in firsts.items():
        rows[k]["first_anomaly_s_median"] = round(statistics.median(xs), 3)
    return list(rows.values())


# ---------------------------------------------------------------------------------------------- writing


def write_certificate(suite: dict, out_dir: Path) -> dict[str, Path]:
    """Write ``certificate.md``, ``certificate.html`` and ``junit.xml`` into ``out_dir`` (created if
    needed) and return their paths as ``{"md", "html", "junit"}``.

    ``suite``: ``{"suite": name, "started", "finished": ISO str, "command": the test-all command line,
    "versions": {component: version} (shown in the order given), "cells": [cell record, ...]}``. Both
    documents carry the header (suite, command, times, **PASS/FAIL**, :data:`RULE`), the versions, the
    cells (with links to the runs' reports, relative to the suite directory), the mutant detection table
    when there are mutant cells, where the cells' time went (``report/cost.py``), and why each failed cell
    failed. ``junit.xml``: see :func:`build_junit`.

    Control characters XML 1.0 forbids (say, from an error message) are dropped from all three.

    Raises: ``OSError`` when a file cannot be written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / MD, "html": out / HTML, "junit": out / JUNIT}
    paths["md"].write_text(certificate_md(suite), encoding="utf-8")
    paths["html"].write_text(certificate_html(suite), encoding="utf-8")
    root = build_junit(suite)
    ET.indent(root)
    ET.ElementTree(root).write(paths["junit"], encoding="utf-8", xml_declaration=True)
    return paths


def _cells(suite: dict) -> list[dict]:
    return list(suite.get("cells") or [])


def _headline(cells: list[dict]) -> str:
    n_ok = sum(1 for c in cells if c.get("passed"))
    mutants = [c for c in cells if c.get("expect") == "invalid"]
    s = f"{n_ok} of {len(cells)} cells passed"
    if mutants:
        s += (f" ({sum(1 for c in cells if c.get('expect') == 'valid' and c.get('passed'))} of "
              f"{len(cells) - len(mutants)} exactly-once cells valid, "
              f"{sum(1 for c in mutants if c.get('caught'))} of {len(mutants)} mutant cells caught)")
    return s


def faults_text(faults: dict) -> str:
    """``{"kill-executor": 2, "kill-broker:leader": 1}`` → ``"kill-executor×2, kill-broker:leader×1"``
    (``—`` when empty)."""
    return ", ".join(f"{f}×{n}" for f, n in (faults or {}).items()) or DASH


PLATFORM_NOTE = ("Anomalies of the input log, written by the workload's Kafka client and the brokers before "
                 "the pipeline read it (checkers/platform.py): findings about Kafka and its client, not part of "
                 "the pipeline's verdict unless the run was --strict; each run's report names the versions and "
                 "the suspected known issue")


def anomalies_text(anomalies: dict) -> str:
    """``{"duplicate": 12, "lost": 3}`` → ``"duplicate 12, lost 3"`` (``—`` when empty); a liveness
    anomaly (``checkers/liveness.py``) is marked so: ``"hanging-transaction 1 (liveness)"``."""
    return ", ".join(f"{a} {n}" + (" (liveness)" if a in liveness.ANOMALIES else "")
                     for a, n in (anomalies or {}).items()) or DASH


def _seconds(s) -> str:
    if s is None:
        return DASH
    s = float(s)
    if s < 59.95:
        return f"{s:.1f} s"
    whole = int(round(s))
    return f"{whole // 60} min {whole % 60:02d} s"


def _elapsed(c: dict) -> str:
    """A cell's elapsed time, marked when the cell was taken from an earlier suite (``--reuse``)."""
    return _seconds(c.get("elapsed_s")) + (" (reused)" if c.get("reused_from") else "")


def reused_text(cells: list[dict]) -> str:
    """One line on the cells taken from earlier suites (``harness/reuse.py``), ``""`` when none was."""
    by_suite: dict[str, int] = {}
    for c in cells:
        if c.get("reused_from"):
            by_suite[c["reused_from"]] = by_suite.get(c["reused_from"], 0) + 1
    if not by_suite:
        return ""
    return (f"{sum(by_suite.values())} cells were not run again: an earlier suite ran the same run and it passed "
            "(--reuse); their elapsed times and reports are that suite's: "
            + ", ".join(f"{n} from {d}" for d, n in by_suite.items()))


def _why(c: dict) -> str:
    """Why a failed cell failed, one line."""
    bits = [f"expected {c.get('expect')}, got {c.get('verdict')}"]
    if c.get("anomalies"):
        bits.append(f"anomalies: {anomalies_text(c['anomalies'])}")
    bits += [f"{a}: {t}" for a, t in (c.get("advice") or {}).items()]
    if c.get("unknown_reasons"):
        bits.append("; ".join(str(x) for x in c["unknown_reasons"]))
    if c.get("verdict") == "crashed" and c.get("error"):
        bits.append(f"error: {c['error']}")
    return " — ".join(bits)


def _cell_name(c: dict) -> str:
    return f"{c.get('sink')} / {c.get('workload')} / {c.get('package')} / seed {c.get('seed')}"


# -- markdown


def _md(v) -> str:
    """Text for a markdown table cell: ``&``, ``<`` and ``>`` HTML-escaped (markdown renders inline HTML),
    quotes left as typed (they mean nothing to markdown and ``&#x27;`` reads badly in the raw file), ``|``
    escaped, on one line."""
    return esc(v, quote=False).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]


def certificate_md(suite: dict) -> str:
    """``certificate.md`` (see :func:`write_certificate`)."""
    cells = _cells(suite)
    result = suite_result(cells)
    cmd = str(suite.get("command") or "")
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall("`+", cmd)), default=0))
    lines = [f"# onceproof certificate: {_md(suite.get('suite'))}", "",
             f"**Result: {result}** — {_md(_headline(cells))}.", "", f"_{RULE}._", "",
             f"- started: {_md(suite.get('started'))}", f"- finished: {_md(suite.get('finished'))}",
             f"- exit code: {suite_exit_code(cells)}", "- command:", "", f"{fence}sh", cmd, fence, "",
             "## Versions", ""]
    versions = suite.get("versions") or {}
    lines += _md_table(["component", "version"], [[_md(k), _md(v)] for k, v in versions.items()]) if versions \
        else ["_not recorded_"]
    matrix = version_matrix(cells)
    if matrix:
        lines += ["", "## Per version pair", ""]
        lines += _md_table(["Kafka", "PySpark", "cells", "passed", "failed", "verdicts", "time"],
                           [[_md(m["kafka"]), _md(m["pyspark"]), str(m["cells"]), str(m["passed"]), str(m["failed"]),
                             _md(", ".join(f"{v} {n}" for v, n in m["verdicts"].items())),
                             _md(_seconds(m["elapsed_s"]))] for m in matrix])
    lines += ["", "## Cells", ""]
    rows = []
    for c in cells:
        link = f"[report]({quote(c['report'])})" if c.get("report") else DASH
        rows.append([_md(c.get("sink")), _md(c.get("workload")), _md(_package(c, bool(matrix))), _md(c.get("seed")),
                     _md(c.get("expect")), f"**{_md(c.get('verdict'))}**", "PASS" if c.get("passed") else "**FAIL**",
                     _md(_elapsed(c)), _md(faults_text(c.get("faults_exercised"))),
                     _md(anomalies_text(c.get("anomalies"))), link])
    lines += _md_table(["sink", "workload", "package", "seed", "expected", "verdict", "result", "elapsed",
                        "faults exercised", "anomalies", "report"], rows) if cells else ["_no cells_"]
    if reused_text(cells):
        lines += ["", f"_{_md(reused_text(cells))}._"]
    det = detection_table(cells)
    if det:
        lines += ["", "## Mutant detection", "",
                  "Each mutant sink is broken on purpose; a seed catches it when its run comes out invalid.", ""]
        lines += _md_table(["mutant", "package", "caught", "anomalies (caught runs)", "median time to first anomaly",
                            "verdicts", "likely cause → fix"],
                           [[_md(d["mutant"]), _md(d["package"]), f"{d['caught']}/{d['runs']}",
                             _md(anomalies_text(d["anomalies"])), _md(_seconds(d["first_anomaly_s_median"])),
                             _md(", ".join(f"{s}: {v}" for s, v in zip(d["seeds"], d["verdicts"]))),
                             _md("; ".join(f"{a}: {t}" for a, t in (d.get("advice") or {}).items()) or DASH)]
                            for d in det])
        if suite.get("not_needed"):
            lines += ["", f"{NOT_NEEDED_NOTE} {_md(not_needed_text(suite['not_needed']))}."]
    found = [c for c in cells if c.get("platform_findings")]
    if found:
        lines += ["", "## Platform findings", "", PLATFORM_NOTE, ""]
        lines += _md_table(["cell", "findings", "report"],
                           [[_md(_cell_name(c)), _md(anomalies_text(c["platform_findings"])),
                             f"[report]({quote(c['report'])})" if c.get("report") else DASH] for c in found])
    dropped = suite.get("left_out") or []
    if dropped:
        lines += ["", "## Faults left out", "", "Faults of the packages that the system under test cannot take; "
                  "its cells ran the rest.", ""]
        lines += _md_table(["system under test", "package", "fault", "why"],
                           [[_md(d.get("sut")), _md(d.get("package")), _md(d.get("spec")), _md(d.get("why"))]
                            for d in dropped])
    spent = cost.suite_cost(cells)
    if spent["cells"]:
        head, rows = cost.cost_table(spent)
        lines += ["", "## Where the time went", ""] + _md_table(head, [[_md(v) for v in r] for r in rows])
        lines += ["", f"_{_md(cost.cost_note(spent))}._"]
    failed = [c for c in cells if not c.get("passed")]
    if failed:
        lines += ["", "## Failed cells", ""]
        lines += [f"- **{_md(_cell_name(c))}**: {_md(_why(c))}"
                  + (f" ([run]({quote(c['run_dir'])}))" if c.get("run_dir") else "") for c in failed]
    return _clean("\n".join(lines) + "\n")


# -- html

_CSS_EXTRA = ("td.pass{background:#dafbe1;color:#1a7f37;font-weight:700} "
              "td.fail{background:#ffebe9;color:#a40e26;font-weight:700} "
              ".rule{font-style:italic} ul.why li{margin:3px 0}")


def _result_badge(result: str) -> str:
    color = VERDICT_COLORS["valid"] if result == "PASS" else VERDICT_COLORS["invalid"]
    return f'<div class=verdict style="background:{color}"><b>{esc(result)}</b></div>'


def _verdict(v) -> str:
    return f'<b style="color:{VERDICT_COLORS.get(str(v), "#656d76")}">{esc(v)}</b>'


def _href(rel: str | None, text: str) -> str:
    return f'<a href="{esc(quote(rel))}">{esc(text)}</a>' if rel else f"<span class=muted>{DASH}</span>"


def _package(c: dict, per_release: bool) -> str:
    """A cell's package, with the Kafka and PySpark releases it ran on when the suite has a version axis."""
    return (f"{c.get('package')} on Kafka {c.get('kafka') or '?'}, PySpark {c.get('pyspark') or '?'}"
            if per_release else str(c.get("package")))


def _html_cell_row(c: dict, per_release: bool = False) -> str:
    tds = [esc(c.get("sink")), esc(c.get("workload")), esc(_package(c, per_release)), esc(c.get("seed")),
           esc(c.get("expect")), _verdict(c.get("verdict"))]
    return ("<tr>" + "".join(f"<td>{td}</td>" for td in tds)
            + ("<td class=pass>PASS</td>" if c.get("passed") else "<td class=fail>FAIL</td>")
            + f"<td class='num nowrap'>{esc(_elapsed(c))}</td>"
            f"<td>{esc(faults_text(c.get('faults_exercised')))}</td><td>{esc(anomalies_text(c.get('anomalies')))}</td>"
            f"<td>{_href(c.get('report'), 'report')}</td></tr>")


def certificate_html(suite: dict) -> str:
    """``certificate.html`` (see :func:`write_certificate`): one self-contained page, no JavaScript."""
    cells = _cells(suite)
    result = suite_result(cells)
    name = suite.get("suite")
    meta = {"suite": name, "started": suite.get("started"), "finished": suite.get("finished"),
            "exit code": suite_exit_code(cells)}
    body = [f"<h1>onceproof certificate: {esc(name)}</h1>", _result_badge(result),
            f"<p class=summary>{esc(_headline(cells))}.</p>", f"<p class=rule>{esc(RULE)}.</p>",
            '<table class=kv>' + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in meta.items())
            + "</table>", f"<h3>Command</h3><pre>{esc(suite.get('command'))}</pre>", "<h2>Versions</h2>"]
    versions = suite.get("versions") or {}
    body.append('<table class=kv>' + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>"
                                             for k, v in versions.items()) + "</table>"
                if versions else "<p class=muted>not recorded</p>")
    matrix = version_matrix(cells)
    if matrix:
        body.append("<h2>Per version pair</h2><table><tr>" + "".join(
            f"<th>{h}</th>" for h in ("Kafka", "PySpark", "cells", "passed", "failed", "verdicts", "time"))
            + "</tr>" + "".join(
            f"<tr><td>{esc(m['kafka'])}</td><td>{esc(m['pyspark'])}</td><td class=num>{m['cells']}</td>"
            f"<td class=num>{m['passed']}</td>"
            f"<td class=num>{m['failed']}</td><td>{esc(', '.join(f'{v} {n}' for v, n in m['verdicts'].items()))}</td>"
            f"<td class='num nowrap'>{esc(_seconds(m['elapsed_s']))}</td></tr>" for m in matrix) + "</table>")
    body.append("<h2>Cells</h2>")
    if cells:
        head = "".join(f"<th>{h}</th>" for h in ("sink", "workload", "package", "seed", "expected", "verdict",
                                                 "result", "elapsed", "faults exercised", "anomalies", "report"))
        rows = "".join(_html_cell_row(c, bool(matrix)) for c in cells)
        body.append(f"<table class=data><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        if reused_text(cells):
            body.append(f"<p class=muted>{esc(reused_text(cells))}.</p>")
    else:
        body.append("<p class=muted>no cells</p>")
    det = detection_table(cells)
    if det:
        body.append("<h2>Mutant detection</h2><p class=muted>Each mutant sink is broken on purpose; a seed "
                    "catches it when its run comes out invalid.</p>")
        head = "".join(f"<th>{h}</th>" for h in ("mutant", "package", "caught", "anomalies (caught runs)",
                                                 "median time to first anomaly", "verdicts", "likely cause → fix"))
        rows = "".join(
            f"<tr><td>{esc(d['mutant'])}</td><td>{esc(d['package'])}</td>"
            + ("<td class=pass>" if d["caught"] == d["runs"] else "<td class=fail>")
            + f"{d['caught']}/{d['runs']}</td><td>{esc(anomalies_text(d['anomalies']))}</td>"
            f"<td class=num>{esc(_seconds(d['first_anomaly_s_median']))}</td>"
            f"<td>{', '.join(f'{esc(s)}: {_verdict(v)}' for s, v in zip(d['seeds'], d['verdicts']))}</td>"
            f"<td class=small>{'<br>'.join(esc(f'{a}: {t}') for a, t in (d.get('advice') or {}).items()) or DASH}</td>"
            "</tr>" for d in det)
        body.append(f"<table class=data><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        if suite.get("not_needed"):
            body.append(f"<p class=muted>{esc(NOT_NEEDED_NOTE)} {esc(not_needed_text(suite['not_needed']))}.</p>")
    found = [c for c in cells if c.get("platform_findings")]
    if found:
        body.append(f"<h2>Platform findings</h2><p class=muted>{esc(PLATFORM_NOTE)}</p><table class=data><thead>"
                    "<tr><th>cell</th><th>findings</th><th>report</th></tr></thead><tbody>" + "".join(
                        f"<tr><td>{esc(_cell_name(c))}</td><td>{esc(anomalies_text(c['platform_findings']))}</td>"
                        f"<td>{_href(c.get('report'), 'report')}</td></tr>" for c in found) + "</tbody></table>")
    dropped = suite.get("left_out") or []
    if dropped:
        body.append("<h2>Faults left out</h2><p class=muted>Faults of the packages that the system under test "
                    "cannot take; its cells ran the rest.</p><table class=data><thead><tr><th>system under test"
                    "</th><th>package</th><th>fault</th><th>why</th></tr></thead><tbody>" + "".join(
                        f"<tr><td>{esc(d.get('sut'))}</td><td>{esc(d.get('package'))}</td><td>{esc(d.get('spec'))}"
                        f"</td><td>{esc(d.get('why'))}</td></tr>" for d in dropped) + "</tbody></table>")
    spent = cost.suite_cost(cells)
    if spent["cells"]:
        head, rows = cost.cost_table(spent)
        body.append("<h2>Where the time went</h2><table class=data><thead><tr>"
                    + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
                    + "".join("<tr>" + "".join(f"<td class=nowrap>{esc(v)}</td>" for v in r) + "</tr>" for r in rows)
                    + f"</tbody></table><p class=muted>{esc(cost.cost_note(spent))}.</p>")
    failed = [c for c in cells if not c.get("passed")]
    if failed:
        body.append("<h2>Failed cells</h2><ul class=why>" + "".join(
            f"<li><b>{esc(_cell_name(c))}</b>: {esc(_why(c))}"
            + (f" ({_href(c.get('run_dir'), 'run')})" if c.get("run_dir") else "") + "</li>" for c in failed)
            + "</ul>")
    return _clean(page(f"onceproof certificate: {name} — {result}", "".join(body),
                       head_extra=f"<style>{_CSS_EXTRA}</style>"))


# -- junit


def build_junit(suite: dict) -> ET.Element:
    """The suite's ``<testsuites name="onceproof-suite">``: one ``<testsuite name=<suite name>>`` with
    ``properties`` (command, started, finished, result, ``version.<component>``) and one
    ``<testcase classname="onceproof.<sink>.<workload>.<package>[.kafka-<X_Y_Z>.spark-<X_Y_Z>]"
    name="seed-<seed>" time=elapsed>`` per cell (the version pair when the suite has a version axis). A failed cell has
    ``<failure message="expected <expect>, got <verdict>" type=<verdict>>`` (its anomalies, unknown
    reasons and run directory as text), a crashed one ``<error>`` instead (with the error); a passed one a
    ``<system-out>`` with its verdict and anomalies."""
    cells = _cells(suite)
    name = str(suite.get("suite") or SUITE_NAME)
    per_release = bool(version_matrix(cells))
    cases = []
    for c in cells:
        classname = f"onceproof.{c.get('sink')}.{c.get('workload')}.{c.get('package')}"
        if per_release:  # the version axes: one case per version pair, ``….kafka-3_5_2.spark-3_5_7``
            classname += (f".kafka-{str(c.get('kafka') or '?').replace('.', '_')}"
                          f".spark-{str(c.get('pyspark') or '?').replace('.', '_')}")
        el = ET.Element("testcase", classname=_clean(classname), name=_clean(f"seed-{c.get('seed')}"),
                        time=f"{float(c.get('elapsed_s') or 0):.3f}")
        detail = [f"verdict: {c.get('verdict')}", f"anomalies: {anomalies_text(c.get('anomalies'))}",
                  *(f"{a}: {t}" for a, t in (c.get("advice") or {}).items()),
                  f"faults exercised: {faults_text(c.get('faults_exercised'))}",
                  *(f"unknown reason: {x}" for x in c.get("unknown_reasons") or []),
                  *([f"error: {c['error']}"] if c.get("error") else []),
                  f"run_dir: {c.get('run_dir') or DASH}", f"report: {c.get('report') or DASH}"]
        if not c.get("passed"):
            tag = "error" if c.get("verdict") == "crashed" else "failure"
            f = ET.SubElement(el, tag, message=_clean(f"expected {c.get('expect')}, got {c.get('verdict')}"),
                              type=_clean(c.get("verdict")))
            f.text = _clean("\n".join(detail))
        else:
            ET.SubElement(el, "system-out").text = _clean("\n".join(detail))
        cases.append(el)
    counts = {"tests": str(len(cases)),
              "failures": str(sum(1 for e in cases if e.find("failure") is not None)),
              "errors": str(sum(1 for e in cases if e.find("error") is not None)), "skipped": "0",
              "time": f"{sum(float(c.get('elapsed_s') or 0) for c in cells):.3f}"}
    root = ET.Element("testsuites", name=SUITE_NAME, **counts)
    ts = ET.SubElement(root, "testsuite", name=_clean(name), **counts)
    if suite.get("started"):
        ts.set("timestamp", _clean(suite["started"]))
    props = ET.SubElement(ts, "properties")
    for k, v in (("command", suite.get("command")), ("started", suite.get("started")),
                 ("finished", suite.get("finished")), ("result", suite_result(cells)),
                 *((f"version.{k}", v) for k, v in (suite.get("versions") or {}).items())):
        if v is not None:
            ET.SubElement(props, "property", name=_clean(k), value=_clean(v))
    ts.extend(cases)
    return root
